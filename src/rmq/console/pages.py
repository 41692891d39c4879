"""The console's pages: HTML shells rendered from the package's templates, which fill and
refresh themselves from ``/api`` (``static/console.js``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, select_autoescape

import rmq
from rmq.errors import CorruptRegistry, InputError

from .security import console_page

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(env=Environment(loader=PackageLoader("rmq.console", "templates"),
                                            autoescape=select_autoescape()))


def _page(request: Request, template: str, page: str, status: int = 200,
          **context: Any) -> HTMLResponse:
    client: rmq.Client = request.app.state.client
    # the topics a page offers to pick: the readable ones (a broken one, which the overview
    # names with its problem, has nothing to show)
    readable = list(client.each_topic(lambda info: info.name).results)
    return templates.TemplateResponse(request, template, {
        "page": page, "refresh_ms": request.app.state.refresh_ms,
        "topics": readable, **context}, status_code=status)


@router.get("/", response_class=HTMLResponse)
def overview(request: Request) -> HTMLResponse:
    return _page(request, "overview.html", "overview")


@router.get("/topics/{topic}", response_class=HTMLResponse)
def topic(request: Request, topic: str) -> HTMLResponse:
    try:
        request.app.state.client.topic(topic, fresh=True)
    except InputError as exc:
        return _page(request, "missing.html", "missing", 404, message=str(exc))
    except CorruptRegistry as exc:
        return _page(request, "missing.html", "missing", 409, message=str(exc),
                     title="Broken topic")
    return _page(request, "topic.html", "topic", topic=topic)


@router.get("/consumers", response_class=HTMLResponse)
def consumers(request: Request) -> HTMLResponse:
    return _page(request, "consumers.html", "consumers")


@router.get("/dead", response_class=HTMLResponse)
def dead(request: Request) -> HTMLResponse:
    return _page(request, "dead.html", "dead")


@router.get("/find", response_class=HTMLResponse)
def find(request: Request) -> HTMLResponse:
    return _page(request, "find.html", "find")


@router.get("/api/docs", response_class=HTMLResponse)
def api_docs(request: Request) -> HTMLResponse:
    """The API's endpoints as listed by its OpenAPI document; drawn here rather than by
    Swagger UI, which would load its scripts from a CDN (the console ships everything)."""
    return _page(request, "api_docs.html", "api", endpoints=endpoints(request.app.openapi()))


def endpoints(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Each operation of an OpenAPI ``document``: method, path, summary, its parameters
    (``name?`` when optional) and the fields of its JSON body."""
    schemas = document.get("components", {}).get("schemas", {})
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            parameters = [p["name"] + ("" if p.get("required") else "?")
                          for p in operation.get("parameters", [])]
            body = operation.get("requestBody", {}).get("content", {}).get(
                "application/json", {}).get("schema", {})
            fields = schemas.get(body.get("$ref", "").rpartition("/")[2], {})
            required = set(fields.get("required", []))
            found.append({"method": method.upper(), "path": path,
                          "summary": operation.get("summary", ""), "parameters": parameters,
                          "body": [n + ("" if n in required else "?") for n in sorted(
                              fields.get("properties", {}), key=lambda n: n not in required)]})
    return found


@router.get("/login", response_class=HTMLResponse)
def login(request: Request) -> HTMLResponse:
    failed = request.query_params.get("failed") is not None
    # only a page of this console: the form sends the token on to it (security.py)
    target = console_page(request.query_params.get("next"), str(request.base_url))
    return templates.TemplateResponse(request, "login.html", {
        "page": "login", "failed": failed, "next": target,
        "refresh_ms": 0, "topics": []}, status_code=401 if failed else 200)
