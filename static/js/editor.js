// A light code editor: a <textarea> (the real input: native undo, selection,
// accessibility) over a <pre> with the highlighted text, plus a prefix
// completion popup. By default no wrapping, so a caret position is (line,
// column); with {wrap: true} (a narrow editor) long lines wrap, the overlay
// wraps them the same way and each line number is as tall as its wrapped line.

import { KNOWN_PREFIXES, declaredPrefixes, tokenize } from "./sparql.js";

const esc = (s) => s.replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c]);

let editorCount = 0;

export class Editor {
  /**
   * @param {HTMLElement} host   an element with class "editor" holding a <textarea>
   * @param {{onRun?: () => void}} opts
   */
  constructor(host, opts = {}) {
    this.host = host;
    this.onRun = opts.onRun || null;
    this.wrap = !!opts.wrap;
    this.textarea = host.querySelector("textarea");
    this.textarea.setAttribute("wrap", this.wrap ? "soft" : "off");
    if (this.wrap) host.classList.add("wrap");
    this.textarea.spellcheck = false;
    this.textarea.setAttribute("autocapitalize", "off");
    this.textarea.setAttribute("autocomplete", "off");
    this.pre = document.createElement("pre");
    this.pre.className = "editor-highlight";
    this.pre.setAttribute("aria-hidden", "true");
    this.code = document.createElement("code");
    this.pre.appendChild(this.code);
    host.insertBefore(this.pre, this.textarea);
    this.gutter = document.createElement("div");
    this.gutter.className = "editor-gutter";
    this.gutter.setAttribute("aria-hidden", "true");
    host.insertBefore(this.gutter, this.pre);
    this.errorLine = null;
    this.popup = null;
    this.items = [];
    this.active = 0;
    this.id = `editor-${++editorCount}`;

    this.textarea.addEventListener("input", (ev) => this.onInput(ev));
    this.textarea.addEventListener("scroll", () => this.syncScroll());
    this.textarea.addEventListener("keydown", (ev) => this.onKey(ev));
    this.textarea.addEventListener("blur", () => setTimeout(() => this.closePopup(), 150));
    this.textarea.addEventListener("click", () => this.closePopup());
    if (this.wrap && typeof ResizeObserver !== "undefined") {
      // a new width wraps the lines anew: the line numbers follow
      this.resizer = new ResizeObserver(() => this.render());
      this.resizer.observe(this.textarea);
    }
    this.render();
  }

  /** Back to the first line and column (after the text was replaced or submitted). */
  resetScroll() {
    this.textarea.scrollTop = 0;
    this.textarea.scrollLeft = 0;
    this.syncScroll();
  }

  get value() { return this.textarea.value; }

  set value(v) {
    this.textarea.value = v;
    this.errorLine = null;
    this.render();
  }

  focus() { this.textarea.focus(); }

  render() {
    if (this.wrap) {
      this.renderWrapped();
      return;
    }
    const text = this.textarea.value;
    let html = "";
    for (const t of tokenize(text)) {
      html += t.kind === "ws" || t.kind === "other" ? esc(t.text) : `<span class="tok-${t.kind}">${esc(t.text)}</span>`;
    }
    // A line of the overlay per line of text; the error line is marked.
    if (this.errorLine !== null) {
      const lines = html.split("\n");
      const i = this.errorLine - 1;
      if (i >= 0 && i < lines.length) lines[i] = `<span class="error-line">${lines[i] || " "}</span>`;
      html = lines.join("\n");
    }
    this.code.innerHTML = html + "\n";
    const n = text.split("\n").length;
    if (this.gutter.childElementCount !== n) {
      let g = "";
      for (let i = 1; i <= n; i++) g += `<span>${i}</span>`;
      this.gutter.innerHTML = g;
    }
    for (const el of this.gutter.querySelectorAll(".error")) el.classList.remove("error");
    if (this.errorLine !== null && this.gutter.children[this.errorLine - 1]) {
      this.gutter.children[this.errorLine - 1].classList.add("error");
    }
    this.syncScroll();
  }

