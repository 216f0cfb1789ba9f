// Query history (this browser's localStorage, newest first) and shareable links: a URL
// whose fragment holds the text (`/#query=<text>` fills the Query editor, `/#register=<text>`
// the registration form). A fragment never reaches the server, nor its logs.

const KEY = "jindou.history";
const MAX = 50;

export function loadHistory() {
  try {
    const v = JSON.parse(localStorage.getItem(KEY) || "[]");
    return Array.isArray(v) ? v.filter((e) => e && typeof e.text === "string") : [];
  } catch {
    return [];
  }
}

/** Remember ``text`` (moved to the top when already there); tells the page with an event. */
export function addHistory(text, kind = "query") {
  if (!text || !text.trim()) return;
  const list = loadHistory().filter((e) => e.text !== text);
  list.unshift({ text, kind, at: Date.now() });
  try {
    localStorage.setItem(KEY, JSON.stringify(list.slice(0, MAX)));
  } catch {
    /* storage full or disabled: no history */
  }
  window.dispatchEvent(new CustomEvent("jindou-history"));
}

export function clearHistory() {
  try {
    localStorage.removeItem(KEY);
  } catch { /* nothing kept */ }
  window.dispatchEvent(new CustomEvent("jindou-history"));
}

/** One line naming a history entry: its first line that is not a PREFIX/BASE/comment line. */
export function summary(text, max = 70) {
  const lines = text.split("\n").map((l) => l.trim()).filter(Boolean);
  const main = lines.find((l) => !/^(PREFIX|BASE)\b/i.test(l) && !l.startsWith("#")) || lines[0] || "";
  return main.length > max ? `${main.slice(0, max - 1)}…` : main;
}

/** The link that opens this page with ``text`` in the editor of ``target`` ("query" or "register"). */
export function shareLink(target, text) {
  return `${location.origin}${location.pathname}#${target}=${encodeURIComponent(text)}`;
}

/** Show ``url`` in the read-only field of ``bar`` and try to copy it to the clipboard. */
export async function offerLink(bar, url) {
  const input = bar.querySelector("input");
  const note = bar.querySelector(".share-note");
  bar.hidden = false;
  input.value = url;
  input.focus();
  input.select();
  try {
    await navigator.clipboard.writeText(url);
    note.textContent = "Link copied.";
  } catch {
    note.textContent = "Copy the link from the field.";
  }
}
