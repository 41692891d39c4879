"""The founding case end to end (SPEC §8): price changes in, product images out.

A shop re-renders a product's picture, with its price printed on it, whenever the price
changes. Prices change all the time, from many systems at once; rendering is slow. Here:

1. A Spark job (``local[*]`` unless run under ``spark-submit``) generates price-change events
   in waves: many sources, Zipf-skewed products (a few products change constantly), some
   merchants urgent. Each wave gives a product one new price, which every source reports.
   The events go into an RMQ topic through the ``rmq`` data source, each carrying its price
   (the body) under its product's key, into a topic that merges by key: every change of a
   product still waiting in the queue merges into one message that holds the newest price,
   and urgent merchants' products are sent with HIGH priority.
2. Workers (``rmq.Consumer``, a batch handler) take the messages in batches and render them
   on a simulated GPU (``render.py``: a fixed cost per batch plus a cost per image), then
   draw each product's image with Pillow, with the price its message carries. Merging by key
   is what makes that both correct and cheap: one render covers every change queued before
   it, with the newest price; a change that arrives while its product is being rendered
   queues a new render, and the topic's serial keys run a product's renders one at a time,
   in order (a batch holds a product at most once), so the newest price is drawn last. The
   renderers are bound with ``supersede``: that change also tells the running render its
   price is stale, and the GPU stops that image at once instead of finishing it
   (``--no-supersede`` lets it finish, for comparison).
3. When the queue is empty, it checks every image against each product's latest price,
   prints a summary (with what batching and the renders stopped early saved the GPU) and
   writes it as ``summary.json`` next to the images (``prices.json`` holds the latest
   prices).

The topic is removed at the end unless ``--keep``. ``python -m rmq.demo --help`` lists the
options.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import os
import random
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ..client import Client
from ..extras import require
from ..message import Priority
from .render import Renderer, SimulatedGpu, image_price, is_urgent, merchant_of

__all__ = ["main", "DemoConfig", "run", "image_price"]

SOURCES = ("erp", "promotions", "competitor-watch", "inventory", "flash-sale", "coupons",
           "marketplace-sync", "currency-rates")
EVENT_SCHEMA = "source string, key string, body string, merchant int, priority int, cents int"


@dataclass(frozen=True)
class DemoConfig:
    """The demo's sizes and places (each is a command-line option of the same name)."""

    events: int = 200_000
    products: int = 3_000
    merchants: int = 40
    urgent: float = 0.1
    zipf: float = 1.1
    waves: int = 5
    workers: int = 4
    batch: int = 32
    batch_wait_ms: int = 50
    gpu_batch_ms: float = 40.0
    gpu_image_ms: float = 4.0
    supersede: bool = True
    out: Path = Path("rmq-demo")
    url: str | None = None
    master: str | None = None
    seed: int = 7
    keep: bool = False


def product_id(rank: int) -> str:
    return f"sku-{rank:06d}"


def price_of(rank: int, wave: int, seed: int) -> int:
    """The price (cents) product ``rank`` takes in ``wave``: every source reports the same."""
    return int((5 + rank % 95) * 100 * (0.7 + 0.6 * random.Random(f"{seed}-{rank}-{wave}")
                                        .random()))


def price_changes(config: DemoConfig, wave: int, index: int, ids: Iterator[int]
                  ) -> Iterator[tuple[str, str, str, int, int, int]]:
    """One Spark task: a price-change event per input id, as (source, key = the product id,
    body = its new price as JSON, merchant, priority, price in cents)."""
    rng = random.Random(f"{config.seed}-{wave}-{index}")
    weights = list(itertools.accumulate(1 / (r + 1) ** config.zipf
                                        for r in range(config.products)))
    for _ in ids:
        rank = min(bisect.bisect(weights, rng.random() * weights[-1]), config.products - 1)
        merchant = merchant_of(rank, config.merchants)
        urgent = is_urgent(merchant, config.urgent, config.merchants)
        cents = price_of(rank, wave, config.seed)
        product = product_id(rank)
        yield (rng.choice(SOURCES), product, json.dumps({"cents": cents, "product": product}),
               merchant, int(Priority.HIGH if urgent else Priority.MEDIUM), cents)


