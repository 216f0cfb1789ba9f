"""`python -m bench.lane_profile`: CPU per request of the HTTP fast lane, in process.

Drives the real ``FastLaneProtocol`` (uvicorn's httptools protocol of
``server/app.py``, whose ``data_received`` reads plain lane heads itself with
``server/lane.py``; the app of ``create_app`` wrapped in ``RequestLog`` as
``jindou serve`` runs it) with pre-built ``GET /sparql?query=`` requests (``--method post`` / ``form``: POSTs) over
a stand-in transport that only collects the written bytes: no sockets, no
event-loop wake-ups, so the time per request is the server's own CPU for it
(HTTP parse, query string, shape, parse, program, execution, rendering,
headers, the write). Families: the selective shapes of issue 14 (point, star,
chains, inverse, small joins from a constant, LIMIT/DISTINCT/ORDER BY, ASK,
CONSTRUCT, DESCRIBE), each repeated (one text) and varied (a new constant and
comment every request). ``--profile`` adds a cProfile of the varied runs.
``--thrash-mb N`` (cold mode): before every timed request a buffer of N MiB is
read and written (untimed), so each request starts with its code and data
evicted from the caches, as a server woken from ``epoll`` for each request on a
busy machine meets them; the hot numbers measure instructions, the cold ones
also how many distinct objects and functions a request touches.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import statistics
import sys
import time

from bench.http_load import ACCEPTS, PREFIX, _entities, request_bytes

#: name -> (template with {c}, entity kind, Accept)
LANE_FAMILIES = {
    "point": ("SELECT ?p ?o WHERE {{ <{c}> ?p ?o }}", "AssociateProfessor"),
    "star4": ("SELECT ?n ?e ?t ?w WHERE {{ <{c}> ub:name ?n ; ub:emailAddress ?e ; ub:telephone ?t ; "
              "ub:worksFor ?w }}", "AssociateProfessor"),
    "chain2": ("SELECT ?c ?t WHERE {{ <{c}> ub:takesCourse ?c . ?t ub:teacherOf ?c }}", "GraduateStudent"),
    "chain3": ("SELECT ?p ?d ?u WHERE {{ <{c}> ub:advisor ?p . ?p ub:worksFor ?d . ?d ub:subOrganizationOf ?u }}",
               "GraduateStudent"),
    "inverse": ("SELECT ?s WHERE {{ ?s ub:advisor <{c}> }}", "FullProfessor"),
    "join": ("SELECT ?s ?n WHERE {{ ?s ub:advisor <{c}> . ?s ub:name ?n . ?s a ub:GraduateStudent }}",
             "FullProfessor"),
    "limit": ("SELECT ?s WHERE {{ ?s ub:advisor <{c}> }} LIMIT 3", "FullProfessor"),
    "distinct": ("SELECT DISTINCT ?c WHERE {{ ?s ub:advisor <{c}> . ?s ub:takesCourse ?c }}", "FullProfessor"),
    "orderby": ("SELECT ?s ?n WHERE {{ ?s ub:advisor <{c}> ; ub:name ?n }} ORDER BY ?n", "FullProfessor"),
    "ask": ("ASK {{ <{c}> ub:worksFor ?d }}", "AssociateProfessor"),
    "construct": ("CONSTRUCT {{ <{c}> ub:name ?n ; ub:worksFor ?d }} WHERE {{ <{c}> ub:name ?n ; ub:worksFor ?d }}",
                  "AssociateProfessor"),
    "describe": ("DESCRIBE <{c}>", "AssociateProfessor"),
}


GRAPH_ACCEPT = "application/n-triples"
#: the results media type of SELECT / ASK requests (``--accept``)
RESULTS_ACCEPT = "application/sparql-results+json"


def use_extended() -> None:
    """``--extended``: the families of ``python -m bench http-load --extended`` (their
    exact templates and entity kinds) instead of LANE_FAMILIES."""
    from bench.http_load import EXTENDED  # noqa: PLC0415

    LANE_FAMILIES.clear()
    LANE_FAMILIES.update({f.name: (f.template, f.kind) for f in EXTENDED})


def texts(name: str, mode: str, n: int, salt: str) -> list[str]:
    tpl, kind = LANE_FAMILIES[name]
    ents = _entities(kind, 60)
    if mode == "repeated":
        return [PREFIX + tpl.format(c=ents[0]) + "\n"] * n
    return [PREFIX + tpl.format(c=ents[i % len(ents)]) + f"\n# {salt}-{i}\n" for i in range(n)]


#: how request() sends a query (``--method``): get, post (application/sparql-query) or form
METHOD = "get"
#: how --profile sorts (--profile-sort)
PROFILE_SORT = "tottime"
#: --thrash-mb: a buffer read and written before every request (None: hot runs)
THRASH = None


def _thrash() -> None:
    """Evict the caches (and TLB) before a request: read every cache line of the
    buffer, write every 512th element (its pages dirtied)."""
    junk = THRASH
    junk.sum()
    junk[::512] += 1


def request(text: str, accept: str | None = None) -> bytes:
    if accept is None:
        graph = "\nCONSTRUCT" in text or "\nDESCRIBE" in text
        accept = GRAPH_ACCEPT if graph else RESULTS_ACCEPT
    return request_bytes("/sparql", text, 7878, accept, METHOD)


class _Transport(asyncio.Transport):
    """Collects what the protocol writes (the last answer)."""

    def __init__(self):
        super().__init__()
        self.out = []
        self.closed = False

    def write(self, data):
        self.out.append(data)

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 7878)}.get(name, default)

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


def make_protocol(db, loop):
    """A FastLaneProtocol over ``db`` as ``jindou serve`` builds it, connected to a stand-in transport."""
    return make_connector(db, loop)()


def make_connector(db, loop, settings=None):
    """``connect()`` -> (a new FastLaneProtocol connection, its stand-in transport), all
    of one app over ``db`` as ``jindou serve`` builds it (``settings``: default ones)."""
    import uvicorn
    from uvicorn.server import ServerState as UvState

    from server.app import create_app, http_protocol
    from server.logs import RequestLog
    from server.settings import Settings

    app = create_app(settings if settings is not None else Settings(), database=db)
    app.middleware_stack = app.build_middleware_stack()
    cfg = uvicorn.Config(RequestLog(app, access=False), http=http_protocol(), access_log=False, log_config=None,
                         lifespan="off")
    cfg.load()
    uv = UvState()

    def connect():
        proto = cfg.http_protocol_class(config=cfg, server_state=uv, app_state={}, _loop=loop)
        tr = _Transport()
        proto.connection_made(tr)
        return proto, tr

    return connect


def run(proto, tr, reqs: list[bytes], loop) -> tuple[list[float], int]:
    """Per-request ns of the inline answers, and how many went the ASGI way."""
    out = []
    slow = 0
    pc = time.perf_counter_ns
    cold = THRASH is not None
    for r in reqs:
        tr.out.clear()
        if cold:
            _thrash()
        t0 = pc()
        proto.data_received(r)
        t1 = pc()
        if not tr.out or not proto.cycle.response_complete if proto.cycle is not None else not tr.out:
            slow += 1
            deadline = time.monotonic() + 30
            while not (proto.cycle is not None and proto.cycle.response_complete) and time.monotonic() < deadline:
                loop.run_until_complete(asyncio.sleep(0.0005))
        else:
            out.append(t1 - t0)
    # (the keep-alive timer is armed once per idle spell, as a server's connection keeps it
    # between requests: cancelling it per request made every request arm a new one)
    if proto.timeout_keep_alive_task is not None:
        proto.timeout_keep_alive_task.cancel()
        proto.timeout_keep_alive_task = None
    return out, slow


def run_forms(connect, reqs: list[list[bytes]], loop, closing: bool) -> tuple[list[float], int, list[float]]:
    """:func:`run` for requests of several chunks (one read each, timed together)
    on connections from ``connect()``; with ``closing`` a new connection per
    request (its set-up timed apart: the third list)."""
    out, setup = [], []
    slow = 0
    pc = time.perf_counter_ns
    proto = tr = None
    for chunks in reqs:
        if proto is None or closing:
            t0 = pc()
            proto, tr = connect()
            setup.append(pc() - t0)
        tr.out.clear()
        if THRASH is not None:
            _thrash()
        t0 = pc()
        for c in chunks:
            proto.data_received(c)
        t1 = pc()
        if not tr.out or (proto.cycle is not None and not proto.cycle.response_complete):
            slow += 1
            deadline = time.monotonic() + 30
            while not (tr.out and (proto.cycle is None or proto.cycle.response_complete)) \
                    and time.monotonic() < deadline:
                loop.run_until_complete(asyncio.sleep(0.0005))
        else:
            out.append(t1 - t0)
        if proto.timeout_keep_alive_task is not None:
            proto.timeout_keep_alive_task.cancel()
            proto.timeout_keep_alive_task = None
        if closing:
            t0 = pc()
            proto.connection_lost(None)
            setup[-1] += pc() - t0
    return out, slow, setup


def client_table(db, loop, fams: list[str], names: list[str] | None, n: int, rounds: int) -> None:
    """µs per request of each client's request form (bench/client_forms.py), repeated
    and varied texts, and how many went the ASGI way."""
    from bench.client_forms import CLOSING, forms

    connect = make_connector(db, loop)
    names = names or list(forms("ASK {}"))
    cells: dict = {}
    for r in range(rounds):
        for name in names:
            for mode in ("repeated", "varied"):
                reqs = [forms(t)[name] for f in fams for t in texts(f, mode, n + 20, f"c{r}-{name}")]
                run_forms(connect, reqs[:50], loop, name in CLOSING)
                ns, slow, setup = run_forms(connect, reqs[50:], loop, name in CLOSING)
                c = cells.setdefault((name, mode), [[], 0, []])
                c[0].append(statistics.median(ns) / 1e3 if ns else float("nan"))
                c[1] += slow
                if setup and name in CLOSING:
                    c[2].append(statistics.median(setup) / 1e3)
    print(f"families {','.join(fams)}: µs per request (median of the rounds' medians), requests not answered "
          "inline, a new connection's set-up + close\n")
    print("| client form | repeated µs | varied µs | not inline | connection µs |\n| --- | ---: | ---: | ---: | ---: |")
    for name in names:
        a, b = cells[(name, "repeated")], cells[(name, "varied")]
        conn = a[2] + b[2]
        print(f"| {name} | {statistics.median(a[0]):.1f} | {statistics.median(b[0]):.1f} | {a[1] + b[1]} "
              f"| {statistics.median(conn) if conn else 0:.1f} |")


#: (label, module, attribute) of the functions timed by --stages (inclusive times)
STAGES = (
    ("data_received: HTTP parse + everything", "proto", "data_received"),
    ("on_message_complete: the lane", "proto", "on_message_complete"),
    ("answer_inline: handler + CORS + metrics", "server.app:EdgeMiddleware", "answer_inline"),
    ("answer_get: the lane GET's handler + head + metrics", "server.app:EdgeMiddleware", "answer_get"),
    ("handle_sparql_inline", "server.app", "handle_sparql_inline"),
    ("inline_answer: the handler before its reply", "server.app", "inline_answer"),
    ("query string decode", "server.api.sparql", "parse_params_cached"),
    ("a layout's ready runner: read, run, answer (_run_bound)", "server.api.sparql", "_run_bound"),
    ("raw text -> skeleton + slots (known layouts)", "engine.sparql.normalize", "raw_normalize"),
    ("POST: post_answer (the body's handler before its reply)", "server.app", "post_answer"),
    ("POST: body bytes -> skeleton + slots", "engine.sparql.normalize", "body_normalize"),
    ("skeleton -> template", "engine.database:Database", "match_template"),
    ("admission + cost record + the run (try_inline_lane)", "server.api.common:ServerState", "try_inline_lane"),
    ("the job's answer: negotiation + JSON", "server.api.sparql:_PlainJob", "answer"),
    ("Database.query_template", "engine.database:Database", "query_template"),
    ("text -> shape (cost key)", "server.api.sparql", "_cost_shape"),
    ("normalize (skeleton + slots)", "engine.sparql.normalize", "normalize"),
    ("parse + plan (texts without a template)", "engine.database:Database", "_prepare_shaped"),
    ("Database.query", "engine.database:Database", "query"),
    ("program rebinding", "engine.database", "_rebind"),
    ("template -> rebound program (_template_program)", "engine.database:Database", "_template_program"),
    ("tiny run (a program that ends tuple at a time, no budget)", "engine.database", "_tiny_run"),
    ("a runner's answer: small writer", "server.api.sparql:_BoundJob", "answer"),
    ("run_fast (compiled program)", "engine.database", "run_fast"),
    ("run_fast_lists (compiled program, lists out)", "engine.database", "run_fast_lists"),
    ("write (status line, headers, request id)", "proto", "_write_answer"),
    ("render: small SPARQL JSON", "engine.small_answers", "select_json"),
    ("render: small N-Triples", "engine.small_answers", "graph_ntriples"),
    ("render: small XML / CSV / TSV", "engine.small_answers", "_select"),
    ("render: general writer", "engine.exec.serialize", "serialize"),
)


def instrument(proto) -> tuple[dict, list]:
    """Wrap the STAGES functions with perf_counter_ns probes: (label -> [calls, ns],
    the (owner, attribute, function) to put back)."""
    import importlib

    acc: dict = {}
    undo: list = []
    for label, where, attr in STAGES:
        if where == "proto":
            owner = type(proto)
        else:
            mod, _, cls = where.partition(":")
            owner = importlib.import_module(mod)
            if cls:
                owner = getattr(owner, cls, None)
                if owner is None:  # (an older tree: no such stage)
                    continue
        fn = getattr(owner, attr, None)
        if fn is None:  # (an older tree: no such stage)
            continue
        undo.append((owner, attr, fn))
        cell = acc[label] = [0, 0]

        def wrapped(*a, __fn=fn, __cell=cell, **k):
            t0 = time.perf_counter_ns()
            try:
                return __fn(*a, **k)
            finally:
                __cell[0] += 1
                __cell[1] += time.perf_counter_ns() - t0

        setattr(owner, attr, wrapped)
    return acc, undo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lane_profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/jindou-bench/lubm-t1000000-seed0.nt")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--families", default=None)
    ap.add_argument("--profile", default=None, help="cProfile the varied runs of this family ('all')")
    ap.add_argument("--profile-mode", default="varied")
    ap.add_argument("--profile-sort", default="tottime", help="pstats order of --profile (e.g. cumulative)")
    ap.add_argument("--stages", action="store_true", help="instead: inclusive time per stage (perf_counter_ns probes)")
    ap.add_argument("--show", action="store_true", help="print one answer per family")
    ap.add_argument("--clients", nargs="?", const="all", default=None,
                    help="instead: per client request form (bench/client_forms.py; comma-separated or all)")
    ap.add_argument("--mapped", action="store_true",
                    help="the store as a `--processes N` server holds it: persisted in /dev/shm, the graph "
                         "and dictionary arrays mapped from the packs (Store.remap)")
    ap.add_argument("--extended", action="store_true",
                    help="the families of `bench http-load --extended` (their texts) instead")
    ap.add_argument("--method", choices=("get", "post", "form"), default="get",
                    help="how the requests carry their query (as `bench http-load --method`)")
    ap.add_argument("--accept", default="json",
                    help="results format(s) of SELECT / ASK requests, comma-separated: json, xml, csv, tsv or "
                         "media types (as `bench http-load --accept`; graph families keep N-Triples; "
                         "several: measured alternately, --stages and --profile use the first)")
    ap.add_argument("--thrash-mb", type=int, default=0,
                    help="cold mode: read and write a buffer of this many MiB before every timed request "
                         "(64: past the L3 cache), so every request starts equally cold")
    args = ap.parse_args(argv)
    globals()["METHOD"] = args.method
    globals()["RESULTS_ACCEPT"] = ACCEPTS.get(args.accept.split(",")[0], args.accept.split(",")[0])
    globals()["PROFILE_SORT"] = args.profile_sort
    if args.extended:
        use_extended()
    from engine.database import Database

    tmp = None
    if args.mapped:
        import atexit
        import shutil
        import tempfile

        tmp = tempfile.mkdtemp(prefix="jindou-lane-profile-", dir="/dev/shm")
        atexit.register(shutil.rmtree, tmp, True)
        db = Database(query_timeout=3600, data_dir=tmp)
    else:
        db = Database(query_timeout=3600)
    t0 = time.perf_counter()
    db.load_file(args.data)
    if args.mapped:
        db.store.remap()
    print(f"loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    import gc

    gc.collect()
    gc.freeze()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    proto, tr = make_protocol(db, loop)
    if args.thrash_mb > 0:
        import numpy as np

        globals()["THRASH"] = np.ones(args.thrash_mb << 17, dtype=np.int64)
    fams = args.families.split(",") if args.families else list(LANE_FAMILIES)
    if args.clients:
        client_table(db, loop, fams, None if args.clients == "all" else args.clients.split(","),
                     args.requests, args.rounds)
        return 0
    if args.stages:
        for mode in ("repeated", "varied"):
            for f in fams:
                run(proto, tr, [request(t) for t in texts(f, mode, 100, "warm")], loop)
            reqs = [request(t) for f in fams for t in texts(f, mode, args.requests, "stages")]
            acc, undo = instrument(proto)
            run(proto, tr, reqs, loop)
            for owner, attr, fn in undo:  # take the probes out
                setattr(owner, attr, fn)
            print(f"\n{mode} texts, families {','.join(fams)}: µs per request (inclusive), calls per request\n")
            print("| stage | µs | calls |\n| --- | ---: | ---: |")
            for label, (calls, ns) in acc.items():
                print(f"| {label} | {ns / len(reqs) / 1e3:.1f} | {calls / len(reqs):.2f} |")
        return 0
    accepts = [ACCEPTS.get(a, a) for a in args.accept.split(",")]
    cells: dict = {}
    for r in range(args.rounds):
        for f in fams:
            for acc in accepts:  # (formats alternate within a round)
                globals()["RESULTS_ACCEPT"] = acc
                for mode in ("repeated", "varied"):
                    # (a salt per format: "varied" texts never seen before, not the previous format's)
                    reqs = [request(t) for t in texts(f, mode, args.requests + 50, f"r{r}-{acc}")]
                    ns, slow = run(proto, tr, reqs[:50], loop)
                    ns, slow = run(proto, tr, reqs[50:], loop)
                    cells.setdefault((f, acc, mode), []).append(statistics.median(ns) / 1e3 if ns else float("nan"))
                    if slow:
                        print(f"{f} {mode}: {slow} of {len(reqs) - 50} not inline", file=sys.stderr)
                    if args.show and r == 0 and mode == "repeated":
                        print(f, acc, b"".join(tr.out)[:600].decode(errors="replace"))
    print("| family | Accept | repeated µs | varied µs |\n| --- | --- | ---: | ---: |")
    for f in fams:
        for acc in accepts:
            a, b = (statistics.median(cells[(f, acc, m)]) for m in ("repeated", "varied"))
            print(f"| {f} | {acc} | {a:.1f} | {b:.1f} |")
    globals()["RESULTS_ACCEPT"] = accepts[0]
    if args.profile:
        pf = fams if args.profile == "all" else args.profile.split(",")
        reqs = [request(t) for f in pf for t in texts(f, args.profile_mode, args.requests, "prof")]
        pr = cProfile.Profile()
        pr.enable()
        run(proto, tr, reqs, loop)
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(PROFILE_SORT).print_stats(45)
        print(s.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
