// Topic page: live cards, charts of the last hour, slot heat, paged peeks and the forms.
"use strict";

(() => {
  const { api, fmt, el, td, fill, badge, setText, showMessage, onSubmit, query } = RMQ;
  const topic = document.body.dataset.topic;
  const base = `/api/topics/${encodeURIComponent(topic)}`;
  const PAGE = 20;
  // ?group=G&state=S (the overview's counts link here) opens on that group's messages
  const params = new URLSearchParams(location.search);
  const state = ["ready", "delayed", "in_flight", "dead"].includes(params.get("state")) ? params.get("state") : "ready";
  const view = { group: params.get("group"), state, offset: 0, slot: "", heat: "pending", detail: null };
  document.querySelectorAll("#state-tabs button").forEach((b) => b.classList.toggle("active", b.dataset.state === state));
  const charts = {
    rates: RMQCharts.rates(document.getElementById("chart-rates")),
    backlog: RMQCharts.backlog(document.getElementById("chart-backlog")),
    merge: RMQCharts.merge(document.getElementById("chart-merge")),
    priority: RMQCharts.priorities(document.getElementById("chart-priority")),
  };
  setText("page-size", PAGE);

  function group() {
    const d = view.detail;
    return d ? d.groups.find((g) => g.group === view.group) || d.groups[0] : null;
  }

  function showHeader(d) {
    const state = document.getElementById("topic-state");
    state.textContent = d.paused ? "paused" : "active";
    state.className = `badge ${d.paused ? "paused" : "active"}`;
    document.getElementById("pause-button").textContent = d.paused ? "Resume" : "Pause";
    setText("topic-sub", `${d.slots} slot${d.slots === 1 ? "" : "s"} · bound: ${d.bound_groups.join(", ")}`);
    const bar = document.getElementById("group-bar");
    if (d.groups.length > 1) {
      bar.replaceChildren(el("span", { class: "muted" }, "Group"), el("div", { class: "tabs", style: "margin:0" },
        d.groups.map((g) => el("button", { type: "button", class: g.group === view.group ? "active" : "",
          onclick: () => { view.group = g.group; view.offset = 0; refresh(); } }, g.group))));
    } else {
      bar.replaceChildren();
    }
  }

  function describeLimits(limits) {
    const parts = [];
    if (limits.max_in_flight !== null) parts.push(`max in flight ${fmt.n(limits.max_in_flight)}`);
    if (limits.rate !== null) parts.push(`rate ${fmt.n(limits.rate.count)} per ${limits.rate.seconds}s`);
    if (limits.max_batches !== null) parts.push(`max batches ${fmt.n(limits.max_batches)}`);
    return parts.length ? parts.join(", ") : "none";
  }

  // The limits form opens with the group's limits as stored: a field left as it is keeps
  // its limit, a cleared one removes it. A field the operator has typed in is not redrawn
  // by the page's refresh; the others follow what is stored.
  const limitsForm = document.getElementById("limits-form");
  const LIMIT_FIELDS = ["max_in_flight", "rate_count", "rate_seconds", "max_batches"];
  function storedLimitFields(limits) {
    return { max_in_flight: limits.max_in_flight === null ? "" : String(limits.max_in_flight),
             rate_count: limits.rate === null ? "" : String(limits.rate.count),
             rate_seconds: limits.rate === null ? "" : String(limits.rate.seconds),
             max_batches: limits.max_batches === null ? "" : String(limits.max_batches) };
  }
  function showLimits(g) {
    setText("limits-now", `Limits of ${g.group}: ${describeLimits(g.limits)}. A field left as it is keeps its limit; a cleared one removes it.`);
    const stored = storedLimitFields(g.limits);
    const shown = JSON.stringify([g.group, stored]);
    if (limitsForm.dataset.shown === shown) return;
    const sameGroup = limitsForm.dataset.group === g.group;
    for (const name of LIMIT_FIELDS) {
      const input = limitsForm.elements[name];
      if (!sameGroup || !input.dataset.edited) { input.value = stored[name]; delete input.dataset.edited; }
      input.dataset.stored = stored[name];
    }
    limitsForm.dataset.group = g.group;
    limitsForm.dataset.shown = shown;
  }
  for (const name of LIMIT_FIELDS) {
    limitsForm.elements[name].addEventListener("input", (e) => { e.target.dataset.edited = "1"; });
  }
  // What the form changes: only the limits whose fields differ from what is stored.
  function limitChanges() {
    const value = (name) => limitsForm.elements[name].value.trim();
    const changed = (name) => value(name) !== (limitsForm.elements[name].dataset.stored || "");
    const changes = {};
    if (changed("max_in_flight")) {
      changes.max_in_flight = value("max_in_flight") === "" ? null : Number(value("max_in_flight"));
    }
    if (changed("rate_count") || changed("rate_seconds")) {
      const [count, seconds] = [value("rate_count"), value("rate_seconds")];
      if ((count === "") !== (seconds === "")) {
        throw new Error("A rate needs both a count and seconds (clear both to remove the rate).");
      }
      changes.rate = count === "" ? null : { count: Number(count), seconds: Number(seconds) };
    }
    if (changed("max_batches")) {
      changes.max_batches = value("max_batches") === "" ? null : Number(value("max_batches"));
    }
    return changes;
  }

  function handlerTime(times) {
    if (!times) return "–";
    const p95 = times.p95_at_most === null ? "> 600 s" : `≤ ${fmt.age(1000 * times.p95_at_most)}`;
    return `${fmt.age(1000 * times.mean_seconds)} · p95 ${p95}`;
  }

  function showCards(g) {
    for (const s of ["ready", "delayed", "dead"]) setText(`c-${s}`, fmt.n(g.backlog[s]));
    setText("c-in_flight", RMQ.inFlight(g));
    setText("c-in_flight-label", g.limits.max_in_flight === null ? "In flight" : "In flight / max");
    setText("c-expired", fmt.n(g.expired));
    document.getElementById("c-expired").classList.toggle("warn", g.expired > 0);
    setText("c-handler", handlerTime(g.handler_times));
    setText("c-oldest", g.backlog.ready ? fmt.age(g.oldest_ready_ms) : "–");
    setText("c-sent", fmt.rate(g.rates.sent));
    setText("c-acked", fmt.rate(g.rates.acked));
    setText("c-merge", fmt.pct(g.rates.merge_rate));
    setText("c-filtered", fmt.n(g.counters.filtered || 0));
    setText("c-superseded", fmt.n(g.counters.superseded || 0));
    setText("c-cancelled", fmt.n(g.counters.cancelled || 0));
    setText("c-outdated", fmt.n(g.counters.outdated || 0));
    setText("c-consumers", `${g.consumers_alive}${g.consumers_dead ? ` (+${g.consumers_dead} dead)` : ""}`);
    for (const button of document.querySelectorAll("#state-tabs button")) {
      button.querySelector(".count").textContent = fmt.n(g.backlog[button.dataset.state]);
    }
  }

  function showSettings(d) {
    const names = { slots: "slots", max_retries: "max retries", visibility_timeout: "visibility timeout (s)",
                    max_message_bytes: "max message bytes", max_delay: "max delay (s)",
                    retry_backoff: "retry backoff (s)", retry_backoff_max: "backoff cap (s)",
                    serial_keys: "serial keys", trace: "trace", trace_retention: "trace retention (s)" };
    document.getElementById("settings").replaceChildren(...Object.entries(names).flatMap(([k, label]) => [
      el("dt", {}, label), el("dd", {}, String(d.settings[k]))]));
    for (const input of document.getElementById("alter-form").elements) {
      if (input.name && d.settings[input.name] !== undefined) input.placeholder = d.settings[input.name];
    }
    const chips = d.bound_groups.map((name) => el("span", { class: "chip" }, name,
      el("button", { type: "button", title: `unbind ${name}`, "aria-label": `unbind ${name}`,
                     onclick: () => unbind(name) }, "×")));
    const unbound = d.unbound_groups.map((name) => el("span", { class: "chip unbound", title: "unbound; keeps what it holds" }, `${name} (unbound)`));
    document.getElementById("groups").replaceChildren(...chips, ...unbound);
    // each group's binding: its filters and its supersede setting, where it has either
    const described = [...new Set([...Object.keys(d.filters), ...Object.keys(d.supersede)])].sort();
    document.getElementById("filters").replaceChildren(...described.flatMap((name) => {
      const f = d.filters[name] || {};
      const limit = d.supersede[name];
      return [el("dt", {}, name), el("dd", { class: "mono", "data-group": name },
        [f.tags ? `tags ${f.tags}` : "", f.where ? `where ${f.where}` : "",
         limit === undefined ? "" : `supersede on, limit ${limit}`].filter(Boolean).join("; "))];
    }));
  }

  function showHeat(heat) {
    const key = view.heat;
    const value = (c) => (key === "pending" ? c.ready + c.delayed : c[key]);
    const max = Math.max(1, ...heat.cells.map(value));
    const hue = { pending: 217, in_flight: 262, dead: 0 }[key];
    const columns = Math.min(32, heat.cells.length);
    const grid = document.getElementById("heat");
    grid.style.gridTemplateColumns = `repeat(${columns}, minmax(0, ${heat.cells.length > 64 ? 30 : 44}px))`;
    grid.replaceChildren(...heat.cells.map((c) => {
      const v = value(c);
      const t = v / max;
      const name = c.first === c.last ? `slot ${c.first}` : `slots ${c.first}–${c.last}`;
      return el("div", {
        class: "cell",
        style: v ? `background:hsl(${hue}, 80%, ${Math.round(92 - 55 * t)}%)` : "",
        title: `${name}: ready ${fmt.n(c.ready)} · delayed ${fmt.n(c.delayed)} · in flight ${fmt.n(c.in_flight)} · dead ${fmt.n(c.dead)}`,
        onmouseenter: (e) => setText("heat-hover", e.target.title),
        onclick: () => { if (c.first === c.last) { view.slot = String(c.first); document.getElementById("peek-slot").value = c.first; view.offset = 0; refreshPeek(); } },
      });
    }));
    setText("heat-max", fmt.n(max === 1 && !heat.cells.some((c) => value(c)) ? 0 : max));
    setText("heat-note", heat.slots_per_cell > 1
      ? `${heat.slots} slots, ${heat.slots_per_cell} per cell; all groups`
      : `${heat.slots} slot${heat.slots === 1 ? "" : "s"}, all groups; click a slot to peek at it`);
  }

  const COLUMNS = {
    ready: ["Slot", "Priority", "Ready since", "Attempts", "Key", "Tag / properties", "Body"],
    delayed: ["Slot", "Priority", "Due", "Attempts", "Key", "Tag / properties", "Body"],
    in_flight: ["Delivery", "Slot", "Priority", "Attempts", "Lease until", "Holder", "Key", "Tag / properties", "Body"],
    dead: ["Delivery", "Slot", "Priority", "Attempts", "Died", "Last error", "Tag / properties", "Body"],
  };
  const NUMERIC = new Set(["Slot", "Priority", "Attempts"]);

  function peekRow(r, g) {
    const now = Date.now();
    // a row that cannot be decoded shows its stored bytes and, on hover, what failed
    const body = r.corrupt
      ? el("td", { class: "body error", title: r.error }, `corrupt: ${r.body}`)
      : el("td", { class: "body", title: `${fmt.n(r.body_bytes)} bytes` }, r.body);
    const key = td(r.key === null ? "" : r.key, "mono");
    const meta = td(RMQ.tagAndProperties(r), "mono");
    const common = [td(r.slot, "num"), td(RMQ.priorityName(r.priority), "num")];
    if (view.state === "ready") {
      return [...common, td(`${fmt.when(r.due_at)} (${fmt.age(now - r.due_at)} ago)`), td(r.attempts, "num"), key, meta, body];
    }
    if (view.state === "delayed") {
      return [...common, td(`${fmt.when(r.due_at)} (in ${fmt.age(r.due_at - now)})`), td(r.attempts, "num"), key, meta, body];
    }
    if (view.state === "in_flight") {
      const lease = r.lease_until ? `${fmt.time(r.lease_until)} (${r.lease_until > now ? "in " + fmt.age(r.lease_until - now) : "expired"})` : "–";
      const holder = r.holder
        ? td(r.holder, "mono")
        : el("td", { class: "muted", title: "claimed without a consumer id (claim's holder argument)" },
          `a consumer of ${r.group} (${g ? g.consumers_alive : "?"} alive)`);
      return [td(r.id, "mono"), ...common, td(r.attempts, "num"), td(lease), holder, key, meta, body];
    }
    return [td(r.id, "mono"), ...common, td(r.attempts, "num"), td(fmt.when(r.dead_at)),
            el("td", { class: "error" }, r.error), meta, body];
  }

  async function refreshPeek() {
    const g = group();
    if (!g) return;
    let page;
    try {
      page = await api("GET", `${base}/messages?${query({ state: view.state, group: g.group,
        slot: view.slot, offset: view.offset, limit: PAGE })}`);
      showMessage("peek-message", "");
    } catch (err) {
      showMessage("peek-message", err.message, "error");
      return;
    }
    const table = document.getElementById("peek-table");
    table.tHead.replaceChildren(el("tr", {}, COLUMNS[view.state].map((c) => el("th", { class: NUMERIC.has(c) ? "num" : "" }, c))));
    fill(table.tBodies[0], page.rows.map((r) => el("tr", {}, peekRow(r, g))), COLUMNS[view.state].length,
         `No ${view.state === "in_flight" ? "in-flight" : view.state} messages${view.slot !== "" ? ` in slot ${view.slot}` : ""}.`);
    const last = Math.min(page.offset + page.rows.length, page.total);
    setText("peek-range", page.total ? `${fmt.n(page.offset + 1)}–${fmt.n(last)} of ${fmt.n(page.total)}` : "0 of 0");
    document.getElementById("peek-prev").disabled = view.offset === 0;
    document.getElementById("peek-next").disabled = last >= page.total;
  }

  async function refresh() {
    const [detail, history] = await Promise.all([api("GET", base), api("GET", `${base}/history?minutes=60`)]);
    view.detail = detail;
    if (!view.group || !detail.groups.some((g) => g.group === view.group)) {
      const preferred = detail.groups.find((g) => g.group === "default") || detail.groups[0];
      view.group = preferred.group;
    }
    const g = group();
    showHeader(detail);
    showCards(g);
    showLimits(g);
    showSettings(detail);
    showHeat(detail.heat);
    RMQCharts.showPriorities(charts.priority, g.ready_by_priority);
    const columns = history.groups[g.group];
    if (columns) {
      RMQCharts.showRates(charts.rates, history, columns);
      RMQCharts.showBacklog(charts.backlog, history, columns);
      RMQCharts.showMerge(charts.merge, history, columns);
    }
    await refreshPeek();
  }

  async function unbind(name) {
    if (!confirm(`Unbind group ${name}? It receives no new messages; what it holds stays.`)) return;
    try {
      await api("DELETE", `${base}/bindings/${encodeURIComponent(name)}`);
      showMessage("bind-message", `Unbound ${name}.`, "ok");
      await refresh();
    } catch (err) {
      showMessage("bind-message", err.message, "error");
    }
  }

  const round = RMQ.poll(refresh);

  document.getElementById("pause-button").addEventListener("click", async () => {
    const paused = view.detail && view.detail.paused;
    try {
      await api("POST", `${base}/${paused ? "resume" : "pause"}`);
      await round();
    } catch (err) {
      RMQ.banner(err.message);
    }
  });
  for (const button of document.querySelectorAll("#state-tabs button")) {
    button.addEventListener("click", () => {
      document.querySelectorAll("#state-tabs button").forEach((b) => b.classList.toggle("active", b === button));
      view.state = button.dataset.state;
      view.offset = 0;
      refreshPeek();
    });
  }
  for (const button of document.querySelectorAll("#heat-tabs button")) {
    button.addEventListener("click", () => {
      document.querySelectorAll("#heat-tabs button").forEach((b) => b.classList.toggle("active", b === button));
      view.heat = button.dataset.state;
      if (view.detail) showHeat(view.detail.heat);
    });
  }
  document.getElementById("peek-slot").addEventListener("change", (e) => {
    view.slot = e.target.value;
    view.offset = 0;
    refreshPeek();
  });
  document.getElementById("peek-prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - PAGE); refreshPeek(); });
  document.getElementById("peek-next").addEventListener("click", () => { view.offset += PAGE; refreshPeek(); });

  onSubmit(document.getElementById("alter-form"), "alter-message", async (fields) => {
    if (!Object.keys(fields).length) throw new Error("Fill in at least one setting to change.");
    await api("PATCH", base, fields);
    document.getElementById("alter-form").reset();
    await round();
    return `Saved: ${Object.entries(fields).map(([k, v]) => `${k} = ${v}`).join(", ")}.`;
  });
  onSubmit(limitsForm, "limits-message", async () => {
    const g = group();
    const changes = limitChanges();
    if (!Object.keys(changes).length) throw new Error("Nothing to change: edit a limit, or clear it to remove it.");
    const result = await api("POST", `${base}/limits`, { group: g ? g.group : "default", ...changes });
    delete limitsForm.dataset.shown;  // redrawn from what is stored now
    for (const name of LIMIT_FIELDS) delete limitsForm.elements[name].dataset.edited;
    await round();
    return `Limits of ${result.group}: ${describeLimits(result.limits)}.`;
  });
  // "keep its filters" leaves Tags and Where out: the group keeps what it has
  const bindForm = document.getElementById("bind-form");
  bindForm.elements.keep_filters.addEventListener("change", (e) => {
    for (const name of ["tags", "where"]) bindForm.elements[name].disabled = e.target.checked;
  });
  onSubmit(bindForm, "bind-message", async (fields) => {
    const binding = fields.keep_filters ? { group: fields.group || "", keep_filters: true }
      : { group: fields.group || "", tags: fields.tags || null, where: fields.where || null };
    if (fields.supersede) binding.supersede = fields.supersede === "on";
    if (fields.supersede_limit !== undefined) {
      if (fields.supersede === "off") throw new Error("A supersede limit goes with supersede on.");
      binding.supersede_limit = fields.supersede_limit;
      if (!fields.supersede) binding.supersede = true;  // a limit of supersedes: supersede on
    }
    const result = await api("POST", `${base}/bindings`, binding);
    bindForm.reset();
    for (const name of ["tags", "where"]) bindForm.elements[name].disabled = false;
    await round();
    const filtered = result.tags || result.where ? " that its filters accept" : "";
    const notes = result.notes.map((note) => ` Note: ${note}.`).join("");
    const kept = fields.keep_filters ? "its filters are kept" : "its filters are now as given";
    // said when asked for, or when on: a group that supersedes behaves differently
    const supersede = "supersede" in binding || result.supersede_limit !== null
      ? ` ${result.supersede_limit === null ? "Supersede off" : `Supersede on, limit ${result.supersede_limit}`}.` : "";
    return (result.added ? `Bound ${result.group}: it gets every message sent from now on${filtered}.`
                         : `${result.group} was already bound; ${kept}.`) + supersede + notes;
  });
  // A named level sets the number sent; "Custom…" shows the number itself to type.
  const level = document.getElementById("send-priority");
  const custom = document.getElementById("send-priority-custom");
  level.addEventListener("change", () => {
    const typed = level.value === "custom";
    custom.style.display = typed ? "" : "none";
    if (typed) custom.querySelector("input").focus();
    else custom.querySelector("input").value = level.value;
  });
  onSubmit(document.getElementById("send-form"), "send-message", async (fields) => {
    const result = await api("POST", `${base}/messages`, fields);
    await round();
    const sent = result.merged ? `Merged into a pending message (slot ${result.slot}).` : `Sent to slot ${result.slot}.`;
    const away = result.filtered_by.length
      ? ` The filters of ${result.filtered_by.join(", ")} turned it away.` : "";
    return sent + away;
  });
})();
