// Renders /openapi.json: each route's methods, request body fields and responses, then the
// schemas they refer to. All text goes into text nodes.
"use strict";

(function () {
  function el(tag, parent, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    if (parent) parent.appendChild(e);
    return e;
  }

  const refName = (ref) => ref.split("/").pop();

  // A schema's type in one line: a link for a $ref, `T[]` for arrays, `A | B` for unions.
  function typeOf(s, parent) {
    if (!s) return el("span", parent, "any", "type");
    if (s.$ref) {
      const a = el("a", parent, refName(s.$ref), "type");
      a.href = "#schema-" + refName(s.$ref);
      return a;
    }
    const union = s.oneOf || s.anyOf;
    if (union) {
      union.forEach((u, i) => {
        if (i) parent.appendChild(document.createTextNode(" | "));
        typeOf(u, parent);
      });
      return parent;
    }
    if (s.enum) return el("span", parent, s.enum.map((v) => JSON.stringify(v)).join(" | "), "type");
    if (s.const !== undefined) return el("span", parent, JSON.stringify(s.const), "type");
    if (s.type === "array") {
      typeOf(s.items, parent);
      return parent.appendChild(document.createTextNode("[]"));
    }
    const t = Array.isArray(s.type) ? s.type.join(" | ") : s.type || "object";
    return el("span", parent, t, "type");
  }

  function fields(schema, parent) {
    const props = schema.properties || {};
    const names = Object.keys(props);
    if (!names.length) {
      const line = el("p", parent, "", "muted");
      typeOf(schema, line);
      if (schema.description) line.appendChild(document.createTextNode(": " + schema.description));
      return;
    }
    const required = new Set(schema.required || []);
    const table = el("table", parent);
    for (const name of names) {
      const tr = el("tr", table);
      const td = el("td", tr, name);
      if (required.has(name)) el("span", td, " *", "required");
      typeOf(props[name], el("td", tr));
      el("td", tr, props[name].description || "");
    }
  }

  function operation(path, method, op, parent) {
    const sec = el("section", parent);
    sec.id = method + path;
    const h = el("h3", sec);
    el("span", h, method.toUpperCase(), "method " + method);
    h.appendChild(document.createTextNode(path));
    if (op.summary) el("p", sec, op.summary);
    if (op.description) el("p", sec, op.description, "muted");
    const body = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
    if (body) {
      const p = el("p", sec, "Request body: ");
      typeOf(body.schema, p);
    }
    for (const [status, r] of Object.entries(op.responses || {})) {
      const p = el("p", sec, status + ": " + (r.description || "") + " ", "muted");
      for (const [type, c] of Object.entries(r.content || {})) {
        p.appendChild(document.createTextNode(type + " "));
        if (c.schema) typeOf(c.schema, p);
      }
    }
    const a = el("a", document.getElementById("toc"), method.toUpperCase() + " " + path);
    a.href = "#" + encodeURIComponent(sec.id);
  }

  async function start() {
    const doc = await (await fetch("openapi.json")).json();
    document.getElementById("version").textContent = "OpenAPI " + doc.openapi + " · " + doc.info.version;
    document.getElementById("description").textContent = doc.info.description || "";
    const ops = document.getElementById("operations");
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) operation(path, method, op, ops);
    }
    const schemas = document.getElementById("schemas");
    for (const [name, s] of Object.entries((doc.components && doc.components.schemas) || {})) {
      const sec = el("section", schemas);
      sec.id = "schema-" + name;
      el("h3", sec, name);
      if (s.description) el("p", sec, s.description, "muted");
      fields(s, sec);
    }
  }

  start().catch((e) => {
    document.getElementById("description").textContent = "Could not load /openapi.json: " + e.message;
  });
})();
