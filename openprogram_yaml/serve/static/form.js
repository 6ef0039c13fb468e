// A form generated from a method's inputs JSON Schema, and the inputs read back from it.
//
// string -> text field (a text area for long text), number/integer -> number field,
// boolean -> checkbox (a yes/no/unset choice when optional without default), enum -> select,
// anything else (array, object, several types) -> a JSON text area.

import { el } from "./dom.js";

/** Which control an input's schema gets. */
function kindOf(schema) {
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
  return () => {
    const inputs = {};
    for (const [name, read] of readers) {
      const value = read();
      if (value !== undefined) inputs[name] = value;
    }
    return inputs;
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
  if (kind === "enum") {
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
  const label = el(
    "label",
    { for: id },
    el("span", { class: "name", text: name }),
    el("span", { class: "type", text: type }),
    isRequired && !hasDefault ? el("span", { class: "req", text: "required" }) : null,
  );
  const node = el("div", { class: kind === "boolean" ? "field check" : "field" }, label, control, help);
  return { node, read };
}
