"""The registry (the seed's configuration service), kept in Redis: topics with their settings,
bound groups, the paused flag, and the consumers' heartbeats. Sans-IO operations, like
``queue.py``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from ..errors import (
    CorruptRegistry,
    InputError,
    InvalidSetting,
    TopicConflict,
    UnknownTopic,
    WrongKeyType,
)
from ..filters import Filter
from ..settings import (
    DEFAULT_GROUP,
    GroupLimits,
    TopicSettings,
    check_group_name,
    check_topic_name,
)
from .bindings import filter_argument, group_filters, group_supersede, stop_argument
from .calls import Op, command
from .handler_times import HandlerTimes
from .keys import TOPICS, HeadsKeys, LimitKeys, RegistryKeys, SlotKeys
from .transactions import topic_keys as transaction_keys

__all__ = [
    "TopicInfo",
    "ConsumerState",
    "ConsumerInfo",
    "load_info",
    "create_topic",
    "alter_topic",
    "delete_topic",
    "list_topics",
    "set_paused",
    "heartbeat",
    "forget_consumer",
    "list_consumers",
    "FORGET_AFTER_MS",
]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as registered: settings, the groups that receive its messages, paused flag,
    and its generation (a token of this creation of the topic, "" for a topic created
    before generations existed), which every send and claim passes along: the scripts
    refuse a generation that is not the slot's (docs/storage.md, "Deleted topics")."""

    name: str
    settings: TopicSettings
    bound_groups: tuple[str, ...]
    paused: bool
    unbound_groups: tuple[str, ...] = ()  # unbound, but what they held stays until purged
    generation: str = ""
    filters: tuple[tuple[str, Filter], ...] = ()  # (group, its filters) of filtered groups
    # enqueue.lua's ARGV[5] for ``groups``, computed once per load: "" when none filters
    filter_argument: str = ""

    def filter_of(self, group: str) -> Filter:
        """The group's filters (an empty Filter when it has none)."""
        return dict(self.filters).get(group, Filter())
    group_limits: Mapping[str, GroupLimits] = field(default_factory=dict)  # limited ones
    # (group, its supersede_limit) of the groups with supersede on (SPEC §14)
    supersede: tuple[tuple[str, int], ...] = ()
    # enqueue.lua's ARGV[8] for ``groups``, computed once per load: "" when none supersedes
    stop_argument: str = ""

    def limits(self, group: str) -> GroupLimits:
        """The group's limits (no limit for a group that has none stored)."""
        return self.group_limits.get(group, NO_LIMITS)

    def supersede_limit(self, group: str) -> int | None:
        """The group's supersede_limit, or None when its supersede is off."""
        return dict(self.supersede).get(group)

    @property
    def groups(self) -> tuple[str, ...]:
        """The groups that receive new messages: the bound ones, or ``default`` if none."""
        return self.bound_groups or (DEFAULT_GROUP,)

    @property
    def version_retention_ms(self) -> int:
        """How long a key's highest version is remembered (lua/includes/versions.lua)."""
        return int(self.settings.version_retention * 1000)


@dataclass(frozen=True, slots=True)
class ConsumerState:
    """What a running consumer reports in each heartbeat.

    ``concurrency``: handlers it runs at once; ``in_flight``: messages it holds (claimed and
    not yet settled); ``handled`` and ``failed``: handler runs that succeeded and failed
    since it started at ``started_at`` (epoch ms); ``handler_times``: how long those runs
    took.
    """

    id: str
    topic: str
    group: str
    host: str
    pid: int
    started_at: int
    concurrency: int
    in_flight: int
    handled: int
    failed: int
    handler_times: HandlerTimes = HandlerTimes()


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """A consumer's last heartbeat (see :class:`ConsumerState`), seen at ``last_seen`` (epoch
    ms); ``alive`` is false once heartbeats stop arriving, and a dead consumer's numbers are
    those of its last heartbeat. ``handler_times`` is None for a consumer that reported
    none (an earlier version)."""

    id: str
    topic: str
    group: str
    host: str
    pid: int
    started_at: int
    last_seen: int
    concurrency: int
    in_flight: int
    handled: int
    failed: int
    alive: bool
    handler_times: HandlerTimes | None = None
    # seconds of silence after which a consumer is dropped from the registry (and lists)
    FORGOTTEN_AFTER: ClassVar[float] = 600.0


