// The page: agents and their methods, a form per method, Render and Run, run history and
// traces, chat sessions, pending questions, the serving version and live reload notices.

import { api, stream } from "./api.js";
import { el, fill } from "./dom.js";
import { buildForm } from "./form.js";
import { showRender, showRun } from "./run.js";
import { offerSessions, showSession, showSessions } from "./sessions.js";
import { showHistory, showTrace } from "./trace.js";

const $ = (id) => document.getElementById(id);
const view = { agent: null, method: null, readInputs: null };
let runsInFlight = 0;

// --- the serving version and reload notices -------------------------------------------

function versionText(v) {
  if (!v) return "";
  const commit = v.commit ? ` · ${v.commit.slice(0, 10)}${v.dirty ? " (modified)" : ""}` : "";
  return `version ${v.hash}${commit}`;
}

async function loadVersion() {
  try {
    const reply = await api("/version");
    $("version").textContent = versionText(reply.version);
    $("version").title = (reply.files ?? []).join("\n");
  } catch (err) {
    $("version").textContent = `version unavailable: ${err.message}`;
  }
}

/** A reload's outcome (``/events``) as a notice: the new version, or the diagnostics of a
 * broken edit at path:line:col while the last good version keeps serving. */
function showNotice(event) {
  const box = $("notice");
  const failed = event.status === "failed";
  const diagnostics = event.diagnostics ?? [];
  // A failure's message lists the diagnostics, then says what still serves: that last line.
  const lines = (event.message ?? "").split("\n");
  const text = failed ? lines[lines.length - 1] : lines.join(" ");
  fill(
    box,
    el("strong", { text: failed ? "Reload failed" : "Reloaded" }),
    " ",
    el("span", { text }),
    diagnostics.length ? el("ul", { class: "diagnostics" }, diagnostics.map((d) => el("li", {}, el("code", { text: String(d) })))) : null,
    el("button", { type: "button", class: "small close", "aria-label": "dismiss", onclick: () => (box.hidden = true), text: "×" }),
  );
  box.className = failed ? "notice failed" : "notice ok";
  box.hidden = false;
}

/** Listen to /events: what serves now, then each reload; reconnect when the stream ends. */
async function listen() {
  for (let delay = 1000; ; delay = Math.min(delay * 2, 15000)) {
    try {
      await stream("/events", (name, data) => {
        $("connection").textContent = "";
        delay = 1000;
        if (name === "version") {
          $("version").textContent = versionText(data.version);
          if (data.reload?.status === "failed") showNotice(data.reload);
        } else if (name === "reload" && data.status !== "unchanged") {
          showNotice(data);
          loadVersion();
          if (data.status === "loaded") refreshAgents();
        }
      });
    } catch {
      // the server went away: said below, then tried again
    }
    $("connection").textContent = "reconnecting…";
    await new Promise((r) => setTimeout(r, delay));
  }
}

// --- agents, methods and their forms --------------------------------------------------

async function refreshAgents() {
  let reply;
  try {
    reply = await api("/agents");
  } catch (err) {
    fill($("agents"), el("p", { class: "error", text: `cannot list agents: ${err.message}` }));
    return;
  }
  const agents = reply.agents ?? reply;
  fill(
    $("agents"),
    Object.entries(agents).map(([name, agent]) =>
      el(
        "div",
        { class: "agent" },
        el("h3", { text: name }),
        agent.description ? el("p", { class: "muted small", text: agent.description }) : null,
        el(
          "ul",
          {},
          Object.entries(agent.methods ?? {}).map(([method, m]) =>
            el(
              "li",
              {},
              el("button", {
                type: "button",
                class: view.agent === name && view.method === method ? "method-link current" : "method-link",
                "data-method": `${name}.${method}`,
                title: m.description ?? "",
                onclick: () => openMethod(name, method),
                text: method,
              }),
            ),
          ),
        ),
      ),
    ),
  );
  if (view.agent) {
    // Own properties only: a method named constructor (or toString) is found on any object.
    const methods = Object.hasOwn(agents, view.agent) ? agents[view.agent].methods ?? {} : {};
    if (Object.hasOwn(methods, view.method)) {
      openMethod(view.agent, view.method, { keepResult: true });
    } else {
      // The method is gone from the new version: its form no longer means anything.
      Object.assign(view, { agent: null, method: null, readInputs: null });
      $("method").hidden = true;
      $("welcome").hidden = false;
    }
  }
}

