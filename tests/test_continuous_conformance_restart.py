"""Conformance across restarts (--data-dir): ISTREAM / DSTREAM queries take the first difference
after a restart against the last instant before it (not against nothing), also when the GC and
the window journal had freed what that instant's windows held under a plain RSTREAM horizon."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from engine.database import Database
from engine.stream import transient, window_journal
from engine.stream.manager import StreamManager

EX = "http://ex.org/"
PFX = f"PREFIX : <{EX}> "
QUERIES = {
    # tumbling: the instant before the restart shares no element with the one after it
    "tum_i": "REGISTER ISTREAM QUERY tum_i AS SELECT ?x FROM STREAM :s [RANGE 2s TUMBLING] WHERE { ?x :p ?y }",
    "tum_d": "REGISTER DSTREAM QUERY tum_d AS SELECT ?x FROM STREAM :s [RANGE 2s TUMBLING] WHERE { ?x :p ?y }",
    "slide_i": "REGISTER ISTREAM QUERY slide_i AS SELECT ?x (COUNT(*) AS ?n) FROM STREAM :s [RANGE 3s STEP 1s] "
               "WHERE { ?x :p ?y } GROUP BY ?x",
    "cons_d": "REGISTER DSTREAM QUERY cons_d AS CONSTRUCT { ?x :q ?y } FROM STREAM :s [RANGE 1s STEP 1s] "
              "WHERE { ?x :p ?y }",
    "rsp_i": "REGISTER ISTREAM <rsp_i> AS SELECT ?x FROM NAMED WINDOW :w ON :s [RANGE PT2S STEP PT1S] "
             "WHERE { WINDOW :w { ?x :p ?y } }",
    "count_d": "REGISTER DSTREAM QUERY count_d AS SELECT ?x FROM STREAM :s [RANGE TRIPLES 3 STEP 1s] "
               "WHERE { ?x :p ?y }",
}
# element k at t = k * 250 + 100: subject a(k % 5), object b(k)
ELEMS = [(f"a{k % 5}", f"b{k}", k * 250 + 100) for k in range(40)]
END = 10_000


def window(spec, t):
    r, n = spec
    if n is None:
        return [e for e in ELEMS if t - r < e[2] <= t]
    return [e for e in ELEMS if e[2] <= t][-n:]


SPEC = {"tum_i": (2000, None), "tum_d": (2000, None), "slide_i": (3000, None), "cons_d": (1000, None),
        "rsp_i": (2000, None), "count_d": (None, 3)}
STEP = {"tum_i": 2000, "tum_d": 2000}


def full(name, t) -> Counter:
    w = window(SPEC[name], t)
    if name == "slide_i":
        return Counter((x, str(c)) for x, c in Counter(x for x, _, _ in w).items())
    if name == "cons_d":
        return Counter({(x, y): 1 for x, y, _ in w})
    return Counter(x for x, _, _ in {(x, y, 0) for x, y, _ in w})


def got(name, doc) -> Counter:
    if "triples" in doc:
        out = Counter()
        for line in doc["triples"].splitlines():
            s, _, o = line.rstrip(" .").split(" ")
            out[(s[len(EX) + 1:-1], o[len(EX) + 1:-1])] = 1
        return out
    bs = doc["results"]["bindings"]
    if name == "slide_i":
        return Counter((b["x"]["value"][len(EX):], b["n"]["value"]) for b in bs)
    return Counter(b["x"]["value"][len(EX):] for b in bs)


def post(m, elems):
    for s, o, t in elems:   # one POST per element: many small journal records
        body = orjson.dumps({"s": f"<{EX}{s}>", "p": f"<{EX}p>", "o": f"<{EX}{o}>", "t": t})
        assert m.ingest_ndjson("s", body)["rejected"] == 0


@pytest.mark.parametrize(("mid", "cut"), [(4100, 4100), (4100, 5350), (2500, 3900)])
def test_istream_dstream_continue_across_a_restart(tmp_path, monkeypatch, mid, cut):
    # small journal files: a closed file is deleted as soon as the GC freed all its elements
    monkeypatch.setattr(window_journal.WindowJournal.__init__, "__defaults__", (256,))
    # and small window slices: the GC frees a few elements at a time
    kw = dict(transient.TransientStore.__init__.__kwdefaults__, slice_triples=2)
    monkeypatch.setattr(transient.TransientStore.__init__, "__kwdefaults__", kw)
    db = Database(shards=1)
    m = StreamManager(db, data_dir=str(tmp_path))
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        for text in QUERIES.values():
            m.register_query(PFX + text)
        # instants up to `mid` are evaluated (and the GC has run) before the elements up to `cut`
        # arrive: their journal records delete the files the GC freed
        post(m, [e for e in ELEMS if e[2] < mid])
        m.heartbeat("s", mid)
        assert m.drain(20)
        post(m, [e for e in ELEMS if mid <= e[2] < cut])
        m.heartbeat("s", cut)
        assert m.drain(20)
    finally:
        m.close()
    m = StreamManager(db, data_dir=str(tmp_path))
    try:
        post(m, [e for e in ELEMS if e[2] >= cut])
        m.heartbeat("s", END + 1)
        assert m.drain(20)
        for name in QUERIES:
            step = STEP.get(name, 1000)
            evs = [(e.id, orjson.loads(e.data)) for e in m.log(name).since(None, from_t=-1) if e.event == "result"]
            assert [t for t, _ in evs] == list(range(0, END + 1, step)), name
            mode = QUERIES[name].split()[1]
            for t, doc in evs:
                cur, prev = full(name, t), (full(name, t - step) if t else Counter())
                want = cur - prev if mode == "ISTREAM" else prev - cur
                assert got(name, doc) == want, (name, t)
    finally:
        m.close()
