"""`python -m bench.write_cost`: what writing answers costs the writing thread, TCP against a pipe.

The lane writes every answer to its client's loopback TCP connection from the
event loop's (the interpreter's) thread; the kernel delivers the segment and
wakes the client inside that ``write`` (~19 % of a 1-process server's CPU under
8 clients, ``perf``). This measures that cost apart, and what handing the same
answers to another process would cost the thread instead: ``--answers`` reader
processes, each asleep in ``recv`` on its own connection, get one answer each
(one ``send`` per connection: one wake-up each), against one ``write`` of all
of them to a pipe whose one reader process sleeps (one wake-up per batch), as a
writer process fed once per event-loop pass would take them. Thread CPU per
answer on the writing side (``time.thread_time``), median of the rounds; the
modes alternate.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time

ANSWER = b"HTTP/1.1 200 OK\r\n" + b"x" * 440  # about a selective answer's size


def _tcp_reader(port: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(65536)
    while s.recv_into(buf):
        s.send(b"a")  # one "request" per answer, as a client sends


def _pipe_reader(fd: int, back: int) -> None:
    while os.read(fd, 65536):
        os.write(back, b"a")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.write_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--answers", type=int, default=7, help="answers per batch (per event-loop pass; default 7)")
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    readers = [mp.Process(target=_tcp_reader, args=(ls.getsockname()[1],), daemon=True) for _ in range(args.answers)]
    for p in readers:
        p.start()
    conns = []
    for _ in range(args.answers):
        c, _ = ls.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(c)
    r, w = os.pipe()
    br, bw = os.pipe()
    piped = mp.Process(target=_pipe_reader, args=(r, bw), daemon=True)
    piped.start()
    batch = ANSWER * args.answers
    res: dict[str, list[float]] = {"tcp": [], "pipe": []}
    for _ in range(args.rounds):
        for mode in res:
            cpu = 0.0
            for _ in range(args.batches):
                t0 = time.thread_time()
                if mode == "tcp":
                    for c in conns:
                        c.send(ANSWER)
                else:
                    os.write(w, batch)
                cpu += time.thread_time() - t0
                time.sleep(0.0003)  # the readers answer and go back to sleep
                if mode == "tcp":
                    for c in conns:
                        c.recv(16)
                else:
                    os.read(br, 16)
            res[mode].append(cpu / args.batches / args.answers * 1e6)
    for mode, v in res.items():
        print(f"{mode}: µs per answer on the writing thread, rounds {' '.join(f'{x:.2f}' for x in v)}; "
              f"median {statistics.median(v):.2f}")
    for c in conns:
        c.close()
    os.close(w)
    for p in [*readers, piped]:
        p.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
