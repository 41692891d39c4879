"""``rmq topic bind --supersede/--no-supersede/--supersede-limit``, ``rmq cancel`` and the
superseded and cancelled counts of ``rmq stats`` and events of ``rmq trace`` (SPEC §14), run
as a real process against a real server."""

from __future__ import annotations

import json

import pytest
from test_cli import assert_one_line_error, ok, run

import rmq

pytestmark = pytest.mark.single_node


@pytest.fixture
def client(redis_url: str):
    with rmq.Client(redis_url) as c:
        c.create_topic("renders", trace=True)
        yield c


def stats_rows(text: str) -> dict[str, dict[str, str]]:
    """``rmq stats``' table as {group: {column: cell}} (the columns of one word)."""
    lines = text.splitlines()
    headers = lines[1].split()
    assert headers[-3:] == ["superseded", "cancelled", "outdated"]
    rows = [line.split() for line in lines[2:] if line.split() and line.split()[0] != "ready"]
    return {row[0]: dict(zip(("superseded", "cancelled"), row[-3:-1], strict=True))
            for row in rows if len(row) > 10}


def test_bind_turns_supersede_on_and_off_and_show_lists_it_beside_the_filters(redis_url,
                                                                             client):
    out = ok("topic", "bind", "renders", "gpu", "--tags", "order", "--supersede-limit", "5",
             url=redis_url)
    assert out.strip() == ("group 'gpu' bound to topic 'renders' with its filters; supersede "
                           "on, limit 5")
    assert client.topic("renders", fresh=True).supersede_limit("gpu") == 5
    ok("topic", "bind", "renders", "audit", "--supersede", url=redis_url)
    text = ok("topic", "show", "renders", url=redis_url)
    assert "  gpu: tags order; supersede on, limit 5" in text.splitlines()
    assert "  audit: supersede on, limit 3" in text.splitlines()
    shown = json.loads(ok("topic", "show", "renders", "--json", url=redis_url))
    assert shown["supersede"] == {"audit": 3, "gpu": 5}
    # --keep-filters changes supersede alone
    out = ok("topic", "bind", "renders", "gpu", "--no-supersede", "--keep-filters",
             url=redis_url)
    assert out.strip() == ("group 'gpu' was already bound to topic 'renders' with its "
                           "filters; supersede off")
    info = client.topic("renders", fresh=True)
    assert (info.filter_of("gpu").tags, info.supersede_limit("gpu")) == ("order", None)


def test_bind_refuses_supersede_options_that_contradict_each_other(redis_url, client):
    assert_one_line_error(run("topic", "bind", "renders", "gpu", "--no-supersede",
                              "--supersede-limit", "2", url=redis_url), 1,
                          "--supersede-limit goes with --supersede, not --no-supersede")
    assert_one_line_error(run("topic", "bind", "renders", "gpu", "--supersede-limit", "0",
                              url=redis_url), 2, "must be at least 1, got 0 (see --help)")
    assert_one_line_error(run("topic", "bind", "renders", "gpu", "--keep-filters", "--tags",
                              "a", url=redis_url), 1, "--keep-filters keeps the group's filters")
    assert client.topic("renders", fresh=True).groups == ("default",)  # nothing was bound


def test_cancel_removes_a_pending_message_and_stops_a_running_delivery(redis_url, client):
    client.bind("renders", "gpu", supersede=True)
    client.bind("renders", "audit")
    sent = client.send("renders", "product-42")
    (running,) = client.claim("renders", "gpu")
    out = ok("cancel", "renders", sent.message_id, url=redis_url)
    assert out.strip() == (f"cancelled message {sent.message_id} of topic 'renders' in every "
                           "group: removed 1 pending message, told 1 running delivery to stop")
    assert client.nack(running, "stopped") == "cancelled"  # dropped, not retried
    # a supersede, for the stats: a send of what gpu is running
    client.send("renders", "product-7")
    (stale,) = client.claim("renders", "gpu")
    client.send("renders", "product-7")
    done = json.loads(ok("cancel", "renders", stale.message_id, "--group", "gpu", "--json",
                         url=redis_url))
    assert done == {"topic": "renders", "message_id": stale.message_id, "group": "gpu",
                    "pending": 1, "running": 0}  # the delivery is told already: superseded
    rows = stats_rows(ok("stats", "renders", url=redis_url))
    assert rows["gpu"] == {"superseded": "1", "cancelled": "2"}
    assert rows["audit"] == {"superseded": "0", "cancelled": "1"}
    trace = ok("trace", "renders", stale.message_id, url=redis_url)
    assert "a newer send told this delivery to stop" in trace
    assert "removed while pending" in trace


def test_cancel_of_an_unknown_or_malformed_id_exits_with_one_line(redis_url, client):
    handled = client.send("renders", "p")
    client.ack(client.claim("renders"))
    assert_one_line_error(run("cancel", "renders", handled.message_id, url=redis_url), 1, (
        f"rmq cancel: error: no message '{handled.message_id}' is pending or running in group "
        "'default' of topic 'renders': handled already, or dead-lettered (`rmq dead list` shows "
        "those)"))
    assert_one_line_error(run("cancel", "renders", "product-42", url=redis_url), 2, (
        "rmq cancel: error: argument MESSAGE_ID: 'product-42' is not a message id: 16 hex "
        "digits, as rmq send prints it (see --help)"))
    assert_one_line_error(run("cancel", "nope", handled.message_id, url=redis_url), 1,
                          "unknown topic 'nope': create it with `rmq topic create nope`")


def test_trace_by_key_alone_finds_a_key_mode_message_and_names_what_is_missing_otherwise(
        redis_url, client):
    client.create_topic("prices", trace=True, merge="key")
    sent = client.send("prices", "price=10", key="product-42")
    client.ack(client.claim("prices"))
    out = ok("trace", "prices", "--key", "product-42", url=redis_url)
    assert f"message {sent.message_id} of topic 'prices':" in out
    assert "acked" in out
    assert_one_line_error(run("trace", "renders", "--key", "product-42", url=redis_url), 1,
                          "the body (and key) of the message")  # merging by body: not enough
    assert_one_line_error(run("trace", "prices", url=redis_url), 1,
                          "or --key of a message of a topic merging by key")
