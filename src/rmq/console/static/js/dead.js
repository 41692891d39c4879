// Dead letters page: inspect, requeue one, some or all, purge with confirmation.
"use strict";

(() => {
  const { api, fmt, el, td, fill, setText, showMessage, query } = RMQ;
  const PAGE = 50;
  const topicSelect = document.getElementById("dead-topic");
  const groupSelect = document.getElementById("dead-group");
  const tbody = document.querySelector("#dead-table tbody");
  const selectAll = document.getElementById("select-all");
  const params = new URLSearchParams(location.search);
  const view = { offset: 0, total: 0, selected: new Set(), group: params.get("group"),
                 chosen: Boolean(params.get("topic")), opened: new Set() };
  if (params.get("topic")) topicSelect.value = params.get("topic");

  const base = () => `/api/topics/${encodeURIComponent(topicSelect.value)}`;

  function syncSelection() {
    document.getElementById("requeue-selected").disabled = view.selected.size === 0;
    setText("requeue-selected", view.selected.size ? `Requeue selected (${view.selected.size})` : "Requeue selected");
  }

  // Options whose labels change in place (an open list stays open) unless the names change.
  function setOptions(select, names, label) {
    const same = select.options.length === names.length && names.every((n, i) => select.options[i].value === n);
    if (!same) select.replaceChildren(...names.map((n) => el("option", { value: n })));
    names.forEach((n, i) => { select.options[i].textContent = label(n); });
  }

  // Every topic's and the topic's groups' dead letters, counted in the selects and refreshed
  // each round. Without ?topic= the page opens on the first topic that has dead letters.
  async function loadCounts() {
    const topics = Object.fromEntries((await api("GET", "/api/overview")).topics.map((t) => [t.name, t]));
    const deadOf = (t) => t.groups.reduce((sum, g) => sum + g.backlog.dead, 0);
    if (!view.chosen) {
      const first = Object.values(topics).find((t) => deadOf(t) > 0);
      if (first) topicSelect.value = first.name;
      view.chosen = true;
    }
    const names = [...topicSelect.options].map((o) => o.value);
    setOptions(topicSelect, names, (n) => (topics[n] ? `${n} (${fmt.n(deadOf(topics[n]))})` : n));
    const topic = topics[topicSelect.value];
    if (!topic) return;
    const dead = Object.fromEntries(topic.groups.map((g) => [g.group, g.backlog.dead]));
    const groups = [...new Set([...topic.groups.map((g) => g.group), ...topic.bound_groups])];
    // the group asked for, else the one with the most dead letters
    const worst = [...groups].sort((a, b) => (dead[b] || 0) - (dead[a] || 0))[0];
    view.group = view.group && groups.includes(view.group) ? view.group : worst;
    setOptions(groupSelect, groups, (n) => `${n} (${fmt.n(dead[n] || 0)})`);
    groupSelect.value = view.group;
  }

  // The last error's first line, the rest on demand: a traceback must not make a row a
  // screen high. What is opened stays open across the page's refreshes.
  const SHORT = 160;
  function errorCell(r) {
    const error = r.error || "";
    const first = error.split("\n")[0];
    if (error.length <= SHORT && first === error) return el("td", { class: "error" }, error);
    const details = el("details", { open: view.opened.has(r.id),
      ontoggle: (e) => { e.target.open ? view.opened.add(r.id) : view.opened.delete(r.id); } },
      el("summary", { title: "show the whole error" },
        first.length > SHORT ? `${first.slice(0, SHORT - 1)}…` : `${first} …`),
      el("pre", { class: "full-error" }, error));
    return el("td", { class: "error" }, details);
  }

  // The message id opens the finder on it: its trace, on a topic with the trace on.
  function messageIdCell(r) {
    return el("td", { class: "mono" }, el("a", {
      href: `/find?${query({ topic: topicSelect.value, message_id: r.message_id })}`,
      title: "its trace: every state change, oldest first (on a topic with the trace on)",
    }, r.message_id));
  }

  async function requeue(ids) {
    try {
      const body = ids ? { group: view.group, ids } : { group: view.group, all: true };
      const result = await api("POST", `${base()}/dead/requeue`, body);
      ids ? ids.forEach((id) => view.selected.delete(id)) : view.selected.clear();
      syncSelection();
      showMessage("dead-message", `Requeued ${result.requeued} dead letter${result.requeued === 1 ? "" : "s"}: ready again with attempts reset.`, "ok");
      await refresh();
    } catch (err) {
      showMessage("dead-message", err.message, "error");
    }
  }

  async function refresh() {
    if (!topicSelect.value) {
      fill(tbody, [], 9, "No topics yet.");
      return;
    }
    await loadCounts();
    const page = await api("GET", `${base()}/messages?${query({ state: "dead", group: view.group, offset: view.offset, limit: PAGE })}`);
    view.total = page.total;
    setText("dead-count", `${fmt.n(page.total)} in ${topicSelect.value} / ${view.group}`);
    fill(tbody, page.rows.map((r) => el("tr", { "data-id": r.id },
      el("td", {}, el("input", { type: "checkbox", "aria-label": `select ${r.id}`,
        checked: view.selected.has(r.id),
        onchange: (e) => { e.target.checked ? view.selected.add(r.id) : view.selected.delete(r.id); syncSelection(); } })),
      td(r.id, "mono"), messageIdCell(r), td(fmt.when(r.dead_at)), td(r.attempts, "num"),
      td(RMQ.priorityName(r.priority), "num"), errorCell(r), el("td", { class: "body" }, r.body),
      el("td", {}, el("button", { type: "button", class: "small", onclick: () => requeue([r.id]) }, "Requeue")))),
      9, "No dead letters. Messages land here after their last retry fails.");
    const last = Math.min(view.offset + page.rows.length, page.total);
    setText("dead-range", page.total ? `${fmt.n(view.offset + 1)}–${fmt.n(last)} of ${fmt.n(page.total)}` : "0 of 0");
    document.getElementById("dead-prev").disabled = view.offset === 0;
    document.getElementById("dead-next").disabled = last >= page.total;
    document.getElementById("requeue-all").disabled = page.total === 0;
    document.getElementById("purge").disabled = page.total === 0;
  }

  const round = RMQ.poll(refresh);
  function reset() {
    view.offset = 0;
    view.selected.clear();
    syncSelection();
    showMessage("dead-message", "");
    history.replaceState(null, "", `?${query({ topic: topicSelect.value, group: view.group })}`);
    round();
  }
  topicSelect.addEventListener("change", () => { view.group = null; reset(); });
  groupSelect.addEventListener("change", () => { view.group = groupSelect.value; reset(); });
  selectAll.addEventListener("change", () => {
    for (const box of tbody.querySelectorAll("input[type=checkbox]")) {
      box.checked = selectAll.checked;
      const id = box.closest("tr").dataset.id;
      selectAll.checked ? view.selected.add(id) : view.selected.delete(id);
    }
    syncSelection();
  });
  document.getElementById("requeue-selected").addEventListener("click", () => requeue([...view.selected]));
  document.getElementById("requeue-all").addEventListener("click", () => {
    if (confirm(`Requeue all ${fmt.n(view.total)} dead letters of ${topicSelect.value} / ${view.group}?`)) requeue(null);
  });
  document.getElementById("dead-prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - PAGE); round(); });
  document.getElementById("dead-next").addEventListener("click", () => { view.offset += PAGE; round(); });

  const dialog = document.getElementById("purge-dialog");
  document.getElementById("purge").addEventListener("click", () => {
    setText("purge-count", view.total === 1 ? "the 1 dead letter" : `all ${RMQ.plural(view.total, "dead letter")}`);
    setText("purge-group", view.group);
    setText("purge-topic", topicSelect.value);
    document.getElementById("purge-confirm").value = "";
    showMessage("purge-message", "");
    dialog.showModal();
  });
  document.getElementById("purge-cancel").addEventListener("click", () => dialog.close());
  document.getElementById("purge-go").addEventListener("click", async () => {
    try {
      const result = await api("POST", `${base()}/dead/purge`, { group: view.group, confirm: document.getElementById("purge-confirm").value });
      dialog.close();
      showMessage("dead-message", `Purged ${result.purged} dead letter${result.purged === 1 ? "" : "s"}.`, "ok");
      view.offset = 0;
      await round();
    } catch (err) {
      showMessage("purge-message", err.message, "error");
    }
  });
})();
