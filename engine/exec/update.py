"""SPARQL 1.1 Update execution onto ``Store.commit``.

A request is atomic: its operations run in order against a private *working*
view of the store (per graph ``GraphIndex.apply`` of the changes so far, so
each operation sees the effect of the previous ones), while the net effect is
accumulated per graph (rows added, rows removed, dropped/created). Only when
every operation succeeded is one ``Changes`` committed through
:func:`engine.io.ingest.apply` (with the request's deadline and commit gate);
an error leaves the store untouched. New terms are interned in the shared
(append-only) dictionary by :func:`engine.io.ingest.intern_keys`, under the
store's write lock, which the caller holds for the whole request.

LOAD reads only local files (``file:`` IRIs or plain paths) and only when the
database allows it; otherwise it is an error, or a no-op with SILENT.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np

from engine.arrays import unique
from engine.errors import JindouError, QueryTimeout, UpdateError
from engine.exec.bindings import UNBOUND, Bindings
from engine.exec.context import LOCAL_BASE
from engine.exec.evaluate import Evaluator, QueryContext, make_dataset
from engine.io import ingest
from engine.kv.store import Changes
from engine.plan.rewrite import rewrite
from engine.sparql import algebra as A

_NO_ROWS = np.zeros((0, 3), dtype=np.int64)


def _rows(m) -> np.ndarray:
    m = np.asarray(m, dtype=np.int64)
    return m.reshape(-1, 3)


def _present(g, rows: np.ndarray) -> np.ndarray:
    """Which (s, p, o) rows graph ``g`` holds (one vectorized test per predicate)."""
    present = np.zeros(len(rows), dtype=bool)
    for pid in unique(rows[:, 1]).tolist():
        sel = np.flatnonzero(rows[:, 1] == pid)
        present[sel] = g.contains(pid, rows[sel, 0], rows[sel, 2])
    return present


def _unique_rows(m: np.ndarray) -> np.ndarray:
    if len(m) <= 1:
        return m
    return np.unique(m, axis=0)


def _row_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows of a not in b."""
    if len(a) == 0 or len(b) == 0:
        return a
    bv = np.ascontiguousarray(b).view([("", np.int64)] * 3).reshape(-1)
    av = np.ascontiguousarray(a).view([("", np.int64)] * 3).reshape(-1)
    return a[~np.isin(av, bv)]


class _GraphState:
    """Net change of one graph during the request."""

    __slots__ = ("dropped", "added", "removed")

    def __init__(self):
        self.dropped = False
        self.added = _NO_ROWS
        self.removed = _NO_ROWS