async function openMethod(agent, method, { keepResult = false } = {}) {
  let info;
  try {
    info = await api(`/api/methods/${encodeURIComponent(agent)}/${encodeURIComponent(method)}`);
  } catch (err) {
    $("form-error").textContent = err.message;
    return;
  }
  const keep = keepResult && view.agent === agent && view.method === method ? snapshot() : null;
  view.agent = agent;
  view.method = method;
  for (const b of document.querySelectorAll(".method-link")) b.classList.toggle("current", b.dataset.method === `${agent}.${method}`);
  $("welcome").hidden = true;
  $("method").hidden = false;
  $("method-title").textContent = `${agent}.${method}`;
  $("method-description").textContent = info.description ?? "";
  const facts = [`model ${info.model ?? "—"}`];
  if (info.response_format) facts.push("structured output");
  if (info.choices?.length) facts.push(`choices: ${info.choices.map((c) => c.name).join(", ")}`);
  $("method-facts").textContent = facts.join(" · ");
  const form = fill($("inputs"));
  view.readInputs = buildForm(form, info.input_schema ?? {});
  if (keep) restore(keep);
  $("form-error").textContent = "";
  if (!keepResult) {
    $("result").hidden = true;
    $("trace").hidden = true;
    $("session-view").hidden = true;
    $("session").value = "";
  }
  offerSessions($("session-names"), agent, method);
}

// The values typed so far survive a reload of the agent (same field names).
function snapshot() {
  return [...$("inputs").elements].map((e) => [e.name, e.type === "checkbox" ? e.checked : e.value]);
}
function restore(values) {
  const elements = $("inputs").elements;
  for (const [name, value] of values) {
    const e = elements.namedItem(name);
    if (!e || e.type === "file") continue; // a file picker cannot be set: pick it again
    if (e.type === "checkbox") e.checked = value;
    else e.value = value;
  }
}

function readInputs() {
  const form = $("inputs");
  $("form-error").textContent = "";
  let inputs;
  try {
    inputs = view.readInputs();
  } catch (err) {
    $("form-error").textContent = err.message;
    form.reportValidity();
    return null;
  }
  if (!form.checkValidity()) {
    form.reportValidity();
    $("form-error").textContent = "Some inputs need a value.";
    return null;
  }
  return inputs;
}

// Enter in a field must not submit the form (it would leave the page); the buttons act.
$("inputs").addEventListener("submit", (event) => event.preventDefault());

$("render").addEventListener("click", async () => {
  const inputs = readInputs();
  if (inputs === null) return;
  $("trace").hidden = true;
  await showRender($("result"), view.agent, view.method, inputs);
});

$("run").addEventListener("click", async () => {
  const inputs = readInputs();
  if (inputs === null) return;
  $("trace").hidden = true;
  $("session-view").hidden = true;
  const session = $("session").value.trim();
  runsInFlight += 1;
  pollQuestions();
  try {
    await showRun($("result"), view.agent, view.method, inputs, openTrace, session);
  } finally {
    runsInFlight -= 1;
    loadQuestions();
    showHistory($("runs"), openTrace);
    if (session) {
      showSessions($("sessions"), openSession);
      offerSessions($("session-names"), view.agent, view.method);
    }
  }
});

function openTrace(id) {
  $("welcome").hidden = true;
  $("result").hidden = true;
  $("session-view").hidden = true;
  showTrace($("trace"), id, openTrace).then(() => $("trace").scrollIntoView({ block: "start" }));
}

function openSession(name) {
  $("welcome").hidden = true;
  $("result").hidden = true;
  $("trace").hidden = true;
  showSession($("session-view"), name).then(() => $("session-view").scrollIntoView({ block: "start" }));
}

