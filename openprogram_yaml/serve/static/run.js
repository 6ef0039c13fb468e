// "Render" (what would be sent) and "Run" (the streamed answer, then the record).

import { api, stream } from "./api.js";
import { el, fill, pretty, short, duration } from "./dom.js";

const path = (kind, agent, method) => `/${kind}/${encodeURIComponent(agent)}/${encodeURIComponent(method)}`;

/** Show what the method would send with ``inputs``, without calling the model. */
export async function showRender(box, agent, method, inputs) {
  fill(box, el("h2", { text: "Render" }), el("p", { class: "muted", text: "Rendering…" }));
  box.hidden = false;
  let reply;
  try {
    reply = await api(path("api/render", agent, method), { method: "POST", body: inputs });
  } catch (err) {
    fill(box, el("h2", { text: "Render" }), errorView(err.body?.error ?? err.message, err.body?.problems));
    return;
  }
  const r = reply.request;
  const parts = [
    el("h2", { text: "Render" }),
    el("p", { class: "facts" }, fact("model", r.model ?? "—"), fact("runtime", r.runtime), " no model was called"),
  ];
  if (r.system) parts.push(message("system", r.system));
  for (const m of r.messages) parts.push(message(m.role, m.content, m));
  if (r.tools?.length) {
    parts.push(
      el("h3", { text: `Tools (${r.tools.length})` }),
      el(
        "ul",
        { class: "tools" },
        r.tools.map((t) =>
          el("li", {}, el("code", { text: t.name }), t.description ? ` ${t.description}` : "", el("pre", { text: pretty(t.parameters) })),
        ),
      ),
    );
  }
  if (r.response_format) parts.push(el("h3", { text: "Response format" }), el("pre", { text: pretty(r.response_format) }));
  if (r.options && Object.keys(r.options).length) parts.push(el("h3", { text: "Options" }), el("pre", { text: pretty(r.options) }));
  parts.push(el("details", {}, el("summary", { text: "as JSON" }), el("pre", { text: pretty(r) })));
  fill(box, parts);
}

function message(role, content, m = {}) {
  const body = el("pre", { class: "message-text", text: pretty(content) });
  const calls = m.tool_calls?.map((c) => el("p", { class: "event" }, `→ ${c.name}(`, short(c.arguments, 400), ")"));
  return el("article", { class: `message ${role}` }, el("h3", { class: "role", text: role }), body, calls);
}

function fact(name, value) {
  return el("span", { class: "fact" }, el("span", { class: "muted", text: `${name} ` }), el("code", { text: String(value) }));
}

function errorView(message, problems) {
  return el(
    "div",
    { class: "error-box", role: "alert" },
    el("p", { text: typeof message === "string" ? message : JSON.stringify(message) }),
    Array.isArray(problems) && problems.length ? el("ul", {}, problems.map((p) => el("li", { text: typeof p === "string" ? p : JSON.stringify(p) }))) : null,
  );
}

/**
 * Run the method, showing its events as they come; resolves with the final record (or
 * null when the run could not start). ``openTrace(id)`` is offered for the finished run.
 * With ``session`` the run is that chat session's next turn (``?session=NAME``).
 */
