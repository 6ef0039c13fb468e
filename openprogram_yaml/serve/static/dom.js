// Building the page's elements. Everything the server sends (model output, tool results,
// questions, file names) is untrusted: it is set as text, never parsed as HTML.

/** An element with attributes and children; strings become text nodes. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (value === true) node.setAttribute(name, "");
    else node.setAttribute(name, String(value));
  }
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

/** Remove every child of ``node`` and add ``children``. */
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
  return node;
}

/** JSON shown to a person: text as it is, anything else indented. */
export function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

/** One line of at most ``n`` characters. */
export function short(value, n = 160) {
  const text = (typeof value === "string" ? value : JSON.stringify(value)) ?? "";
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > n ? line.slice(0, n - 1) + "…" : line;
}

/** Seconds as "12 ms" or "1.4 s". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "";
  return seconds < 1 ? `${Math.round(seconds * 1000)} ms` : `${seconds.toFixed(seconds < 10 ? 2 : 1)} s`;
}