  /** Wrap mode: one block per line in the overlay (a token spanning lines is split at
   * the line ends, so no element crosses a line), and each gutter number as tall as its block. */
  renderWrapped() {
    const ta = this.textarea;
    const lines = [""];
    for (const t of tokenize(ta.value)) {
      const parts = t.text.split("\n");
      parts.forEach((part, i) => {
        if (i > 0) lines.push("");
        if (!part) return;
        lines[lines.length - 1] += t.kind === "ws" || t.kind === "other" ? esc(part) : `<span class="tok-${t.kind}">${esc(part)}</span>`;
      });
    }
    const err = this.errorLine !== null ? this.errorLine - 1 : -1;
    this.code.innerHTML = lines.map((l, i) =>
      `<span class="ln${i === err ? " error-line" : ""}">${l || " "}</span>`).join("");
    // the textarea's scroll bar narrows its text: the overlay keeps the same text width
    const bar = ta.offsetWidth - ta.clientWidth - (parseFloat(getComputedStyle(ta).borderLeftWidth) || 0) * 2;
    this.pre.style.paddingRight = `calc(12px + ${Math.max(0, bar)}px)`;
    if (this.gutter.childElementCount !== lines.length) {
      this.gutter.innerHTML = lines.map((_, i) => `<span>${i + 1}</span>`).join("");
    }
    const blocks = this.code.children;
    for (let i = 0; i < lines.length; i++) {
      const g = this.gutter.children[i];
      g.style.height = `${blocks[i].offsetHeight || 20}px`;
      g.classList.toggle("error", i === err);
    }
    this.syncScroll();
  }

  syncScroll() {
    this.pre.scrollTop = this.textarea.scrollTop;
    this.pre.scrollLeft = this.textarea.scrollLeft;
    this.gutter.scrollTop = this.textarea.scrollTop;
  }

  /** Mark an error at (line, column), 1-based, and put the caret there. */
  markError(line, column) {
    this.errorLine = line;
    this.render();
    const lines = this.textarea.value.split("\n");
    let pos = 0;
    for (let i = 0; i < Math.min(line - 1, lines.length); i++) pos += lines[i].length + 1;
    pos += Math.max(0, Math.min((column || 1) - 1, (lines[line - 1] || "").length));
    this.textarea.focus();
    this.textarea.setSelectionRange(pos, pos);
  }

  clearError() {
    if (this.errorLine !== null) {
      this.errorLine = null;
      this.render();
    }
  }

  onInput(ev) {
    this.errorLine = null;
    if (ev && ev.inputType === "insertText" && ev.data === ":") this.autoPrefix();
    this.render();
    this.updateCompletion(false);
  }

