"""The demo's renderers (src/rmq/demo/render.py) without Spark: the simulated GPU's costs,
its images stopped early when their price changes, and batch renderers on a serial topic
merging by key, on a real Redis."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq.demo.render import Renderer, SimulatedGpu, image_price

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def messages(n: int) -> list[rmq.Message]:
    return [rmq.Message(topic="t", group="default", slot=0, seq=i, body=b"{}", priority=0,
                        attempts=1, due_at=0) for i in range(n)]


def test_the_simulated_gpu_pays_its_fixed_part_once_a_batch_and_its_image_part_an_image():
    gpu = SimulatedGpu(batch_ms=40, image_ms=4)

    started = time.monotonic()
    rendered = gpu.render(messages(3))
    took = time.monotonic() - started
    gpu.render(messages(5))

    assert len(rendered) == 3
    assert took >= 0.052  # the time is spent, not only counted
    assert (gpu.batches, gpu.images) == (2, 8)
    assert gpu.seconds() == pytest.approx(2 * 0.040 + 8 * 0.004)
    assert gpu.seconds_one_per_call() == pytest.approx(8 * 0.044)
    assert (gpu.stopped, gpu.seconds_saved()) == (0, 0)


def send_prices(client: rmq.Client, cents: int, products: list[str]) -> None:
    client.send_many("prices", [{"body": json.dumps({"product": p, "cents": cents}), "key": p}
                                for p in products])


def test_an_image_whose_price_changes_while_the_gpu_renders_it_stops_there(make_client):
    client = make_client()
    client.create_topic("prices", merge="key")
    client.bind("prices", "gpu", supersede=True)
    send_prices(client, 100, ["sku-000001"])
    (stale,) = client.claim("prices", "gpu")
    gpu = SimulatedGpu(batch_ms=0, image_ms=30_000)
    rendered: list[list[rmq.Message]] = []
    render = threading.Thread(target=lambda: rendered.append(gpu.render([stale])), daemon=True)

    started = time.monotonic()
    render.start()
    send_prices(client, 200, ["sku-000001"])
    render.join(timeout=10)
    took = time.monotonic() - started

    assert rendered == [[]]  # stopped: nothing to draw
    assert (gpu.batches, gpu.images, gpu.stopped) == (1, 0, 1)
    assert gpu.seconds() <= took < 10  # the time actually spent, not the image's 30 s
    assert gpu.seconds() + gpu.seconds_saved() == pytest.approx(30)


PRODUCTS = [f"sku-{rank:06d}" for rank in range(8)]
CHANGED = PRODUCTS[-1]


def render_a_price_change(make_client, tmp_path, supersede: bool) -> tuple[Any, Renderer]:
    """Eight products priced 100 rendered by a batch consumer (batches of 8, 0.9 s on the
    GPU: a batch of one would take 0.2 s and overtake it) on a serial topic merging by key;
    the last one's price changes to 200 while the first batch renders; run until drained.
    Returns the client and the renderer."""
    client = make_client()
    client.create_topic("prices", slots=1, merge="key", serial_keys=True)
    if supersede:
        client.bind("prices", "default", supersede=True)
    send_prices(client, 100, PRODUCTS)
    renderer = Renderer(SimulatedGpu(batch_ms=100, image_ms=100), tmp_path, merchants=4,
                        urgent=0.25, now=client.now)
    consumer = rmq.Consumer(make_client(), "prices", renderer, concurrency=2, batch=8,
                            heartbeat_interval=60).start()
    try:
        wait_for(lambda: client.stats("prices").groups["default"].in_flight == 8,
                 what="the first batch in flight")
        send_prices(client, 200, [CHANGED])

        def drained() -> bool:
            group = client.stats("prices").groups["default"]
            return group.pending == 0 and group.in_flight == 0

        wait_for(drained, timeout=20, what="every price rendered")
    finally:
        consumer.stop(grace=5)
    assert {p: image_price(tmp_path / f"{p}.png") for p in PRODUCTS} == {
        **dict.fromkeys(PRODUCTS, 100), CHANGED: 200}
    return client, renderer


@pytest.mark.extras  # Pillow, of the spark extra
def test_a_price_changed_mid_render_is_drawn_last_and_a_batch_holds_a_product_once(
        make_client, tmp_path):
    _, renderer = render_a_price_change(make_client, tmp_path, supersede=False)
    assert renderer.renders == {**dict.fromkeys(PRODUCTS, 1), CHANGED: 2}
    assert renderer.repeated == 0
    assert (renderer.gpu.batches, renderer.gpu.images, renderer.gpu.stopped) == (2, 9, 0)


@pytest.mark.extras  # Pillow, of the spark extra
def test_with_supersede_a_price_changed_mid_render_stops_its_image_and_the_newer_is_drawn(
        make_client, tmp_path):
    client, renderer = render_a_price_change(make_client, tmp_path, supersede=True)
    assert renderer.renders == dict.fromkeys(PRODUCTS, 1)  # the stale image was not drawn
    gpu = renderer.gpu
    assert (gpu.batches, gpu.images, gpu.stopped) == (2, 8, 1)
    assert 0 < gpu.seconds_saved() <= 0.1
    # the GPU spent less than it would have rendering the stale image to its end
    assert gpu.seconds() < 2 * 0.1 + 9 * 0.1
    assert gpu.seconds() + gpu.seconds_saved() == pytest.approx(2 * 0.1 + 9 * 0.1)
    counters = client.stats("prices").groups["default"].counters
    assert (counters["superseded"], counters.get("retried", 0)) == (1, 0)
