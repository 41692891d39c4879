"""``rmq topic limits``: show and set a group's fleet-wide limits; ``topic show`` and
``stats`` show them."""

from __future__ import annotations

import json

import pytest
from test_cli import assert_one_line_error, ok, run

import rmq

pytestmark = pytest.mark.single_node


@pytest.fixture
def client(redis_url: str):
    with rmq.Client(redis_url) as c:
        c.create_topic("renders")
        yield c


def test_topic_limits_shows_sets_and_removes_limits(redis_url, client):
    assert ok("topic", "limits", "renders", url=redis_url).strip() == (
        "limits of group 'default' of topic 'renders': none")
    ok("topic", "limits", "renders", "--max-in-flight", "4", url=redis_url)
    out = ok("topic", "limits", "renders", "--rate", "100/60", url=redis_url)
    assert out.strip() == ("limits of group 'default' of topic 'renders': "
                           "max in flight 4, rate 100 per 60s")  # the other limit stays
    assert client.limits("renders") == rmq.GroupLimits(4, (100, 60))
    ok("topic", "limits", "renders", "--max-in-flight", "none", url=redis_url)
    assert client.limits("renders") == rmq.GroupLimits(None, (100, 60))


def test_topic_limits_of_a_group_as_json(redis_url, client):
    client.bind("renders", "gpu")
    out = ok("topic", "limits", "renders", "--group", "gpu", "--max-in-flight", "2",
             "--rate", "5/0.5", "--json", url=redis_url)
    assert json.loads(out) == {"topic": "renders", "group": "gpu", "max_in_flight": 2,
                               "rate": {"count": 5, "seconds": 0.5}, "max_batches": None}
    assert client.limits("renders", "gpu") == rmq.GroupLimits(2, (5, 0.5))
    assert client.limits("renders") == rmq.GroupLimits()


def test_topic_limits_of_a_group_that_is_not_bound_names_the_bind_command(redis_url, client):
    client.bind("renders", "gpu")
    done = run("topic", "limits", "renders", "--group", "gpus", "--max-in-flight", "2",
               url=redis_url)
    assert_one_line_error(done, 1, (
        "rmq topic limits: error: group 'gpus' is not bound to topic 'renders' (its groups: "
        "gpu), so no limit of it would hold anything: bind it first with `rmq topic bind "
        "renders gpus`"))
    assert client.limits("renders", "gpus") == rmq.GroupLimits()


@pytest.mark.parametrize(("option", "words"), [
    (["--max-in-flight", "0"], "max_in_flight must be an integer from 1 to 1000000, got 0"),
    (["--max-in-flight", "lots"], "expected a whole number or 'none', got 'lots'"),
    (["--rate", "100"], "expected COUNT/SECONDS (e.g. 100/60) or 'none', got '100'"),
    (["--rate", "100/0"], "rate seconds must be a number from 0.001 to 86400, got 0.0"),
    (["--max-batches", "0"], "max_batches must be an integer from 1 to 1000000, got 0"),
    (["--max-batches", "four"], "expected a whole number or 'none', got 'four'"),
])
def test_topic_limits_refuses_bad_values_in_one_line_and_writes_nothing(redis_url, client,
                                                                        option, words):
    client.set_limits("renders", max_in_flight=3)
    done = run("topic", "limits", "renders", *option, url=redis_url)
    assert_one_line_error(done, done.returncode, words)
    assert done.returncode != 0
    assert client.limits("renders") == rmq.GroupLimits(3)


def test_topic_show_and_stats_show_the_limits(redis_url, client):
    client.set_limits("renders", max_in_flight=4, rate=(100, 60))
    shown = ok("topic", "show", "renders", url=redis_url)
    assert "limits of default: max in flight 4, rate 100 per 60s" in shown
    data = json.loads(ok("topic", "show", "renders", "--json", url=redis_url))
    assert data["limits"] == {"default": {"max_in_flight": 4,
                                          "rate": {"count": 100, "seconds": 60},
                                          "max_batches": None}}
    stats = ok("stats", "renders", url=redis_url)
    assert "limits (default): max in flight 4, rate 100 per 60s" in stats
    data = json.loads(ok("stats", "renders", "--json", url=redis_url))
    assert data["groups"]["default"]["limits"] == {"max_in_flight": 4, "rate": [100, 60],
                                                   "max_batches": None}


def test_topic_limits_sets_shows_and_removes_max_batches(redis_url, client):
    out = ok("topic", "limits", "renders", "--max-batches", "4", url=redis_url)
    assert out.strip() == "limits of group 'default' of topic 'renders': max batches 4"
    out = ok("topic", "limits", "renders", "--max-in-flight", "128", "--json", url=redis_url)
    assert json.loads(out)["max_batches"] == 4  # left out: kept
    assert client.limits("renders") == rmq.GroupLimits(128, None, 4)
    assert "limits of default: max in flight 128, max batches 4" in ok(
        "topic", "show", "renders", url=redis_url)
    assert "limits (default): max in flight 128, max batches 4" in ok(
        "stats", "renders", url=redis_url)
    ok("topic", "limits", "renders", "--max-batches", "none", url=redis_url)
    assert client.limits("renders") == rmq.GroupLimits(128)
