"""bench/http_load.py: the raw HTTP client reads both answer framings, and a short
run side by side with `oxigraph serve` agrees on every family's row counts."""

from __future__ import annotations

import pytest

from bench import http_load, lubm
from bench.peers import oxigraph_binary


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("hl") / "d.nt"
    lubm.generate(path, universities=1)
    return str(path)


def test_short_run_side_by_side(small, capsys):
    peers = "jindou-http,oxigraph-serve" if oxigraph_binary() else "jindou-http"
    code = http_load.main(["--data", small, "--peers", peers, "--rounds", "2", "--requests", "10",
                           "--seconds", "0.5", "--clients", "2"])
    out = capsys.readouterr().out
    assert code == 0, out  # 3: a row count mismatch between the peers
    for fam in http_load.FAMILIES:
        assert f"| repeated | {fam.name} |" in out and f"| varied | {fam.name} |" in out
    assert "| jindou-http |" in out and "queries/s" in out


def test_accept_runs_every_results_format_side_by_side(small, capsys, monkeypatch):
    """``--accept xml,csv,tsv``: one family per format, the peers' row counts (read from
    each format's body) agree."""
    monkeypatch.setattr(http_load, "FAMILIES", http_load.FAMILIES)  # (main replaces the module's families)
    peers = "jindou-http,oxigraph-serve" if oxigraph_binary() else "jindou-http"
    code = http_load.main(["--data", small, "--peers", peers, "--rounds", "1", "--requests", "5",
                           "--families", "point,inverse", "--accept", "xml,csv,tsv", "--skip-throughput"])
    out = capsys.readouterr().out
    assert code == 0, out
    for name in ("point.xml", "point.csv", "point.tsv", "inverse.csv"):  # (ask: test_answer_sizes_...)
        assert f"| repeated | {name} |" in out


def test_answer_sizes_of_each_results_format():
    fam = http_load.FAMILIES[0]
    xml, csv, tsv = (http_load.with_accept((fam,), a)[0] for a in ("xml", "csv", "tsv"))
    assert http_load._answer_size(xml, b"<sparql><results><result>1</result>\n<result>2</result></results>") == 2
    assert http_load._answer_size(xml, b"<sparql><head/><boolean>false</boolean></sparql>") is False
    assert http_load._answer_size(csv, b"s,o\r\na,b\r\nc,d\r\n") == 2
    assert http_load._answer_size(tsv, b"?_askResult\ntrue\n") is True
    assert http_load._answer_size(csv, b"false") is False


def test_every_family_has_answers(small):
    from engine.database import Database

    db = Database()
    db.load_file(small)
    for fam in http_load.FAMILIES:
        ents = http_load._entities(fam.kind, 60)
        rows = [len(db.query(fam.text(c))) for c in ents if "University0." in c]
        assert sum(rows) > 0, fam.name


def test_conn_reads_answers_in_pieces():
    """Conn's one receive buffer per connection: answers split over many reads, two
    answers in one read, a chunked one and one larger than the buffer, each whole."""
    import socket
    import threading

    big = b"x" * (http_load.RECV_SIZE + 12345)
    answers = [
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        b"HTTP/1.1 404 Not Found\r\ncontent-length: %d\r\n\r\n%s" % (len(big), big),
    ]
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        c, _ = srv.accept()
        with c:
            c.recv(100)
            for piece in (answers[0][:7], answers[0][7:30], answers[0][30:]):  # one answer in pieces
                c.sendall(piece)
            c.recv(100)
            c.sendall(answers[1] + answers[0])  # two answers in one write
            got = b""
            while len(got) < 2:  # "c" and "d" (maybe in one read)
                got += c.recv(100)
            c.sendall(answers[2])

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    conn = http_load.Conn(srv.getsockname()[1])
    try:
        assert conn.roundtrip(b"a") == (200, b"hello")
        assert conn.roundtrip(b"b") == (200, b"abcde")
        assert conn.roundtrip(b"c") == (200, b"hello")  # (already in the buffer)
        assert conn.roundtrip(b"d") == (404, big)
    finally:
        conn.close()
        srv.close()
    t.join(5)