  onKey(ev) {
    if ((ev.ctrlKey || ev.metaKey) && ev.key === "Enter") {
      ev.preventDefault();
      this.closePopup();
      if (this.onRun) this.onRun();
      return;
    }
    if (this.popup) {
      if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
        ev.preventDefault();
        const d = ev.key === "ArrowDown" ? 1 : -1;
        this.active = (this.active + d + this.items.length) % this.items.length;
        this.drawPopup();
        return;
      }
      if (ev.key === "Enter" || ev.key === "Tab") {
        ev.preventDefault();
        this.accept(this.items[this.active]);
        return;
      }
      if (ev.key === "Escape") {
        ev.preventDefault();
        this.closePopup();
        return;
      }
    }
    if (ev.ctrlKey && ev.key === " ") {
      ev.preventDefault();
      this.updateCompletion(true);
      return;
    }
    if (ev.key === "Tab" && !ev.shiftKey && !ev.ctrlKey && !ev.altKey && !ev.metaKey) {
      // Indent with two spaces; Escape then Tab leaves the editor (keyboard users keep a way out).
      if (this.escaped) { this.escaped = false; return; }
      ev.preventDefault();
      document.execCommand("insertText", false, "  ");
      return;
    }
    this.escaped = ev.key === "Escape";
  }

  /** The word before the caret and what kind of completion fits there. */
  context() {
    const ta = this.textarea;
    const pos = ta.selectionStart;
    if (pos !== ta.selectionEnd) return null;
    const before = ta.value.slice(0, pos);
    const decl = before.match(/\bPREFIX\s+([A-Za-z][\w-]*)?$/i);
    if (decl) return { kind: "declare", word: decl[1] || "", start: pos - (decl[1] || "").length, pos };
    const m = before.match(/(?:^|[\s{}()\[\];,.^/|!=<>*+])([A-Za-z][\w-]*)$/);
    if (m) return { kind: "use", word: m[1], start: pos - m[1].length, pos };
    return null;
  }

  updateCompletion(forced) {
    const ctx = this.context();
    if (!ctx || (!forced && ctx.kind === "use") || (!forced && ctx.kind === "declare" && ctx.word === "" &&
        !/\s$/.test(this.textarea.value.slice(0, ctx.pos)))) {
      this.closePopup();
      return;
    }
    const declared = declaredPrefixes(this.textarea.value);
    const all = { ...KNOWN_PREFIXES, ...declared };
    const w = ctx.word.toLowerCase();
    const items = Object.entries(all)
      .filter(([p]) => p.toLowerCase().startsWith(w) && (ctx.kind === "use" || !(p in declared) || p === ctx.word))
      .sort((a, b) => a[0].localeCompare(b[0]))
      .slice(0, 12)
      .map(([p, ns]) => ({ prefix: p, ns, declared: p in declared }));
    if (!items.length || (items.length === 1 && items[0].prefix === ctx.word && ctx.kind === "use")) {
      this.closePopup();
      return;
    }
    this.ctx = ctx;
    this.items = items;
    this.active = 0;
    this.openPopup();
  }

  openPopup() {
    if (!this.popup) {
      this.popup = document.createElement("ul");
      this.popup.className = "completion";
      this.popup.id = `${this.id}-completion`;
      this.popup.setAttribute("role", "listbox");
      this.popup.setAttribute("aria-label", "Prefix completions");
      this.popup.addEventListener("mousedown", (ev) => {
        const li = ev.target.closest("li");
        if (li) {
          ev.preventDefault();
          this.accept(this.items[Number(li.dataset.i)]);
        }
      });
      this.host.appendChild(this.popup);
      this.textarea.setAttribute("aria-controls", this.popup.id);
      this.textarea.setAttribute("aria-expanded", "true");
    }
    // Place it under the caret: monospace, no wrapping.
    const ta = this.textarea;
    const before = ta.value.slice(0, this.ctx.start);
    const line = before.split("\n").length - 1;
    const col = before.length - before.lastIndexOf("\n") - 1;
    const cs = getComputedStyle(ta);
    const lh = parseFloat(cs.lineHeight) || 18;
    const cw = this.charWidth(cs);
    const top = parseFloat(cs.paddingTop) + (line + 1) * lh - ta.scrollTop + ta.offsetTop;
    const left = parseFloat(cs.paddingLeft) + col * cw - ta.scrollLeft + ta.offsetLeft;
    this.popup.style.top = `${Math.max(0, top + 2)}px`;
    this.popup.style.left = `${Math.max(0, Math.min(left, ta.offsetLeft + ta.clientWidth - 260))}px`;
    this.drawPopup();
  }

  charWidth(cs) {
    if (!this._cw) {
      const c = document.createElement("canvas").getContext("2d");
      c.font = `${cs.fontSize} ${cs.fontFamily}`;
      this._cw = c.measureText("0123456789").width / 10 || 7.8;
    }
    return this._cw;
  }

  drawPopup() {
    this.popup.innerHTML = this.items.map((it, i) =>
      `<li role="option" id="${this.id}-opt-${i}" data-i="${i}" aria-selected="${i === this.active}">` +
      `<b>${esc(it.prefix)}:</b> <span>${esc(it.ns)}</span></li>`).join("");
    this.textarea.setAttribute("aria-activedescendant", `${this.id}-opt-${this.active}`);
    const el = this.popup.children[this.active];
    if (el) el.scrollIntoView({ block: "nearest" });
  }

  closePopup() {
    if (this.popup) {
      this.popup.remove();
      this.popup = null;
      this.textarea.removeAttribute("aria-activedescendant");
      this.textarea.setAttribute("aria-expanded", "false");
    }
  }

  accept(item) {
    if (!item) return;
    const ta = this.textarea;
    ta.setSelectionRange(this.ctx.start, this.ctx.pos);
    const text = this.ctx.kind === "declare" ? `${item.prefix}: <${item.ns}>` : `${item.prefix}:`;
    document.execCommand("insertText", false, text);
    this.closePopup();
    if (this.ctx.kind === "use") this.autoPrefix();
    this.render();
  }

  /** After "p:" with a known p that is not declared, add its PREFIX line at the top. */
  autoPrefix() {
    const ta = this.textarea;
    const pos = ta.selectionStart;
    const before = ta.value.slice(0, pos);
    const m = before.match(/(?:^|[\s{}()\[\];,.^/|!=*+])([A-Za-z][\w-]*):$/);
    if (!m) return;
    const p = m[1];
    if (/\bPREFIX\s+[\w-]*:$/i.test(before)) return;
    if (!(p in KNOWN_PREFIXES) || p in declaredPrefixes(ta.value)) return;
    // inside an IRI or a string? leave it
    const toks = tokenize(before);
    const last = toks[toks.length - 1];
    if (last && (last.kind === "iri" || last.kind === "string" || last.kind === "comment")) return;
    const line = `PREFIX ${p}: <${KNOWN_PREFIXES[p]}>\n`;
    // after the existing PREFIX lines at the top
    const head = ta.value.match(/^(?:\s*(?:#[^\n]*|PREFIX\s+[^\n]*|BASE\s+[^\n]*)\n)*/i)[0];
    ta.setSelectionRange(head.length, head.length);
    document.execCommand("insertText", false, line);
    ta.setSelectionRange(pos + line.length, pos + line.length);
  }
}
