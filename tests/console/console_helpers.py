"""What the console tests import: Starlette's in-process test client."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    # Starlette 1.x suggests a fork of httpx for its test client; httpx is what we use.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

__all__ = ["TestClient"]