export async function showRun(box, agent, method, inputs, openTrace, session = "") {
  const status = el("span", { class: "badge running", text: "running" });
  const events = el("ol", { class: "events", "aria-label": "events" });
  const answer = el("pre", { class: "answer", "aria-label": "answer" });
  const thinking = el("pre", { class: "thinking" });
  const thinkingBox = el("details", { class: "thinking-box", hidden: true }, el("summary", { text: "thinking" }), thinking);
  const outcome = el("div", { class: "outcome" });
  fill(box, el("h2", {}, `Run ${agent}.${method} `, status), events, thinkingBox, answer, outcome);
  box.hidden = false;

  const line = (cls, ...text) => events.append(el("li", { class: `event ${cls}` }, ...text));
  let record = null;
  const onEvent = (name, data) => {
    const type = data?.type ?? name;
    if (name === "record" || name === "done" || name === "result") {
      record = data.record ?? data;
      return;
    }
    if (name === "error" && !data?.type) {
      line("failed", short(data?.error ?? data, 400));
      return;
    }
    switch (type) {
      case "text":
        answer.append(data.text);
        break;
      case "thinking":
        thinkingBox.hidden = false;
        thinking.append(data.text);
        break;
      case "tool_use":
        line("tool", "→ ", el("code", { text: data.name }), " ", short(data.arguments, 300));
        break;
      case "tool_result":
        line(data.is_error ? "tool failed" : "tool", "← ", el("code", { text: data.name }), data.is_error ? " error: " : " ", short(data.content, 300));
        break;
      case "retry": {
        // What the failed attempt streamed is void: kept visible, struck through.
        if (answer.textContent) {
          events.append(el("li", { class: "event void" }, el("s", { text: short(answer.textContent, 300) })));
          answer.textContent = "";
        }
        const wait = data.delay_s ? ` in ${duration(data.delay_s)}` : "";
        line("retry", `retry ${data.attempt}/${data.max_retries}${wait}: ${data.reason ?? ""} ${short(data.message ?? "", 200)}`);
        break;
      }
      case "structured_output_retry":
        answer.textContent = "";
        line("retry", `reply did not match the response schema (${data.code}); asking the model to repair it`);
        break;
      case "method":
        line("method", "method ", el("code", { text: `${data.agent}.${data.method}` }));
        break;
      case "pick":
        line("pick", "picked ", el("code", { text: data.choice }), data.fields ? ` ${short(data.fields, 200)}` : "");
        break;
      default:
        line("other", `${type}: ${short(data, 200)}`);
    }
  };
  try {
    const query = session ? `?session=${encodeURIComponent(session)}` : "";
    await stream(path("run", agent, method) + query, onEvent, { method: "POST", body: inputs });
  } catch (err) {
    status.className = "badge failed";
    status.textContent = `${err.status ?? "error"}`;
    fill(outcome, errorView(err.body?.error ?? err.message, err.body?.problems));
    return null;
  }
  if (record === null) {
    status.className = "badge failed";
    status.textContent = "no record";
    fill(outcome, errorView("the stream ended without the run's record"));
    return null;
  }
  status.className = `badge ${record.status}`;
  status.textContent = record.status;
  // The validated output follows; the streamed text stays only where it says more.
  if (answer.textContent && answer.textContent === record.output) answer.remove();
  else if (answer.textContent) {
    const streamed = el("details", { class: "streamed" }, el("summary", { text: "streamed reply" }));
    answer.before(streamed);
    streamed.append(answer);
  }
  fill(outcome, recordView(record, openTrace));
  return record;
}

/** A record's cost in words: "$0.0075", or "cost unknown" (a model without a known price). */
export function costText(cost) {
  const usd = cost?.usd;
  if (typeof usd !== "number") return "cost unknown";
  return usd < 0.01 ? `$${usd.toFixed(6)}` : `$${usd.toFixed(4)}`;
}

/** A finished run: its output (or error), usage, timing and a way to its trace. */
export function recordView(record, openTrace) {
  const usage = record.usage ?? {};
  const tokens = [usage.input_tokens, usage.output_tokens].some((n) => n !== undefined) ? `${usage.input_tokens ?? 0} in / ${usage.output_tokens ?? 0} out tokens` : null;
  return el(
    "div",
    { class: "record" },
    record.error
      ? errorView(`${record.error.type ?? "error"}: ${record.error.message ?? ""}`, record.error.problems ?? record.error.issues)
      : el("div", {}, el("h3", { text: "Output" }), el("pre", { class: "output", text: pretty(record.output) })),
    el(
      "p",
      { class: "facts" },
      fact("model", record.model ?? "—"),
      fact("time", duration(record.elapsed_s)),
      tokens ? fact("usage", tokens) : null,
      fact("cost", costText(record.cost)),
      record.version?.hash ? fact("version", record.version.hash) : null,
      openTrace && record.id ? el("button", { type: "button", class: "small", onclick: () => openTrace(record.id), text: "Trace" }) : null,
    ),
  );
}
