// Chat sessions (``GET /api/sessions``): the list under Sessions, the names offered beside
// Run for the open method, and one session's conversation. Messages are untrusted: text only.

import { api } from "./api.js";
import { el, fill } from "./dom.js";

/** List the sessions in ``list``; clicking one calls ``openSession(name)``. */
export async function showSessions(list, openSession) {
  let reply;
  try {
    reply = await api("/api/sessions");
  } catch (err) {
    fill(list, el("li", { class: "muted", text: `sessions unavailable: ${err.message}` }));
    return;
  }
  const sessions = reply.sessions ?? [];
  if (sessions.length === 0) {
    fill(list, el("li", { class: "muted", text: "No sessions yet." }));
    return;
  }
  fill(
    list,
    sessions.map((s) =>
      el(
        "li",
        {},
        el(
          "button",
          { type: "button", class: "run-link", "data-session": s.name, onclick: () => openSession(s.name) },
          el("span", { class: "run-name", text: s.name }),
          el("span", { class: "muted", text: `${s.agent}.${s.method} · ${s.messages} messages · ${when(s.updated_at)}` }),
        ),
      ),
    ),
  );
}

/** Offer the sessions of ``agent.method`` in ``datalist`` (the Session field's choices). */
export async function offerSessions(datalist, agent, method) {
  let reply;
  try {
    reply = await api(`/api/sessions?agent=${encodeURIComponent(agent)}&method=${encodeURIComponent(method)}`);
  } catch {
    return;
  }
  fill(datalist, (reply.sessions ?? []).map((s) => el("option", { value: s.name })));
}

/** Show session ``name``'s conversation in ``box``. */
export async function showSession(box, name) {
  const title = (text) => el("h2", { id: "session-title", text });
  fill(box, title(`Session ${name}`), el("p", { class: "muted", text: "Loading…" }));
  box.hidden = false;
  let reply;
  try {
    reply = await api(`/api/sessions/${encodeURIComponent(name)}`);
  } catch (err) {
    fill(box, title(`Session ${name}`), el("p", { class: "error", text: err.message }));
    return;
  }
  const s = reply.session;
  fill(
    box,
    title(`Session ${s.name}`),
    el("p", { class: "facts", text: `${s.agent}.${s.method} · ${s.messages} messages` }),
    (reply.messages ?? []).map((m) =>
      el("article", { class: `message ${m.role}` }, el("h3", { class: "role", text: m.role }), el("pre", { class: "message-text", text: m.content })),
    ),
  );
}

function when(iso) {
  const date = new Date(iso ?? "");
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleString();
}
