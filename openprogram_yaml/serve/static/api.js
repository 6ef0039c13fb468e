// Talking to the server: JSON requests and server-sent event streams.
//
// A server with a token is opened once as /?token=...: the server keeps the token in a
// cookie (HttpOnly) that the browser sends with every request of this page; the page never
// sees it. Without it every request gets 401, whose message says what to do.

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? body?.error ?? `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

function send(path, { method = "GET", body, accept = "application/json", signal } = {}) {
  const headers = { Accept: accept };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  return fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: "no-store",
  });
}

async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = { error: `${response.status} ${response.statusText}` };
  }
  return new ApiError(response.status, body);
}

/** GET or POST JSON; the parsed reply, or an ApiError holding the server's error body. */
export async function api(path, options = {}) {
  const response = await send(path, options);
  if (!response.ok) throw await failure(response);
  return response.json();
}

/**
 * A request answered with server-sent events (POST works, unlike EventSource); calls
 * ``onEvent(name, data)`` for each event (data parsed as JSON when it is) until the stream
 * ends. A reply that is not an event stream (an error) is thrown as an ApiError.
 */
export async function stream(path, onEvent, options = {}) {
  const response = await send(path, { ...options, accept: "text/event-stream" });
  const type = response.headers.get("Content-Type") ?? "";
  if (!response.ok || !type.startsWith("text/event-stream")) {
    if (response.ok) return onEvent("record", await response.json());
    throw await failure(response);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      dispatch(block, onEvent);
    }
  }
  if (buffer.trim()) dispatch(buffer, onEvent);
}

function dispatch(block, onEvent) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue; // a comment: keeps the connection alive
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  if (data.length === 0) return;
  const text = data.join("\n");
  let parsed = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: passed on as text
  }
  onEvent(name, parsed);
}