def _progress(client: Client, topic: str, config: DemoConfig, renderer: Renderer,
              started: float, done: threading.Event) -> None:
    """A line of progress a second (two when not on a terminal), once something moved and
    whenever it moves again."""
    interval = 1.0 if sys.stdout.isatty() else 2.0
    last = None
    while not done.wait(interval):
        group = client.stats(topic).groups.get("default")
        if group is None:
            continue
        now = (group.counters["sent"], group.counters["merged"], group.pending,
               group.in_flight, sum(renderer.renders.values()))
        if now == last or not any(now):
            continue
        last = now
        sent, merged, queued, rendering, rendered = now
        print(f"  {time.monotonic() - started:6.1f}s  published {sent:>9,}/{config.events:,}"
              f"  merged {merged:>9,}  queued {queued:>6,}  rendering {rendering:>3}"
              f"  rendered {rendered:>7,}", flush=True)


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """This process's standard error (file descriptor 2) into ``path`` meanwhile: the Spark
    JVM started meanwhile inherits it, so its log lines go there, not to the terminal."""
    sys.stderr.flush()
    saved = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(log, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)


def _wait_until_drained(client: Client, topic: str, stall_seconds: float = 120.0) -> None:
    progress, since = None, time.monotonic()
    while True:
        group = client.stats(topic).groups["default"]
        if group.pending == 0 and group.in_flight == 0:
            return
        if (group.counters["acked"], group.pending) != progress:
            progress, since = (group.counters["acked"], group.pending), time.monotonic()
        elif time.monotonic() - since > stall_seconds:
            raise RuntimeError(f"the renderers made no progress for {stall_seconds:.0f} s "
                               f"with {group.pending} messages queued")
        time.sleep(0.2)  # polling the queue's own counters; nothing to subscribe to