class WorkingView:
    """Snapshot-like view (dictionary, default, named, graph()) of the store
    with the request's changes so far applied."""

    def __init__(self, snapshot, empty_graph_factory):
        self.base = snapshot
        self.sn = snapshot.sn
        self.dictionary = snapshot.dictionary
        self.default = snapshot.default
        self.named = dict(snapshot.named)
        self._empty = empty_graph_factory
        self.state: dict[int | None, _GraphState] = {}
        self.created: set[int] = set()
        self.removed_graphs: set[int] = set()

    def graph(self, gid):
        if gid is None:
            return self.default
        g = self.named.get(gid)
        return g if g is not None else self._empty()

    def exists(self, gid) -> bool:
        return gid is None or gid in self.named

    def _set(self, gid, g):
        if gid is None:
            self.default = g
        else:
            self.named[gid] = g

    def _st(self, gid) -> _GraphState:
        st = self.state.get(gid)
        if st is None:
            st = self.state[gid] = _GraphState()
        return st

    def create(self, gid: int):
        if gid not in self.named:
            self.named[gid] = self._empty()
            self.created.add(gid)
            self.removed_graphs.discard(gid)

    def clear(self, gid):
        st = self._st(gid)
        st.dropped = True
        st.added = _NO_ROWS
        st.removed = _NO_ROWS
        if gid is None or gid in self.named:
            self._set(gid, self._empty())

    def drop(self, gid):
        self.clear(gid)
        if gid is not None:
            self.named.pop(gid, None)
            self.created.discard(gid)
            self.removed_graphs.add(gid)

    def remove(self, gid, rows: np.ndarray):
        if len(rows) == 0 or not self.exists(gid):
            return
        g = self.graph(gid)
        rows = _unique_rows(rows)
        rows = rows[_present(g, rows)]
        if len(rows) == 0:
            return
        self._set(gid, g.apply(rows, None))
        st = self._st(gid)
        in_added = _row_diff(rows, _row_diff(rows, st.added)) if len(st.added) else _NO_ROWS
        st.added = _row_diff(st.added, rows)
        rest = _row_diff(rows, in_added)
        if len(rest):
            st.removed = _unique_rows(np.concatenate([st.removed, rest]))

    def add(self, gid, rows: np.ndarray):
        if len(rows) == 0:
            return
        if gid is not None and gid not in self.named:
            self.create(gid)
        g = self.graph(gid)
        rows = _unique_rows(rows)
        rows = rows[~_present(g, rows)]
        if len(rows) == 0:
            return
        self._set(gid, g.apply(None, rows))
        st = self._st(gid)
        was_removed = _row_diff(rows, _row_diff(rows, st.removed)) if len(st.removed) else _NO_ROWS
        st.removed = _row_diff(st.removed, rows)
        rest = _row_diff(rows, was_removed)
        if len(rest):
            st.added = _unique_rows(np.concatenate([st.added, rest]))

    def changes(self) -> Changes:
        ch = Changes()
        for gid, st in self.state.items():
            if st.dropped:
                ch.drop.add(gid)
            if len(st.removed) and not st.dropped:
                ch.remove[gid] = st.removed
            if len(st.added):
                ch.add[gid] = st.added
        for gid in self.removed_graphs:
            if gid in self.base.named:
                ch.drop.add(gid)
        for gid in list(self.named):
            if gid not in self.base.named or (gid in ch.drop):
                ch.create.add(gid)
        return ch

    @property
    def dirty(self) -> bool:
        return bool(self.state or self.created or self.removed_graphs)


