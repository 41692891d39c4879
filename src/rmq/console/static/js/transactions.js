// Topic page, Transactions panel: open transactions (age, half messages, checks so far)
// and the topic's counts, polled from /api/topics/{topic}/transactions.
"use strict";

(() => {
  const { api, fmt, el, td, fill, setText } = RMQ;
  const topic = document.body.dataset.topic;
  const path = `/api/topics/${encodeURIComponent(topic)}/transactions`;

  function stateOf(tx) {
    if (tx.closing) return `${tx.closing.replace("_", " ")} in part`;
    return tx.abandoned ? "abandoned" : "open";
  }

  async function refresh() {
    const v = await api("GET", path);
    setText("tx-open", fmt.n(v.open_count));
    setText("tx-halves", fmt.n(v.halves));
    setText("tx-abandoned", fmt.n(v.abandoned));
    fill(document.querySelector("#tx-table tbody"), v.open.map((tx) => el("tr", {},
      td(tx.id, "mono"), td(fmt.age(tx.age_ms), "num"), td(fmt.n(tx.halves), "num"),
      td(tx.slots.join(", "), "mono"), td(fmt.n(tx.checks), "num"),
      td(tx.check_in_ms ? `in ${fmt.age(tx.check_in_ms)}` : "due", "num"), td(stateOf(tx)))),
    7, "No open transactions.");
  }

  RMQ.poll(refresh);
})();