def load_info(name: str, salvage: bool = False) -> Op[TopicInfo]:
    """The topic's entry; UnknownTopic if it has none, CorruptRegistry if it cannot be read.
    ``salvage`` reads a corrupt entry as the largest topic it could be (every possible slot,
    the readable group names): what ``delete_topic`` needs to remove one."""
    keys = RegistryKeys(name)
    reads = _entry_reads(keys)
    try:
        settings, groups, paused, unbound, generation, filters, limits, supersede = yield [
            command(verb, key) for key, (verb, _) in reads.items()]
    except WrongKeyType:
        problem, stored = yield from _wrong_types(reads)
        if not salvage:
            raise CorruptRegistry(name, problem) from None
        return _salvaged(name, stored[keys.groups], stored[keys.paused],
                         stored[keys.unbound])
    if settings is None:
        if salvage and (yield [command("SISMEMBER", TOPICS, name)])[0]:
            return _salvaged(name, groups, paused, unbound)  # listed, without settings
        raise UnknownTopic(name)
    try:
        bound = _names(name, groups)
        found = group_filters(name, bound, filters)
        superseding = group_supersede(name, bound, supersede)
        return TopicInfo(name, _settings(name, settings), bound,
                         paused is not None, _names(name, unbound),
                         _generation(name, generation), found,
                         filter_argument(bound or (DEFAULT_GROUP,), found),
                         _limits(name, limits), superseding,
                         stop_argument(name, bound or (DEFAULT_GROUP,), superseding))
    except CorruptRegistry:
        if not salvage:
            raise
        return _salvaged(name, groups, paused, unbound)


def _salvaged(name: str, groups: set[bytes], paused: bytes | None,
              unbound: set[bytes]) -> TopicInfo:
    """A corrupt entry as the largest topic it could be, with its readable group names."""
    return TopicInfo(name, TopicSettings(slots=MAX_SLOTS), _names(name, groups, readable=True),
                     paused is not None, _names(name, unbound, readable=True))


def _entry_reads(keys: RegistryKeys) -> dict[str, tuple[str, str]]:
    """Each key of the entry with the command that reads it and the Redis type it has."""
    return {keys.settings: ("GET", "string"), keys.groups: ("SMEMBERS", "set"),
            keys.paused: ("GET", "string"), keys.unbound: ("SMEMBERS", "set"),
            keys.generation: ("GET", "string"), keys.filters: ("HGETALL", "hash"),
            keys.limits: ("HGETALL", "hash"), keys.supersede: ("HGETALL", "hash")}


def _wrong_types(reads: dict[str, tuple[str, str]]) -> Op[tuple[str, dict[str, Any]]]:
    """After Redis answered WRONGTYPE to the entry's reads: which keys hold another type
    (the problem, naming them), and what the others hold (a wrong one reads as absent)."""
    types = yield [command("TYPE", key) for key in reads]
    found = {key: kind.decode() if isinstance(kind, bytes) else str(kind)
             for key, kind in zip(reads, types, strict=True)}
    wrong = [key for key, (_, want) in reads.items() if found[key] not in (want, "none")]
    readable = [key for key in reads if key not in wrong]
    values = yield [command(reads[key][0], key) for key in readable]
    empty: dict[str, Any] = {"GET": None, "SMEMBERS": set(), "HGETALL": {}}
    stored = {key: empty[verb] for key, (verb, _) in reads.items()}
    stored.update(zip(readable, values, strict=True))
    problem = "; ".join(f"its key {key} is a Redis {found[key]}, not a {reads[key][1]}"
                        for key in wrong)
    return problem or "Redis answered WRONGTYPE reading it", stored


MAX_SLOTS = 1024


def _settings(name: str, stored: bytes) -> TopicSettings:
    try:
        return TopicSettings.from_json(stored)
    except (ValueError, TypeError) as exc:  # not JSON, not an object, unknown or bad values
        raise CorruptRegistry(name, f"its settings are not RMQ's: {exc}") from None


def _generation(name: str, stored: bytes | None) -> str:
    if stored is None:
        return ""  # created before generations existed: its sends and claims go unchecked
    try:
        generation = stored.decode("ascii")
    except UnicodeDecodeError:
        generation = ""
    if not generation.isalnum():
        raise CorruptRegistry(name, f"its generation is not RMQ's: {stored!r}")
    return generation


NO_LIMITS = GroupLimits()


