"""OpenTelemetry (SPEC §11, the ``otel`` extra): with a tracer provider configured, sends
make producer spans, each handler call a consumer span linked to the producer spans of the
sends merged into its message (at most 32), and each ``claim`` a receive span, named and
described by the messaging conventions (a failure's ``error.type``, the server, the slot as
the partition); without one, nothing is stored. A provider is global to a process, so each
configured run is a subprocess that records its spans with the SDK's
``InMemorySpanExporter``."""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
import redis
from test_acl import add_user, documented_acl  # noqa: F401  (add_user: a fixture)

import rmq

pytestmark = [pytest.mark.extras, pytest.mark.single_node]

SETUP = """
import asyncio, json, sys, threading
import rmq
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
client = rmq.Client(sys.argv[1])


def consume(topic, count):
    handled = []
    done = threading.Event()

    def handle(message):
        handled.append(message.text)
        if len(handled) == count:
            done.set()

    consumer = rmq.Consumer(client, topic, handle, concurrency=1).start()
    assert done.wait(30), handled
    consumer.stop(grace=5)


def report():
    spans = []
    for span in exporter.get_finished_spans():
        spans.append({"name": span.name, "kind": span.kind.name,
                      "status": span.status.status_code.name,
                      "attributes": dict(span.attributes),
                      "context": [span.context.trace_id, span.context.span_id],
                      "links": [[link.context.trace_id, link.context.span_id]
                                for link in span.links],
                      "linked_ids": [(link.attributes or {}).get("messaging.message.id")
                                     for link in span.links]})
    print(json.dumps(spans))
"""

MERGED_SENDS = SETUP + """
client.create_topic("renders")
client.send("renders", b"product:42")
client.send("renders", b"product:42")
client.send_many("renders", [b"product:42", b"product:7"])


async def send_async():
    async with rmq.AsyncClient(sys.argv[1]) as other:
        await other.send("renders", b"product:42")

asyncio.run(send_async())
consume("renders", 2)
report()
"""

MANY_SENDS = SETUP + """
client.create_topic("renders")
for _ in range(40):
    client.send("renders", b"product:42")
consume("renders", 1)
report()
"""

FAILURES = SETUP + """
class NoPrice(Exception):
    pass


client.create_topic("renders", max_retries=0)
try:
    client.send("unknown-topic", b"product:42")
except rmq.errors.UnknownTopic:
    pass
else:
    raise AssertionError("a send to an unknown topic succeeded")
client.send("renders", b"product:42")
failed = threading.Event()


def handle(message):
    failed.set()
    raise NoPrice(f"no price for {message.text}")


consumer = rmq.Consumer(client, "renders", handle, concurrency=1).start()
assert failed.wait(30)
consumer.stop(grace=5)
report()
"""

CLAIMS = SETUP + """
client.create_topic("renders")
client.send("renders", b"product:42")
client.send("renders", b"product:42")
client.send("renders", b"product:7")
client.ack(client.claim("renders", count=10))


async def claim_async():
    async with rmq.AsyncClient(sys.argv[1]) as other:
        await other.send("renders", b"product:9")
        await other.ack(await other.claim("renders", "default", 10))
        assert await other.claim("renders") == []

asyncio.run(claim_async())
report()
"""


BATCH = SETUP + """
client.create_topic("renders", max_retries=0)
client.send("renders", b"product:42")
client.send("renders", b"product:7")
client.send("renders", b"product:9")
done = threading.Event()


def render(messages):
    done.set()
    raise rmq.BatchFailed({m: "no price" for m in messages if m.text == "product:9"})


consumer = rmq.Consumer(client, "renders", render, batch=10, concurrency=1).start()
assert done.wait(30)
consumer.stop(grace=5)
report()
"""


