// Find a message: by body or key, in every group and state, with where it is and who holds it,
// and (on a topic with the trace on) its timeline: every state change, oldest first.
"use strict";

(() => {
  const { api, fmt, el, td, fill, setText, showMessage, query, stateBadge } = RMQ;
  const form = document.getElementById("find-form");
  const params = new URLSearchParams(location.search);
  for (const name of ["topic", "body", "key", "message_id"]) {
    if (params.get(name) !== null) form.elements[name].value = params.get(name);
  }
  form.elements.every_slot.checked = params.get("every_slot") === "true";

  function due(r) {
    const now = Date.now();
    if (r.state === "delayed") return `${fmt.when(r.due_at)} (in ${fmt.age(r.due_at - now)})`;
    return fmt.when(r.due_at);
  }

  function holder(r) {
    if (r.state !== "in_flight") return td("–", "muted");
    const lease = r.lease_until ? `lease until ${fmt.time(r.lease_until)}` : "lease ended";
    const who = r.holder
      ? el("span", { class: "mono" }, r.holder)
      : el("span", { title: "claimed without a consumer id (claim's holder argument)" }, `a consumer of ${r.group}`);
    return el("td", {}, who, el("div", { class: "prio-text" }, lease));
  }

  function detail(e) {
    if (e.event === "merged") return `${e.count} send${e.count === 1 ? "" : "s"} merged, the last at ${fmt.time(e.last_time)}`;
    if (e.event === "superseded") return "a newer send told this delivery to stop";
    if (e.event === "cancelled") return e.delivery_id ? "cancelled: told to stop" : "cancelled: removed while pending";
    if (e.event === "outdated") return "a send older than its key's version, dropped";
    return e.error || "";
  }

  // Cancel a message (in one group, or every group): removed where pending, its running
  // deliveries told to stop; the page says what was done, or why nothing was.
  async function cancel(topic, id, group) {
    const where = group ? `group ${group}` : "every group";
    if (!confirm(`Cancel message ${id} in ${where}? Where it is pending it is removed; a running delivery is told to stop and is not retried.`)) return;
    try {
      const done = await api("POST", `/api/topics/${encodeURIComponent(topic)}/cancel`, { message_id: id, group: group || null });
      showMessage("find-message", `Cancelled message ${id} in ${where}: removed ${RMQ.plural(done.pending, "pending message")}, told ${done.running} running ${done.running === 1 ? "delivery" : "deliveries"} to stop.`, "ok");
    } catch (err) {
      showMessage("find-message", err.message, "error");
      return;
    }
    if (last) await search(last);
  }

  function cancelButton(topic, id, group) {
    return el("button", { type: "button", class: "small danger", "data-cancel": id, "data-group": group || "",
                          title: group ? `cancel it in group ${group}` : "cancel it in every group",
                          onclick: () => cancel(topic, id, group) }, group ? "Cancel" : "Cancel in every group");
  }

  // One timeline per message id: its events in every group, oldest first.
  async function showTrace(topic, ids) {
    const base = `/api/topics/${encodeURIComponent(topic)}/trace`;
    const traces = await Promise.all(ids.map((id) => api("GET", `${base}?${query({ message_id: id })}`)));
    const panel = document.getElementById("trace-results");
    panel.hidden = ids.length === 0;
    const off = traces.length && !traces[0].trace;
    const events = traces.reduce((n, t) => n + t.events.length, 0);
    setText("trace-count", off ? "the trace is off for this topic" : `${events} event${events === 1 ? "" : "s"}`);
    document.getElementById("trace-timelines").replaceChildren(...ids.map((id, i) => {
      const rows = traces[i].events.map((e) => el("tr", { "data-event": e.event },
        td(`${fmt.when(e.time)}.${String(e.time % 1000).padStart(3, "0")}`), td(e.event, "mono"), td(e.group), td(e.delivery_id || "–", "mono"),
        td(e.attempt === null ? "" : e.attempt, "num"), td(e.consumer || "", "mono"),
        el("td", { class: e.error ? "error" : "muted" }, detail(e))));
      const table = el("table", { class: "trace-table", "data-message-id": id },
        el("thead", {}, el("tr", {}, ...["Time", "Event", "Group", "Delivery", "Attempt", "Consumer", "Detail"]
          .map((h) => el("th", {}, h)))),
        el("tbody", {}, ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 7, class: "muted" },
          "Nothing recorded for this message."))])));
      return el("div", { class: "table-wrap" }, el("div", { class: "timeline-head" },
        el("h3", { class: "mono" }, `message ${id}`), cancelButton(topic, id, null)), table);
    }));
  }

  async function search(fields) {
    if (!fields.topic) throw new Error("There is no topic to search yet.");
    if (!fields.body && !fields.key && !fields.message_id) throw new Error("Give a body, a key or a message id to find.");
    const wanted = { body: fields.body, key: fields.key, every_slot: fields.every_slot ? "true" : "" };
    history.replaceState(null, "", `?${query({ topic: fields.topic, ...wanted, message_id: fields.message_id })}`);
    if (!fields.body && !fields.key) {
      document.getElementById("find-results").hidden = true;
      await showTrace(fields.topic, [fields.message_id]);
      return "";
    }
    const result = await api("GET", `/api/topics/${encodeURIComponent(fields.topic)}/find?${query(wanted)}`);
    document.getElementById("find-results").hidden = false;
    setText("find-count", `${result.rows.length} stored message${result.rows.length === 1 ? "" : "s"} in ${fields.topic}`);
    fill(document.querySelector("#find-table tbody"), result.rows.map((r) => el("tr", { "data-state": r.state },
      el("td", {}, stateBadge(r.state)), td(r.group), td(r.slot, "num"), td(RMQ.priorityName(r.priority), "num"), td(due(r)),
      td(r.attempts, "num"), holder(r), td(r.message_id, "mono"), td(r.id || "–", "mono"),
      td(r.key === null ? "" : r.key, "mono"),
      td(RMQ.tagAndProperties(r), "mono"),
      el("td", { class: "body" }, r.body), el("td", { class: "error" }, r.error || ""),
      // a dead letter is not pending: requeue or purge it on the dead-letters page
      el("td", {}, r.state === "dead" ? null : cancelButton(fields.topic, r.message_id, r.group)))), 14,
      "Nothing stored with that body or key (it may have been handled already).");
    const ids = [...new Set([fields.message_id, ...result.rows.map((r) => r.message_id)].filter(Boolean))];
    // handled or cancelled already: its trace may still tell its story (a key alone names a
    // message on a topic merging by key)
    if (!ids.length && (fields.body || result.merge === "key")) {
      const byBody = await api("GET", `/api/topics/${encodeURIComponent(fields.topic)}/trace?${query({ body: fields.body, key: fields.key })}`);
      if (byBody.events.length) ids.push(byBody.events[0].message_id);
    }
    await showTrace(fields.topic, ids);
    return "";
  }

  // The last search runs again every few seconds, so a found message's state stays current.
  let last = null;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const fields = RMQ.formJSON(form);
    try {
      showMessage("find-message", await search(fields));
      last = fields;
    } catch (err) {
      showMessage("find-message", err.message, "error");
      last = null;
    }
  });
  RMQ.poll(async () => { if (last) await search(last); });
  if (params.get("body") || params.get("key") || params.get("message_id")) form.requestSubmit();
})();
