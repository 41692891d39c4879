"""Who may use the console, and from where (docs/console.md, "Security").

- **Loopback by default.** Bound to 127.0.0.1 the console answers only requests whose
  ``Host`` names the loopback (``localhost``, ``127.0.0.1``, ``[::1]``): a web page that
  rebinds its own domain name to 127.0.0.1 (DNS rebinding) is refused.
- **A token beyond loopback.** Bound to any other address the console refuses to start
  without a token; with one, every request but the static assets must carry it, as
  ``Authorization: Bearer <token>`` (scripts, Prometheus) or as the cookie that opening the
  console once with ``?token=<token>`` sets (HttpOnly, SameSite=Strict), or that the login
  page's form sets: it POSTs the token to ``/login`` (never in a URL) and is sent on to its
  ``next`` page only if that is a page of this console as the browser reads it
  (:func:`console_page`). A link with the token redirects to its own path by the same
  rule, else to ``/``.
- **No cross-site writes.** A state-changing request (anything but GET, HEAD, OPTIONS) is
  refused when the browser says it comes from another site (``Sec-Fetch-Site``) or another
  origin (``Origin``); and a POST must be JSON (``Content-Type: application/json``), which no
  HTML form can send and a cross-origin script may send only after a CORS preflight the
  console never grants (PATCH and DELETE always need that preflight). The one form the
  console accepts is its login form, and only from its own origin. Clients that send
  neither header (curl, scripts) are not browsers, and cross-site request forgery needs a
  browser.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlencode, urljoin, urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

__all__ = ["Guard", "COOKIE", "is_loopback", "console_page", "LOOPBACK_HOSTS"]

COOKIE = "rmq_console_token"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PUBLIC_PREFIXES = ("/static/", "/login")
LOGIN = "/login"
FORM = "application/x-www-form-urlencoded"
MAX_LOGIN_BODY = 8192  # a token and a page path; anything longer is not the login form


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


def console_page(target: str | None, base: str) -> str:
    """``target`` when a browser at ``base`` (the console's own URL) would open it as a page
    of this console, else ``"/"``: the login form sends the token on to it.

    A browser parses a URL by the WHATWG rules, not as written: it drops tabs, CR and LF
    anywhere (``/<TAB>/evil.example`` is ``//evil.example``, another site), strips leading
    spaces and control characters, and reads ``\\`` as ``/``. So a target with any control
    character is refused outright, it must start with ``/``, and both it and its
    percent-decoded form (what a proxy or a later decode may make of it), with ``\\`` read
    as ``/``, must not start with ``//`` and must resolve to ``base``'s scheme and host."""
    if not target or not target.startswith("/"):
        return "/"
    decoded = unquote(target)
    if any(_is_control(c) for c in target + decoded):
        return "/"
    origin = urlsplit(base)[:2]
    for candidate in (target, decoded):
        as_browser = candidate.replace("\\", "/")
        # any run of two or more slashes opens a host for a browser (Python's own parser
        # reads "///host" as a path)
        if as_browser.startswith("//") or urlsplit(urljoin(base, as_browser))[:2] != origin:
            return "/"
    return target


def _is_control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code <= 0x9F


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
        if request.method == "POST" and request.url.path == LOGIN:
            return await self._login(request)
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
        if request.method == "POST" and request.url.path == LOGIN:
            if kind != FORM:
                return _refuse(415, f"the login form is sent as {FORM}")
        elif request.method == "POST" and kind != "application/json":
            return _refuse(415, "a POST must be JSON (Content-Type: application/json)")
        return None

    async def _login(self, request: Request) -> Response:
        """The login form's POST (``token``, ``next``): the cookie and a 303 to ``next`` if
        the token is the console's, else back to the form, which says so."""
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_LOGIN_BODY:
                return _refuse(413, f"the login form is at most {MAX_LOGIN_BODY} bytes")
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        target = console_page(form.get("next", ["/"])[0], str(request.base_url))
        if self.token is None:
            return RedirectResponse(target, 303)  # nothing to ask
        given = form.get("token", [""])[0]
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return RedirectResponse(f"{LOGIN}?{urlencode({'failed': 1, 'next': target})}", 303)
        return self._signed_in(request, target)

    def _holds_token(self, request: Request) -> bool:
        assert self.token is not None
        offered = request.cookies.get(COOKIE, "")
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            offered = bearer.strip()
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def _signed_in(self, request: Request, target: str) -> Response:
        """A 303 to ``target`` that sets the token's cookie."""
        assert self.token is not None
        response = RedirectResponse(target, 303)
        response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
        return response

    async def _with_token(self, request: Request,
                          call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        assert self.token is not None
        given = request.query_params.get("token")
        if given is not None and request.method == "GET":
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return RedirectResponse(f"/login?{urlencode({'failed': 1})}", 303)
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            # the path as decoded: a link's /%2F/evil.example is //evil.example, another
            # site to a browser, so it is sent on only if it stays a page of this console
            target = console_page(request.url.path + (f"?{urlencode(rest)}" if rest else ""),
                                  str(request.base_url))
            return self._signed_in(request, target)
        if self._holds_token(request):
            return await call_next(request)
        if request.url.path.startswith(("/api", "/metrics")) or request.method != "GET":
            return JSONResponse({"error": "this console needs its token: send "
                                          "Authorization: Bearer <token>"},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        return RedirectResponse(f"/login?{urlencode({'next': request.url.path})}", 303)
