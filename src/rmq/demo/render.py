"""The demo's renderers: a simulated GPU that renders a batch of product images at a cost
per batch plus a cost per image, stopping an image whose price changed meanwhile, and the
Pillow drawing of each image it renders.

A GPU pays a fixed part for every call (loading the model's state, moving a batch in and out)
and a small part per image, which is why the renderers take their messages in batches
(SPEC §15): one call of 32 images pays the fixed part once instead of 32 times.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..message import Message

__all__ = ["SimulatedGpu", "Renderer", "image_price", "merchant_of", "is_urgent"]


def merchant_of(rank: int, merchants: int) -> int:
    return rank % merchants


def is_urgent(merchant: int, config_urgent: float, merchants: int) -> bool:
    return merchant < max(1, round(config_urgent * merchants))


@dataclass
class SimulatedGpu:
    """Stands in for a GPU: a batch costs ``batch_ms`` and then ``image_ms`` for each of its
    images, one after another, spent waiting as a CPU waits for its GPU (the CPU stays free
    for the Pillow work of other batches). An image whose delivery is superseded (a newer
    price was sent meanwhile) stops there: the wait is ``message.wait_superseded``, so the
    GPU moves on to the next image at once, and the stale image is not rendered. It counts
    what it ran, and the time it spent, thread-safely."""

    batch_ms: float = 40.0
    image_ms: float = 4.0
    batches: int = 0
    images: int = 0  # rendered to the end
    stopped: int = 0  # stopped early: superseded before or while the GPU rendered them
    stopped_ms: float = 0.0  # the image time the stopped images spent before they stopped
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def render(self, messages: Sequence[Message]) -> list[Message]:
        """Spend the batch's GPU time; return the messages whose images it rendered, in
        their order: every one but those superseded before their image was done."""
        image_starts = time.monotonic() + self.batch_ms / 1000
        _wait_until(image_starts)
        rendered, stopped_ms = [], 0.0
        for message in messages:
            done_at = image_starts + self.image_ms / 1000
            if self._image_time(message, done_at):
                rendered.append(message)
                image_starts = done_at  # the next image starts where this one ended
                continue
            stopped_at = min(time.monotonic(), done_at)  # the GPU is free from here
            stopped_ms += max(0.0, stopped_at - image_starts) * 1000
            image_starts = max(image_starts, stopped_at)
        with self.lock:
            self.batches += 1
            self.images += len(rendered)
            self.stopped += len(messages) - len(rendered)
            self.stopped_ms += stopped_ms
        return rendered

    @staticmethod
    def _image_time(message: Message, until: float) -> bool:
        """Spend one image's GPU time, up to the monotonic time ``until``; whether the image
        was rendered: False once its delivery is superseded (at once if it was before the
        image started), as the GPU's work on a stale price is wasted."""
        return not message.wait_superseded(max(0.0, until - time.monotonic()))

    def seconds(self) -> float:
        """The GPU-seconds spent: the fixed part once a batch, the image part once a
        rendered image, and what the stopped images spent before they stopped."""
        return (self.batches * self.batch_ms + self.images * self.image_ms
                + self.stopped_ms) / 1000

    def seconds_saved(self) -> float:
        """The GPU-seconds the stopped images did not spend: the rest of their image time,
        which the GPU would have spent on them without supersede."""
        return (self.stopped * self.image_ms - self.stopped_ms) / 1000

    def seconds_one_per_call(self) -> float:
        """What the same rendered images would have cost one per call: the fixed part once
        an image."""
        return self.images * (self.batch_ms + self.image_ms) / 1000


_never = threading.Event()  # nothing sets it: waiting on it is a sleep that could be woken


def _wait_until(deadline: float) -> None:
    # against a deadline rather than for a duration, so that the waits' overshoots do not
    # add up over a batch
    _never.wait(max(0.0, deadline - time.monotonic()))


@dataclass
class Renderer:
    """The expensive consumer, a batch handler: the GPU renders a batch of products, then
    each image it rendered (not those superseded meanwhile: their newer price renders next)
    is drawn with its message's price into ``out/<product>.png``, whose text chunks record
    ``product`` and ``price_cents`` (what the checks read back)."""

    gpu: SimulatedGpu
    out: Path
    merchants: int
    urgent: float
    now: Callable[[], int]  # the client's clock (Redis's, epoch ms): how long messages waited
    renders: Counter[str] = field(default_factory=Counter)
    waits: dict[int, list[int]] = field(default_factory=dict)
    repeated: int = 0  # batches that held a product twice (serial keys promise none)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, messages: list[Message]) -> None:
        now = self.now()
        products = [message.json()["product"] for message in messages]
        with self.lock:
            for message in messages:
                self.waits.setdefault(message.priority, []).append(
                    max(0, now - message.due_at))
            # a product twice in one batch could be drawn with the older price last
            self.repeated += len(set(products)) < len(products)
        for message in self.gpu.render(messages):
            change = message.json()
            self.draw(change["product"], int(change["cents"]))

    def draw(self, product: str, cents: int) -> None:
        """Draw ``product``'s card with its price and store it, atomically."""
        from PIL import Image, ImageDraw
        from PIL.PngImagePlugin import PngInfo

        rank = int(product.split("-")[1])
        merchant = merchant_of(rank, self.merchants)
        shade = random.Random(rank)
        image = Image.new("RGB", (400, 250), (248, 247, 242))
        draw = ImageDraw.Draw(image)
        colour = tuple(shade.randrange(90, 230) for _ in range(3))
        draw.rounded_rectangle((16, 16, 176, 234), radius=18, fill=colour)
        draw.ellipse((46, 70, 146, 170), fill=(255, 255, 255))
        draw.text((196, 24), product, fill=(40, 40, 40), font=_font(22))
        draw.text((196, 56), f"merchant m{merchant:03d}", fill=(110, 110, 110), font=_font(16))
        draw.text((196, 110), f"${cents // 100}.{cents % 100:02d}", fill=(200, 30, 30),
                  font=_font(44))
        if is_urgent(merchant, self.urgent, self.merchants):
            draw.rectangle((196, 190, 300, 218), fill=(200, 30, 30))
            draw.text((206, 193), "URGENT", fill=(255, 255, 255), font=_font(18))
        info = PngInfo()
        info.add_text("product", product)
        info.add_text("price_cents", str(cents))
        target = self.out / f"{product}.png"
        partial_file = target.with_name(f".{product}.{threading.get_ident()}.png")
        image.save(partial_file, "PNG", pnginfo=info)
        partial_file.replace(target)  # readers never see a half-written image
        with self.lock:
            self.renders[product] += 1


_fonts: dict[int, Any] = {}


def _font(size: int) -> Any:
    from PIL import ImageFont

    if size not in _fonts:
        try:
            _fonts[size] = ImageFont.load_default(size=size)
        except (TypeError, ValueError, OSError):  # Pillow without FreeType: fixed size
            _fonts[size] = ImageFont.load_default()
    return _fonts[size]


def image_price(path: Path) -> int | None:
    """The price (cents) an image was rendered with, from its PNG text chunk."""
    from PIL import Image

    with Image.open(path) as image:
        text = getattr(image, "text", {})
        return int(text["price_cents"]) if "price_cents" in text else None
