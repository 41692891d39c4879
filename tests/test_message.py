"""``claimed_message`` and the parse of a claim's reply, the claims' fast ways to build a
``Message``: the same object as the dataclass's own constructor builds, field for field,
frozen and hashable alike."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.message import Message, claimed_message

FIELDS = st.tuples(st.text(max_size=8), st.text(max_size=8), st.integers(0, 1023),
                   st.integers(1, 2**53), st.binary(max_size=64), st.integers(0, 255),
                   st.integers(1, 100), st.integers(0, 2**50),
                   st.none() | st.binary(max_size=16), st.integers(0, 2**50),
                   st.text(alphabet="0123456789abcdef", max_size=16),
                   st.none() | st.text(max_size=8),
                   st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4)))


@given(FIELDS)
def test_a_claimed_message_is_the_message_the_constructor_builds(values):
    built, claimed = Message(*values), claimed_message(*values)
    assert type(claimed) is Message
    assert claimed == built and hash(claimed) == hash(built) and repr(claimed) == repr(built)
    # every field, by name: a setter out of step with Message's fields would swap two; then
    # the hidden ones: the member as stored (the bare body here), no trace, no span links,
    # no stop state asked for yet
    assert dataclasses.astuple(claimed) == (*values, values[4], "", (), None)
    assert pickle.loads(pickle.dumps(claimed)) == built


def test_a_claimed_message_is_frozen_as_any_message():
    message = claimed_message("t", "g", 1, 2, b"b", 3, 1, 4, None, 5, "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.seq = 3  # type: ignore[misc]
    assert dataclasses.replace(message, attempts=2) == Message("t", "g", 1, 2, b"b", 3, 2, 4,
                                                               None, 5)


def test_a_claims_reply_parses_into_the_messages_claimed_message_builds():
    # parse_claimed writes claimed_message out for bare bodies: the same objects, hidden
    # attributes included, and the claim's delivery ids handed out per slot in order
    from rmq.storage.claim_calls import parse_claimed

    reply = [-1, 2, 1, 40, 2, 7,  # shares: slot index 1 from id 40, slot index 2 from id 7
             3, 128 * 2**32 + 5, 1, 1000, 1, b"a", 2, b"b", 1, b"c",  # a run of 3
             1, 64 * 2**32, 2, 999, 2, b"d"]  # a run of 1
    parsed = parse_claimed("t", "gen", "g", [4, 9], reply, 5000, "trace", undecodable=[])
    expected = [claimed_message("t", "g", slot, seq, body, priority, attempts, due, None,
                                5000, "gen", trace="trace")
                for slot, seq, body, priority, attempts, due in [
                    (4, 40, b"a", 128 * 2**32 + 5, 1, 1000), (9, 7, b"b", 128 * 2**32 + 5, 1, 1000),
                    (4, 41, b"c", 128 * 2**32 + 5, 1, 1000), (9, 8, b"d", 64 * 2**32, 2, 999)]]
    assert [dataclasses.astuple(m) for m in parsed] == [dataclasses.astuple(m) for m in expected]
    assert all(type(m) is Message for m in parsed)
