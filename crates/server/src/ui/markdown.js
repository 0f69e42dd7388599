// A small Markdown renderer for model output: fenced code, headings, lists, block quotes,
// tables, rules, paragraphs; code spans, emphasis, strike-through and http(s) links.
// It builds DOM nodes and puts all text in text nodes, so no output can become markup.
// Unclosed constructs (a stream that stopped mid-way) render as far as they go.
"use strict";

(function () {
  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?(.*)$/;
  const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

  function el(tag, parent, text) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  // The start of a block other than a paragraph (ends a paragraph).
  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
  }

  function code(lines, i, parent) {
    const [, fence, lang] = FENCE.exec(lines[i]);
    const body = [];
    for (i++; i < lines.length; i++) {
      const close = lines[i].trim();
      if (close.startsWith(fence[0].repeat(fence.length)) && close.replace(/[`~]/g, "") === "") break;
      body.push(lines[i]);
    }
    const c = el("code", el("pre", parent), body.join("\n"));
    if (lang) c.dataset.lang = lang;
    return i + 1;
  }

  // A list: items with the same kind of marker; an item's lines (dedented) are blocks of their own.
  function list(lines, i, parent) {
    const first = ITEM.exec(lines[i]);
    const ordered = /\d/.test(first[2]);
    const ul = el(ordered ? "ol" : "ul", parent);
    if (ordered && parseInt(first[2], 10) !== 1) ul.start = parseInt(first[2], 10);
    while (i < lines.length) {
      const m = ITEM.exec(lines[i]);
      if (!m || /\d/.test(m[2]) !== ordered) break;
      const indent = m[1].length + m[2].length + 1;
      const item = [m[3]];
      for (i++; i < lines.length; i++) {
        const l = lines[i];
        const blankThenIndented = l.trim() === "" && i + 1 < lines.length && /^\s{2,}\S/.test(lines[i + 1]);
        if (/^\s{2,}\S/.test(l) || blankThenIndented) item.push(l.slice(Math.min(indent, l.search(/\S|$/))));
        else if (l.trim() !== "" && !startsBlock(l) && item[item.length - 1].trim() !== "") item.push(l);
        else break;
      }
      const li = el("li", ul);
      blocks(item, li);
      if (li.childNodes.length === 1 && li.firstChild.tagName === "P") li.replaceChildren(...li.firstChild.childNodes);
      while (i < lines.length && lines[i].trim() === "" && i + 1 < lines.length && ITEM.test(lines[i + 1])) i++;
    }
    return i;
  }

  function cells(line) {
    return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
  }

  function table(lines, i, parent) {
    const t = el("table", parent);
    const head = el("tr", el("thead", t));
    for (const c of cells(lines[i])) inline(c, el("th", head));
    const body = el("tbody", t);
    for (i += 2; i < lines.length && lines[i].includes("|") && lines[i].trim() !== ""; i++) {
      const tr = el("tr", body);
      for (const c of cells(lines[i])) inline(c, el("td", tr));
    }
    return i;
  }

  function blocks(lines, parent) {
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (line.trim() === "") {
        i++;
      } else if (FENCE.test(line)) {
        i = code(lines, i, parent);
      } else if ((m = HEADING.exec(line))) {
        inline(m[2], el("h" + m[1].length, parent));
        i++;
      } else if (RULE.test(line)) {
        el("hr", parent);
        i++;
      } else if (QUOTE.test(line)) {
        const quoted = [];
        for (; i < lines.length && (m = QUOTE.exec(lines[i])); i++) quoted.push(m[1]);
        blocks(quoted, el("blockquote", parent));
      } else if (ITEM.test(line)) {
        i = list(lines, i, parent);
      } else if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1])) {
        i = table(lines, i, parent);
      } else {
        const p = el("p", parent);
        for (let first = true; i < lines.length && lines[i].trim() !== "" && (first || !startsBlock(lines[i])); i++) {
          if (!first) el("br", p);
          inline(lines[i], p);
          first = false;
        }
      }
    }
  }

  // Code spans, **strong**, __strong__, *em*, _em_, ~~del~~, [text](http…): the first match wins.
  const INLINE = new RegExp(
    [
      /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/.source,
      /\*\*(?=\S)([\s\S]*?\S)\*\*/.source,
      /(?<!\w)__(?=\S)([\s\S]*?\S)__(?!\w)/.source,
      /\*(?=[^\s*])([\s\S]*?[^\s*])\*/.source,
      /(?<!\w)_(?=[^\s_])([\s\S]*?[^\s_])_(?!\w)/.source,
      /~~(?=\S)([\s\S]*?\S)~~/.source,
      /\[([^\]\n]+)\]\((https?:\/\/[^)\s]+)\)/.source,
    ].join("|")
  );

  function inline(text, parent) {
    while (text) {
      const m = INLINE.exec(text);
      if (!m) break;
      if (m.index > 0) parent.appendChild(document.createTextNode(text.slice(0, m.index)));
      if (m[1]) el("code", parent, m[2].length > 2 && m[2].startsWith(" ") && m[2].endsWith(" ") ? m[2].slice(1, -1) : m[2]);
      else if (m[3] || m[4]) inline(m[3] || m[4], el("strong", parent));
      else if (m[5] || m[6]) inline(m[5] || m[6], el("em", parent));
      else if (m[7]) inline(m[7], el("del", parent));
      else {
        const a = el("a", parent);
        a.href = m[9];
        a.rel = "noopener noreferrer";
        a.target = "_blank";
        inline(m[8], a);
      }
      text = text.slice(m.index + m[0].length);
    }
    if (text) parent.appendChild(document.createTextNode(text));
  }

  // The rendered nodes of `text`, in a fragment.
  window.renderMarkdown = function (text) {
    const frag = document.createDocumentFragment();
    blocks(text.replace(/\r\n?/g, "\n").split("\n"), frag);
    return frag;
  };
})();