def run(script: str, url: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_handler_span_links_to_the_producer_spans_of_the_sends_merged_into_its_message(
        redis_url):
    spans = run(MERGED_SENDS, redis_url)
    producers = [s for s in spans if s["kind"] == "PRODUCER"]
    consumers = {s["attributes"]["messaging.message.id"]: s for s in spans
                 if s["kind"] == "CONSUMER"}
    assert [s["name"] for s in producers] == ["send renders"] * 4
    assert all(s["attributes"]["messaging.system"] == "rmq"
               and s["attributes"]["messaging.destination.name"] == "renders"
               and s["attributes"]["messaging.operation.type"] == "send" for s in producers)
    single, merged, batch, from_async = producers
    product_42 = rmq.message_id_of("renders", b"product:42")
    assert single["attributes"]["messaging.message.id"] == product_42
    assert merged["attributes"]["rmq.merged"] is True
    assert batch["attributes"]["messaging.batch.message_count"] == 2
    assert set(consumers) == {product_42, rmq.message_id_of("renders", b"product:7")}
    handled = consumers[product_42]
    assert handled["name"] == "process renders"
    assert handled["attributes"]["messaging.consumer.group.name"] == "default"
    assert handled["attributes"]["messaging.operation.type"] == "process"
    assert sorted(handled["links"]) == sorted(
        s["context"] for s in (single, merged, batch, from_async))
    assert consumers[rmq.message_id_of("renders", b"product:7")]["links"] == [batch["context"]]
    # a Consumer's own claims are not the application's: they make no receive span
    assert {s["kind"] for s in spans} == {"PRODUCER", "CONSUMER"}
    # what the sends kept for the claim was taken by it
    assert [key for node in _nodes(redis_url) for key in node.keys("*:links:*")] == []


def test_a_batch_handler_call_is_one_span_linked_to_the_send_of_each_of_its_messages(
        redis_url):
    spans = run(BATCH, redis_url)
    producers = {s["attributes"]["messaging.message.id"]: s["context"] for s in spans
                 if s["kind"] == "PRODUCER"}
    (batch,) = [s for s in spans if s["kind"] == "CONSUMER"]
    assert batch["name"] == "process renders"
    assert batch["attributes"]["messaging.batch.message_count"] == 3
    assert batch["attributes"]["messaging.operation.type"] == "process"
    assert sorted(zip(batch["linked_ids"], batch["links"], strict=True)) == sorted(
        producers.items())
    # a BatchFailed is the batch's failure: recorded on its span
    assert batch["status"] == "ERROR"
    assert batch["attributes"]["error.type"] == "rmq.errors.BatchFailed"


def test_a_handler_span_links_to_the_latest_32_sends(redis_url):
    spans = run(MANY_SENDS, redis_url)
    producers = [s["context"] for s in spans if s["kind"] == "PRODUCER"]
    (consumer,) = [s for s in spans if s["kind"] == "CONSUMER"]
    assert len(producers) == 40
    assert consumer["links"] == producers[-32:]


def test_a_user_with_only_the_documented_acl_links_its_spans(redis_url, request):
    # the links are plain commands in the send's round trip: the ACL must carry them too
    make_user = request.getfixturevalue("add_user")  # test_acl's, on this redis_url
    spans = run(MERGED_SENDS, make_user(documented_acl("rmq")))
    consumers = [s for s in spans if s["kind"] == "CONSUMER"]
    assert len(consumers) == 2 and sorted(len(s["links"]) for s in consumers) == [1, 4]


def test_without_a_tracer_provider_no_span_context_is_stored(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("renders")
        client.send("renders", b"product:42")
        client.send_many("renders", [b"product:42", b"product:7"])
        assert rmq.otel.tracer() is None
        stored = [row.message_id for row in client.snapshot("renders")]
        assert len(stored) == 2
        for message in client.claim("renders"):
            assert rmq.message.links_of(message) == ()
    links = [key for node in _nodes(redis_url) for key in node.keys("*:links:*")]
    assert links == []


def test_a_failed_send_and_a_failed_handler_call_name_their_error_type(redis_url):
    spans = run(FAILURES, redis_url)
    failed_send, sent = [s for s in spans if s["kind"] == "PRODUCER"]
    assert failed_send["name"] == "send unknown-topic"
    assert failed_send["status"] == "ERROR"
    assert failed_send["attributes"]["error.type"] == "rmq.errors.UnknownTopic"
    assert sent["status"] == "UNSET" and "error.type" not in sent["attributes"]
    (handled,) = [s for s in spans if s["kind"] == "CONSUMER"]
    assert handled["status"] == "ERROR"
    assert handled["attributes"]["error.type"] == "__main__.NoPrice"


def test_a_claim_makes_a_receive_span_on_either_client(redis_url):
    spans = run(CLAIMS, redis_url)
    sends = [s for s in spans if s["kind"] == "PRODUCER"]
    receives = [s for s in spans if s["kind"] == "CLIENT"]
    assert [s["name"] for s in receives] == ["claim renders"] * 3
    for span in receives:
        assert span["status"] == "UNSET"
        assert {key: span["attributes"][key] for key in (
            "messaging.system", "messaging.destination.name", "messaging.consumer.group.name",
            "messaging.operation.name", "messaging.operation.type")} == {
            "messaging.system": "rmq", "messaging.destination.name": "renders",
            "messaging.consumer.group.name": "default", "messaging.operation.name": "claim",
            "messaging.operation.type": "receive"}
    from_sync, from_async, empty = receives
    assert [s["attributes"]["messaging.batch.message_count"] for s in receives] == [2, 1, 0]
    # each claimed message's latest send is linked, named by its message id
    product_42, product_7 = (rmq.message_id_of("renders", body)
                             for body in (b"product:42", b"product:7"))
    linked = dict(zip(from_sync["linked_ids"], from_sync["links"], strict=True))
    assert linked == {product_42: sends[1]["context"], product_7: sends[2]["context"]}
    assert from_async["links"] == [sends[3]["context"]]
    assert empty["links"] == []


@pytest.mark.both_deployments
def test_spans_name_the_server_and_the_slot_as_the_partition(redis_url):
    spans = run(MERGED_SENDS, redis_url) + run(CLAIMS, redis_url)
    url = urlsplit(redis_url)
    assert spans and all(s["attributes"]["server.address"] == url.hostname
                         and s["attributes"]["server.port"] == url.port for s in spans)
    for span in spans:
        attributes = span["attributes"]
        if span["kind"] == "CONSUMER":
            slot = attributes["rmq.delivery.id"].split("-")[0]
            assert attributes["messaging.destination.partition.id"] == slot
        elif span["kind"] == "PRODUCER" and "messaging.batch.message_count" not in attributes:
            assert attributes["messaging.destination.partition.id"].isdigit()
        else:  # a batch or a claim spans several slots
            assert "messaging.destination.partition.id" not in attributes
    # a message's sends went to the slot it was then claimed from
    product_42 = rmq.message_id_of("renders", b"product:42")
    slots = {s["attributes"]["messaging.destination.partition.id"] for s in spans
             if s["attributes"].get("messaging.message.id") == product_42}
    assert len(slots) == 1


def _nodes(url: str) -> list[redis.Redis]:
    first = redis.Redis.from_url(url)
    try:
        masters = [n for n in first.execute_command("CLUSTER", "NODES").decode().splitlines()
                   if "master" in n]
    except redis.ResponseError:
        return [first]
    hosts = [line.split()[1].split("@")[0] for line in masters]
    return [redis.Redis(host=h.rsplit(":", 1)[0], port=int(h.rsplit(":", 1)[1]))
            for h in hosts]
