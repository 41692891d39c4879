"""``rmq send --tag/--property``, ``rmq topic bind --tags/--where`` and ``rmq topic show``
with filters, run as a real process against a real server."""

from __future__ import annotations

import json

import pytest
from test_cli import assert_one_line_error, ok, run

import rmq

pytestmark = pytest.mark.single_node


@pytest.fixture
def client(redis_url: str):
    with rmq.Client(redis_url) as c:
        yield c


def test_bind_with_filters_then_send_with_tag_and_properties(redis_url, client):
    client.create_topic("t", slots=2)
    out = ok("topic", "bind", "t", "eu", "--tags", "order || refund",
             "--where", "region = 'eu' AND price > 10", url=redis_url)
    assert "bound to topic 't' with its filters" in out
    ok("send", "t", "kept", "--tag", "order", "--property", "region=eu",
       "--property", "price=12.5", url=redis_url)
    ok("send", "t", "cheap", "--tag", "order", "--property", "region=eu",
       "--property", "price=5", url=redis_url)
    ok("send", "t", "text", "--tag", "order", "--property", "region=eu",
       "--property", 'price="12"', url=redis_url)  # a string: never compares with 10
    (row,) = client.snapshot("t", groups=["eu"])
    assert (row.body, row.tag, row.properties) == (b"kept", "order",
                                                    {"region": "eu", "price": 12.5})
    assert client.stats("t").groups["eu"].counters["filtered"] == 2
    shown = json.loads(ok("topic", "show", "t", "--json", url=redis_url))
    assert shown["filters"] == {"eu": {"tags": "order || refund",
                                       "where": "region = 'eu' AND price > 10"}}
    text = ok("topic", "show", "t", url=redis_url)
    assert "eu: tags order || refund; where region = 'eu' AND price > 10" in text


def test_bad_filters_and_properties_exit_with_one_line(redis_url, client):
    client.create_topic("t")
    assert_one_line_error(run("topic", "bind", "t", "g", "--where", "price >", url=redis_url),
                          1, "column 8")
    assert_one_line_error(run("send", "t", "x", "--property", "novalue", url=redis_url), 2,
                          "expected NAME=VALUE")
    assert_one_line_error(run("send", "t", "x", "--property", "1a=2", url=redis_url), 1,
                          "invalid property name '1a'")
    assert_one_line_error(run("send", "t", "x", "--tag", "a b", url=redis_url), 1,
                          "invalid tag")
    assert client.topic("t", fresh=True).groups == ("default",)
    assert client.stats("t").groups["default"].ready == 0


def test_bind_says_a_bare_word_is_a_property_name_without_refusing_it(redis_url, client):
    client.create_topic("t")
    out = ok("topic", "bind", "t", "eu", "--where", "region = eu", url=redis_url)
    assert out.splitlines() == [
        "group 'eu' bound to topic 't' with its filters",
        "note: in --where, eu is read as a property name (region = eu compares two "
        "properties); quote a string: region = 'eu'"]
    assert client.topic("t", fresh=True).filter_of("eu").where == "region = eu"  # bound as is


def test_send_says_which_groups_filters_turned_the_message_away(redis_url, client):
    client.create_topic("t")
    client.bind("t", "eu", where="region = 'eu'")
    client.bind("t", "orders", tags="order")
    client.bind("t", "all")
    out = ok("send", "t", "x", "--tag", "refund", "--property", "region=eu", url=redis_url)
    assert out.splitlines()[1] == "not stored for 'orders': its filters turned it away"
    out = ok("send", "t", "y", "--property", "region=us", url=redis_url)
    assert out.splitlines()[1] == ("not stored for 'eu', 'orders': their filters turned it "
                                   "away")
    client.unbind("t", "all")
    client.topic("t", fresh=True)
    out = ok("send", "t", "--file", "-", "--property", "region=us", url=redis_url,
             stdin="a\nb\n")
    assert out.splitlines()[1] == ("stored for no group: the filters of 'eu', 'orders' turned "
                                   "them away (rmq topic show t shows them)")
    assert len(ok("send", "t", "z", "--tag", "order", "--property", "region=eu",
                  url=redis_url).splitlines()) == 1  # every group took it: nothing to say
    assert client.stats("t").groups["orders"].counters["filtered"] == 4
