"""Who may use the console, and from where (docs/console.md, "Security").

- **Loopback by default.** Bound to 127.0.0.1 the console answers only requests whose
  ``Host`` names the loopback (``localhost``, ``127.0.0.1``, ``[::1]``): a web page that
  rebinds its own domain name to 127.0.0.1 (DNS rebinding) is refused.
- **A token beyond loopback.** Bound to any other address the console refuses to start
  without a token; with one, every request but the static assets must carry it, as
  ``Authorization: Bearer <token>`` (scripts, Prometheus) or as the cookie that opening the
  console once with ``?token=<token>`` sets (HttpOnly, SameSite=Strict).
- **No cross-site writes.** A state-changing request (anything but GET, HEAD, OPTIONS) is
  refused when the browser says it comes from another site (``Sec-Fetch-Site``) or another
  origin (``Origin``); and a POST must be JSON (``Content-Type: application/json``), which no
  HTML form can send and a cross-origin script may send only after a CORS preflight the
  console never grants (PATCH and DELETE always need that preflight). Clients that send
  neither header (curl, scripts) are not browsers, and cross-site request forgery needs a
  browser.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

__all__ = ["Guard", "COOKIE", "is_loopback", "LOOPBACK_HOSTS"]

COOKIE = "rmq_console_token"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PUBLIC_PREFIXES = ("/static/", "/login")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the console on this machine."""
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostname(netloc: str) -> str:
    return (urlsplit(f"//{netloc}").hostname or "").lower()


def _refuse(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


@dataclass(frozen=True)
class Guard:
    """The checks above, as an HTTP middleware: ``app.middleware("http")(guard)``.
    ``token`` None: no token asked (loopback only); ``allowed_hosts`` None: any Host."""

    token: str | None
    allowed_hosts: frozenset[str] | None

    async def __call__(self, request: Request,
                       call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        host = request.headers.get("host", "")
        if self.allowed_hosts is not None and _hostname(host) not in self.allowed_hosts:
            names = ", ".join(sorted(self.allowed_hosts))
            return _refuse(421, f"this console answers only to {names}; Host {host!r} is "
                                "refused")
        if request.method not in SAFE_METHODS:
            refused = self._cross_site(request, host)
            if refused is not None:
                return refused
        if self.token is not None and not request.url.path.startswith(PUBLIC_PREFIXES):
            return await self._with_token(request, call_next)
        return await call_next(request)

    def _cross_site(self, request: Request, host: str) -> Response | None:
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return _refuse(403, f"cross-site request refused (Sec-Fetch-Site: {site})")
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
            return _refuse(403, f"cross-origin request refused (Origin: {origin})")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if request.method == "POST" and kind != "application/json":
            return _refuse(415, "a POST must be JSON (Content-Type: application/json)")
        return None

    def _holds_token(self, request: Request) -> bool:
        assert self.token is not None
        offered = request.cookies.get(COOKIE, "")
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            offered = bearer.strip()
        return hmac.compare_digest(offered.encode(), self.token.encode())

    async def _with_token(self, request: Request,
                          call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        assert self.token is not None
        given = request.query_params.get("token")
        if given is not None and request.method == "GET":
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return RedirectResponse(f"/login?{urlencode({'failed': 1})}", 303)
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, 303)
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict",
                                secure=request.url.scheme == "https")
            return response
        if self._holds_token(request):
            return await call_next(request)
        if request.url.path.startswith(("/api", "/metrics")) or request.method != "GET":
            return JSONResponse({"error": "this console needs its token: send "
                                          "Authorization: Bearer <token>"},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        return RedirectResponse(f"/login?{urlencode({'next': request.url.path})}", 303)
