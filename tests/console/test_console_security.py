"""Who may use the console (issue 10, point 3): loopback by default and only under a
loopback Host name; a token beyond loopback, asked of every request; no state change from
another site."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from urllib.parse import unquote, urljoin, urlsplit

import httpx
import pytest
from console_helpers import TestClient

import rmq
from rmq.console import create_app
from rmq.console.security import console_page
from rmq.server import free_port

pytestmark = pytest.mark.extras

TOKEN = "s3cret-token"


@pytest.fixture
def guarded(client: rmq.Client):
    with TestClient(create_app(client, token=TOKEN, allowed_hosts=None, sample_interval=None),
                    base_url="http://console.example:8270") as http:
        yield http


def test_on_loopback_a_page_under_another_host_name_is_refused(api: TestClient,
                                                               client: rmq.Client) -> None:
    """A site that rebinds its own name to 127.0.0.1 (DNS rebinding) reads nothing."""
    client.create_topic("t")
    for path in ("/", "/api/overview", "/metrics"):
        refused = api.get(path, headers={"Host": "evil.example:8270"})
        assert refused.status_code == 421 and "evil.example" in refused.json()["error"]
    assert api.get("/api/overview", headers={"Host": "localhost:8270"}).status_code == 200


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Origin": "null"},
])
def test_a_state_change_from_another_site_is_refused(api: TestClient, client: rmq.Client,
                                                     headers: dict) -> None:
    client.create_topic("t")
    refused = api.post("/api/topics/t/pause", json={}, headers=headers)
    assert refused.status_code == 403 and "refused" in refused.json()["error"]
    refused = api.patch("/api/topics/t", json={"max_retries": 1}, headers=headers)
    assert refused.status_code == 403
    info = client.topic("t", fresh=True)
    assert not info.paused and info.settings.max_retries == 16


def test_a_state_change_from_the_console_itself_is_accepted(api: TestClient,
                                                            client: rmq.Client) -> None:
    client.create_topic("t")
    done = api.post("/api/topics/t/pause", json={},
                    headers={"Origin": "http://127.0.0.1:8270", "Sec-Fetch-Site": "same-origin"})
    assert done.status_code == 200
    assert client.topic("t", fresh=True).paused


def test_a_post_that_an_html_form_could_send_is_refused(api: TestClient,
                                                        client: rmq.Client) -> None:
    client.create_topic("t")
    for kind in ("application/x-www-form-urlencoded", "text/plain", "multipart/form-data"):
        refused = api.post("/api/topics/t/pause", content=b"{}", headers={"Content-Type": kind})
        assert refused.status_code == 415 and "JSON" in refused.json()["error"]
    assert not client.topic("t", fresh=True).paused


def test_with_a_token_every_request_but_the_static_assets_needs_it(
        guarded: TestClient, client: rmq.Client) -> None:
    client.create_topic("t")
    for path in ("/api/overview", "/metrics", "/api/openapi.json"):
        refused = guarded.get(path)
        assert refused.status_code == 401 and "token" in refused.json()["error"]
    assert guarded.post("/api/topics/t/pause", json={}).status_code == 401
    assert guarded.get("/api/overview", headers={"Authorization": "Bearer wrong"}
                       ).status_code == 401
    assert not client.topic("t", fresh=True).paused
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert guarded.get("/api/overview", headers=bearer).status_code == 200
    assert guarded.get("/metrics", headers=bearer).status_code == 200
    assert guarded.get("/static/console.css").status_code == 200
    page = guarded.get("/topics/t", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/login?next=%2Ftopics%2Ft"


def test_opening_the_console_with_its_token_sets_a_strict_cookie(guarded: TestClient) -> None:
    wrong = guarded.get("/?token=nope", follow_redirects=False)
    assert wrong.status_code == 303 and wrong.headers["location"] == "/login?failed=1"
    opened = guarded.get(f"/consumers?token={TOKEN}&topic=t", follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"] == "/consumers?topic=t"
    cookie = opened.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert guarded.get("/consumers").status_code == 200  # the cookie now travels
    assert guarded.get("/api/overview").status_code == 200


# Paths of links that carry the token, as an attacker writes them: each would be a
# redirect to another site if the console sent the browser on to the path it decoded.
HOSTILE_PATHS = ["/%2F/evil.example", "/%2f%2fevil.example/steal", "//evil.example/steal",
                 "/%5C/evil.example", "/%5Cevil.example", "/%09/evil.example",
                 "/%2F%09/evil.example", "/%0A/evil.example"]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_a_link_with_the_token_redirects_only_to_a_page_of_this_console(
        guarded: TestClient, path: str) -> None:
    opened = guarded.get(f"http://console.example:8270{path}?token={TOKEN}",
                         follow_redirects=False)
    assert opened.status_code == 303
    location = opened.headers["location"]
    assert location == "/" or console_page(location, "http://console.example:8270/") == \
        location, location
    for read_as in (location, unquote(location)):  # as written, and decoded once more
        as_browser = read_as.replace("\\", "/")
        assert as_browser.startswith("/") and not as_browser.startswith("//"), location
        assert urlsplit(urljoin("http://console.example:8270/", as_browser)).netloc == \
            "console.example:8270", location


def test_a_link_with_the_token_keeps_its_page_and_query(guarded: TestClient) -> None:
    opened = guarded.get(f"/topics/t?token={TOKEN}&group=a", follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"] == "/topics/t?group=a"


# ``next`` as the console receives it (its query already decoded once): each would take the
# browser, and the token the login form sends, to another site, read as a browser reads a URL
# (WHATWG: tab, CR and LF dropped anywhere, "\\" read as "/", leading spaces stripped), or
# once decoded again.
HOSTILE_NEXT = [
    "//evil.example/steal",
    "/\\evil.example/steal",
    "\\\\evil.example/steal",
    "/\\/evil.example/steal",
    "/\t/evil.example/steal",  # /%09/evil.example/steal in the attacker's link
    "/\n/evil.example/steal",
    "/\r/evil.example/steal",
    "/%09/evil.example/steal",  # the same, encoded twice
    "/%5Cevil.example/steal",
    "/%2F/evil.example/steal",
    " //evil.example/steal",
    "/\x00/evil.example",
    "/\x85/evil.example",
    "https://evil.example/steal",
    "http:evil.example/steal",
    "javascript:alert(document.cookie)",
    "evil.example/steal",
    "",
]


def login_form(guarded: TestClient, target: str) -> str:
    """The ``next`` the login page's form will post, after checking the form posts."""
    page = guarded.get("/login", params={"next": target})
    assert page.status_code == 200
    assert '<form class="inline" method="post" action="/login">' in page.text
    (posted,) = re.findall(r'name="next" value="([^"]*)"', page.text)
    return html.unescape(posted)


