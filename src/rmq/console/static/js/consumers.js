// Consumers page: every consumer's liveness, last heartbeat, load and throughput.
"use strict";

(() => {
  const { api, fmt, el, td, fill, badge, setText, query } = RMQ;
  const tbody = document.querySelector("#consumers-table tbody");
  const select = document.getElementById("consumer-topic");
  const wanted = new URLSearchParams(location.search).get("topic");
  if (wanted) select.value = wanted;

  async function refresh() {
    const data = await api("GET", `/api/consumers?${query({ topic: select.value })}`);
    const now = data.now;  // the queue's clock, by which heartbeats and starts are stamped
    const alive = data.consumers.filter((c) => c.alive).length;
    setText("consumer-count", `${alive} alive, ${data.consumers.length - alive} dead`);
    setText("dead-after", `shown dead after ${data.dead_after} s without a heartbeat, no longer listed after ${fmt.age(1000 * data.forgotten_after)}; a dead one's numbers (in italics) are those of its last heartbeat`);
    setText("consumers-broken", data.broken.length
      ? `skipped, registry entry broken: ${data.broken.map((b) => b.name).join(", ")} (see Topics)` : "");
    fill(tbody, data.consumers.map((c) => el("tr", { "data-consumer": c.id, "data-alive": String(c.alive) },
      td(c.id, "mono"),
      el("td", {}, el("a", { href: `/topics/${encodeURIComponent(c.topic)}`, class: "mono" }, c.topic)),
      td(c.group), td(c.host), td(c.pid, "num"),
      el("td", {}, badge(c.alive ? "alive" : "dead", c.alive ? "alive" : "dead")),
      td(`${fmt.age(1000 * c.seconds_since_heartbeat)} ago`, "num"),
      td(fmt.n(c.concurrency), "num"), ...[c.in_flight, c.handled, c.failed].map((n) => c.alive
        ? td(fmt.n(n), "num")
        : el("td", { class: "num stale", title: "as of its last heartbeat" }, fmt.n(n))),
      td(c.alive ? fmt.rate(c.handled_per_second) : "–", "num"),
      td(fmt.age(1000 * (now - c.started_at)), "num"))), 13,
      "No consumers registered. Start one with: rmq worker module:function TOPIC");
  }

  const round = RMQ.poll(refresh);
  select.addEventListener("change", () => {
    history.replaceState(null, "", select.value ? `?topic=${encodeURIComponent(select.value)}` : location.pathname);
    round();
  });
})();
