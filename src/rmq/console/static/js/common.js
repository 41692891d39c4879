// Shared by every page: the API call, formatting, live polling and form helpers.
"use strict";

const RMQ = (() => {
  const COLORS = {
    ready: "#2563eb", delayed: "#d97706", in_flight: "#7c3aed", dead: "#dc2626",
    sent: "#2563eb", merged: "#06b6d4", acked: "#16a34a", retried: "#d97706",
    dead_lettered: "#dc2626",
  };

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(method, path, body) {
    const options = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
    if (method !== "GET") {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body === undefined ? {} : body);
    }
    let response;
    try {
      response = await fetch(path, options);
    } catch (err) {
      throw new ApiError(0, "the console does not answer (is it still running?)");
    }
    let data = null;
    try { data = await response.json(); } catch (err) { data = null; }
    if (!response.ok) {
      const text = data && data.error ? data.error : `${response.status} ${response.statusText}`;
      throw new ApiError(response.status, text);
    }
    return data;
  }

  const numberFormat = new Intl.NumberFormat("en-US");
  const fmt = {
    n: (v) => (v === null || v === undefined ? "–" : numberFormat.format(v)),
    rate: (v) => {
      if (v === null || v === undefined) return "–";
      if (v === 0) return "0";
      if (v < 10) return v.toFixed(1);
      return numberFormat.format(Math.round(v));
    },
    pct: (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(1)}%`),
    age: (ms) => {
      if (ms === null || ms === undefined) return "–";
      if (ms < 1000) return `${Math.round(ms)} ms`;
      const s = ms / 1000;
      if (s < 60) return `${s.toFixed(1)} s`;
      const m = Math.floor(s / 60);
      if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, "0")}s`;
      const h = Math.floor(m / 60);
      if (h < 48) return `${h}h ${String(m % 60).padStart(2, "0")}m`;
      return `${Math.floor(h / 24)}d ${h % 24}h`;
    },
    time: (ms) => (ms ? new Date(ms).toLocaleTimeString([], { hour12: false }) : "–"),
    when: (ms) => {
      if (!ms) return "–";
      const d = new Date(ms);
      const today = new Date();
      const time = d.toLocaleTimeString([], { hour12: false });
      if (d.toDateString() === today.toDateString()) return time;
      return `${d.toISOString().slice(0, 10)} ${time}`;
    },
  };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function td(value, cls) { return el("td", { class: cls }, value); }

  function fill(tbody, rows, columns, emptyText) {
    tbody.replaceChildren(...(rows.length ? rows : [
      el("tr", {}, el("td", { colspan: columns, class: "empty" }, emptyText))]));
  }

  function badge(text, cls) { return el("span", { class: `badge ${cls}` }, text); }

  function stateBadge(state) {
    return badge(state === "in_flight" ? "in flight" : state, `state-${state}`);
  }

  function setText(id, text) {
    const node = document.getElementById(id);
    if (node) node.textContent = text;
  }

  function showMessage(id, text, kind) {
    const node = document.getElementById(id);
    if (!node) return;
    node.textContent = text || "";
    node.className = `form-message ${text ? kind || "error" : ""}`;
  }

  function banner(text) {
    const node = document.getElementById("banner");
    node.textContent = text || "";
    node.classList.toggle("show", Boolean(text));
  }

  function live(state, text) {
    const node = document.getElementById("live");
    if (!node) return;
    node.classList.remove("stale", "down");
    if (state !== "ok") node.classList.add(state);
    setText("live-text", text);
  }

  // Calls `refresh` now and every data-refresh ms while the page is visible; a failure
  // shows in the banner and the live dot, and the next round tries again.
  function poll(refresh) {
    const interval = Number(document.body.dataset.refresh) || 2000;
    let running = false;
    async function round() {
      if (running || document.hidden) return;
      running = true;
      try {
        await refresh();
        banner("");
        live("ok", `live · updated ${fmt.time(Date.now())}`);
      } catch (err) {
        banner(err.message);
        live("down", "not updating");
      } finally {
        running = false;
      }
    }
    round();
    setInterval(round, interval);
    document.addEventListener("visibilitychange", round);
    return round;
  }

  // The non-empty fields of a form as JSON: number inputs as numbers, checkboxes as booleans.
  function formJSON(form) {
    const out = {};
    for (const input of form.elements) {
      if (!input.name) continue;
      if (input.type === "checkbox") { if (input.checked) out[input.name] = true; continue; }
      if (input.value === "") continue;
      out[input.name] = input.type === "number" || input.dataset.number ? Number(input.value) : input.value;
    }
    return out;
  }

  // Submit handler: sends the form, shows the API's own message on failure.
  function onSubmit(form, messageId, send) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const button = form.querySelector("button[type=submit]");
      if (button) button.disabled = true;
      try {
        const text = await send(formJSON(form));
        showMessage(messageId, text, "ok");
      } catch (err) {
        showMessage(messageId, err.message, "error");
      } finally {
        if (button) button.disabled = false;
      }
    });
  }

  function query(params) {
    const search = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) {
      if (v !== null && v !== undefined && v !== "") search.set(k, v);
    }
    return search.toString();
  }

  // The API's names for the named levels (rmq.Priority), the number for any other.
  const PRIORITY_NAMES = { 64: "LOW", 128: "MEDIUM", 192: "HIGH" };
  function priorityName(p) { return PRIORITY_NAMES[p] || String(p); }

  // A message's tag and properties in one line: "order · region="eu" price=12".
  function tagAndProperties(r) {
    const props = Object.entries(r.properties || {}).map(([name, value]) => `${name}=${JSON.stringify(value)}`).join(" ");
    return [r.tag || "", props].filter(Boolean).join(" · ");
  }

  // A group's in flight: "used / max" of its max in flight, else the live deliveries (those
  // whose lease ran out, not recovered yet, are shown apart as expired).
  function inFlight(g) {
    if (g.limits && g.limits.max_in_flight !== null && g.limit_in_use !== null && g.limit_in_use !== undefined) {
      return `${fmt.n(g.limit_in_use)} / ${fmt.n(g.limits.max_in_flight)}`;
    }
    return fmt.n(g.backlog.in_flight - (g.expired || 0));
  }

  // "1 dead letter", "28 dead letters"
  function plural(n, noun) { return `${fmt.n(n)} ${noun}${n === 1 ? "" : "s"}`; }

  function priorityBar(byPriority) {
    const entries = Object.entries(byPriority || {}).map(([p, n]) => [Number(p), n]);
    const total = entries.reduce((sum, [, n]) => sum + n, 0);
    if (!total) return el("span", { class: "prio-text" }, "–");
    entries.sort((a, b) => b[0] - a[0]);
    const bar = el("div", { class: "prio-bar", title: entries.map(([p, n]) => `${priorityName(p)}: ${fmt.n(n)}`).join("\n") },
      entries.map(([p, n]) => el("span", {
        style: `width:${(100 * n) / total}%;background:${priorityColor(p)}` })));
    const text = entries.slice(0, 3).map(([p, n]) => `${priorityName(p)} ${fmt.n(n)}`).join(" · ")
      + (entries.length > 3 ? ` · +${entries.length - 3}` : "");
    return el("div", {}, el("div", { class: "prio-text" }, text), bar);
  }

  function priorityColor(p) {
    // shades of the "ready" blue: the higher the priority, the darker
    const t = Math.max(0, Math.min(1, p / 255));
    return `hsl(217, 80%, ${Math.round(80 - 50 * t)}%)`;
  }

  return { COLORS, api, fmt, el, td, fill, badge, stateBadge, setText, showMessage, banner,
           poll, formJSON, onSubmit, query, priorityBar, priorityColor, priorityName, plural,
           tagAndProperties, inFlight };
})();
