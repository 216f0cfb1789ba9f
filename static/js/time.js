// Event time. The API's timestamps are integers in epoch milliseconds. A stream fed with
// wall-clock times (the demo, a pipeline) is shown as times of day; one fed with small
// values (a test, the README's example posting t = 1000, 2000, ...) is not wall-clock: its
// times are shown as the time since t = 0, without a 1970 date, and a "lag" behind the
// server's clock (which would be decades) is not shown for it.

export const UNIT = "epoch milliseconds";

/** 2001-09-09 (1e12 ms): event times before it are taken as relative, not wall-clock. */
const WALL_CLOCK_FROM = 1e12;

export function isWallClock(ms) {
  return typeof ms === "number" && ms >= WALL_CLOCK_FROM;
}

/** A relative event time: "0 s", "5 s", "1.25 s", "750 ms", "2 h 5 min 3 s". */
export function fmtSinceZero(ms) {
  if (!Number.isFinite(ms)) return "–";
  const neg = ms < 0 ? "−" : "";
  ms = Math.abs(ms);
  if (ms < 1000) return `${neg}${ms} ms`;
  if (ms < 60000) return `${neg}${+(ms / 1000).toFixed(3)} s`;
  const h = Math.floor(ms / 3600000);
  const m = Math.floor((ms % 3600000) / 60000);
  const s = +((ms % 60000) / 1000).toFixed(3);
  return neg + [h ? `${h} h` : "", m ? `${m} min` : "", s ? `${s} s` : ""].filter(Boolean).join(" ");
}

/** An instant in a list or an axis: a time of day (UTC offset of the browser) or "t=5 s". */
export function fmtInstant(ms) {
  if (ms === null || ms === undefined) return "–";
  if (!isWallClock(ms)) return `t=${fmtSinceZero(ms)}`;
  const d = new Date(ms);
  const t = d.toLocaleTimeString("en-GB", { hour12: false });
  return d.getMilliseconds() ? `${t}.${String(d.getMilliseconds()).padStart(3, "0")}` : t;
}

/** An instant with its date (wall-clock), or the relative form. */
export function fmtEventTime(ms) {
  if (ms === null || ms === undefined) return "–";
  if (!isWallClock(ms)) return `t=${fmtSinceZero(ms)}`;
  const d = new Date(ms);
  return `${d.toLocaleDateString("en-CA")} ${d.toLocaleTimeString([], { hour12: false })}`;
}

/** A tooltip for an event time: the raw value and its unit. */
export function rawTitle(ms) {
  if (ms === null || ms === undefined) return "";
  return `${ms} (${UNIT})${isWallClock(ms) ? "" : ": not wall-clock time, shown as the time since t = 0"}`;
}
