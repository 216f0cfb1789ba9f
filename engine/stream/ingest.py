"""Ingestion: a POST's elements become a transient-store batch (and absorbed store triples).

The path of every ingest call (ndjson, Arrow, a graph, a heartbeat), on the caller's (HTTP
worker) thread, kept short:

1. a batch id the ledger holds for the stream answers ``duplicate`` at once (nothing parsed);
2. parse (:mod:`engine.stream.adaptor`; blank node labels scoped to the POST, like a loaded
   file); a flood of late elements is refused before interning;
3. intern the terms in the store's dictionary (:func:`engine.io.ingest.intern`, the one write
   path's: each distinct key of a dictionary column once);
4. under the stream's lock: admit the timestamps (:class:`~engine.stream.progress.StreamClock`:
   late elements become per-line errors), append one batch to the stream's transient store,
   absorb its timeless triples (:func:`engine.stream.absorb.absorb`, one store commit per POST,
   so every element is atomic for one-shot queries), journal it (with ``--data-dir``,
   :mod:`engine.stream.window_journal`, so windows survive a restart), record the batch id;
5. only then *publish* the new progress and wake the scheduler: an instant never fires before
   its data is readable.

A :class:`~engine.stream.transient.TransientStoreFull` during a POST (budget exhausted even after
GC) stores nothing of it and propagates (kind ``backpressure``); the stream's progress stays as
it was before the POST.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.io import ingest as write_path
from engine.stream import maintained, pred_times
from engine.stream.absorb import AbsorbLog, absorb, commit_absorbed
from engine.stream.adaptor import ParsedLines, parse_graph, split_elements, timeless_mask
from engine.stream.ledger import BatchLedger, check_batch_id, duplicate
from engine.stream.limits import MAX_BAD_LINES, BadRequest, TooManyBadLines, check_time
from engine.stream.progress import ARRIVAL, LateElementError
from engine.stream.registry import Registry, StreamEntry
from engine.stream.transient import TransientStoreFull
from engine.stream.window_journal import WindowJournal

__all__ = ["Ingestor"]

log = logging.getLogger("jindou.stream")


class Ingestor:
    """The ingestion path of one manager (thread-safe: one stream's batches are serialized by
    the stream's lock, interning by the store's write lock)."""

    def __init__(self, db, reg: Registry, ledger: BatchLedger, absorb_log: AbsorbLog, now_ms: Callable[[], int],
                 journal: WindowJournal | None = None):
        self.db = db
        self.reg = reg
        self.ledger = ledger
        self.absorb_log = absorb_log
        self._now = now_ms
        self.journal = journal

    def _published(self, st: StreamEntry) -> None:
        self.reg.publish(st)
        self.reg.progress_changed()

    # -- one batch -----------------------------------------------------------------
    def store_batch(self, st: StreamEntry, rows: np.ndarray, tau: np.ndarray,
                    mark: tuple[int, int] | None = None, keys=None, batch_id: str | None = None,
                    outcome: tuple[int, int] | None = None) -> bool:
        """Caller holds ``st.lock``: append to the transient store (and its journal: ``keys``
        are the s, p, o key columns of ``rows``; the record carries the POST's ``batch_id`` and
        its (accepted, rejected) ``outcome``, see :meth:`replay_windows`), absorb the timeless part.

        Returns whether timeless triples were committed to the store."""
        if len(rows) == 0:
            return False
        tm = timeless_mask(rows[:, 1], st.absorb, st.absorb_pids)
        if tm.any():
            self.db.store.snapshot()  # a down store worker refuses the batch before anything changes
        seq0 = st.store.end_seq
        st.store.append_rows(rows, tau)
        # indexed before the progress is published (relevance checks), from the batch in hand
        pred_times.note(st.store, rows[:, 1], tau)
        # joined into the maintained results of the queries reading the stream (their next instant's)
        maintained.note(st.store, seq0, rows, tau)
        journal = self.journal if keys is not None else None
        st.batches += 1
        st.elements += len(split_elements(tau))
        origin = {st.name: st.batches}  # a cluster advances its workers' vector timestamps by it
        if not tm.any():
            if journal is not None:
                journal.record(st.name, keys, tau, st.store.freed_tau, None, batch_id, outcome)
            return False
        recorded = None
        if journal is not None:
            def recorded(new: np.ndarray, sn: int) -> None:   # the batch with its absorb record, before the commit
                flags = np.zeros(len(rows), dtype=bool)
                flags[tm] = new
                journal.record(st.name, keys, tau, st.store.freed_tau, pa.array(flags, mask=~tm), batch_id, outcome,
                               sn)
        if tm.all():
            absorb(self.db.store, self.absorb_log, rows, tau, mark, origin, recorded)
        else:
            absorb(self.db.store, self.absorb_log, rows[tm], tau[tm], mark, origin, recorded)
        return True

    @staticmethod
    def late_mask(t: np.ndarray, p0: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(late rows, progress each row sees) by the progress rules from ``p0``."""
        n = len(t)
        seen = np.empty(n, dtype=np.int64)
        seen[0] = np.iinfo(np.int64).min if p0 is None else p0
        if n > 1:
            np.maximum.accumulate(t[:-1], out=seen[1:])
            np.maximum(seen[1:], seen[0], out=seen[1:])
        return t < seen, seen

    @staticmethod
    def check_late(parsed: ParsedLines, p0: int | None) -> None:
        """Raise TooManyBadLines when bad lines plus late elements (at least those late against
        ``p0``; progress only grows) exceed the limit."""
        late, seen = Ingestor.late_mask(parsed.t, p0)
        n_late = int(np.count_nonzero(late))
        if n_late + len(parsed.errors) > MAX_BAD_LINES:
            i = int(np.argmax(late)) if n_late else 0
            first = parsed.errors[0] if parsed.errors else {
                "line": int(parsed.line[i]),
                "error": f"late element: timestamp {int(parsed.t[i])} is below the stream's progress {int(seen[i])}"}
            raise TooManyBadLines(n_late + len(parsed.errors), first)

    def admit_rows(self, st: StreamEntry, parsed: ParsedLines, rows: np.ndarray,
                   mark: tuple[int, int] | None = None, batch_id: str | None = None) -> dict:
        """Caller holds ``st.lock``: progress rules per row, then one transient-store batch.

        A :class:`TransientStoreFull` stores nothing, counts the rows as rejected, leaves the
        stream's progress as it was and propagates."""
        errors = list(parsed.errors)
        n = len(parsed)
        saved = st.sclock.save()
        if st.clock == ARRIVAL:
            stamps, mask, _ = st.sclock.assign(n=n)
        else:
            stamps = parsed.t
            p0 = st.sclock.peek()
            mask, _ = st.sclock.admit(stamps)
            if not mask.all() and len(errors) + n - int(np.count_nonzero(mask)) > MAX_BAD_LINES:
                st.sclock.rollback(saved)
                self.check_late(parsed, p0)   # raises, naming the first bad line
                raise TooManyBadLines(None, None)
            if not mask.all():
                seen = np.empty(n, dtype=np.int64)
                seen[0] = np.iinfo(np.int64).min if p0 is None else p0
                if n > 1:
                    np.maximum.accumulate(stamps[:-1], out=seen[1:])
                    np.maximum(seen[1:], seen[0], out=seen[1:])
                for i in np.flatnonzero(~mask).tolist():
                    errors.append({"line": int(parsed.line[i]),
                                   "error": f"late element: timestamp {int(stamps[i])} is below the "
                                            f"stream's progress {int(seen[i])}"})
        acc = int(np.count_nonzero(mask))
        stored = absorbed = False
        try:
            keys = (parsed.s, parsed.p, parsed.o)
            outcome = (acc, len(errors))
            if acc == n:
                absorbed = self.store_batch(st, rows, np.asarray(stamps, dtype=np.int64), mark, keys,
                                            batch_id, outcome)
            else:
                kept = pa.array(mask)
                absorbed = self.store_batch(st, rows[mask], np.asarray(stamps, dtype=np.int64)[mask], mark,
                                            tuple(k.filter(kept) for k in keys), batch_id, outcome)
            stored = True
        finally:
            if not stored:
                st.sclock.rollback(saved)
            st.accepted += acc if stored else 0
            st.rejected += len(errors) + (0 if stored else acc)
            self._published(st)
        if len(errors) > 1:
            errors.sort(key=lambda e: e["line"])
        return {"accepted": acc, "rejected": len(errors), "errors": errors, "progress": st.sclock.peek(),
                "_absorbed": absorbed}

    # -- the ingestion paths ---------------------------------------------------------
    def ingest(self, name: str, batch_id, parse: Callable[[StreamEntry, str], ParsedLines]) -> dict:
        """The shared ingestion path (ndjson and Arrow): parse, intern, admit, store, publish."""
        batch_id = check_batch_id(batch_id)
        st = self.reg.stream(name)
        dup = duplicate(self.ledger, st.name, batch_id, st.sclock.peek())   # a re-delivery interns nothing
        if dup is not None:
            return dup
        parsed = parse(st, write_path.bnode_prefix(self.db.store))
        if st.clock != ARRIVAL and len(parsed):   # refuse a flood of late elements before interning
            self.check_late(parsed, st.sclock.peek())
        iv = write_path.intern(self.db.store, parsed.s, parsed.p, parsed.o)
        rows, mark = iv.rows, (iv.first_new, iv.sn)   # mark: absorb()'s edge-test skip
        with st.lock:
            dup = duplicate(self.ledger, st.name, batch_id, st.sclock.peek())   # a concurrent delivery
            if dup is not None:
                return dup
            report = self.admit_rows(st, parsed, rows, mark, batch_id)
            if batch_id is not None:
                self.ledger.record(st.name, batch_id, durable=report.pop("_absorbed"),
                                   accepted=report["accepted"], rejected=report["rejected"])
                report["duplicate"] = False
                report["batch_id"] = batch_id
            else:
                report.pop("_absorbed")
        return report

    def ingest_graph(self, name: str, data: bytes, media_type: str, t: int | None,
                     batch_id: str | None = None) -> dict:
        """One RDF graph, all of it one element at ``t`` (epoch ms). An event-time stream needs
        ``t``: taking the wall clock instead would jump its progress to now and refuse the
        data's own times as late, so a missing ``t`` is a 400 that changes nothing; an
        arrival-clock stream stamps the element itself."""
        batch_id = check_batch_id(batch_id)
        st = self.reg.stream(name)
        if t is not None:
            t = check_time(t, "?t")
        elif st.clock != ARRIVAL:
            raise BadRequest(f"stream {st.name!r} takes event time: a graph body needs ?t=<event time, epoch "
                             "milliseconds> (or register the stream with \"clock\": \"arrival\")")
        dup = duplicate(self.ledger, st.name, batch_id, st.sclock.peek())
        if dup is not None:
            return dup
        prefix = write_path.bnode_prefix(self.db.store)
        pk = parse_graph(data, media_type, bnode_prefix=prefix)   # LoadError: nothing stored
        iv = write_path.intern(self.db.store, pk.s, pk.p, pk.o)
        rows, mark = iv.rows, (iv.first_new, iv.sn)
        n = len(rows)
        with st.lock:
            dup = duplicate(self.ledger, st.name, batch_id, st.sclock.peek())
            if dup is not None:
                return dup
            saved = st.sclock.save()
            if st.clock == ARRIVAL:
                stamps, _, _ = st.sclock.assign(n=1)
                tau = int(stamps[0])
            else:
                tau = int(t)
                try:
                    st.sclock.check(np.asarray([tau], dtype=np.int64))
                except LateElementError:
                    st.rejected += max(1, n)
                    raise
            stored = absorbed = False
            try:
                absorbed = self.store_batch(st, rows, np.full(n, tau, dtype=np.int64), mark, (pk.s, pk.p, pk.o),
                                            batch_id, (n, 0))
                stored = True
            finally:
                if stored:
                    st.accepted += n
                else:
                    st.sclock.rollback(saved)
                    st.rejected += n
                self._published(st)
            progress = st.sclock.peek()
            report = {"accepted": n, "rejected": 0, "errors": [], "progress": progress}
            if batch_id is not None:
                self.ledger.record(st.name, batch_id, durable=absorbed, accepted=n, rejected=0)
                report.update(duplicate=False, batch_id=batch_id)
        return report

    def heartbeat(self, name: str, t: int) -> int:
        """Raise the stream's progress to ``t``; a time outside the contract's range raises
        :class:`~engine.stream.limits.BadTimestamp` and changes nothing."""
        st = self.reg.stream(name)
        t = check_time(t, "heartbeat t")
        with st.lock:
            if st.clock == ARRIVAL:
                p = st.sclock.tick()
            else:
                p = st.sclock.heartbeat(int(t))
            self.reg.publish(st)
        self.reg.progress_changed()
        return p

    # -- restart ---------------------------------------------------------------------
    def replay_windows(self) -> None:
        """Read every stream's journal back into its transient store (at start, before the
        first instant is evaluated). A stream's progress is raised to its last replayed element
        (the registry's saved progress may be older than a crash). A replayed batch's id is
        recorded in the ledger if it is missing there (a crash between the journal's record and
        the ledger's line, or a ledger write that failed): its re-delivery is then a duplicate,
        not a second copy of the elements at the stream's progress. (An id the ledger's bound had
        evicted comes back as a recent one: its batch is still in the windows, so it is recent.)
        An absorbing batch whose record names a store commit the persistent store does not have
        (a crash between the record and the commit) commits its timeless rows now: the batch id
        said it was delivered, so the store must hold them.
        A journal that no longer fits the window budget is replayed up to that point (logged)."""
        if self.journal is None:
            return
        store = self.db.store
        # a persistent store held every commit numbered up to its snapshot number at open (later
        # ones may be this start's --data loads); an absorbing record naming a later one was cut
        # off before its commit: replayed, it commits its rows. (A cluster's coordinator does not
        # say which number it opened at: its replay does not complete commits.)
        durable_sn = getattr(store, "opened_sn", None) if getattr(store, "data_dir", None) is not None else None
        completed = 0
        top = 0   # the largest blank-node load id replayed (see _bump_load_ids)
        with self.reg.cv:
            streams = list(self.reg.streams.values())
        for st in streams:
            n = 0
            try:
                for b in self.journal.replay(st.name):
                    iv = write_path.intern(self.db.store, b.s, b.p, b.o)
                    top = max(top, _max_load_id(b.s), _max_load_id(b.o))
                    with st.lock:
                        st.store.append_rows(iv.rows, b.t)
                        pred_times.note(st.store)
                        if b.absorbed is not None:   # the absorb records: the store already holds the rows
                            held = b.absorbed.is_valid().to_numpy(zero_copy_only=False)
                            new = b.absorbed.fill_null(False).to_numpy(zero_copy_only=False)
                            self.absorb_log.add(b.t[held], iv.rows[held], new[held])
                            if durable_sn is not None and b.commit_sn is not None and b.commit_sn > durable_sn:
                                with store.write_lock:
                                    commit_absorbed(store, iv.rows[held], {st.name: 1})
                                completed += 1
                        if st.clock != ARRIVAL:
                            st.sclock.heartbeat(int(b.t[-1]))
                    if b.batch_id is not None and not self.ledger.seen(st.name, b.batch_id):
                        acc, rej = b.outcome if b.outcome is not None else (None, None)
                        self.ledger.record(st.name, b.batch_id, accepted=acc, rejected=rej)
                    n += len(b.t)
            except (TransientStoreFull, ValueError) as exc:
                log.warning("stream %r: window journal replayed up to %d triples: %s", st.name, n, exc)
            if n:
                with st.lock:
                    self.reg.publish(st)
                log.info("stream %r: %d triples of its windows restored from the journal", st.name, n)
        if completed:
            log.warning("%d absorbing batch(es) journaled before a crash had not reached the store: "
                        "committed now", completed)
        with store.write_lock:   # later POSTs must not reuse a replayed element's blank node labels
            store.load_counter = max(store.load_counter, top)


def _max_load_id(keys) -> int:
    """The largest ``n`` of blank-node keys ``_:L<n>x...`` (:func:`engine.io.ingest.bnode_prefix`)
    in a key column, 0 if none: the store's load counter is only saved with a commit, so a
    restarted server could hand out a replayed POST's prefix again."""
    m = pc.extract_regex(keys, r"^_:L(?P<n>[0-9]{1,18})x")
    ids = m.filter(m.is_valid()).field("n")
    if len(ids) == 0:
        return 0
    return int(pc.max(pc.cast(ids, pa.int64())).as_py())
