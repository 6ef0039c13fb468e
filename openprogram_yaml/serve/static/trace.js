// Run history and the trace of one run: the tree of spans (run, method, exec with its
// attempts and pick, tool calls) with durations, tokens and errors.

import { api } from "./api.js";
import { el, fill, pretty, short, duration } from "./dom.js";
import { costText, recordView } from "./run.js";

/** List the recent runs in ``list``; clicking one opens its trace. */
export async function showHistory(list, openTrace) {
  let reply;
  try {
    reply = await api("/runs");
  } catch (err) {
    fill(list, el("li", { class: "muted", text: `runs unavailable: ${err.message}` }));
    return;
  }
  const runs = Array.isArray(reply) ? reply : (reply.runs ?? []);
  if (runs.length === 0) {
    fill(list, el("li", { class: "muted", text: "No runs yet." }));
    return;
  }
  fill(
    list,
    runs.map((r) =>
      el(
        "li",
        {},
        el(
          "button",
          { type: "button", class: "run-link", "data-run": r.id, onclick: () => openTrace(r.id) },
          el("span", { class: `dot ${r.status}`, "aria-hidden": "true" }),
          el("span", { class: "run-name", text: `${r.agent}.${r.method}` }),
          el("span", { class: "muted", text: `${r.status} · ${when(r.started_at)} · ${duration(r.elapsed_s)} · ${spent(r)}${r.error ? ` · ${r.error}` : ""}` }),
        ),
      ),
    ),
  );
}

/** A run's tokens and cost, for the history list: "40 tokens, cost unknown". */
function spent(run) {
  const usage = run.usage ?? {};
  return `${(usage.input_tokens ?? 0) + (usage.output_tokens ?? 0)} tokens, ${costText(run.cost)}`;
}

function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleTimeString();
}

/** Show run ``id``: its record and its trace as a tree. */
export async function showTrace(box, id, openTrace) {
  fill(box, el("h2", { id: "trace-title", text: `Trace ${id}` }), el("p", { class: "muted", text: "Loading…" }));
  box.hidden = false;
  let reply;
  try {
    reply = await api(`/runs/${encodeURIComponent(id)}`);
  } catch (err) {
    fill(box, el("h2", { id: "trace-title", text: `Trace ${id}` }), el("p", { class: "error", text: err.message }));
    return;
  }
  const record = reply.record ?? reply;
  const nodes = reply.trace ?? reply.nodes ?? record.trace ?? [];
  const title = `Trace of ${record.agent}.${record.method}`;
  fill(
    box,
    el("h2", { id: "trace-title" }, title, " ", el("span", { class: `badge ${record.status}`, text: record.status })),
    el("details", { class: "inputs-used" }, el("summary", { text: "inputs" }), el("pre", { text: pretty(record.inputs ?? {}) })),
    recordView(record, null),
    el("h3", { text: "Spans" }),
    nodes.length ? el("ul", { class: "tree" }, tree(nodes)) : el("p", { class: "muted", text: "No trace was kept for this run." }),
  );
}

function tree(nodes) {
  const children = new Map();
  const ids = new Set(nodes.map((n) => n.id));
  for (const node of nodes) {
    const parent = ids.has(node.parent_id) ? node.parent_id : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(node);
  }
  const build = (node) => {
    const kids = (children.get(node.id) ?? []).map(build);
    return span(node, kids);
  };
  return (children.get(null) ?? []).map(build);
}

function span(node, kids) {
  const data = node.data ?? {};
  const usage = data.usage;
  const tokens = usage && (usage.input_tokens || usage.output_tokens) ? `${usage.input_tokens ?? 0}→${usage.output_tokens ?? 0} tok` : null;
  const failed = node.status !== "ok" && node.status !== "running";
  const summary = el(
    "summary",
    {},
    el("span", { class: `kind ${node.kind}`, text: node.kind }),
    el("span", { class: "span-name", text: node.name || "" }),
    el("span", { class: "muted", text: duration(node.duration_s) }),
    tokens ? el("span", { class: "muted", text: tokens }) : null,
    failed ? el("span", { class: `badge ${node.status === "running" ? "running" : "failed"}`, text: node.status }) : null,
    node.error ? el("span", { class: "error", text: short(`${node.error.type ?? "error"}: ${node.error.message ?? ""}`, 200) }) : null,
  );
  const extra = [];
  for (const [i, attempt] of (data.attempts ?? []).entries()) {
    const wait = attempt.delay_s ? `, retried after ${duration(attempt.delay_s)}` : "";
    extra.push(el("li", { class: "event retry" }, `attempt ${i + 1} failed: ${attempt.reason}${attempt.http_status ? ` (HTTP ${attempt.http_status})` : ""}: ${short(attempt.message ?? "", 200)}${wait}`));
  }
  for (const repair of data.repairs ?? []) extra.push(el("li", { class: "event retry" }, `repair: ${short(repair, 200)}`));
  if (data.pick) {
    const fields = data.pick.fields && Object.keys(data.pick.fields).length ? ` ${short(data.pick.fields, 200)}` : "";
    extra.push(el("li", { class: "event pick" }, "picked ", el("code", { text: String(data.pick.decision ?? short(data.pick, 80)) }), fields));
  }
  const details = el(
    "div",
    { class: "span-body" },
    extra.length ? el("ul", { class: "events" }, extra) : null,
    node.inputs !== null && node.inputs !== undefined ? el("details", {}, el("summary", { text: "inputs" }), el("pre", { text: pretty(node.inputs) })) : null,
    node.output !== null && node.output !== undefined ? el("details", {}, el("summary", { text: "output" }), el("pre", { text: pretty(node.output) })) : null,
    node.error ? el("details", {}, el("summary", { text: "error" }), el("pre", { text: pretty(node.error) })) : null,
    Object.keys(data).length ? el("details", {}, el("summary", { text: "details" }), el("pre", { text: pretty(data) })) : null,
  );
  return el(
    "li",
    { class: `span ${node.kind}` },
    el("details", { open: node.kind !== "tool" || failed }, summary, details, kids.length ? el("ul", {}, kids) : null),
  );
}