class UpdateExecutor:
    def __init__(self, store, *, base=None, using=(), using_named=(), allow_load=False, timeout=None,
                 max_rows=None, empty_graph=None, deadline=None, may_commit=None):
        self.store = store
        # one deadline (time.monotonic()) for the whole request, else ``timeout`` from now
        self.deadline = deadline if deadline is not None else (time.monotonic() + timeout if timeout else None)
        self.may_commit = may_commit  # asked once before committing: False = the caller gave up
        self.base = base
        self.using = tuple(using)
        self.using_named = tuple(using_named)
        self.allow_load = allow_load
        self.timeout = timeout
        self.max_rows = max_rows
        self.view = WorkingView(store.snapshot(), empty_graph)
        self.dictionary = store.dictionary

    # ---- ids
    def gid(self, iri: str, create: bool = False) -> int:
        return ingest.graph_id(self.store, iri, create)

    def encode(self, keys: list[str]) -> np.ndarray:
        return ingest.intern_keys(self.store, keys)

    def target_gids(self, target: A.GraphTarget) -> list:
        if target.kind == "DEFAULT":
            return [None]
        if target.kind == "NAMED":
            return list(self.view.named)
        if target.kind == "ALL":
            return [None, *self.view.named]
        gid = self.gid(target.iri)
        return [gid] if gid >= 0 else [("absent", target.iri)]

    def check(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise QueryTimeout(f"update exceeded its timeout of {self.timeout} s")

    # ---- driver
    def run(self, update: A.Update):
        for op in update.operations:
            self.check()
            try:
                self.apply(op)
            except QueryTimeout:
                raise  # SILENT does not hide running out of time
            except JindouError:
                if getattr(op, "silent", False):
                    continue
                raise
        if not self.view.dirty:
            return None
        return ingest.apply(self.store, self.view.changes(), deadline=self.deadline, may_commit=self.may_commit,
                            timeout=self.timeout)

    def apply(self, op):
        meth = getattr(self, "_" + type(op).__name__)
        meth(op)

    # ---- data operations
    def _ground_rows(self, quads, fresh_bnodes: bool) -> dict:
        labels: dict[str, str] = {}
        by_graph: dict = {}
        for i, q in enumerate(quads):
            if not i & 4095:
                self.check()
            keys = []
            for t in (q.s, q.p, q.o):
                k = t.key
                if fresh_bnodes and k.startswith("_:"):
                    k = labels.setdefault(k, "_:u" + uuid.uuid4().hex)
                keys.append(k)
            g = None if q.g is None else q.g.key[1:-1]
            by_graph.setdefault(g, []).append(keys)
        return by_graph

    def _InsertData(self, op: A.InsertData):
        for g, rows in self._ground_rows(op.quads, True).items():
            gid = None if g is None else self.gid(g, create=True)
            flat = [k for r in rows for k in r]
            self.view.add(gid, _rows(self.encode(flat)))

    def _DeleteData(self, op: A.DeleteData):
        for g, rows in self._ground_rows(op.quads, False).items():
            gid = None if g is None else self.gid(g)
            if g is not None and gid < 0:
                continue
            flat = [k for r in rows for k in r]
            ids = np.asarray(self.dictionary.lookup_many(flat), dtype=np.int64).reshape(-1, 3)
            ids = ids[(ids >= 0).all(axis=1)]
            self.view.remove(gid, ids)

    def _Modify(self, op: A.Modify):
        view = self.view
        ctx = QueryContext(view, base=self.base, timeout=self.timeout, max_rows=self.max_rows)
        ctx.deadline = self.deadline
        using = self.using or op.using
        using_named = self.using_named or op.using_named
        if self.using or self.using_named:
            using, using_named = self.using, self.using_named
        if using or using_named:
            ds = make_dataset(ctx, using, using_named)
        elif op.with_iri is not None:
            ds = make_dataset(ctx)
            gid = ctx.lookup("<" + op.with_iri + ">")
            ds.default = view.named[gid] if gid >= 0 and gid in view.named else view.graph(-2)
            ds.key = ("with", op.with_iri)
        else:
            ds = make_dataset(ctx)
        ev = Evaluator(ctx, ds)
        sol = ev.eval(rewrite(op.where))
        with_gid = None
        if op.with_iri is not None:
            with_gid = ("iri", op.with_iri)
        deletes = self._instantiate(op.delete, sol, ctx, with_gid, insert=False)
        inserts = self._instantiate(op.insert, sol, ctx, with_gid, insert=True)
        for gid, rows in deletes.items():
            self.check()
            view.remove(gid, rows)
        for gid, rows in inserts.items():
            self.check()
            view.add(gid, rows)

    def _instantiate(self, quads, sol: Bindings, ctx: QueryContext, with_gid, insert: bool) -> dict:
        out: dict = {}
        n = sol.n
        if n == 0 or not quads:
            return out
        bnodes: dict[str, np.ndarray] = {}
        for q in quads:
            self.check()
            cols = []
            for t in (q.s, q.p, q.o):
                if isinstance(t, A.Var):
                    cols.append(sol.col(t.name))
                elif t.key.startswith("_:") and insert:
                    b = bnodes.get(t.key)
                    if b is None:
                        tag = "_:u" + uuid.uuid4().hex + "x"
                        b = bnodes[t.key] = self.encode([f"{tag}{i}" for i in range(n)])
                    cols.append(b)
                else:
                    cols.append(np.full(n, ctx.term_id(t.key), dtype=np.int64))
            if q.g is None:
                gcol = None if with_gid is None else np.full(n, ctx.term_id("<" + with_gid[1] + ">"), np.int64)
            elif isinstance(q.g, A.Var):
                gcol = sol.col(q.g.name)
            else:
                gcol = np.full(n, ctx.term_id(q.g.key), dtype=np.int64)
            s, p, o = cols
            ok = (s != UNBOUND) & (p != UNBOUND) & (o != UNBOUND)
            if gcol is not None:
                ok &= gcol != UNBOUND
            ks = ctx.kinds(np.where(ok, s, 0))
            kp = ctx.kinds(np.where(ok, p, 0))
            ok &= ((ks == 0) | (ks == 1)) & (kp == 0)
            if gcol is not None:
                kg = ctx.kinds(np.where(ok, gcol, 0))
                ok &= kg == 0
            idx = np.flatnonzero(ok)
            if len(idx) == 0:
                continue
            m = np.stack([s[idx], p[idx], o[idx]], axis=1)
            g = gcol[idx] if gcol is not None else None
            m, g = self._to_store_ids(m, g, ctx, insert)
            if len(m) == 0:
                continue
            if g is None:
                out.setdefault(None, []).append(m)
            else:
                for gid in unique(g).tolist():
                    out.setdefault(int(gid), []).append(m[g == gid])
        return {k: np.concatenate(v) for k, v in out.items()}

    def _to_store_ids(self, m: np.ndarray, g, ctx, insert: bool):
        """Map query-local ids to store ids (interning them on insert; rows
        with terms the store does not hold cannot be deleted)."""
        local = m >= LOCAL_BASE
        glocal = (g >= LOCAL_BASE) if g is not None else None
        if not local.any() and (glocal is None or not glocal.any()):
            return m, g
        if not insert:
            keep = ~local.any(axis=1)
            if glocal is not None:
                keep &= ~glocal
            return m[keep], (g[keep] if g is not None else None)
        m = m.copy()
        flat = m.reshape(-1)
        li = np.flatnonzero(flat >= LOCAL_BASE)
        flat[li] = self.encode(ctx.keys(flat[li]))
        if glocal is not None and glocal.any():
            g = g.copy()
            gi = np.flatnonzero(glocal)
            g[gi] = self.encode(ctx.keys(g[gi]))
        return m, g

    # ---- graph management
    def _Clear(self, op: A.Clear):
        for gid in self.target_gids(op.target):
            if isinstance(gid, tuple):
                if op.silent:
                    continue
                raise UpdateError(f"graph <{gid[1]}> does not exist")
            if gid is not None and gid not in self.view.named:
                if op.silent:
                    continue
                raise UpdateError(f"graph <{op.target.iri}> does not exist")
            self.view.clear(gid)

    def _Drop(self, op: A.Drop):
        for gid in self.target_gids(op.target):
            if isinstance(gid, tuple) or (gid is not None and gid not in self.view.named):
                if op.silent:
                    continue
                raise UpdateError(f"graph <{op.target.iri}> does not exist")
            self.view.drop(gid)

    def _Create(self, op: A.Create):
        gid = self.gid(op.iri, create=True)
        if gid in self.view.named:
            if op.silent:
                return
            raise UpdateError(f"graph <{op.iri}> already exists")
        self.view.create(gid)

    def _graph_rows(self, gid) -> np.ndarray:
        s, p, o = self.view.graph(gid).scan_all()
        return np.stack([np.asarray(s, np.int64), np.asarray(p, np.int64), np.asarray(o, np.int64)], axis=1)

    def _Transfer(self, op: A.Transfer):
        src = self.target_gids(op.source)[0]
        dst_t = op.target
        if isinstance(src, tuple) or (src is not None and src not in self.view.named):
            if op.silent:
                return
            raise UpdateError(f"source graph <{op.source.iri}> does not exist")
        dst = None if dst_t.kind == "DEFAULT" else self.gid(dst_t.iri, create=True)
        if src == dst:
            return
        rows = self._graph_rows(src)
        if op.op in ("MOVE", "COPY"):
            if dst is None or dst in self.view.named:
                self.view.clear(dst)
            if dst is not None:
                self.view.create(dst)
        elif dst is not None:
            self.view.create(dst)
        self.view.add(dst, rows)
        if op.op == "MOVE":
            if src is None:
                self.view.clear(None)
            else:
                self.view.drop(src)

    def _Load(self, op: A.Load):
        if not self.allow_load:
            raise UpdateError("LOAD is disabled on this server")
        src = op.source
        u = urlparse(src)
        if u.scheme == "file":
            path = Path(unquote(u.path))
        elif u.scheme == "":
            path = Path(src)
        else:
            raise UpdateError(f"LOAD only reads local files (file: IRIs), not <{src}>")
        if not path.is_file():
            raise UpdateError(f"LOAD: no such file {path}")
        try:
            # every statement goes to the target graph (quads lose their graph)
            rows, _, _ = ingest.read(self.store, str(path), base=src)
        except JindouError:
            raise
        except Exception as e:  # noqa: BLE001 - any parser failure is a load error
            raise UpdateError(f"LOAD of <{src}> failed: {e}") from e
        gid = None if op.into is None else self.gid(op.into, create=True)
        if gid is not None:
            self.view.create(gid)
        self.view.add(gid, rows)
