"""``Database``: the facade the HTTP layer, the CLI and the tests use.

* ``query`` parses and plans (:mod:`engine.plan`; the plan is cached with the
  parse, keyed by query text and base; a new text of a known *shape* - the
  same BGP with another subject/object constant - reuses that shape's
  compiled fast program with the constant swapped, see :meth:`shape_key`), takes the current snapshot
  (consistent reads while updates commit), builds the dataset (protocol
  ``default-graph-uri``/``named-graph-uri`` override ``FROM``/``FROM NAMED``)
  and executes the plan on the calling thread with a timeout and a row
  budget: the fast path's program when the planner chose one, else the
  operator tree. BGP step orders are cached per snapshot.
* ``explain`` returns the plan as JSON, optionally after running it with
  per-operator row counts and times (:mod:`engine.plan.explain`).
* ``update`` runs a whole SPARQL Update request atomically under the store's
  write lock (see :mod:`engine.exec.update`).
* ``load_file`` / ``load_data``, the Graph Store operations and updates write
  through :mod:`engine.io.ingest`, the one write path (parse -> intern -> apply).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict

import numpy as np

from engine.errors import JindouError, NotFound, QueryEvaluationError, QueryTimeout
from engine.exec.bgp import _ANY, _EXPAND, _MEMBER, _PRUNE, SMALL_ROWS, SmallBGP
from engine.exec.context import CELL, LOCAL_BASE, MemoryBudget, enter_budget, leave_budget, release_memory
from engine.exec.evaluate import (
    DatasetView,
    QueryContext,
    _evaluate_query,
    _GivenBGP,
    compile_fast,
    evaluate_query,
    make_dataset,
    project_lists,
    run_fast,
    run_fast_lists,
)
from engine.exec.result import QueryResult
from engine.io import ingest
from engine.kv import vertex_preds
from engine.kv.store import Changes, Store
from engine.plan.fast_tree import UnionProgram, compile_filtered, compile_union
from engine.plan.fast_tree import constants as filter_constants
from engine.plan.planner import QueryPlan, fast_shape, make_plan
from engine.plan.point import DESCRIBE_RESOURCES, DESCRIBE_ROWS, PointProgram, compile_point, describe_small
from engine.plan.rewrite import rewrite
from engine.settings import DEFAULTS
from engine.small_answers import OwnTemplate, SmallSelect, construct_triples, ordered_lists
from engine.sparql import normalize as norm
from engine.sparql import shapes
from engine.sparql.algebra import Const

_PARSE_CACHE_SIZE = 512
_PLAN_CACHE_SIZE = 4096
#: query texts longer than this are not cached (parsed and prepared forms):
#: 512 cached texts of megabytes would pin gigabytes
_CACHE_TEXT_MAX = 64 * 1024
#: no parse shape learned yet for a skeleton (see Database._parse_shaped)
_NO_SHAPE = object()
#: one text of the skeleton seen, none learned yet
_SEEN_ONCE = object()
#: after a query whose working set passed this, freed heap goes back to the OS
_TRIM_AFTER = 64 << 20



def _released(budget: MemoryBudget, run, *args):
    """``run(*args)``, then the freed heap given back when the query held more than
    ``_TRIM_AFTER`` bytes at its peak (also when it was refused)."""
    try:
        res = run(*args)
    except JindouError as e:
        # the frames of a refused query hold its intermediate tables: drop them
        # before giving the freed heap back
        err = e.with_traceback(None)
    else:
        err = None
    if budget.peak > _TRIM_AFTER:
        release_memory()
    if err is not None:
        raise err
    return res

class Database:
    #: which SERVICE endpoints queries may call (engine/exec/service.py; None: none; the server sets it)
    service_policy = None

    def __init__(self, shards: int = DEFAULTS.shards, data_dir: str | None = None,
                 query_timeout: float = DEFAULTS.query_timeout, max_rows: int = DEFAULTS.max_rows,
                 allow_load: bool = DEFAULTS.allow_load, query_memory: int = DEFAULTS.query_memory,
                 workers: int = DEFAULTS.workers, cluster: str | None = DEFAULTS.cluster,
                 cluster_transport: str = DEFAULTS.cluster_transport, cluster_exec: str = DEFAULTS.cluster_exec):
        if workers or cluster:
            from engine.cluster.coordinator import ClusterStore, read_cluster_file

            addresses = read_cluster_file(cluster) if cluster else None
            self.store = ClusterStore(workers=workers, addresses=addresses, transport=cluster_transport,
                                      data_dir=data_dir, exec_mode=cluster_exec)
        else:
            self.store = Store(shards=shards, data_dir=data_dir)
        #: the store answers lookups in this process: a tiny run needs no query deadline in its
        #: context (a cluster's lookups bound their waits for a worker by it: they enter it)
        self._local = not (workers or cluster)
        self.query_timeout = query_timeout
        self.max_rows = max_rows
        #: per-query memory budget in bytes (0 = unlimited): see engine.exec.context.MemoryBudget
        self.query_memory = query_memory
        self.allow_load = allow_load
        self._parse_cache: OrderedDict = OrderedDict()
        self._plan_cache: OrderedDict = OrderedDict()
        self._plan_sn = -1
        self._term_cache: dict[str, int] = {}
        self._prepared: dict = {}  # (text, base) -> QueryPlan
        self._prepared_shape: dict = {}  # (text, base) -> shape (_fast_shape_key) or None
        #: shape key -> (snapshot, graph, (program, slots), parameter id): one compiled
        #: fast program per query shape and snapshot, rebound for new constants
        self._shapes: dict = {}
        #: (skeleton, base) -> _Template (or None: that skeleton has none): texts of a
        #: known fast shape answered without parsing (see _template_hit)
        self._templates: dict = {}
        #: every template made (weakly): their memos of a snapshot's programs are dropped with it
        self._made_templates: weakref.WeakSet = weakref.WeakSet()
        #: (skeleton, base) -> engine.sparql.shapes.ParseShape (or None: none for that
        #: skeleton): texts that differ only in constants are rebound, not parsed
        self._parse_shapes: dict = {}
        self._norm_memo: tuple = (None, None)
        #: (shape key, constant id) -> (the shape's entry, its program rebound to that constant)
        self._rebound: dict = {}
        self._hit_memo: tuple = (None, None, None)
        self._snap_terms: QueryContext | None = None
        self._snap_terms_prev: QueryContext | None = None
        self._lock = threading.Lock()
        self.queries = 0
        self.updates = 0

    # ------------------------------------------------------------ parsing
    def _parse(self, text: str, base: str | None, deadline: float | None = None):

        k = (text, base)
        with self._lock:
            q = self._parse_cache.get(k)
            if q is not None:
                self._parse_cache.move_to_end(k)
                return q
        q = self._parse_shaped(text, base, deadline)
        if len(text) > _CACHE_TEXT_MAX:
            return q
        with self._lock:
            self._parse_cache[k] = q
            if len(self._parse_cache) > _PARSE_CACHE_SIZE:
                self._parse_cache.popitem(last=False)
        return q

    def _parse_shaped(self, text: str, base: str | None, deadline: float | None):
        """The parse of a text: from its skeleton's parse shape (the algebra rebound
        to its constants, :mod:`engine.sparql.shapes`) when one is known, else
        parsed (learning the skeleton's shape on the way)."""
        from engine.sparql.parser import parse_query  # noqa: PLC0415

        check = _deadline_check(deadline, self.query_timeout)
        n = self._normalized(text)
        if n is None:
            return parse_query(text, base, check=check)
        tk = (n[0], base)
        sh = self._parse_shapes.get(tk, _NO_SHAPE)
        if sh is not _NO_SHAPE and sh is not None and sh is not _SEEN_ONCE:
            q = sh.bind(n[1])
            if q is not None:
                return q
        q = parse_query(text, base, check=check)
        if sh is _NO_SHAPE or sh is _SEEN_ONCE:
            # learned at a skeleton's second text: a text seen once pays no probe parse
            sh = _SEEN_ONCE if sh is _NO_SHAPE else shapes.learn(text, n, q, lambda t: parse_query(t, base,
                                                                                                     check=check))
            with self._lock:
                if len(self._parse_shapes) >= _PARSE_CACHE_SIZE:
                    self._parse_shapes = {}
                self._parse_shapes[tk] = sh
        return q

    def _shaped_plan(self, text: str, base: str | None) -> QueryPlan | None:
        """The plan of a text of a known parse shape (see :meth:`_parse_shaped`)
        without parsing or rewriting it: the algebra and the planned tree of the
        shape's probe text with the text's constants (the rewrite looks only at
        node kinds, checked on the shape's first rebound text: its rebound tree
        must equal the rewrite of its algebra); the fast path's view is made
        afresh (it reads constants). None: parse and plan it."""
        n = self._normalized(text)
        if n is None:
            return None
        sh = self._parse_shapes.get((n[0], base))
        if sh is None or sh is _SEEN_ONCE:
            return None
        c = sh.consts(n[1])
        if c is None:
            return None
        q = sh.build(c)
        root_fn = sh.plan
        if root_fn is False:
            return None
        if root_fn is None:
            root_fn = shapes.rebinder(rewrite(sh.query.pattern), sh.probes)
            if root_fn is None or root_fn(c) != rewrite(q.pattern):
                sh.plan = False
                return None
            sh.plan = root_fn
        root = root_fn(c)
        return QueryPlan(q, root, fast_shape(q, root))

    def _plans(self, sn: int) -> dict:
        with self._lock:
            if sn > self._plan_sn:
                self._plan_cache = _BoundedDict(_PLAN_CACHE_SIZE)
                self._plan_sn = sn
            elif sn < self._plan_sn:
                return {}  # a query on an older snapshot: plan privately
            return self._plan_cache

    # ------------------------------------------------------------ queries
    def _prepare(self, text: str, base: str | None, deadline: float | None = None) -> QueryPlan:
        return self._prepare_shaped(text, base, deadline)[0]

    def _prepare_shaped(self, text: str, base: str | None, deadline: float | None = None) -> tuple:
        """(plan, shape) of a text: parsed and planned once per (text, base)."""
        k = (text, base)
        pq = self._prepared.get(k)  # lock-free hit: dict reads are atomic
        if pq is not None:
            return pq, self._prepared_shape.get(k)
        pq = self._shaped_plan(text, base)
        if pq is None:
            pq = make_plan(self._parse(text, base, deadline))
        shape = _shape_key(pq)
        if shape is not None:
            self._learn(text, base, pq, shape, deadline)
        if len(text) > _CACHE_TEXT_MAX:
            return pq, shape
        with self._lock:
            if len(self._prepared) >= _PARSE_CACHE_SIZE:
                self._prepared.clear()
                self._prepared_shape.clear()
            self._prepared_shape[k] = shape
            self._prepared[k] = pq
        return pq, shape

    def shape_key(self, text: str, base: str | None = None, deadline: float | None = None):
        """A hashable key shared by the queries that differ only in the one
        subject/object constant of a fast-path BGP (None for other queries):
        they cost alike and share one compiled program. Parses the text (cached;
        a syntax error raises as :meth:`query` would)."""
        k = (text, base)
        if k not in self._prepared:
            hit = self._template_hit(text, base)
            if hit is not None:
                self._hit_memo = (text, base, hit)  # the query that follows uses it
                return hit[0].key
        sh = self._prepare_shaped(text, base, deadline)[1]
        return None if sh is None else sh[0]

    # ------------------------------------------------------------ shape templates
    def _normalized(self, text: str):
        memo = self._norm_memo
        if memo[0] is text:
            return memo[1]
        n = norm.normalize(text)
        self._norm_memo = (text, n)
        return n

    def _template_hit(self, text: str, base: str | None):
        """(template, parameter key) when ``text`` is a known template's text with
        only its parameter changed (:mod:`engine.sparql.normalize`): such a text
        is not tokenized, parsed or planned; None otherwise."""
        if not self._templates:
            return None
        return self.match_template(self._normalized(text), base)

    def match_template(self, n: tuple[str, list[str]] | None, base: str | None):
        """:meth:`_template_hit` for a text's normalized form ``n`` (skeleton,
        slots), e.g. read from a URL's bytes (``engine.sparql.normalize.raw_normalize``).
        A text whose fixed slots differ from the skeleton's template (another class or
        predicate written as an IRI) is matched against the template learned for those
        fixed slots, if any (``_Template.variants``: one dict lookup)."""
        if n is None:
            return None
        tpl = self._templates.get((n[0], base))
        if tpl is None:
            return None
        got = self._match(tpl, n[1])
        if got is None and tpl.variants:
            v = tpl.variants.get(_fixed_values(tpl.fixed, n[1]))
            if v is not None:
                got = self._match(v, n[1])
        if got is None and tpl.alt:  # (the skeleton's texts with the parameter(s) in other slots)
            got = self._match(tpl.alt, n[1])
        return got

    def _match(self, tpl, slots):
        """(template, parameter key(s)) when ``slots`` are ``tpl``'s text's with only its
        parameter(s) changed, else None."""
        if tpl.params is not None:
            return self._match_params(tpl, slots)
        v = norm.swapped(slots, tpl.fixed, None)
        key = norm.slot_key(v) if v and v[0] == tpl.quote else None
        if key is None or key in tpl.others:
            return None
        return tpl, key

    @staticmethod
    def _match_params(tpl, slots):
        """:meth:`match_template` of a template of several parameters (``tpl.params``:
        the parameter of each slot, None for a fixed one): (template, their keys)."""
        vals: list = [None] * len(tpl.quote)
        for s, f, i in zip(slots, tpl.fixed, tpl.params, strict=True):
            if i is None:
                if s != f:
                    return None
            elif vals[i] is None:
                vals[i] = s
            elif s != vals[i]:
                return None
        keys = []
        for v, q, fixed in zip(vals, tpl.quote, tpl.skeleton_keys, strict=True):
            if fixed is not None:  # (written in the skeleton)
                keys.append(fixed)
                continue
            key = norm.slot_key(v) if v and v[0] == q else None
            if key is None or key in tpl.others:
                return None
            keys.append(key)
        return tpl, tuple(keys)

    def _learn(self, text: str, base: str | None, pq: QueryPlan, shape: tuple, deadline) -> None:
        """Make ``text`` (a fast shape, just parsed) the template of its skeleton
        when its parameter is written as slots (an absolute IRI or a plain
        string) and a probe text, the same with another constant in those
        slots, parses to the same shape with that constant: then every text of
        the skeleton that differs only there is that shape with its own constant.

        A skeleton keeps one template per value of its fixed slots: a text whose
        parameter sits in the same slots as the skeleton's template but whose other
        slots differ (another class or predicate written as an IRI: another shape,
        whose plan reads that constant's statistics) is learned the same way, from
        its own parse and plan and probe, as a *variant* (``_Template.variants``, keyed
        by the fixed slots' values), so the texts of that shape are hits from their
        second sighting on. Bounded (:data:`_MAX_VARIANTS` per skeleton)."""
        n = self._normalized(text)
        if n is None:
            return
        tk = (n[0], base)
        head = self._templates.get(tk, _NO_SHAPE)
        vk = None
        if head is not _NO_SHAPE:
            if head is None:
                return
            got = self._template_slots(n, shape)
            if got is None:
                return
            if got[0] != head.places:
                # the parameter(s) in other slots of the same skeleton (a comment slot where
                # the head has an IRI: ``DESCRIBE <a> # c`` and ``DESCRIBE <a> <b>``): one
                # such template per skeleton, tried after the head's (False: none)
                if head.alt is None:
                    alt = self._make_template(text, base, n, pq, shape, deadline)
                    with self._lock:
                        if head.alt is None:
                            head.alt = alt if alt is not None else False
                return
            vk = _fixed_values(head.fixed, n[1])
            if vk in head.variants or vk == _fixed_values(head.fixed, head.fixed):
                return
        tpl = self._make_template(text, base, n, pq, shape, deadline)
        with self._lock:
            if vk is not None:
                if len(head.variants) >= _MAX_VARIANTS:
                    head.variants = {}
                head.variants[vk] = tpl  # (None: that variant has no template; not probed again)
                return
            if len(self._templates) >= _PLAN_CACHE_SIZE:
                self._templates = {}
            self._templates[tk] = tpl

    @staticmethod
    def _template_slots(n, shape) -> tuple | None:
        """(the slots that write the shape's parameter(s), which parameter each holds):
        None when no slot does."""
        param = shape[1]
        keys = param if type(param) is tuple else (param,)
        which = {k: j for j, k in enumerate(keys)}
        params = tuple(i for i, s in enumerate(n[1]) if norm.slot_key(s) in which)
        return (params, which) if params else None

    def _make_template(self, text: str, base: str | None, n, pq: QueryPlan, shape: tuple, deadline):
        """The template of ``text`` (see :meth:`_learn`), None when its probe text does
        not parse to the same shape with the probe's constant."""
        got = self._template_slots(n, shape)
        if got is None:
            return None
        params, which = got
        slots = n[1]
        param = shape[1]
        multi = type(param) is tuple
        keys = param if multi else (param,)
        # (a parameter written in the skeleton itself, e.g. a prefixed name, stays fixed
        # there: its key is the template's for every text)
        quotes = [None] * len(keys)
        for i in params:
            quotes[which[norm.slot_key(slots[i])]] = slots[i][0]
        probes = [(f"<urn:x-jindou:probe:{j}>" if q == "<" else f"{q}jindou probe {j}{q}") if q else None
                  for j, q in enumerate(quotes)]
        q = quotes[0]
        probe = (tuple(norm.slot_key(p) if p else k for p, k in zip(probes, keys, strict=True)) if multi
                 else norm.slot_key(probes[0]))
        sp = norm.spans(text)
        parts, last = [], 0
        for i in params:
            a, b = sp[i]
            parts += (text[last:a], probes[which[norm.slot_key(slots[i])]])
            last = b
        parts.append(text[last:])
        try:
            from engine.sparql.parser import parse_query  # noqa: PLC0415

            got = _shape_key(make_plan(parse_query("".join(parts), base,
                                                        check=_deadline_check(deadline, self.query_timeout))))
        except JindouError:
            got = None
        if got is None or got != (shape[0], probe):
            return None
        fixed = tuple(None if i in params else s for i, s in enumerate(slots))
        tpl = _Template(fixed, tuple(quotes) if multi else q, shape[0], pq, _shape_constants(shape[0]))
        with self._lock:
            self._made_templates.add(tpl)
        tpl.places = params
        if multi:
            tpl.params = tuple(which[norm.slot_key(s)] if i in params else None
                               for i, s in enumerate(slots))
            tpl.skeleton_keys = tuple(None if qq else k for qq, k in zip(quotes, keys, strict=True))
        return tpl

    def _run_template(self, tpl, key: str, max_rows, budget, deadline, timeout, lists: bool = False):
        """Run a template's shape for the constant ``key`` by rebinding the shape's
        program of the current snapshot; None when there is none to rebind (the
        caller takes the full path, which compiles it)."""
        got = self._template_program(tpl, key)
        if got is None:
            return None
        return self._run_program(tpl.pq, got[0], got[1], got[2], max_rows, budget, deadline, timeout, lists)

    def _template_program(self, tpl, key: str):
        """(program rebound to the constant ``key``, the snapshot's term table, its
        default graph) of a template's shape on the current snapshot; None when the
        snapshot has no program of the shape yet, the constant is not in the store
        (the full path answers), or the program starts big."""
        snap = self.store.snapshot()
        terms = self._snap_terms
        if terms is None or terms.snapshot is not snap:
            return None
        # the template keeps its shape's entry and rebound programs of the current
        # snapshot (a shape key is a nested tuple: hashing it per query costs more
        # than the lookups; _drop_programs forgets them with the snapshot)
        memo = tpl.memo
        graph = snap.default
        if memo is not None and memo[0][0] is snap and memo[0][1] is graph:
            known, progs = memo[0], memo[1]
        else:
            known = self._shapes.get(tpl.key)
            if known is None or known[0] is not snap or known[1] is not graph:
                return None
            progs = {}
            memo = tpl.memo = (known, progs, {})
        if type(key) is tuple:  # (several parameters)
            pid = tuple(terms.lookup(k) for k in key)
            if min(pid) < 0:
                return None
        else:
            pid = terms.lookup(key)
            if pid < 0:
                return None
        compiled = progs.get(pid)
        if compiled is None:
            rk = (tpl.key, pid)
            compiled = self._rebound.get(rk)
            if compiled is None or compiled[0] is not known:
                compiled = (known, _rebind(known[2], known[3], pid))
                if len(self._rebound) >= _PLAN_CACHE_SIZE:
                    self._rebound = {}
                self._rebound[rk] = compiled
            if len(progs) >= _PLAN_CACHE_SIZE:
                progs.clear()
            progs[pid] = compiled
        compiled = compiled[1]
        if compiled is None or compiled[0].starts_big:
            return None
        if key not in memo[2]:  # (query_template's plain SELECT, kept by the key)
            _keep_plain(memo[2], key, tpl.pq.fast, compiled, self._local, (snap, terms, graph))
        return compiled, terms, graph

    def _run_program(self, pq: QueryPlan, program, terms, graph, max_rows, budget, deadline, timeout,
                     lists: bool = False):
        """Run a compiled fast program under the query's budget and deadline; its result,
        or None when the program hands the query back to the general path. With
        ``lists`` a SELECT without ORDER BY may come back as a ``SmallSelect``."""

        def check():
            if deadline is not None and time.monotonic() > deadline:
                raise QueryTimeout(f"query exceeded its timeout of {timeout} s")

        fast = pq.fast
        prog = program[0]
        if (fast.names is None and fast.template is None and type(prog) is SmallBGP and not prog.empty
                and self._local):
            found = _exists(prog.steps)  # an ASK: depth first, bounded, charges nothing
            if found is not None:
                check()
                self.queries += 1
                return QueryResult(form="ASK", terms=terms, boolean=found)
        token = enter_budget(budget, deadline)
        try:
            if fast.describe:
                res = _describe_fast(program, terms, graph, max_rows or self.max_rows, check)
            elif lists and fast.template is None and fast.order is None:
                res = run_fast_lists(pq, program, terms, graph, max_rows or self.max_rows, check)
                if type(res) is tuple:
                    res = SmallSelect(tuple(fast.names), res[0], terms, res[1])
            else:
                res = _run_fast(pq, program, terms, graph, max_rows or self.max_rows, check, lists)
        finally:
            leave_budget(token)
        check()
        if res is not None:
            self.queries += 1
        return res

    def _drop_programs(self, terms) -> None:
        with self._lock:
            self._snap_terms_prev = terms
            self._shapes = {}
            self._rebound = {}
            # (every template made, also those the server's lane runners hold after the
            # table let them go: a kept memo would pin the old snapshot)
            for tpl in list(self._made_templates):
                tpl.memo = None
            for pq in list(self._prepared.values()):
                pq.state = None

    def _snapshot_terms(self, snap) -> QueryContext:
        """A term table shared by the fast-path results of one snapshot (they
        hold only store ids)."""
        st = self._snap_terms
        if st is None or st.snapshot is not snap:
            st = self._snap_terms = QueryContext(snap, term_cache=self._term_cache)
        return st

    def query(self, text: str, *, default_graph_uris=(), named_graph_uris=(), base: str | None = None,
              timeout: float | None = None, max_rows: int | None = None,
              query_memory: int | None = None, deadline: float | None = None, lists: bool = False):
        """Evaluate a query. ``query_memory`` overrides the memory budget (bytes, 0 =
        unlimited); ``deadline`` (a time.monotonic() instant, e.g. set when the server
        admitted the request) covers parsing too, else the timeout starts now. With
        ``lists``, a SELECT answered tuple at a time may come back as an
        ``engine.small_answers.SmallSelect`` (see :meth:`query_template`)."""
        timeout = timeout or self.query_timeout
        if deadline is None and timeout:
            deadline = time.monotonic() + timeout
        budget = MemoryBudget(self.query_memory if query_memory is None else query_memory)
        return _released(budget, self._query, text, default_graph_uris, named_graph_uris, base, timeout,
                         max_rows, budget, deadline, lists)

    def explain(self, text: str, *, analyze: bool = False, default_graph_uris=(), named_graph_uris=(),
                base: str | None = None, timeout: float | None = None, max_rows: int | None = None,
                query_memory: int | None = None, deadline: float | None = None) -> dict:
        """The plan of a query as a JSON-ready dict (:mod:`engine.plan.explain`);
        with ``analyze`` the query runs first (same budgets as :meth:`query`) and
        every operator reports its actual rows and time."""
        from engine.plan.explain import explain_plan  # noqa: PLC0415

        timeout = timeout or self.query_timeout
        if deadline is None and timeout:
            deadline = time.monotonic() + timeout
        budget = MemoryBudget(self.query_memory if query_memory is None else query_memory)
        pq = self._prepare(text, base, deadline)
        if pq.query.form not in ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE"):
            raise QueryEvaluationError(f"unknown query form {pq.query.form}")
        snap = self.store.snapshot()
        st = None
        if (pq.fast is not None and pq.fast.template is None and pq.fast.order is None and not pq.fast.describe
                and not default_graph_uris and not named_graph_uris):
            st = self._fast_program(pq, snap)
            if st[2] is None or st[2][0].starts_big:
                st = None
        ctx, ds = self._context(pq, snap, default_graph_uris, named_graph_uris, base, timeout, max_rows, budget,
                                deadline)
        token = enter_budget(budget, deadline)
        try:
            return explain_plan(pq, ctx, ds, fast_state=st, analyze=analyze, max_rows=max_rows or self.max_rows,
                                check=_deadline_check(deadline, timeout))
        except JindouError as e:
            raise e.with_traceback(None) from None
        finally:
            leave_budget(token)
            if budget.peak > _TRIM_AFTER:
                release_memory()

    def _query(self, text, default_graph_uris, named_graph_uris, base, timeout, max_rows, budget,
               deadline, lists: bool = False):
        if not default_graph_uris and not named_graph_uris and (text, base) not in self._prepared:
            memo = self._hit_memo
            hit = memo[2] if memo[0] is text and memo[1] == base else self._template_hit(text, base)
            if hit is not None:
                if hit[0].key in _DESCRIBE_KEYS:
                    res = self._describe_small(_described_keys(hit[0].key, hit[1]), self.store.snapshot(), budget,
                                               deadline, timeout)
                else:
                    res = self._run_template(hit[0], hit[1], max_rows, budget, deadline, timeout, lists)
                if res is not None:
                    return res
        pq, shape = self._prepare_shaped(text, base, deadline)
        q = pq.query
        if q.form not in ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE"):
            raise QueryEvaluationError(f"unknown query form {q.form}")
        snap = self.store.snapshot()
        if pq.fast is not None and not default_graph_uris and not named_graph_uris:
            st = pq.state
            if st is None or st[0] is not snap or st[1] is not snap.default:
                st = self._fast_program(pq, snap, shape)
            if st[2] is not None and not st[2][0].starts_big:
                res = self._run_program(pq, st[2], st[3], st[1], max_rows, budget, deadline, timeout, lists)
                if res is not None:
                    return res
        if (q.form == "DESCRIBE" and q.describe and not default_graph_uris and not named_graph_uris
                and (q.dataset is None or not (q.dataset.default or q.dataset.named))
                and all(isinstance(t, Const) for t in q.describe)):
            res = self._describe_small([t.key for t in q.describe], snap, budget, deadline, timeout)
            if res is not None:
                return res
        ctx, ds = self._context(pq, snap, default_graph_uris, named_graph_uris, base, timeout, max_rows, budget,
                                deadline)
        self.queries += 1
        return evaluate_query(q, ctx, ds, plan=pq)

    def query_template(self, hit, *, deadline: float | None = None, lists: bool = False):
        """:meth:`query` of a text known to be the template hit ``hit`` (from
        :meth:`match_template`) with the default dataset, without the text: the
        shape's program rebound to the hit's constant, under the same budgets and
        deadline; None when no program of the current snapshot is there to
        rebind (the caller runs the text through :meth:`query`, which compiles it).
        With ``lists``, a SELECT answered tuple at a time comes back as an
        ``engine.small_answers.SmallSelect`` (Python sequences, no numpy columns:
        cheaper for a few rows; its ``result()`` is the QueryResult).

        A program that ends tuple at a time is *tiny by construction* (at most
        SMALL_ROWS solutions as Python tuples, no vectorized step): with ``lists`` it
        runs first without entering the memory budget (:func:`_tiny_run`), when the
        budget cannot refuse what such a run charges (:func:`_tiny_bytes`: nothing for
        SELECT / ASK, the triples of at most SMALL_ROWS solutions for CONSTRUCT) and
        with one deadline check after it (it makes no check inside: its steps are
        bounded); a program that grows hands back (None) and runs again as before,
        budgeted, checked, handed over to the vectorized steps.

        The HTTP lane's every query comes here: :meth:`_run_template`,
        :meth:`_run_program` and :func:`_released` in one frame (the same budget,
        deadline checks, count and heap release)."""
        tpl, key = hit
        timeout = self.query_timeout
        if deadline is None and timeout:
            deadline = time.monotonic() + timeout
        memo = tpl.memo
        if memo is not None and lists:  # (the lane's usual query: a SELECT or ASK kept by its key)
            plain = memo[2].get(key)
            if plain:
                prog, out, names, steps, snap0, terms, graph, compiled = plain
                snap = self.store.snapshot()
                # (kept with the snapshot, term table and default graph it was made on: the
                # checks _template_program makes, as three identity tests)
                if snap0 is snap and terms is self._snap_terms and graph is snap.default and not prog.starts_big:
                    n = self.max_rows
                    if names is None:  # (another SELECT or an ASK: _tiny_run answers, as below)
                        res = _tiny_run(tpl.pq.fast, compiled, terms, n)
                        if type(res) is tuple:
                            return self._template_rest(tpl.pq, compiled, terms, graph, res, lists, deadline,
                                                       timeout)
                        if res is not None:
                            if deadline is not None and time.monotonic() > deadline:
                                raise QueryTimeout(f"query exceeded its timeout of {timeout} s")
                            self.queries += 1
                            return res
                        return self._template_rest(tpl.pq, compiled, terms, graph, None, lists, deadline, timeout)
                    rows, k = prog.run([()], n if n < SMALL_ROWS else SMALL_ROWS)
                    if k == steps:
                        n = len(rows)
                        if n == 0:
                            res = SmallSelect(names, [() for _ in out], terms, 0)
                        else:
                            tcols = list(zip(*rows, strict=True)) if prog.slots else []
                            res = SmallSelect(names, list(map(tcols.__getitem__, out)), terms, n)
                        if deadline is not None and time.monotonic() > deadline:
                            raise QueryTimeout(f"query exceeded its timeout of {timeout} s")
                        self.queries += 1
                        return res
                    # (the program grew: its rows so far go on, budgeted, as _tiny_run's do)
                    return self._template_rest(tpl.pq, compiled, terms, graph, (rows, k), lists, deadline,
                                               timeout)
        tk = tpl.key
        if tk is _DESCRIBE_ONE or len(tk) == 2 and tk[0] == "DESCRIBE":  # (_DESCRIBE_KEYS: no hashing)
            keys = [key] if tk is _DESCRIBE_ONE else list(key)
            limit = self.query_memory
            if self._local and (limit == 0 or limit >= _DESCRIBE_TINY_BYTES):
                res = self._describe_tiny(keys, deadline, timeout)
                if res is not None:
                    return res
            budget = MemoryBudget(limit)
            return _released(budget, self._describe_small, keys, self.store.snapshot(), budget, deadline,
                             timeout)
        got = self._template_program(tpl, key)
        if got is None:
            return None
        program, terms, graph = got
        pq = tpl.pq
        fast = pq.fast
        handed = None
        if fast.describe:  # (no hand-over: a DESCRIBE of many solutions is the general path's)
            limit = self.query_memory
            if self._local and (limit == 0 or limit >= _DESCRIBE_TINY_BYTES):  # (its charges: bounded)
                res = _describe_fast(program, terms, graph, self.max_rows, _deadline_check(deadline, timeout))
                if res is not None:
                    self.queries += 1
                return res
            budget = MemoryBudget(limit)
            return _released(budget, self._run_program, pq, program, terms, graph, self.max_rows, budget,
                             deadline, timeout)
        if lists and self._local:
            limit = self.query_memory
            if limit == 0 or fast.template is None or limit >= _tiny_bytes(fast):  # (SELECT / ASK: nothing)
                res = _tiny_run(fast, program, terms, self.max_rows)
                if type(res) is tuple:  # the program grew: its rows so far go on, budgeted, below
                    handed = res
                elif res is not None:
                    if deadline is not None and time.monotonic() > deadline:
                        raise QueryTimeout(f"query exceeded its timeout of {timeout} s")
                    self.queries += 1
                    return res
        return self._template_rest(pq, program, terms, graph, handed, lists, deadline, timeout)

    def _template_rest(self, pq, program, terms, graph, handed, lists: bool, deadline, timeout):
        """:meth:`query_template`'s budgeted run of a program that is not tiny, or of the
        rows (``handed``) a tiny run made before the program grew."""
        fast = pq.fast

        def check():
            if deadline is not None and time.monotonic() > deadline:
                raise QueryTimeout(f"query exceeded its timeout of {timeout} s")

        budget = MemoryBudget(self.query_memory)
        token = enter_budget(budget, deadline)
        try:
            if handed is not None:  # (run_fast_lists' and _run_fast's hand-over, from the tiny run's rows)
                rows, k = handed
                got = program[0].finish(rows, k, graph, self.max_rows, check)
                given = _GivenOrdered if fast.order is not None else _GivenBGP
                res = _evaluate_query(pq.query, terms, given(terms, fast.bgp, got), pq.root)
            elif lists and fast.template is None and fast.order is None:
                res = run_fast_lists(pq, program, terms, graph, self.max_rows, check)
                if type(res) is tuple:
                    res = SmallSelect(tuple(fast.names), res[0], terms, res[1])
            else:
                res = _run_fast(pq, program, terms, graph, self.max_rows, check, lists)
            check()
        except JindouError as e:
            err = e.with_traceback(None)
        else:
            err = None
        finally:
            leave_budget(token)
        if budget.peak > _TRIM_AFTER:
            release_memory()
        if err is not None:
            raise err
        if res is not None:
            self.queries += 1
        return res

    def _describe_tiny(self, keys: list, deadline, timeout):
        """:meth:`_describe_small` of a few resources without entering a memory budget: the
        caller checked that the budget cannot refuse it (a tuple-at-a-time description
        charges at most :data:`_DESCRIBE_TINY_BYTES`; past DESCRIBE_ROWS triples it gives
        None and the budgeted path answers); the deadline is still checked every round."""
        snap = self.store.snapshot()
        terms = self._snap_terms
        if terms is None or terms.snapshot is not snap or terms is not self._snap_terms_prev:
            return None  # (a new snapshot: the budgeted path makes its term table, drops old programs)
        ids = list(map(terms.lookup, keys))

        def check():
            if deadline is not None and time.monotonic() > deadline:
                raise QueryTimeout(f"query exceeded its timeout of {timeout} s")

        res = describe_small(ids, snap.default, terms, check)
        if res is not None:
            self.queries += 1
        return res

    def _describe_small(self, keys: list, snap, budget, deadline, timeout) -> QueryResult | None:
        """DESCRIBE of constant resources (term keys) over the default graph, tuple
        at a time (:func:`engine.plan.point.describe_small`); None: the general path."""
        terms = self._snapshot_terms(snap)
        if terms is not self._snap_terms_prev:
            self._drop_programs(terms)
        ids = list(map(terms.lookup, keys))

        def check():
            if deadline is not None and time.monotonic() > deadline:
                raise QueryTimeout(f"query exceeded its timeout of {timeout} s")

        token = enter_budget(budget, deadline)
        try:
            res = describe_small(ids, snap.default, terms, check)
        finally:
            leave_budget(token)
        if res is not None:
            self.queries += 1
        return res

    def _fast_program(self, pq: QueryPlan, snap, shape=None) -> tuple:
        """The plan's fast program for ``snap``: compiled once per snapshot (a
        commit makes a new snapshot object); (snapshot, graph, (program, slots) or
        None, term table). With a ``shape`` (:func:`_fast_shape_key`) whose
        program is known for this snapshot, that program is rebound to this
        query's constant instead of planning and compiling again (its step order
        is the one planned for the first constant seen: a generic plan, like a
        prepared statement's; the executor still hands over to the vectorized
        steps when the rows grow)."""
        st = pq.state
        graph = snap.default
        if st is None or st[0] is not snap or st[1] is not graph:
            terms = self._snapshot_terms(snap)
            if terms is not self._snap_terms_prev:  # a new snapshot: drop every stale
                self._drop_programs(terms)          # program (they pin old snapshots)
            compiled = None
            tpl = self._shapes.get(shape[0]) if shape is not None else None
            pid = _param_ids(terms, shape[1]) if shape is not None else -1
            if tpl is not None and tpl[0] is snap and tpl[1] is graph and pid is not None:
                compiled = _rebind(tpl[2], tpl[3], pid)
            if compiled is None:
                if pq.fast.union is not None:
                    compiled = compile_union(pq.fast, graph, terms)
                elif pq.fast.filters:
                    compiled = compile_filtered(pq.fast, graph, terms)
                else:
                    compile = (compile_point if pq.fast.point else
                               compile_construct if pq.fast.template is not None else compile_fast)
                    compiled = compile(pq.fast, graph, terms.lookup)
                if shape is not None and pid is not None and compiled is not None and not compiled[0].empty:
                    with self._lock:
                        if len(self._shapes) >= _PLAN_CACHE_SIZE:
                            self._shapes = {}
                        self._shapes[shape[0]] = (snap, graph, compiled, pid)
                if compiled is None and vertex_preds.pending_edges(graph):
                    # (variable predicates wait for the edge index a background build is
                    # making: compiled again by the next query instead of never this snapshot)
                    return (snap, graph, None, terms)
            st = pq.state = (snap, graph, compiled, terms)
        return st

    def _context(self, pq: QueryPlan, snap, default_graph_uris, named_graph_uris, base, timeout, max_rows, budget,
                 deadline) -> tuple[QueryContext, DatasetView]:
        q = pq.query
        ctx = QueryContext(snap, base=q.base or base, timeout=timeout or self.query_timeout,
                           max_rows=max_rows or self.max_rows, plan_cache=self._plans(snap.sn),
                           term_cache=self._term_cache)
        ctx.memory = budget
        ctx.deadline = deadline
        ctx.service_policy = self.service_policy  # SERVICE: engine/exec/service.py
        if default_graph_uris or named_graph_uris:
            ds = make_dataset(ctx, tuple(default_graph_uris), tuple(named_graph_uris))
        elif q.dataset is not None and (q.dataset.default or q.dataset.named):
            ds = make_dataset(ctx, q.dataset.default, q.dataset.named)
        else:
            ds = DatasetView(snap.default, snap.named)
        return ctx, ds

    # ------------------------------------------------------------ updates
    def update(self, text: str, *, base: str | None = None, using_graph_uris=(), using_named_graph_uris=(),
               deadline: float | None = None, may_commit=None) -> None:
        """``deadline`` (time.monotonic()) covers parsing, waiting for the write lock
        and evaluation; ``may_commit()`` is asked once right before the commit
        (False: the caller gave up, nothing is applied)."""
        from engine.exec.update import UpdateExecutor  # noqa: PLC0415
        from engine.sparql.parser import parse_update  # noqa: PLC0415

        if deadline is None and self.query_timeout:
            deadline = time.monotonic() + self.query_timeout
        check = _deadline_check(deadline, self.query_timeout)
        u = parse_update(text, base, check=check)
        with ingest.write_locked(self.store, deadline, self.query_timeout):
            ex = UpdateExecutor(self.store, base=u.base or base, using=using_graph_uris,
                                using_named=using_named_graph_uris, allow_load=self.allow_load,
                                timeout=self.query_timeout, max_rows=self.max_rows,
                                empty_graph=lambda: self.store.snapshot().graph(-2),
                                deadline=deadline, may_commit=may_commit)
            budget = MemoryBudget(self.query_memory)  # the WHERE parts of DELETE/INSERT too
            token = enter_budget(budget, deadline)
            try:
                ex.run(u)
            finally:
                leave_budget(token)
                if budget.peak > _TRIM_AFTER:
                    release_memory()
        self.updates += 1

    # ------------------------------------------------------------ loading
    def _graph_id(self, graph: str | None, create: bool) -> int | None:
        return ingest.graph_id(self.store, graph, create)

    def load_file(self, path, graph: str | None = None, format: str | None = None, base: str | None = None,
                  lenient: bool = False, progress: bool = False):
        return ingest.load_file(self.store, path, graph=graph, format=format, base=base, lenient=lenient,
                                progress=progress)

    def load_data(self, data: bytes | str, media_type: str, graph: str | None = None, base: str | None = None):
        return ingest.load_data(self.store, data, media_type, graph=graph, base=base, allow_fetch=self.allow_load)

    # ------------------------------------------------------------ Graph Store Protocol
    def graph_get(self, graph: str | None) -> QueryResult:
        snap = self.store.snapshot()
        if graph is None:
            g = snap.default
        else:
            gid = self._graph_id(graph, create=False)
            if gid is None or gid < 0 or gid not in snap.named:
                raise NotFound("graph", graph or "default")
            g = snap.named[gid]
        s, p, o = g.scan_all()
        triples = np.stack([np.asarray(s, np.int64), np.asarray(p, np.int64), np.asarray(o, np.int64)], axis=1)
        ctx = QueryContext(snap)
        return QueryResult(form="CONSTRUCT", terms=ctx, triples=triples)

    def _exists(self, graph: str | None) -> bool:
        if graph is None:
            return True
        gid = self._graph_id(graph, create=False)
        return gid is not None and gid >= 0 and gid in self.store.snapshot().named

    def graph_put(self, graph: str | None, data, media_type: str, base: str | None = None) -> bool:
        """Replace ``graph`` by the payload; True if the graph was created."""
        return ingest.load(self.store, data, media_type=media_type, graph=graph, replace=True, base=base,
                           allow_fetch=self.allow_load)[1]

    def graph_post(self, graph: str | None, data, media_type: str, base: str | None = None) -> bool:
        """Add the payload to ``graph``; True if the graph was created."""
        return ingest.load(self.store, data, media_type=media_type, graph=graph, base=base,
                           allow_fetch=self.allow_load)[1]

    def graph_delete(self, graph: str | None) -> None:
        with self.store.write_lock:
            if not self._exists(graph):
                raise NotFound("graph", graph or "default")
            ingest.apply(self.store, Changes(drop={self._graph_id(graph, create=False)}))

    # ------------------------------------------------------------ status
    def status(self) -> dict:
        st = dict(self.store.stats())
        gt = st.get("graph_triples")
        if isinstance(gt, dict):  # JSON needs string keys: name graphs by IRI
            d = self.store.dictionary
            st["graph_triples"] = {(d.key(int(g))[1:-1] if isinstance(g, int) else str(g)): n for g, n in gt.items()}
        st.update(queries=self.queries, updates=self.updates, query_timeout=self.query_timeout,
                  max_rows=self.max_rows, query_memory=self.query_memory, allow_load=self.allow_load)
        return st

    def close(self) -> None:
        self.store.close()


def _deadline_check(deadline: float | None, timeout: float):
    """A callable raising QueryTimeout once ``deadline`` (time.monotonic()) has passed."""
    if deadline is None:
        return None

    def check() -> None:
        if time.monotonic() > deadline:
            raise QueryTimeout(f"query exceeded its timeout of {timeout} s")

    return check


_RDF_TYPE = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"


#: the shape key of ``DESCRIBE <one constant>`` (its parameter: that constant)
_DESCRIBE_ONE = ("DESCRIBE",)
#: ... of ``DESCRIBE <a> <b>...`` (n distinct constants, its parameters: a tuple of them), by n
_DESCRIBE_MANY = {n: ("DESCRIBE", n) for n in range(2, 5)}  # (up to _MAX_PARAMS)
#: every DESCRIBE-of-constants shape key (a template of one answers by ``describe_small``)
_DESCRIBE_KEYS = frozenset((_DESCRIBE_ONE, *_DESCRIBE_MANY.values()))


def _described_keys(key, param) -> list:
    """The resources (term keys) of a DESCRIBE-of-constants template's parameter(s)."""
    return [param] if key is _DESCRIBE_ONE else list(param)


def _shape_key(pq: QueryPlan) -> tuple | None:
    """(shape key, parameter key) of a query whose texts differ only in one
    constant and are answered without a parse from a template: a fast shape
    (:func:`_fast_shape_key`) or the DESCRIBE of one constant over the default
    graph (its WHERE clause, if any, is not evaluated for a constant); None otherwise."""
    sh = _fast_shape_key(pq)
    if sh is not None:
        return sh
    q = pq.query
    if (q.form == "DESCRIBE" and q.describe and all(isinstance(t, Const) for t in q.describe)
            and (q.dataset is None or not (q.dataset.default or q.dataset.named))):
        if len(q.describe) == 1:
            return _DESCRIBE_ONE, q.describe[0].key
        keys = tuple(t.key for t in q.describe)
        # (each a parameter: distinct, at most _MAX_PARAMS of them)
        if len(keys) in _DESCRIBE_MANY and len(set(keys)) == len(keys):
            return _DESCRIBE_MANY[len(keys)], keys
    return None


def _fast_shape_key(pq: QueryPlan) -> tuple | None:
    """(shape key, parameter) of a fast-path query whose texts differ only in their
    subject/object constants other than the classes of ``rdf:type`` patterns (classes
    and predicates decide the cost and the program, so they stay in the key). The
    parameter is one term key when one constant fills those places (a star on one
    entity names it in every pattern: its step order is the first text's, a generic
    plan); several constants are several parameters (a tuple of keys, in order of
    appearance) only where the plan does not depend on them: each sits in patterns
    with a variable predicate, whose step estimates read no constant's fan-out, and
    the program is rebound to every new tuple of them. None for every other query. A
    parameter must not also be a predicate, class or FILTER constant of the query, so
    swapping it in the compiled program is unambiguous."""
    fast = pq.fast
    if fast is None:
        return None
    parts = []
    params: dict[str, int] = {}
    others = set()
    fixed_plan = set()  # parameters in a pattern of a constant predicate (their fan-out orders the steps)
    for t in fast.triples:
        row = []
        for i, term in enumerate((t.s, t.p, t.o)):
            if not isinstance(term, Const):
                row.append(("v", term.name))
            elif i == 1 or (i == 2 and isinstance(t.p, Const) and t.p.key == _RDF_TYPE):
                row.append(("c", term.key))
                others.add(term.key)
            else:
                j = params.setdefault(term.key, len(params))
                if isinstance(t.p, Const):
                    fixed_plan.add(term.key)
                row.append(("p", j))
        parts.append(tuple(row))
    if not params or others.intersection(params):
        return None
    # (one pattern, no UNION branches, has one step: no order for its constants' fan-out to decide)
    one_step = len(fast.triples) == 1 and fast.union is None
    if len(params) > 1 and ((fixed_plan and not one_step) or len(params) > _MAX_PARAMS):
        return None
    conds = set()
    if fast.filters:
        conds |= filter_constants(fast.filters)
    branches = None
    if fast.union is not None:  # (each branch's size and conditions: the tree's structure)
        for b in fast.union:
            if b.filters:
                conds |= filter_constants(b.filters)
        branches = tuple((len(b.triples), b.filters) for b in fast.union)
    if conds.intersection(params):
        return None
    key = (pq.query.form, tuple(parts), tuple(fast.names) if fast.names is not None else None,
           fast.distinct, fast.offset, fast.limit, fast.order, fast.filters, branches)
    if fast.template is not None:  # the template's constants (the parameters' places marked) too
        key += (tuple(tuple(("v", x.name) if not isinstance(x, Const) else ("p", params[x.key])
                            if x.key in params else ("c", x.key) for x in (t.s, t.p, t.o)) for t in fast.template),)
    param = next(iter(params)) if len(params) == 1 else tuple(params)
    return key, param


#: a shape has at most this many parameters
_MAX_PARAMS = 4


def _param_ids(terms, param):
    """The store ids of a shape's parameter (a key, or a tuple of keys); None when one
    is not in the store."""
    if type(param) is tuple:
        ids = tuple(terms.lookup(k) for k in param)
        return ids if min(ids) >= 0 else None
    i = terms.lookup(param)
    return i if i >= 0 else None


def _rebind(compiled, old, new):
    """A copy of a compiled fast program with the constant id ``old`` (the shape's
    parameter, unique in it) replaced by ``new``; None for an empty program. With
    several parameters ``old`` and ``new`` are tuples (replaced all at once: through
    negative ids, which no term has)."""
    prog, out = compiled
    if prog.empty:
        return None
    if type(old) is tuple:
        for j, o in enumerate(old):
            compiled = _rebind(compiled, o, -2 - j)
        for j, nw in enumerate(new):
            compiled = _rebind(compiled, -2 - j, nw)
        return compiled
    if isinstance(prog, UnionProgram):
        return prog.rebound(lambda b: b if b.empty else _rebind((b, ()), old, new)[0]), out
    if out and isinstance(out[0], tuple):  # a CONSTRUCT's resolved template (its type kept: OwnTemplate)
        out = type(out)(tuple(("c", new) if e == ("c", old) else e for e in t) for t in out)
    if isinstance(prog, PointProgram):
        return prog.rebound(old, new), out

    def end(e):
        return (True, new) if e is not None and e[0] is True and e[1] == old else e

    steps = [(kind, fs, end(a), end(b) if kind == _PRUNE else (end(b[0]), b[1]) if kind == _ANY else b)
             for kind, fs, a, b in prog.steps]
    rtriples = [None if rt is None else tuple(("c", new) if p[0] == "c" and p[1] == old else p for p in rt)
                for rt in prog.rtriples]
    return SmallBGP(list(prog.slots), steps, rtriples, list(prog.widths), False), out


def _tiny_bytes(fast) -> int:
    """The most a tiny run (:func:`_tiny_run`) of the fast plan ``fast`` charges to the
    memory budget: a CONSTRUCT's triples of at most SMALL_ROWS solutions
    (``small_answers.construct_triples``); nothing for SELECT / ASK (Python tuples,
    no table)."""
    if fast.template is None:
        return 0
    b = fast.tiny_bytes
    if b is None:
        # (and a template's blank nodes, a query-local key per label and solution, and its
        # constants the store may not hold, a query-local key each)
        consts = {x.key for t in fast.template for x in (t.s, t.p, t.o) if isinstance(x, Const)}
        labels = sum(1 for c in consts if c.startswith("_:"))
        b = fast.tiny_bytes = (SMALL_ROWS * (len(fast.template) * (3 * 2 + 3) * CELL + labels * _BNODE_KEY_BYTES)
                               + sum(len(c) + _BNODE_KEY_BYTES for c in consts))
    return b


#: what one fresh blank node of a tiny CONSTRUCT may hold (its key, ~30 characters, and
#: its place in the answer's term table: ``QueryContext.fresh_bnodes``' charge)
_BNODE_KEY_BYTES = 48 + 12 + 120

#: the most a tuple-at-a-time DESCRIBE charges (``point.describe_small``: DESCRIBE_ROWS triples)
_DESCRIBE_TINY_BYTES = DESCRIBE_ROWS * (3 + 3) * CELL


def _tiny_run(fast, compiled, terms, max_rows: int):
    """A template's answer when its program ends tuple at a time (as ``run_fast_lists``,
    ``_run_fast`` with ORDER BY and ``construct_triples`` give it with ``lists``: the
    same answer and order); else (rows, k), the rows after the program's first k
    steps, when it hands over to the vectorized steps or its ORDER BY rows are not
    few (the caller finishes it the budgeted way, as those do), or None (a CONSTRUCT
    that is not few: the general path)."""
    if fast.template is not None:
        return construct_triples(compiled, terms, max_rows)
    prog, out = compiled
    names = fast.names
    if names is None and type(prog) is SmallBGP and not prog.empty:  # ASK: one solution is the answer
        found = _exists(prog.steps)
        if found is not None:
            return QueryResult(form="ASK", terms=terms, boolean=found)
    rows, k = prog.run([()], min(max_rows, SMALL_ROWS))
    if k < len(prog.steps):
        return rows, k
    if names is None:
        return QueryResult(form="ASK", terms=terms, boolean=len(rows) > 0)
    if fast.order is not None:
        got = ordered_lists(fast, compiled, rows, terms)
        return (rows, k) if got is None else SmallSelect(tuple(names), got[0], terms, got[1])
    n = len(rows)
    if n == 0:
        return SmallSelect(tuple(names), [() for _ in out], terms, 0)
    tcols = list(zip(*rows, strict=True)) if prog.slots else []
    if fast.distinct or fast.offset or fast.limit is not None or None in out:
        cols, n = project_lists(fast, tcols, out, n)
    else:  # (project_lists of a plain projection: the slots' columns)
        cols = list(map(tcols.__getitem__, out))
    return SmallSelect(tuple(names), cols, terms, n)


#: the tuple-at-a-time programs :func:`_keep_plain` keeps (their ``run``, ``steps``, ``slots``, ``starts_big``)
_PLAIN_PROGRAMS = (SmallBGP, PointProgram)


def _keep_plain(kept: dict, key, fast, compiled, local: bool, made: tuple) -> None:
    """Keep in ``kept`` (a template's memo, by its constant ``key``: no term lookup, no
    program lookup per query) what :meth:`Database.query_template` needs to answer a SELECT
    or an ASK whose program runs tuple at a time (SmallBGP, PointProgram) on a local store
    without ``_template_program``: (program, the columns' slots, the names, the steps'
    count, the snapshot, term table and default graph it is valid for (``made``), the
    program). A plain SELECT -- no ORDER BY, DISTINCT, OFFSET, LIMIT or unbound column --
    is answered in query_template's frame as :func:`_tiny_run` does; for another SELECT or
    an ASK the names are None (``_tiny_run`` answers it). False for any other query
    (CONSTRUCT, DESCRIBE: the general steps, which check the memory budget)."""
    prog, out = compiled
    names = fast.names
    if len(kept) >= _PLAN_CACHE_SIZE:
        kept.clear()
    if not local or type(prog) not in _PLAIN_PROGRAMS or fast.template is not None or fast.describe:
        kept[key] = False
        return
    plain = (names is not None and fast.order is None and not fast.distinct and not fast.offset
             and fast.limit is None and None not in out)
    kept[key] = (prog, out, tuple(names) if plain else None, len(prog.steps), *made, compiled)


#: an ASK's depth-first search (:func:`_exists`) looks at most this many partial solutions
EXISTS_WORK = SMALL_ROWS


class _TooMuch(Exception):
    """The depth-first search of :func:`_exists` passed its work bound."""


def _exists(steps: list) -> bool | None:
    """Whether a tuple-at-a-time program (``SmallBGP.steps``: constant-predicate
    expansions, prunes and membership tests) has a solution: depth first, the same
    steps as ``SmallBGP.run`` applies to its rows, one partial solution at a time, so
    an ASK stops at its first solution (a last expansion only asks whether the list is
    non-empty) instead of making every solution, or handing many over to the vectorized
    steps. Tiny by construction: None (the caller runs the program as usual) past
    :data:`EXISTS_WORK` partial solutions, or for steps of other kinds (filters,
    variable predicates)."""
    for st in steps:
        if st[0] not in (_EXPAND, _PRUNE, _MEMBER):
            return None
    work = [EXISTS_WORK]
    try:
        return _exists_from(steps, 0, len(steps) - 1, (), work)
    except _TooMuch:
        return None


def _exists_from(steps: list, k: int, last: int, r: tuple, work: list) -> bool:
    while True:  # (prunes and tests in place; an expansion recurses per neighbour)
        kind, fs, a, b = steps[k]
        ac, av = a
        if kind == _EXPAND:  # (fs: SmallBGP's ``nbrs(v, cap)``, a list or None past cap)
            if k == last:
                return fs(av if ac else r[av], 0) is None  # (more than none; no list made)
            nb = fs(av if ac else r[av], work[0])
            if nb is None:
                raise _TooMuch
            work[0] -= len(nb)
            for x in nb:
                if _exists_from(steps, k + 1, last, r + (x,), work):
                    return True
            return False
        if kind == _PRUNE:  # (fs: ``has(v, o)``)
            bc, bv = b
            if not fs(av if ac else r[av], bv if bc else r[bv]):
                return False
        elif not fs[1](r[b], av):  # _MEMBER: the var end (slot b) in the constant end's list
            return False
        if k == last:
            return True
        k += 1


def _run_fast(pq: QueryPlan, compiled, terms, graph, max_rows: int, check, lists: bool = False
              ) -> QueryResult | SmallSelect | None:
    """A fast shape's answer from its compiled program: SELECT / ASK by ``run_fast``;
    with ORDER BY a few solutions are ordered as tuples (``small_answers.ordered_lists``;
    with ``lists`` a SmallSelect), more go to the general operators above the BGP,
    as run_fast's hand-over does; CONSTRUCT by :func:`_construct_fast` (None: the
    general path answers)."""
    fast = pq.fast
    if fast.template is not None:
        return _construct_fast(compiled, terms, max_rows)
    if fast.order is None:
        return run_fast(pq, compiled, terms, graph, max_rows, check)
    prog = compiled[0]
    rows, k = prog.run([()], min(max_rows, SMALL_ROWS))
    if k == len(prog.steps):
        got = ordered_lists(fast, compiled, rows, terms)
        if got is not None:
            res = SmallSelect(tuple(fast.names), got[0], terms, got[1])
            return res if lists else res.result()
    res = prog.finish(rows, k, graph, max_rows, check)
    return _evaluate_query(pq.query, terms, _GivenOrdered(terms, fast.bgp, res), pq.root)


class _GivenOrdered(_GivenBGP):
    """The general operators over a BGP's known solutions, ORDER BY (and its top-k
    under a LIMIT) included: the evaluator state ORDER BY keeps, nothing written
    to the shared term table."""

    def __init__(self, ctx, bgp, res):
        super().__init__(ctx, bgp, res)
        self._tops: dict[int, int] = {}


def compile_construct(fast, graph, lookup):
    """(program, resolved template) of a CONSTRUCT's fast shape: the WHERE BGP's
    program and each template triple as ``("c", id)`` / ``("v", slot or None)`` /
    ``("b", k)`` (the template's k-th blank node label: a fresh blank node per solution) /
    ``("k", key)`` (a constant the store does not hold: a query-local id per answer, as
    the general CONSTRUCT gives it; ``small_answers.construct_triples``)."""
    c = compile_fast(fast, graph, lookup)
    if c is None:
        return None
    prog = c[0]
    pos = {v: i for i, v in enumerate(prog.slots)}
    labels: dict[str, int] = {}
    tpl = []
    for t in fast.template:
        if isinstance(t.p, Const) and t.p.key.startswith("_:"):
            continue  # (a blank node is never a predicate: the triple is never made)
        row = []
        for x in (t.s, t.p, t.o):
            if isinstance(x, Const) and x.key.startswith("_:"):  # (fresh per solution)
                row.append(("b", labels.setdefault(x.key, len(labels))))
                continue
            if isinstance(x, Const):
                i = lookup(x.key)
                # (a constant the store does not hold: a query-local id in the answer's terms)
                row.append(("c", int(i)) if i >= 0 else ("k", x.key))
            else:
                row.append(("v", pos.get(x.name)))
        tpl.append(tuple(row))
    own = any(e[0] in "bk" for row in tpl for e in row)
    return prog, (OwnTemplate if own else tuple)(tpl)


def _describe_fast(compiled, terms, graph, max_rows: int, check) -> QueryResult | None:
    """``DESCRIBE ?v... WHERE { BGP }`` by its fast program, as
    :func:`engine.exec.evaluate.describe` answers it: the distinct store ids its solutions
    bind to the described variables (``compiled``'s output slots), described tuple at a
    time (:func:`engine.plan.point.describe_small`). None (the general path answers) when
    the solutions are not few (the program would hand over), they name more than
    DESCRIBE_RESOURCES resources, or the graph has no in-process lookups."""
    prog, out = compiled
    rows, k = prog.run([()], min(max_rows, SMALL_ROWS))
    if k < len(prog.steps):
        return None
    ids = {r[i] for r in rows for i in out if i is not None}
    ids = sorted(i for i in ids if 0 <= i < LOCAL_BASE)
    if len(ids) > DESCRIBE_RESOURCES:
        return None
    return describe_small(ids, graph, terms, check)


def _construct_fast(compiled, terms, max_rows: int) -> QueryResult | None:
    """A CONSTRUCT's triples from its compiled program (None: the general path
    answers): :func:`engine.small_answers.construct_triples`."""
    return construct_triples(compiled, terms, max_rows)


class _Template:
    """A text of a fast shape as its skeleton's template: the slots that must
    stay as they are (None: the parameter's slots), the parameter's kind (its
    first character: ``<`` or a quote), the shape key, the plan (its BGP's
    constant is never read: the program is rebound, and the fast path's
    hand-over replaces the BGP by its rows) and the shape's other constants
    (a parameter equal to one of them has no shape)."""

    __slots__ = ("fixed", "quote", "key", "pq", "others", "memo", "cost_key", "params", "skeleton_keys", "places",
                 "variants", "alt", "__weakref__")

    def __init__(self, fixed, quote, key, pq, others):
        self.fixed = fixed
        self.quote = quote
        self.key = key
        self.pq = pq
        self.others = others
        #: (the shape's entry of the current snapshot, constant id -> rebound program), see _run_template
        self.memo = None
        #: the server's cost-table key of the shape, kept by the server (server/api/sparql.py _HitJob)
        self.cost_key = None
        #: with several parameters: the parameter of each slot (None: fixed), ``quote`` a tuple
        self.params = None
        #: ... and per parameter its key when the skeleton itself writes it (else None)
        self.skeleton_keys = None
        #: the slots that write the parameter(s) (those ``fixed`` has None for)
        self.places = ()
        #: a skeleton's template only: the templates of its texts with other values in the
        #: fixed slots (:func:`_fixed_values` -> template, or None: none), see Database._learn
        self.variants = {}
        #: a skeleton's template only: the template of its texts whose parameter(s) sit in
        #: other slots (None: not tried yet, False: none), see Database._learn
        self.alt = None


#: a skeleton keeps at most this many variant templates (other fixed slots), then starts over
_MAX_VARIANTS = 256


def _fixed_values(fixed: tuple, slots) -> tuple:
    """The values of ``slots`` at a template's fixed places (where ``fixed`` is not None):
    the key of a skeleton's variant templates."""
    return tuple([s for s, f in zip(slots, fixed, strict=True) if f is not None])


def _shape_constants(key: tuple) -> frozenset:
    """The predicates and classes of a shape key (see :func:`_fast_shape_key`)."""
    if key in _DESCRIBE_KEYS:
        return frozenset()
    out = frozenset(c[1] for row in key[1] for c in row if c is not None and c[0] == "c")
    if len(key) > 7 and key[7]:  # (a FILTER's constants: fast.filters)
        out |= filter_constants(key[7])
    if len(key) > 8 and key[8]:  # (a UNION's branches' conditions)
        for _, f in key[8]:
            out |= filter_constants(f)
    return out


class _BoundedDict(dict):
    """A dict that stops growing past ``cap`` entries (plan cache)."""

    def __init__(self, cap: int):
        super().__init__()
        self.cap = cap

    def __setitem__(self, k, v):
        if len(self) >= self.cap:
            self.clear()
        super().__setitem__(k, v)


