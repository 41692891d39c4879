// Topics page: every topic and group with backlog, rates and consumers; create a topic.
"use strict";

(() => {
  const { api, fmt, el, td, fill, badge, setText, onSubmit, priorityBar, query } = RMQ;
  const tbody = document.querySelector("#overview-table tbody");

  async function togglePause(topic, paused) {
    try {
      await api("POST", `/api/topics/${encodeURIComponent(topic)}/${paused ? "resume" : "pause"}`);
      await refresh();
    } catch (err) {
      RMQ.banner(err.message);
    }
  }

  // open transactions, the half messages they hold, and those abandoned (none: nothing)
  function transactions(tx) {
    if (!tx.open && !tx.abandoned) return null;
    const parts = [`${fmt.n(tx.open)} open tx · ${fmt.n(tx.halves)} half`];
    if (tx.abandoned) parts.push(`${fmt.n(tx.abandoned)} abandoned`);
    return el("div", { class: "prio-text", "data-cell": "transactions",
                       title: "open transactions · the half messages they hold · abandoned" }, parts.join(" · "));
  }

  function rows(topic) {
    return topic.groups.map((g, i) => {
      const first = i === 0;
      const topicCell = first ? el("td", { rowspan: topic.groups.length, class: "topic-cell" },
        el("a", { href: `/topics/${encodeURIComponent(topic.name)}`, class: "mono" }, topic.name), " ",
        badge(topic.paused ? "paused" : "active", topic.paused ? "paused" : "active"),
        el("div", { class: "prio-text" }, `${topic.slots} slot${topic.slots === 1 ? "" : "s"}`),
        transactions(topic.transactions)) : null;
      const action = first ? el("td", { rowspan: topic.groups.length },
        el("button", { class: "small", type: "button", "data-topic": topic.name,
                       onclick: () => togglePause(topic.name, topic.paused) },
           topic.paused ? "Resume" : "Pause")) : null;
      const consumers = g.consumers_alive + (g.consumers_dead ? ` (+${g.consumers_dead} dead)` : "");
      // each count opens its messages: on the topic's page, dead letters on their own page
      const where = { topic: topic.name, group: g.group };
      const count = (state, text) => td(el("a", { href: state === "dead"
        ? `/dead?${query(where)}` : `/topics/${encodeURIComponent(topic.name)}?${query({ group: g.group, state })}`,
        "data-state": state }, text === undefined ? fmt.n(g.backlog[state]) : text), "num");
      // in flight as used / max of the group's limit; those whose lease ran out apart
      const inFlight = count("in_flight", RMQ.inFlight(g));
      if (g.expired) {
        inFlight.append(el("div", { class: "prio-text expired", "data-cell": "expired",
          title: "in flight with a lease that ran out, not recovered yet" }, `+${fmt.n(g.expired)} expired`));
      }
      return el("tr", { class: "group-row", "data-topic": topic.name, "data-group": g.group },
        topicCell, td(g.group),
        count("ready"), el("td", {}, priorityBar(g.ready_by_priority)),
        count("delayed"), inFlight,
        count("dead"), td(g.backlog.ready ? fmt.age(g.oldest_ready_ms) : "–", "num"),
        el("td", { class: "num", "data-cell": "filtered", title: "sent to the topic, rejected by the group's filters" },
           fmt.n(g.counters.filtered || 0)),
        td(fmt.rate(g.rates.sent), "num"), td(fmt.rate(g.rates.acked), "num"),
        td(fmt.pct(g.rates.merge_rate), "num"), td(consumers, "num"), action);
    });
  }

  async function refresh() {
    const data = await api("GET", "/api/overview");
    const totals = { ready: 0, delayed: 0, in_flight: 0, dead: 0, sent: 0, acked: 0, consumers: 0 };
    for (const topic of data.topics) {
      for (const g of topic.groups) {
        for (const s of ["ready", "delayed", "in_flight", "dead"]) totals[s] += g.backlog[s];
        totals.sent += g.rates.sent || 0;
        totals.acked += g.rates.acked || 0;
        totals.consumers += g.consumers_alive;
      }
    }
    for (const s of ["ready", "delayed", "in_flight", "dead"]) setText(`total-${s}`, fmt.n(totals[s]));
    setText("total-sent", fmt.rate(totals.sent));
    setText("total-acked", fmt.rate(totals.acked));
    setText("total-consumers", fmt.n(totals.consumers));
    setText("topic-count", `${data.topics.length} topic${data.topics.length === 1 ? "" : "s"}`);
    fill(tbody, data.topics.flatMap(rows), 14, "No topics yet: create one below.");
    // a topic whose registry entry is broken: named with what is wrong, its data not shown
    const broken = document.getElementById("broken-topics");
    broken.hidden = data.broken.length === 0;
    document.getElementById("broken-list").replaceChildren(...data.broken.map((b) =>
      el("li", { class: "broken-topic", "data-topic": b.name },
        el("span", { class: "mono" }, b.name), `: ${b.problem}`)));
  }

  const round = RMQ.poll(refresh);
  const form = document.getElementById("create-form");
  onSubmit(form, "create-message", async (fields) => {
    fields.slots = Number(fields.slots);
    const created = await api("POST", "/api/topics", fields);
    form.reset();
    await round();
    return `Created topic ${created.name} with ${created.settings.slots} slots.`;
  });
})();