def _limits(name: str, stored: dict[bytes, bytes]) -> dict[str, GroupLimits]:
    """The limited groups' limits as stored; one that is not RMQ's makes the entry corrupt
    (a limit must never be silently dropped)."""
    limits = {}
    for raw_group, raw in stored.items():
        try:
            limits[check_group_name(raw_group.decode())] = GroupLimits.from_json(raw)
        except (ValueError, TypeError, InputError):
            raise CorruptRegistry(name, f"the limits of group {raw_group!r} are not RMQ's: "
                                        f"{raw!r}") from None
    return limits


def _names(name: str, stored: set[bytes], readable: bool = False) -> tuple[str, ...]:
    """Group names as stored; a name that is not one (another program wrote it) makes the
    entry corrupt, or is left out when only the ``readable`` ones are wanted."""
    names = []
    for raw in stored:
        try:
            names.append(check_group_name(raw.decode()))
        except ValueError:
            if not readable:
                raise CorruptRegistry(name, f"a bound group is not a group name: {raw!r}") \
                    from None
    return tuple(sorted(names))


def create_topic(name: str, settings: TopicSettings,
                 given: Collection[str] | None = None) -> Op[TopicSettings]:
    """Register ``name``. For an existing topic only the settings ``given`` (default: all)
    are compared: equal, it returns the topic's settings and writes nothing; other values
    raise TopicConflict naming them (and nothing is written). A start-up line such as
    ``create_topic("renders", slots=8)`` so keeps working once an operator altered
    another setting.

    The topic's generation is written before its settings, into the registry and into every
    slot, so that whoever can read the settings can send and claim. Two creators at once
    share one generation (the first ``SET NX`` wins) and the settings decide who created
    the topic."""
    keys = RegistryKeys(name)
    compared = [key for key in TopicSettings.names() if given is None or key in given]
    (stored,) = yield [command("GET", keys.settings)]
    if stored is not None:
        return _same_settings(name, stored, settings, compared)
    drawn = secrets.token_hex(8)
    (held,) = yield [command("SET", keys.generation, drawn, "NX", "GET")]
    generation = drawn if held is None else held  # GET answers the one already there
    yield [command("SET", SlotKeys(name, slot).generation, generation)
           for slot in range(settings.slots)]
    created, _ = yield [command("SET", keys.settings, settings.to_json(), "NX"),
                        command("SADD", TOPICS, name)]
    if created:
        return settings
    (stored,) = yield [command("GET", keys.settings)]
    return _same_settings(name, stored, settings, compared)


def _same_settings(name: str, stored: bytes, settings: TopicSettings,
                   compared: Collection[str]) -> TopicSettings:
    existing = _settings(name, stored)
    old, new = existing.to_dict(), settings.to_dict()
    differences = {key: (old[key], new[key]) for key in compared if old[key] != new[key]}
    if differences:
        raise TopicConflict(name, differences, tuple(
            key for key in differences if not _alterable(existing, key, new[key])))
    return existing


def _alterable(settings: TopicSettings, key: str, value: Any) -> bool:
    try:
        settings.altered(**{key: value})
    except InvalidSetting:
        return False
    return True


def alter_topic(name: str, changes: dict[str, Any]) -> Op[TopicSettings]:
    keys = RegistryKeys(name)
    (stored,) = yield [command("GET", keys.settings)]
    if stored is None:
        raise UnknownTopic(name)
    settings = _settings(name, stored).altered(**changes)
    yield [command("SET", keys.settings, settings.to_json(), "XX")]
    return settings