$("refresh-runs").addEventListener("click", () => {
  showHistory($("runs"), openTrace);
  showSessions($("sessions"), openSession);
});

// --- questions the running agents ask -------------------------------------------------

let polling = false;

/** While a run of this page is going, look for its questions every half second. */
async function pollQuestions() {
  if (polling) return;
  polling = true;
  while (runsInFlight > 0) {
    await loadQuestions();
    await new Promise((r) => setTimeout(r, 500));
  }
  polling = false;
}

async function loadQuestions() {
  let reply;
  try {
    reply = await api("/questions");
  } catch {
    return;
  }
  const questions = reply.questions ?? [];
  const box = $("questions");
  const shown = new Set([...box.querySelectorAll("[data-question]")].map((q) => q.dataset.question));
  const now = new Set(questions.map((q) => q.id));
  if (shown.size === now.size && [...now].every((id) => shown.has(id))) return; // keep what is being typed
  fill(box, questions.length ? el("h2", { text: "Waiting for you" }) : null, questions.map(questionCard));
  box.hidden = questions.length === 0;
}

function questionCard(q) {
  const problem = el("p", { class: "error", role: "alert" });
  const send = async (answer) => {
    try {
      if (answer === undefined) await api(`/questions/${encodeURIComponent(q.id)}/decline`, { method: "POST", body: {} });
      else await api(`/questions/${encodeURIComponent(q.id)}/answer`, { method: "POST", body: { answer } });
    } catch (err) {
      problem.textContent = err.message;
      return;
    }
    card.remove();
    if (!$("questions").querySelector("[data-question]")) $("questions").hidden = true;
  };
  const decline = el("button", { type: "button", onclick: () => send(undefined), text: "Decline" });
  let controls;
  if (q.kind === "confirm") {
    controls = [el("button", { type: "button", class: "primary", onclick: () => send(true), text: "Yes" }), el("button", { type: "button", onclick: () => send(false), text: "No" }), decline];
  } else if (q.kind === "form" || q.questions?.length) {
    const names = q.kind === "form" ? q.fields : q.questions;
    const inputs = names.map((name, i) => el("input", { type: "text", id: `q-${q.id}-${i}`, "aria-label": name }));
    const rows = names.map((name, i) => el("div", { class: "field" }, el("label", { for: `q-${q.id}-${i}`, text: name }), inputs[i]));
    const submit = () =>
      send(q.kind === "form" ? Object.fromEntries(names.map((n, i) => [n, inputs[i].value])) : inputs.map((e) => e.value));
    controls = [...rows, el("button", { type: "button", class: "primary", onclick: submit, text: "Send" }), decline];
  } else if (q.options?.length && q.multi) {
    const boxes = q.options.map((o) => el("input", { type: "checkbox", value: o }));
    controls = [
      ...q.options.map((o, i) => el("label", { class: "option" }, boxes[i], ` ${o}`)),
      el("button", { type: "button", class: "primary", onclick: () => send(boxes.filter((b) => b.checked).map((b) => b.value)), text: "Send" }),
      decline,
    ];
  } else if (q.options?.length) {
    controls = [...q.options.map((o) => el("button", { type: "button", onclick: () => send(o), text: o })), decline];
  } else {
    const input = el("input", { type: "text", "aria-label": "your answer", onkeydown: (e) => e.key === "Enter" && send(input.value) });
    controls = [input, el("button", { type: "button", class: "primary", onclick: () => send(input.value), text: "Send" }), decline];
  }
  const card = el(
    "article",
    { class: `question ${q.kind}`, "data-question": q.id },
    el("p", { class: "prompt", text: q.prompt }),
    el("div", { class: "actions" }, controls),
    problem,
  );
  return card;
}

// --- start ----------------------------------------------------------------------------

loadVersion();
refreshAgents();
showHistory($("runs"), openTrace);
showSessions($("sessions"), openSession);
loadQuestions();
setInterval(() => runsInFlight === 0 && loadQuestions(), 5000);
listen();
