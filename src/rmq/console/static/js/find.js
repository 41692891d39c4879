// Find a message: by body or key, in every group and state, with where it is and who holds it.
"use strict";

(() => {
  const { api, fmt, el, td, fill, setText, showMessage, query, stateBadge } = RMQ;
  const form = document.getElementById("find-form");
  const params = new URLSearchParams(location.search);
  for (const name of ["topic", "body", "key"]) {
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

  async function search(fields) {
    if (!fields.topic) throw new Error("There is no topic to search yet.");
    if (!fields.body && !fields.key) throw new Error("Give a body or a key to find.");
    const wanted = { body: fields.body, key: fields.key, every_slot: fields.every_slot ? "true" : "" };
    history.replaceState(null, "", `?${query({ topic: fields.topic, ...wanted })}`);
    const result = await api("GET", `/api/topics/${encodeURIComponent(fields.topic)}/find?${query(wanted)}`);
    document.getElementById("find-results").hidden = false;
    setText("find-count", `${result.rows.length} stored message${result.rows.length === 1 ? "" : "s"} in ${fields.topic}`);
    fill(document.querySelector("#find-table tbody"), result.rows.map((r) => el("tr", { "data-state": r.state },
      el("td", {}, stateBadge(r.state)), td(r.group), td(r.slot, "num"), td(RMQ.priorityName(r.priority), "num"), td(due(r)),
      td(r.attempts, "num"), holder(r), td(r.id || "–", "mono"), td(r.key === null ? "" : r.key, "mono"),
      td(RMQ.tagAndProperties(r), "mono"),
      el("td", { class: "body" }, r.body), el("td", { class: "error" }, r.error || ""))), 12,
      "Nothing stored with that body or key (it may have been handled already).");
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
  if (params.get("body") || params.get("key")) form.requestSubmit();
})();