def delete_topic(info: TopicInfo) -> Op[None]:
    """Remove the topic from the registry first (so nobody sends to it), then its data.

    Without its settings the topic is unknown to clients that load it from here on; without
    its slots' generations, the scripts refuse the sends and claims of clients that still
    have it cached. Both go before any data (the generations in slot order, which claim.lua
    relies on), so nothing is stored into the topic once this returns."""
    keys = RegistryKeys(info.name)
    yield [command("SREM", TOPICS, info.name), command("UNLINK", keys.settings),
           command("UNLINK", keys.generation)]
    yield [command("UNLINK", SlotKeys(info.name, slot).generation)
           for slot in range(info.settings.slots)]
    data = [k for k in keys.all() if k not in (keys.settings, keys.generation)]
    for slot in range(info.settings.slots):
        slot_keys = SlotKeys(info.name, slot)
        data += [slot_keys.clock, slot_keys.seq, slot_keys.trace_log, slot_keys.versions,
                 slot_keys.versions_seen,
                 *slot_keys.earlier_trace(groups_with_data(info))]
        for group in groups_with_data(info):
            data += slot_keys.group(group).all()
    data += [keys.history_ring(group) for group in groups_with_data(info)]
    # the heads indexes (single node, many slots); absent keys cost an UNLINK that finds none
    for group in groups_with_data(info):
        data += HeadsKeys(info.name, group).all()
    for group in set(groups_with_data(info)) | set(info.group_limits):
        data += LimitKeys(info.name, group).all()
    data += yield from transaction_keys(info.name, info.settings.slots)
    # UNLINK frees a big backlog in the background instead of blocking Redis while it does.
    yield [command("UNLINK", k) for k in data]


def list_topics() -> Op[list[str]]:
    """Every registered topic name (a member that is no topic name, written by another
    program, is not one of them)."""
    (names,) = yield [command("SMEMBERS", TOPICS)]
    return sorted(n.decode() for n in names if _is_topic_name(n))


def _is_topic_name(raw: bytes) -> bool:
    try:
        check_topic_name(raw.decode())
    except ValueError:
        return False
    return True


def set_paused(name: str, paused: bool) -> Op[None]:
    key = RegistryKeys(name).paused
    yield [command("SET", key, "1") if paused else command("UNLINK", key)]


def heartbeat(state: ConsumerState, now: int) -> Op[None]:
    """Record ``state`` as seen at ``now`` (epoch ms), unless the topic does not exist: a
    consumer that outlives its topic leaves no consumers hash behind.

    Plain commands, not a script: Redis asks write access to every key a script names, and a
    one-topic tenant may only read its settings (docs/reliability.md, "Security"). The record
    goes first and the settings are read after it, in one pipeline; ``delete_topic`` removes
    the settings before the consumers hash, so a record written after that hash was removed
    finds the settings gone and is removed again."""
    record = {**asdict(state), "last_seen": now,
              "handler_times": state.handler_times.to_json()}
    del record["id"], record["topic"]
    keys = RegistryKeys(state.topic)
    _, exists = yield [command("HSET", keys.consumers, state.id, json.dumps(record)),
                       command("EXISTS", keys.settings)]
    if not exists:
        yield [command("HDEL", keys.consumers, state.id)]


def forget_consumer(name: str, consumer_id: str) -> Op[None]:
    yield [command("HDEL", RegistryKeys(name).consumers, consumer_id)]


# A consumer silent this long is dropped from the registry: a crashed one shows as dead for
# that long, then lists no more (docs/console.md, "Consumers").
FORGET_AFTER_MS = int(ConsumerInfo.FORGOTTEN_AFTER * 1000)


def list_consumers(name: str, now: int, dead_after_ms: int,
                   forget_after_ms: int = FORGET_AFTER_MS) -> Op[list[ConsumerInfo]]:
    """Consumers of the topic as of ``now`` (epoch ms); silent ones longer than
    ``forget_after_ms`` are dropped."""
    key = RegistryKeys(name).consumers
    (records,) = yield [command("HGETALL", key)]
    consumers, stale = [], []
    for consumer_id, raw in records.items():
        try:
            record = json.loads(raw)
            age = now - record["last_seen"]
            info = ConsumerInfo(
                id=consumer_id.decode(), topic=name, group=record["group"],
                host=record["host"], pid=record["pid"], started_at=record["started_at"],
                last_seen=record["last_seen"], concurrency=record.get("concurrency", 0),
                in_flight=record.get("in_flight", 0), handled=record.get("handled", 0),
                failed=record.get("failed", 0), alive=age <= dead_after_ms,
                handler_times=HandlerTimes.from_json(record.get("handler_times")))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue  # not a heartbeat RMQ wrote: one unreadable record hides no other
        if age > forget_after_ms:
            stale.append(consumer_id)
            continue
        consumers.append(info)
    if stale:
        yield [command("HDEL", key, *stale)]
    return sorted(consumers, key=lambda c: c.id)


def groups_with_data(info: TopicInfo) -> Sequence[str]:
    """Groups whose data may exist: the bound ones, the unbound ones, and ``default``."""
    return sorted(set(info.groups) | set(info.unbound_groups) | {DEFAULT_GROUP})
