"""Every ``/api`` operation under generated input (schemathesis's strategies, from the
console's own OpenAPI schema): never a server error, and a refused request writes nothing."""

from __future__ import annotations

import pytest
import redis
import schemathesis
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmq
from rmq.console import api, create_app

pytestmark = pytest.mark.extras

DELAYED_MS = 3_600_000  # far enough that no read promotes it during the test
OPERATIONS = sorted((route.path, method) for route in api.router.routes
                    if isinstance(route, APIRoute) for method in route.methods)


def seed(client: rmq.Client) -> None:
    client.create_topic("t", slots=2, max_retries=0)
    client.bind("t", "audit")
    client.send_many("t", ["a", "b", "c", {"body": "later", "delay_ms": DELAYED_MS}])
    (message,) = client.claim("t", "audit", count=1)
    client.nack(message, "boom")


def keyspace(raw: redis.Redis) -> dict[bytes, bytes | None]:
    return {key: raw.dump(key) for key in raw.scan_iter(count=1000)}


@pytest.fixture
def api_schema(client: rmq.Client) -> schemathesis.BaseSchema:
    seed(client)
    # any Host name: the schema loader and the test client name their own
    app = create_app(client, allowed_hosts=None, sample_interval=None)
    return schemathesis.openapi.from_asgi("/api/openapi.json", app)


def test_the_schema_documents_every_operation(api_schema: schemathesis.BaseSchema) -> None:
    documented = sorted((op.path, op.method.upper()) for op in
                        (result.ok() for result in api_schema.get_all_operations()))
    assert documented == OPERATIONS


@pytest.mark.parametrize(("path", "method"), OPERATIONS)
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
@given(data=st.data())
def test_no_operation_answers_generated_input_with_a_server_error_or_a_partial_write(
        api_schema: schemathesis.BaseSchema, console_url: str, path: str, method: str,
        data: st.DataObject) -> None:
    operation = api_schema[path][method]
    mode = data.draw(st.sampled_from(list(schemathesis.GenerationMode)))  # valid or not
    case = data.draw(operation.as_strategy(mode))
    if "topic" in (case.path_parameters or {}) and data.draw(st.booleans()):
        case.path_parameters["topic"] = "t"  # the topic that exists, half of the time
    with redis.Redis.from_url(console_url) as raw:
        before = keyspace(raw)
        response = case.call()
        assert response.status_code < 500, (case.as_curl_command(), response.text)
        if response.status_code >= 400:
            assert response.json().get("error"), (case.as_curl_command(), response.text)
            assert keyspace(raw) == before, case.as_curl_command()