def run(config: DemoConfig) -> dict[str, Any]:
    """Run the demo and return its summary (also written to ``out/summary.json``)."""
    from pyspark.sql import SparkSession

    from ..runtime import Consumer
    from ..spark import publish, spark_session
    from ..spark.clients import resolve

    started = time.monotonic()
    url = resolve(config.url)
    client = Client(url)
    topic = f"demo.renders.{time.strftime('%Y%m%d-%H%M%S')}.{secrets.token_hex(3)}"
    # the newest price of a product wins while it waits; its renders run one at a time
    client.create_topic(topic, slots=8, merge="key", serial_keys=True)
    # and a newer price tells the render still running with the older one to stop
    client.bind(topic, "default", supersede=config.supersede)
    config.out.mkdir(parents=True, exist_ok=True)
    for old in config.out.glob("sku-*.png"):
        old.unlink()
    gpu = SimulatedGpu(config.gpu_batch_ms, config.gpu_image_ms)
    renderer = Renderer(gpu, config.out, config.merchants, config.urgent, client.now)
    consumer = Consumer(client, topic, renderer, concurrency=config.workers,
                        batch=config.batch, batch_wait_ms=config.batch_wait_ms).start()
    done = threading.Event()
    printer = threading.Thread(target=_progress, daemon=True,
                               args=(client, topic, config, renderer, started, done))
    owns_spark = SparkSession.getActiveSession() is None
    try:
        print(f"rmq demo: {config.events:,} price changes of {config.products:,} products "
              f"into topic {topic!r}, {config.workers} render workers taking batches of up "
              f"to {config.batch}; starting Spark...", flush=True)
        with _stderr_to(config.out / "spark.log"):
            spark = spark_session("rmq-demo", master=config.master,
                                  conf={"spark.ui.showConsoleProgress": "false"})
            spark.sparkContext.setLogLevel("ERROR")
        printer.start()
        publish_started = time.monotonic()
        sent = merged = 0
        latest: dict[str, int] = {}  # product -> its price in the last wave that changed it
        per_wave = -(-config.events // config.waves)
        for wave in range(config.waves):
            size = min(per_wave, config.events - wave * per_wave)
            if size <= 0:
                break
            ids = spark.sparkContext.range(size, numSlices=spark.sparkContext.defaultParallelism)
            changes = spark.createDataFrame(
                ids.mapPartitionsWithIndex(partial(price_changes, config, wave)),
                EVENT_SCHEMA, verifySchema=False)
            counts = publish(changes.select("key", "body", "priority"), topic, url=url)
            sent, merged = sent + counts.sent, merged + counts.merged
            # waves go out one after another: a later wave's price is the newer
            latest.update((row["key"], row["cents"])
                          for row in changes.select("key", "cents").distinct().collect())
        publish_seconds = time.monotonic() - publish_started
        _wait_until_drained(client, topic)
    finally:
        consumer.stop()
        done.set()
    wall = time.monotonic() - started
    superseded = client.stats(topic).groups["default"].counters.get("superseded", 0)
    summary = _summarise(config, topic, latest, renderer, sent, merged, superseded,
                         publish_seconds, wall)
    if not config.keep:
        client.delete_topic(topic)
    client.close()
    if owns_spark:
        spark.stop()
    return summary


def _summarise(config: DemoConfig, topic: str, prices: dict[str, int], renderer: Renderer,
               sent: int, merged: int, superseded: int, publish_seconds: float, wall: float
               ) -> dict[str, Any]:
    (config.out / "prices.json").write_text(json.dumps(prices, indent=1, sort_keys=True))
    stale = sorted(p for p, cents in prices.items()
                   if not (config.out / f"{p}.png").exists()
                   or image_price(config.out / f"{p}.png") != cents)
    rendered = sum(renderer.renders.values())
    gpu = renderer.gpu

    def median_wait(priority: int) -> int | None:
        waits = renderer.waits.get(priority)
        return int(statistics.median(waits)) if waits else None

    summary = {
        "topic": topic, "events": config.events, "products": config.products,
        "sources": len(SOURCES), "workers": config.workers, "waves": config.waves,
        "sent": sent, "merged": merged, "merged_pct": round(100 * merged / max(sent, 1), 2),
        "stored": sent - merged, "rendered": rendered,
        "products_changed": len(prices), "re_renders": rendered - len(renderer.renders),
        "images_up_to_date": len(prices) - len(stale), "stale_images": stale,
        "batch": config.batch, "batch_wait_ms": config.batch_wait_ms,
        "gpu_batch_ms": gpu.batch_ms, "gpu_image_ms": gpu.image_ms,
        "batches": gpu.batches,
        "mean_batch": round((gpu.images + gpu.stopped) / max(gpu.batches, 1), 2),
        "gpu_seconds": round(gpu.seconds(), 2),
        "gpu_seconds_one_per_call": round(gpu.seconds_one_per_call(), 2),
        # deliveries a newer price superseded; those still on the GPU stopped there
        "supersede": config.supersede, "superseded": superseded,
        "renders_stopped": gpu.stopped, "gpu_seconds_saved": round(gpu.seconds_saved(), 2),
        "batches_repeating_a_product": renderer.repeated,
        "median_wait_ms": {"urgent": median_wait(int(Priority.HIGH)),
                           "normal": median_wait(int(Priority.MEDIUM))},
        "publish_seconds": round(publish_seconds, 2), "wall_seconds": round(wall, 2),
        "publish_per_second": round(sent / max(publish_seconds, 1e-9)),
        "events_per_second": round(sent / max(wall, 1e-9)),
        "renders_per_second": round(rendered / max(wall, 1e-9), 1),
        "out": str(config.out.resolve()),
        # no URL given: the Redis server RMQ started itself, which keeps running
        "embedded_server": config.url is None and not os.environ.get("RMQ_REDIS_URL"),
    }
    (config.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def report(summary: dict[str, Any]) -> str:
    """The summary as the lines the demo prints."""
    s = summary
    waits = s["median_wait_ms"]
    saving = s["gpu_seconds_one_per_call"] / max(s["gpu_seconds"], 1e-9)
    return "\n".join([
        "",
        "RMQ demo: price changes -> product images",
        f"  events published    {s['sent']:>10,}  from {s['sources']} sources, "
        f"{s['products']:,} products",
        f"  merged while queued {s['merged']:>10,}  ({s['merged_pct']:.1f} %)",
        f"  messages stored     {s['stored']:>10,}",
        f"  images rendered     {s['rendered']:>10,}  ({s['products_changed']:,} products, "
        f"{s['re_renders']:,} re-rendered after a later change)",
        f"  up to date          {s['images_up_to_date']:>10,}  of {s['products_changed']:,} "
        f"images show the latest price",
        f"  GPU batches         {s['batches']:>10,}  (mean {s['mean_batch']:.1f} images, up to "
        f"{s['batch']}; {s['gpu_batch_ms']:g} ms a batch + {s['gpu_image_ms']:g} ms an image)",
        f"  GPU time            {s['gpu_seconds']:>9.1f}s  (one image a call: "
        f"{s['gpu_seconds_one_per_call']:.1f}s, {saving:.1f}x as much)",
        *_supersede_lines(s),
        f"  median wait         urgent {waits['urgent']} ms, normal {waits['normal']} ms",
        f"  publish             {s['publish_seconds']:>9.1f}s  "
        f"({s['publish_per_second']:,} events/s)",
        f"  wall time           {s['wall_seconds']:>9.1f}s  ({s['events_per_second']:,} "
        f"events/s end to end, {s['renders_per_second']} renders/s)",
        f"  output              {s['out']}  (an image per product, summary.json, "
        f"prices.json, spark.log)",
        *(["  embedded Redis      still running for the next client (rmq server status; "
           "rmq server stop stops it)"] if s.get("embedded_server") else []),
    ])


def _supersede_lines(s: dict[str, Any]) -> list[str]:
    if not s["supersede"]:
        return ["  renders stopped              0  (--no-supersede: each runs to its end)"]
    return [
        f"  renders stopped     {s['renders_stopped']:>10,}  early, by a newer price (of "
        f"{s['superseded']:,} superseded; the rest had left the GPU)",
        f"  GPU time saved      {s['gpu_seconds_saved']:>9.1f}s  (the stopped renders' "
        f"remaining image time)",
    ]


def parse_args(argv: Sequence[str] | None) -> DemoConfig:
    d = DemoConfig()
    p = argparse.ArgumentParser(prog="rmq demo", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--events", type=int, default=d.events, help="price changes to publish")
    p.add_argument("--products", type=int, default=d.products, help="products in the shop")
    p.add_argument("--merchants", type=int, default=d.merchants, help="merchants")
    p.add_argument("--urgent", type=float, default=d.urgent,
                   help="share of merchants whose products are rendered first (HIGH priority)")
    p.add_argument("--zipf", type=float, default=d.zipf,
                   help="skew of how often each product changes (Zipf exponent)")
    p.add_argument("--waves", type=int, default=d.waves,
                   help="Spark jobs the events are published in, one after another")
    p.add_argument("--workers", type=int, default=d.workers,
                   help="concurrent renders (batches rendered at once)")
    p.add_argument("--batch", type=int, default=d.batch,
                   help="most messages a render takes at once (1: one a call)")
    p.add_argument("--batch-wait-ms", type=int, default=d.batch_wait_ms,
                   help="how long a render waits for its batch to fill, the messages still "
                        "merging meanwhile")
    p.add_argument("--gpu-batch-ms", type=float, default=d.gpu_batch_ms,
                   help="the simulated GPU's cost of a batch")
    p.add_argument("--gpu-image-ms", type=float, default=d.gpu_image_ms,
                   help="the simulated GPU's cost of each image of a batch")
    p.add_argument("--supersede", action=argparse.BooleanOptionalAction, default=d.supersede,
                   help="bind the renderers with supersede: a newer price stops the render "
                        "of the older one early (--no-supersede: it runs to its end, to "
                        "compare the GPU time)")
    p.add_argument("--out", type=Path, default=d.out, help="directory for images and summary")
    p.add_argument("--url", default=None,
                   help="Redis URL (default: $RMQ_REDIS_URL, else the embedded server)")
    p.add_argument("--master", default=None,
                   help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--seed", type=int, default=d.seed, help="random seed of the events")
    p.add_argument("--keep", action="store_true", help="keep the topic in Redis afterwards")
    a = p.parse_args(argv)
    for name in ("events", "products", "merchants", "waves", "workers", "batch"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    for name in ("batch_wait_ms", "gpu_batch_ms", "gpu_image_ms"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be at least 0")
    if not 0 <= a.urgent <= 1:
        p.error("--urgent must be from 0 to 1")
    return DemoConfig(a.events, a.products, a.merchants, a.urgent, a.zipf, a.waves, a.workers,
                      a.batch, a.batch_wait_ms, a.gpu_batch_ms, a.gpu_image_ms, a.supersede,
                      a.out, a.url, a.master, a.seed, a.keep)


def main(argv: Sequence[str] | None = None) -> int:
    """``rmq demo`` / ``python -m rmq.demo``: run and print the summary; 1 if an image
    is stale or a batch held a product twice."""
    config = parse_args(argv)
    require("spark")  # before Spark or Redis is touched
    summary = run(config)
    print(report(summary), flush=True)
    return 0 if not summary["stale_images"] and not summary["batches_repeating_a_product"] else 1


if __name__ == "__main__":
    sys.exit(main())
