"""Throwaway TLS material for the test servers: a CA, a server certificate for
127.0.0.1/localhost and a client certificate, made with the ``openssl`` command line tool
(chosen over the ``cryptography`` package: it ships with every Redis host)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from rmq.errors import RMQError
from rmq.server import TLSFiles, run_tool

__all__ = ["TLSFiles", "make_tls_files"]


# P-256 keys: generated in milliseconds where RSA takes a noticeable fraction of a second.
EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]


def make_tls_files(directory: str | Path) -> TLSFiles:
    """Write a fresh CA, a server certificate for 127.0.0.1/localhost and a client certificate
    into ``directory`` with the ``openssl`` command line tool."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RMQError("making TLS certificates needs openssl: apt-get install openssl")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    files = TLSFiles(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt",
                     d / "client.key")
    ca_key = d / "ca.key"
    run_tool([openssl, "req", "-x509", *EC_KEY, "-nodes", "-keyout", str(ca_key),
          "-out", str(files.ca_cert), "-days", "3650", "-subj", "/CN=rmq test CA"], "openssl CA")
    for name, cert, key, ext in (
            ("localhost", files.server_cert, files.server_key,
             "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
            ("rmq client", files.client_cert, files.client_key, "extendedKeyUsage=clientAuth\n")):
        csr, extfile = d / f"{key.stem}.csr", d / f"{key.stem}.ext"
        extfile.write_text(ext)
        run_tool([openssl, "req", "-new", *EC_KEY, "-nodes", "-keyout", str(key),
              "-out", str(csr), "-subj", f"/CN={name}"], "openssl request")
        run_tool([openssl, "x509", "-req", "-in", str(csr), "-CA", str(files.ca_cert), "-CAkey",
              str(ca_key), "-set_serial", str(time.time_ns()), "-days", "3650",
              "-extfile", str(extfile), "-out", str(cert)], "openssl signing")
    return files