def sign_in(guarded: TestClient, target: str, token: str = TOKEN,
            **headers: str) -> httpx.Response:
    return guarded.post("/login", data={"token": token, "next": target},
                        headers=headers, follow_redirects=False)


@pytest.mark.parametrize("target", HOSTILE_NEXT)
def test_the_login_form_sends_the_token_only_to_a_page_of_this_console(
        guarded: TestClient, target: str) -> None:
    assert login_form(guarded, target) == "/"
    signed_in = sign_in(guarded, target)
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/"


def test_the_login_form_posts_the_token_and_opens_the_page_asked_for(
        guarded: TestClient) -> None:
    target = "/consumers?topic=t"
    assert login_form(guarded, target) == target
    signed_in = sign_in(guarded, target, **{"Origin": "http://console.example:8270",
                                            "Sec-Fetch-Site": "same-origin"})
    assert signed_in.status_code == 303 and signed_in.headers["location"] == target
    cookie = signed_in.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert guarded.get("/consumers").status_code == 200  # the cookie now travels


def test_the_login_form_with_a_wrong_token_says_so_and_sets_nothing(
        guarded: TestClient) -> None:
    refused = sign_in(guarded, "/dead", token="nope")
    assert refused.status_code == 303 and "set-cookie" not in refused.headers
    assert refused.headers["location"] == "/login?failed=1&next=%2Fdead"
    again = guarded.get(refused.headers["location"])
    assert again.status_code == 401 and "not the console's token" in again.text
    assert guarded.get("/api/overview").status_code == 401


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Origin": "null"},
])
def test_a_login_from_another_site_is_refused(guarded: TestClient, headers: dict) -> None:
    refused = sign_in(guarded, "/", **headers)
    assert refused.status_code == 403 and "set-cookie" not in refused.headers
    assert guarded.get("/api/overview").status_code == 401


def test_the_login_form_is_the_one_form_the_console_accepts(guarded: TestClient,
                                                           client: rmq.Client) -> None:
    client.create_topic("t")
    as_json = guarded.post("/login", json={"token": TOKEN, "next": "/"})
    assert as_json.status_code == 415 and "set-cookie" not in as_json.headers
    as_form = guarded.post("/api/topics/t/pause", data={"token": TOKEN})
    assert as_form.status_code == 415
    assert not client.topic("t", fresh=True).paused


def run_console(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rmq", "--url", url, "console", *args],
                          capture_output=True, text=True, timeout=60)


def test_beyond_loopback_the_console_refuses_to_start_without_a_token(
        console_url: str) -> None:
    done = run_console(console_url, "--host", "0.0.0.0", "--port", str(free_port()))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "give a token" in done.stderr, done.stderr


def test_beyond_loopback_the_console_asks_every_request_for_its_token(
        console_process, client: rmq.Client) -> None:
    base = console_process("--host", "0.0.0.0", "--token", TOKEN)
    client.create_topic("t")
    # any Host name is answered (a token, not the name, guards it), but not without the token
    headers = {"Host": "queue.internal.example"}
    assert httpx.get(f"{base}/api/overview", headers=headers).status_code == 401
    assert httpx.post(f"{base}/api/topics/t/pause", json={}, headers=headers).status_code == 401
    assert not client.topic("t", fresh=True).paused
    authorized = {**headers, "Authorization": f"Bearer {TOKEN}"}
    (topic,) = httpx.get(f"{base}/api/overview", headers=authorized).json()["topics"]
    assert topic["name"] == "t"


@pytest.mark.parametrize("hostile", ["/%09/evil.example/steal", "/%0A/evil.example/steal",
                                     "/%0D/evil.example/steal"])
def test_in_a_browser_the_login_form_keeps_the_token_on_the_console(
        browser, console_process, hostile: str) -> None:
    """The attack end to end: a link to the login page whose ``next`` a browser reads as
    another site; the user types the token and submits."""
    base = console_process("--token", TOKEN)
    context = browser.new_context()
    elsewhere: list[str] = []
    # Every request to another origin is answered here, so a leak would land and show.
    context.route(lambda url: not url.startswith(base + "/"),
                  lambda route: (elsewhere.append(route.request.url),
                                 route.fulfill(status=200, body="stolen")))
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        sent: list[str] = []
        page.on("request", lambda request: sent.append(request.url))
        page.goto(f"{base}/login?next={hostile}")
        page.fill("input[name=token]", TOKEN)
        with page.expect_navigation():
            page.click("button[type=submit]")
        page.wait_for_load_state()
        assert elsewhere == [] and page.url == f"{base}/"
        assert sent and not [url for url in sent if TOKEN in url]
        assert page.title().startswith("Topics")  # signed in: the cookie is set
    finally:
        context.close()
