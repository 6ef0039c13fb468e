// A form generated from a method's inputs JSON Schema, and the inputs read back from it.
//
// string -> text field (a text area for long text), number/integer -> number field,
// boolean -> checkbox (a yes/no/unset choice when optional without default), enum -> select,
// a file (a string with contentMediaType image/*, audio/*, video/*, application/pdf, or
// format image/audio/pdf/file) -> a file picker, sent as a data URL,
// anything else (array, object, several types) -> a JSON text area.

import { el } from "./dom.js";

/** The file types a file input takes (an ``accept`` list), or null for other inputs. */
const FILE_FORMATS = { image: "image/*", audio: "audio/*", pdf: "application/pdf", file: "image/*,audio/*,video/*,application/pdf" };
const MAX_FILE_BYTES = 20 * 1024 * 1024; // the server's cap (runtime/content.py)
function fileTypes(schema) {
  if (schema.type !== "string") return null;
  const media = typeof schema.contentMediaType === "string" ? schema.contentMediaType.toLowerCase() : null;
  if (media !== null) return /^(image|audio|video)\//.test(media) || media === "application/pdf" ? media : null;
  // Own properties only: a format named constructor (or toString) is found on any object.
  return Object.hasOwn(FILE_FORMATS, schema.format) ? FILE_FORMATS[schema.format] : null;
}

/** Which control an input's schema gets. */
function kindOf(schema) {
  if (fileTypes(schema) !== null) return "file";
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return "enum";
  if (schema.type === "string") return "string";
  if (schema.type === "number" || schema.type === "integer") return "number";
  if (schema.type === "boolean") return "boolean";
  return "json";
}

/**
 * The fields of ``schema`` (the method's input_schema: properties and required) added to
 * ``form``; returns a function that reads the inputs back, or throws with a message.
 */
export function buildForm(form, schema) {
  const properties = schema.properties ?? {};
  const required = new Set(schema.required ?? []);
  const readers = [];
  for (const [name, prop] of Object.entries(properties)) {
    const field = inputField(name, prop ?? {}, required.has(name));
    form.append(field.node);
    readers.push([name, field.read]);
  }
  if (readers.length === 0) form.append(el("p", { class: "muted", text: "This method takes no inputs." }));
  // Object.fromEntries makes each input a property of its own: an input named __proto__
  // assigned as inputs[name] = value set the object's prototype and was never sent.
  return () => {
    const values = readers.map(([name, read]) => [name, read()]);
    return Object.fromEntries(values.filter(([, value]) => value !== undefined));
  };
}

function inputField(name, schema, isRequired) {
  const id = `input-${name}`;
  const kind = kindOf(schema);
  const hasDefault = Object.hasOwn(schema, "default");
  const help = schema.description ? el("small", { id: `${id}-help`, class: "help", text: schema.description }) : null;
  const common = { id, name, "aria-describedby": help ? `${id}-help` : null, required: isRequired && !hasDefault };
  let control;
  let read;
  if (kind === "file") {
    // The file is read when picked; the run sends it as a data URL.
    const accept = fileTypes(schema);
    const note = el("small", { class: "help", "aria-live": "polite" });
    let value;
    let problem = null;
    control = el("input", { ...common, type: "file", accept });
    control.addEventListener("change", () => {
      value = undefined;
      problem = null;
      note.textContent = "";
      const file = control.files?.[0];
      if (!file) return;
      if (file.size > MAX_FILE_BYTES) {
        problem = `${name}: ${file.name} is larger than ${MAX_FILE_BYTES / 1024 / 1024} MiB`;
        note.textContent = problem;
        return;
      }
      problem = `${name}: ${file.name} is still being read`;
      const reader = new FileReader();
      reader.onload = () => {
        // The file's name rides along as a data URL parameter (a PDF is sent with it).
        value = reader.result.replace(";base64,", `;name=${encodeURIComponent(file.name)};base64,`);
        problem = null;
        note.textContent = `${file.name}, ${Math.ceil(file.size / 1024)} KiB`;
      };
      reader.onerror = () => {
        problem = `${name}: ${file.name} cannot be read`;
        note.textContent = problem;
      };
      reader.readAsDataURL(file);
    });
    read = () => {
      if (problem !== null) throw new Error(problem);
      return value;
    };
    const node = el("div", { class: "field" }, fieldLabel(name, id, accept, isRequired, hasDefault), control, note, help);
    return { node, read };
  } else if (kind === "enum") {
    const options = schema.enum.map((v, i) => el("option", { value: String(i), text: typeof v === "string" ? v : JSON.stringify(v) }));
    const blank = isRequired && !hasDefault ? "choose…" : "(not set)";
    control = el("select", common, el("option", { value: "", text: blank }), options);
    if (hasDefault) control.value = String(schema.enum.findIndex((v) => JSON.stringify(v) === JSON.stringify(schema.default)));
    read = () => (control.value === "" ? undefined : schema.enum[Number(control.value)]);
  } else if (kind === "string") {
    const long = !(schema.maxLength <= 120) && !schema.format;
    const type = { date: "date", email: "email", uri: "url", "date-time": "datetime-local" }[schema.format] ?? "text";
    control = long ? el("textarea", { ...common, rows: 3 }) : el("input", { ...common, type });
    if (schema.minLength) control.minLength = schema.minLength;
    if (schema.maxLength) control.maxLength = schema.maxLength;
    if (hasDefault) control.value = String(schema.default);
    read = () => (control.value === "" && !isRequired ? undefined : control.value);
  } else if (kind === "number") {
    control = el("input", {
      ...common,
      type: "number",
      step: schema.type === "integer" ? "1" : "any",
      min: schema.minimum,
      max: schema.maximum,
    });
    if (hasDefault) control.value = String(schema.default);
    read = () => (control.value === "" ? undefined : Number(control.value));
  } else if (kind === "boolean" && (isRequired || hasDefault)) {
    control = el("input", { ...common, type: "checkbox", required: false });
    control.checked = Boolean(schema.default);
    read = () => control.checked;
  } else if (kind === "boolean") {
    control = el("select", common, el("option", { value: "", text: "(not set)" }), el("option", { value: "true", text: "yes" }), el("option", { value: "false", text: "no" }));
    read = () => (control.value === "" ? undefined : control.value === "true");
  } else {
    control = el("textarea", { ...common, rows: 4, class: "json", spellcheck: "false", placeholder: "JSON" });
    if (hasDefault) control.value = JSON.stringify(schema.default, null, 2);
    read = () => {
      control.setCustomValidity("");
      if (control.value.trim() === "") return undefined;
      try {
        return JSON.parse(control.value);
      } catch (err) {
        control.setCustomValidity(`not JSON: ${err.message}`);
        throw new Error(`${name}: not JSON (${err.message})`);
      }
    };
  }
  const type = kind === "json" ? (schema.type ? [schema.type].flat().join(" | ") : "JSON") : kind === "enum" ? "one of" : schema.type;
  const label = fieldLabel(name, id, type, isRequired, hasDefault);
  const node = el("div", { class: kind === "boolean" ? "field check" : "field" }, label, control, help);
  return { node, read };
}

function fieldLabel(name, id, type, isRequired, hasDefault) {
  return el(
    "label",
    { for: id },
    el("span", { class: "name", text: name }),
    el("span", { class: "type", text: type }),
    isRequired && !hasDefault ? el("span", { class: "req", text: "required" }) : null,
  );
}
