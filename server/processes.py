"""Several serving processes over one store: ``jindou serve --processes N``.

One Python process serves one core. With ``--processes N`` the server is N
processes on one listening socket (inherited: the kernel hands each new
connection to whichever process accepts first):

* the **primary** (the process started by ``jindou serve``) owns the store and
  everything that changes or watches it: writes, streams, continuous queries,
  SSE, admin (/status, /metrics), the web UI. Its store is persistent in a
  directory (``--data-dir``, else ``/dev/shm/jindou-procs-<pid>-<tag>/store``),
  so every graph array lives in the segment packs of :mod:`engine.kv.persist`;
  after the initial load the primary swaps its own arrays for the mapped packs
  (:meth:`engine.kv.store.Store.remap`).
* **query processes** (``python -m server.processes``, started and supervised
  by the primary) open that directory read-only (:class:`ReaderStore`: the
  packs memory-mapped through the distributed store's ``shm`` transport, no
  copy per process) and answer ``GET``/``POST /sparql`` queries, the HTTP fast
  lane included. Any other request that reaches one of them is not proxied:
  the connection itself (its file descriptor, by ``SCM_RIGHTS``) and the bytes
  already read go to the primary, whose uvicorn protocol continues it
  (``loop.connect_accepted_socket``) -- keep-alive, SSE and streaming answers
  work as if the primary had accepted it.

Read-your-writes: the store calls :meth:`ProcessGroup.on_commit` after each
commit (under the writer lock, before the write is acknowledged); every query
process re-reads the manifest, maps the new packs (unchanged segments keep
their mapped arrays and lookup tables), extends its dictionary, and
acknowledges. A process that has not switched within
``--process-sync-timeout`` is killed (so it serves nothing stale) and
restarted; the write is then acknowledged.

Control messages ride a ``SOCK_SEQPACKET`` socket pair per query process
(kind byte + payload): ``S`` switch to version >= sn, ``A`` now at sn, ``R``
started at sn, ``H`` a connection (fd + bytes), ``T`` counters (JSON).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np

from engine.bom import strip_bom
from engine.kv import vertex_preds
from engine.kv.dictionary import Dictionary
from engine.kv.graph import GraphIndex, empty_graph
from engine.kv.persist import MANIFEST
from engine.kv.store import Snapshot, Store

log = logging.getLogger("jindou.server")

_SWITCH, _ACK, _HELLO, _CONN, _MORE, _STATS = b"S", b"A", b"R", b"H", b"C", b"T"
_GIVE, _PLACE = b"B", b"P"  # a fresh connection to balance: to the primary (+ target), to a query process
#: bytes per hand-over message (the bytes a query process read may be more than one
#: SOCK_SEQPACKET message holds where socket buffers are small)
_PIECE = 32 << 10
_SN = struct.Struct("<q")
_BUF = 4 << 20  # control socket buffers: a handed-over connection's first bytes fit one message
_MAX_MSG = 1 << 20
#: request bytes a query process reads looking for the end of the head (and a small form body)
_PEEK_LIMIT = 64 << 10
_SHM = "/dev/shm"
#: longest wait of the primary's control thread for a message (it supervises the query
#: processes after each wait: exits are also seen at once, as their control socket closes)
_IDLE = 0.5
#: a connection counts towards its process's load (the balance) while it was opened
#: or asked something within this many seconds
_ACTIVE_S = 1.0
#: how often a process republishes that count
_REPUBLISH_S = 0.5
_DIR_PREFIX = "jindou-procs-"


# ------------------------------------------------------------------ the shared store, read side
class ReaderStore(Store):
    """The primary's persisted store, read-only in another process: graph arrays
    mapped from the packs (shared pages), the dictionary's arrays mapped when
    one chunk holds them (a heap copy once writes add terms). :meth:`refresh`
    moves to the newest manifest; a commit here is refused."""

    def __init__(self, directory: str):
        from engine.cluster.transport import SharedMemoryTransport

        self.write_lock = threading.RLock()
        self.data_dir = None
        self._persist = None
        self.load_counter = 0
        self.dir = directory
        self._transport = SharedMemoryTransport(None, directory)
        self._graphs: dict[int, tuple[tuple, GraphIndex]] = {}
        self._chunks: list[list[str]] = []
        self.dictionary = ReadOnlyDictionary()
        self.n_shards = 1
        self._empty = empty_graph(1)
        self._snapshot = Snapshot(0, self.dictionary, self._empty, {}, self._empty)
        self.refresh()

    def commit(self, changes):
        from engine.errors import JindouError

        raise JindouError("this query process cannot write: writes are served by the primary process")

    def refresh(self) -> int:
        """Switch to the manifest's version (if newer); the version now served."""
        with self.write_lock:
            for _ in range(50):
                try:
                    with open(os.path.join(self.dir, MANIFEST), encoding="utf-8") as f:
                        man = json.load(f)
                except FileNotFoundError:  # nothing committed yet: the empty store
                    return self._snapshot.sn
                try:
                    self._switch(man)
                    return self._snapshot.sn
                except FileNotFoundError:
                    # a newer commit collected files this manifest named: read the newer one
                    time.sleep(0.001)
            raise RuntimeError(f"cannot follow the store in {self.dir}: files keep disappearing")

    def _switch(self, man: dict) -> None:
        sn = int(man["sn"])
        if sn <= self._snapshot.sn:
            return
        n = int(man["shards"])
        if n != self.n_shards:
            self.n_shards = n
            self._empty = empty_graph(n)
            self._graphs = {}
        d = self._dictionary_for(man["dictionary"]["chunks"])
        parts = self._transport.shards({"graphs": man["graphs"], "owned": list(range(n))}, n)
        graphs: dict[int, tuple[tuple, GraphIndex]] = {}
        for g, per in parts.items():
            shards = [per.get(k) or self._empty.shards[k] for k in range(n)]
            ids = tuple(id(s) for s in shards)
            hit = self._graphs.get(g)
            # the same shards: the same GraphIndex, so its statistics and caches carry over
            graphs[g] = hit if hit is not None and hit[0] == ids else (ids, GraphIndex(shards))
            if graphs[g] is not hit:  # its edge indexes: the last version's patched (or built)
                vertex_preds.follow(hit[1] if hit is not None else None, graphs[g][1])
        self._graphs = graphs
        default = graphs[-1][1] if -1 in graphs else self._empty
        named = {g: gi for g, (_, gi) in graphs.items() if g != -1}
        self._snapshot = Snapshot(sn, d, default, named, self._empty)

    def _dictionary_for(self, chunks: list[list[str]]) -> Dictionary:
        chunks = [list(c) for c in chunks]
        have = self._chunks
        if have and chunks[: len(have)] == have:
            for c in chunks[len(have):]:
                blob, offs, num, hashes, hids = (np.load(self._p(x)) for x in c)
                self.dictionary.extend_persisted(blob, offs, num, hashes, hids)
        elif chunks != have:  # first open, or the writer compacted its chunks: read them all
            self.dictionary = _mapped_dictionary([[self._p(x) for x in c] for c in chunks])
        self._chunks = chunks
        return self.dictionary

    def _p(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def stats(self) -> dict:
        st = super().stats()
        st["persistent"] = False
        return st


class ReadOnlyDictionary(Dictionary):
    """A query process's dictionary: it follows the primary's (ids must stay the same
    in every process), so it never interns a term itself."""

    def encode(self, keys):
        ids = self.lookup_many(keys)
        if len(ids) and int(ids.min()) < 0:
            from engine.errors import JindouError

            raise JindouError("this query process cannot add terms: writes are served by the primary process")
        return ids


def _mapped_dictionary(chunks: list[list[str]]) -> Dictionary:
    """A dictionary over persisted chunks: one chunk is mapped as it is (its pages
    shared with every process mapping it); several are concatenated."""
    if not chunks:
        return ReadOnlyDictionary()
    # plain ndarray views of the maps: np.memmap's slicing costs microseconds per key lookup
    parts = [[np.load(p, mmap_mode="r").view(np.ndarray) for p in c] for c in chunks]
    if len(parts) == 1:
        blob, offs, num, hashes, hids = parts[0]
    else:
        blob = np.concatenate([p[0] for p in parts])
        offs = np.concatenate([p[1] for p in parts])
        num = np.concatenate([p[2] for p in parts])
        hashes = np.concatenate([p[3] for p in parts])
        hids = np.concatenate([p[4] for p in parts])
        order = np.argsort(hashes, kind="stable")
        hashes, hids = hashes[order], hids[order]
    d = ReadOnlyDictionary()
    d.use_persisted(blob, offs, num, hashes, hids)
    return d


# ------------------------------------------------------------------ which process serves a request
def classify(buf: bytes) -> str | None:
    """``"read"`` when a query process answers the request starting ``buf`` (a
    SPARQL query at /sparql), ``"primary"`` for anything else, None while the
    head (or a small form body that may hold ``update=``) is incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return "primary" if len(buf) > _PEEK_LIMIT else None
    lines = buf[:end].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        return "primary"  # the primary's parser answers the malformed request
    method, target = parts[0], parts[1]
    path = target.split(b"?", 1)[0]
    if path not in (b"/sparql", b"/sparql/"):
        return "primary"
    if method in (b"GET", b"HEAD", b"OPTIONS"):
        return "read"
    if method != b"POST":
        return "primary"
    ctype, length, chunked, expect = b"", None, False, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-type":
            ctype = value.split(b";", 1)[0].strip().lower()
        elif name == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return "primary"
        elif name == b"transfer-encoding":
            chunked = True
        elif name == b"expect":
            expect = True  # the body comes after a 100 Continue: the primary looks into it
    if ctype == b"application/sparql-query":
        return "read"
    if (ctype != b"application/x-www-form-urlencoded" or chunked or length is None or length > _PEEK_LIMIT
            or expect):
        return "primary"  # an update, another body, or a form too big to look into here
    body = buf[end + 4:]
    if len(body) < length:
        return None
    try:
        form = parse_qs(strip_bom(body[:length]).decode("latin-1"), keep_blank_values=True)  # (as parse_form)
    except ValueError:
        return "primary"
    return "primary" if "update" in form else "read"


# ------------------------------------------------------------------ primary side
class _Reader:
    """One query process as the primary sees it."""

    def __init__(self, no: int):
        self.no = no
        self.proc: subprocess.Popen | None = None
        self.ctrl: socket.socket | None = None
        self.state = "stopped"  # starting, joining, up, dead, stopped
        self.acked = -1
        self.started = 0.0
        self.restart_at = 0.0
        self.failures = 0
        self.restarts = 0
        self.handed_over = 0
        self.last_seen = 0.0  # monotonic time of its last message (it reports every second)
        self.pending: tuple[int, list[bytes]] | None = None  # a connection whose bytes are still coming
        self.stats: dict = {}


class ProcessGroup:
    """The primary's side: starts, feeds and supervises the query processes."""

    def __init__(self, config, store: Store, listen: socket.socket, directory: str, store_dir: str,
                 own_dir: bool):
        self.config = config
        self.store = store
        self.listen = listen
        self.dir = directory
        self.store_dir = store_dir
        self.own_dir = own_dir
        self.timeout = float(config.process_sync_timeout)
        #: a query process reports every second; one silent for longer than a query may
        #: run inline plus the switch time limit is restarted
        #: (no query time limit: never)
        qt = float(config.query_timeout)
        self.silence = qt + self.timeout + 2.0 if qt > 0 else float("inf")
        self.readers = [_Reader(k) for k in range(1, int(config.processes))]
        self.cpus = process_cpus(config)  # (before the primary binds itself: its children inherit that)
        self._cond = threading.Condition()
        self._sel = selectors.DefaultSelector()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server = None
        self._early: list[tuple[int, bytes]] = []  # connections handed over before the loop runs
        self.started = time.time()

    # ---- life cycle
    def start(self) -> None:
        cfg = self.config.model_copy(update={"data_dir": None, "demo": False, "data": [], "graph": []})
        with open(os.path.join(self.dir, "config.json"), "w", encoding="utf-8") as f:
            f.write(cfg.model_dump_json())
        self.store.on_commit = self.on_commit
        self.store.processes_status = self.status
        global _BALANCE
        path = os.path.join(self.dir, "connections")
        np.zeros(len(self.readers) + 1, dtype=np.int64).tofile(path)
        self.balance = _BALANCE = _Balance(path, 0, len(self.readers) + 1, self.place)
        for r in self.readers:
            self._spawn(r)
        self._thread = threading.Thread(target=self._run, name="jindou-processes", daemon=True)
        self._thread.start()
        if self.cpus is not None:  # the event loop's thread (this one), after the query processes started
            bind_cpu(self.cpus[0])

    def attach(self, loop: asyncio.AbstractEventLoop, server) -> None:
        """The primary's uvicorn server is starting: connections handed over go to it."""
        with self._cond:
            self.loop, self.server = loop, server
            early, self._early = self._early, []
        for fd, data in early:
            self._adopt(fd, data)

    def stop_readers(self) -> None:
        """Ask every query process to stop (the primary is shutting down)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            procs = [r.proc for r in self.readers if r.proc is not None]
        for p in procs:
            with contextlib.suppress(OSError):
                p.send_signal(signal.SIGTERM)

    def stop(self, grace: float = 10.0) -> None:
        """Stop every query process (SIGTERM, then SIGKILL after ``grace``), end the
        control thread, remove the shared-memory directory."""
        self.stop_readers()
        self.store.on_commit = None
        end = time.monotonic() + grace
        for r in self.readers:
            p = r.proc
            if p is None:
                continue
            try:
                p.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(5)
        if self._thread is not None:
            self._thread.join(5)
        for r in self.readers:
            self._close_ctrl(r)
            r.state = "stopped"
        with self._cond:
            early, self._early = self._early, []
        for fd, _ in early:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- query processes
    def _spawn(self, r: _Reader) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for s in (mine, theirs):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BUF)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _BUF)
        root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        argv = [sys.executable, "-m", "server.processes", "--no", str(r.no), "--dir", self.dir,
                "--store", self.store_dir, "--listen-fd", str(self.listen.fileno()),
                "--ctrl-fd", str(theirs.fileno()), "--parent", str(os.getpid())]
        if self.cpus is not None:
            argv += ["--cpu", str(self.cpus[r.no])]
        try:
            proc = subprocess.Popen(argv, pass_fds=(self.listen.fileno(), theirs.fileno()), env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=own_session(self.config))
        except OSError as e:
            mine.close()
            theirs.close()
            log.error("cannot start query process %d: %s", r.no, e)
            r.state, r.restart_at = "dead", time.monotonic() + 1.0
            return
        theirs.close()
        mine.settimeout(self.timeout)
        with self._cond:
            r.proc, r.ctrl, r.state, r.acked = proc, mine, "starting", -1
            r.started = r.last_seen = time.monotonic()
        self._sel.register(mine, selectors.EVENT_READ, r)
        log.info("query process %d started (pid %d)", r.no, proc.pid)

    def _close_ctrl(self, r: _Reader) -> None:
        if r.pending is not None:
            with contextlib.suppress(OSError):
                os.close(r.pending[0])
            r.pending = None
        s, r.ctrl = r.ctrl, None
        if s is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(s)
            s.close()

    def _kill(self, r: _Reader, why: str) -> None:
        """Stop ``r`` now (caller holds the condition): it serves nothing more."""
        if r.state == "dead":
            return
        r.state = "dead"
        log.warning("query process %d (pid %s) %s: restarting it", r.no, r.proc.pid if r.proc else "?", why)
        if r.proc is not None:
            with contextlib.suppress(OSError):
                r.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.proc.wait(2)
        self._cond.notify_all()

    def _run(self) -> None:
        while not (self._stopping and all(r.proc is None or r.proc.poll() is not None for r in self.readers)):
            try:
                events = self._sel.select(self._idle_wait()) if self._sel.get_map() else None
            except (OSError, ValueError):
                events = None
            if events is None:
                time.sleep(0.05)
            for key, _ in events or ():
                self._on_message(key.data)
            self._supervise()

    def _idle_wait(self) -> float:
        """How long the control thread may wait for a message: until the next restart
        is due, else :data:`_IDLE` (a message wakes it at once). Every wake-up of this
        thread takes the GIL from the event loop's thread in the middle of its requests
        (it used to wake ~17 times a second)."""
        if self._stopping:
            return 0.05
        wait = _IDLE
        now = time.monotonic()
        for r in self.readers:
            if r.proc is None and r.state == "dead":
                wait = min(wait, max(0.0, r.restart_at - now))
        return wait

    def _supervise(self) -> None:
        now = time.monotonic()
        for r in self.readers:
            if r.state == "up" and now - r.last_seen > self.silence and not self._stopping:
                # its event loop has not run for longer than any query may take: wedged
                with self._cond:
                    self._kill(r, f"sent nothing for {now - r.last_seen:.0f} s")
            p = r.proc
            if p is not None and p.poll() is not None:
                with self._cond:
                    if r.state != "dead" and not self._stopping:
                        log.warning("query process %d (pid %d) exited with status %s: restarting it",
                                    r.no, p.pid, p.returncode)
                    r.state = "dead"
                    self._cond.notify_all()
                self._close_ctrl(r)
                r.proc = None
                if _BALANCE is not None:
                    _BALANCE.arr[r.no] = 0  # its connections went with it
                ran = now - r.started
                r.failures = 0 if ran > 30 else r.failures + 1
                r.restart_at = now + min(5.0, 0.2 * 2 ** max(0, r.failures - 1))
            if r.proc is None and not self._stopping and r.state == "dead" and now >= r.restart_at:
                r.restarts += 1
                self._spawn(r)

    def _on_message(self, r: _Reader) -> None:
        s = r.ctrl
        if s is None:
            return
        try:
            msg, fds, _, _ = socket.recv_fds(s, _MAX_MSG, 4)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError:
            msg, fds = b"", []
        if not msg:  # the process is gone (its exit is seen by _supervise)
            self._close_ctrl(r)
            with self._cond:
                r.state = "dead"
                self._cond.notify_all()
            return
        r.last_seen = time.monotonic()
        kind = msg[:1]
        if kind == _GIVE and fds:
            self._place(int.from_bytes(msg[1:3], "little"), fds[0])
            fds = fds[1:]
        elif kind == _CONN and fds:
            r.pending = (fds[0], [msg[2:]])
            fds = fds[1:]
        elif kind == _MORE and r.pending is not None:
            r.pending[1].append(msg[2:])
        if kind in (_CONN, _MORE) and r.pending is not None and msg[1:2] == b"0":  # the last piece
            fd, parts = r.pending
            r.pending = None
            r.handed_over += 1
            self._adopt(fd, b"".join(parts))
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if kind == _ACK:
            with self._cond:
                r.acked = max(r.acked, _SN.unpack_from(msg, 1)[0])
                if r.state == "joining":
                    r.state = "up"
                self._cond.notify_all()
        elif kind == _HELLO:
            with self._cond:
                r.acked = _SN.unpack_from(msg, 1)[0]
                r.state = "joining"
                # the snapshot is published before on_commit runs: a commit that does not
                # see this process as joining has already published what is sent here
                self._send(r, _SWITCH + _SN.pack(self.store.snapshot().sn))
        elif kind == _STATS:
            with contextlib.suppress(ValueError):
                r.stats = json.loads(msg[1:])

    def _send(self, r: _Reader, msg: bytes) -> None:
        try:
            if r.ctrl is None:
                raise OSError("no control channel")
            r.ctrl.send(msg)
        except OSError as e:
            self._kill(r, f"cannot be told of a new version ({e})")

    def on_commit(self, snap) -> None:
        """Store hook (writer lock held): every query process switches to ``snap``
        before the write is acknowledged; one that lags past the time limit is killed."""
        sn = snap.sn
        with self._cond:
            targets = [r for r in self.readers if r.state in ("joining", "up")]
            for r in targets:
                self._send(r, _SWITCH + _SN.pack(sn))
            deadline = time.monotonic() + self.timeout
            while True:
                lag = [r for r in targets if r.state in ("joining", "up") and r.acked < sn]
                if not lag:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    for r in lag:
                        self._kill(r, f"did not switch to version {sn} within {self.timeout:g} s")
                    return
                self._cond.wait(left)

    # ---- connections handed over
    def place(self, target: int, fd: int) -> None:
        """Give a connection this process accepted to query process ``target`` (balance);
        OSError when it cannot take it now."""
        r = self.readers[target - 1] if 0 < target <= len(self.readers) else None
        with self._cond:
            if r is None or r.state != "up" or r.ctrl is None:
                raise OSError("that process is not serving")
            socket.send_fds(r.ctrl, [_PLACE], [fd])

    def _place(self, target: int, fd: int) -> None:
        """A connection a query process gives away: to ``target``, else here."""
        if target != 0:
            try:
                self.place(target, fd)
            except OSError:
                pass
            else:
                with contextlib.suppress(OSError):
                    os.close(fd)
                return
        self._adopt(fd, b"")

    def _adopt(self, fd: int, data: bytes) -> None:
        with self._cond:
            loop = self.loop
            if loop is None and not self._stopping:
                self._early.append((fd, data))
                return
        if loop is None or self._stopping:
            with contextlib.suppress(OSError):
                os.close(fd)
            return
        try:
            loop.call_soon_threadsafe(self._adopt_in_loop, fd, data)
        except RuntimeError:  # the loop is closed
            with contextlib.suppress(OSError):
                os.close(fd)

    def _adopt_in_loop(self, fd: int, data: bytes) -> None:
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.close(fd)
            return
        server = self.server
        if server is None or server.should_exit:
            sock.close()
            return
        sock.setblocking(False)
        self.loop.create_task(self._continue(sock, server, data))

    async def _continue(self, sock: socket.socket, server, data: bytes) -> None:
        config = server.config
        loop = asyncio.get_running_loop()

        def protocol():
            proto = config.http_protocol_class(config=config, server_state=server.server_state,
                                               app_state=server.lifespan.state, _loop=loop)
            proto._adopted = True
            made = proto.connection_made

            def connection_made(transport) -> None:
                # the bytes the query process read come first, before anything the
                # transport reads from the socket (a body sent after the head)
                made(transport)
                if data:
                    proto.data_received(data)

            proto.connection_made = connection_made
            return proto

        try:
            await loop.connect_accepted_socket(protocol, sock=sock)
        except Exception as e:  # noqa: BLE001 - the client went away meanwhile
            log.debug("handed-over connection lost: %s", e)
            sock.close()

    # ---- /status, /metrics
    def status(self) -> list[dict]:
        """One entry per process (the primary first): role, pid, state, the store
        version it serves, memory (resident; proportional = shared pages split
        among the processes mapping them), requests it answered."""
        me = {"process": 0, "role": "primary", "pid": os.getpid(), "state": "up",
              "version": self.store.snapshot().sn, **_memory(os.getpid())}
        if self.server is not None:
            me["requests"] = self.server.server_state.total_requests
        out = [me]
        with self._cond:
            rows = [(r, r.proc.pid if r.proc else None) for r in self.readers]
        for r, pid in rows:
            row = {"process": r.no, "role": "query", "pid": pid, "state": r.state, "version": r.acked,
                   "restarts": r.restarts, "handed_over": r.handed_over,
                   "requests": int(r.stats.get("requests", 0))}
            if pid is not None:
                row.update(_memory(pid))
            out.append(row)
        return out


def _memory(pid: int) -> dict:
    """Resident and proportional set size of a process (Linux /proc), bytes."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("Rss", "Pss"):
                    out["rss_bytes" if k == "Rss" else "pss_bytes"] = int(v.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def group_directory(config) -> tuple[str, str, bool]:
    """(directory for the group's files, the store's persistent directory, whether the
    group owns both): the store lives in ``--data-dir`` when given, else in shared
    memory under the group's directory (removed at stop). Directories of groups
    whose primary is gone are removed first."""
    base = _SHM if os.path.isdir(_SHM) and os.access(_SHM, os.W_OK) else None
    _sweep(base)
    import tempfile

    d = tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-", dir=base)
    if config.data_dir:
        return d, os.path.abspath(config.data_dir), True
    return d, os.path.join(d, "store"), True


def _sweep(base: str | None) -> None:
    import tempfile

    root = base or tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if not name.startswith(_DIR_PREFIX):
                continue
            try:
                pid = int(name[len(_DIR_PREFIX):].split("-", 1)[0])
            except ValueError:
                continue
            if pid != os.getpid() and not pid_alive(pid):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0; one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def primary_server_class():
    """uvicorn's Server that tells the group when it starts and stops."""
    import uvicorn

    class PrimaryServer(uvicorn.Server):
        group: ProcessGroup | None = None

        async def startup(self, sockets=None) -> None:
            if self.group is not None:
                self.group.attach(asyncio.get_running_loop(), self)
            await super().startup(sockets=sockets)

        async def shutdown(self, sockets=None) -> None:
            if self.group is not None:
                self.group.stop_readers()
            await super().shutdown(sockets=sockets)

    return PrimaryServer


# ------------------------------------------------------------------ balancing connections
class _Balance:
    """Busy connections per process, in a small shared array (each process writes its
    own slot). A process that accepts a connection while it holds two more than the
    least busy one gives it to that one: the accepting process is whichever woke
    first (one may take a whole burst of connections), so without this a few keep-alive
    clients can pile onto one process while another idles.

    A connection counts while it is busy: opened, or asked something, within the last
    :data:`_ACTIVE_S` seconds. An idle keep-alive connection (a monitor's, a browser
    tab's, the one a benchmark loaded its data with) costs its process nothing, and
    counted as one it tipped a burst of 8 clients into 3 / 5 instead of 4 / 4. Each
    process republishes its count every :data:`_REPUBLISH_S` while it has connections.
    ``now`` is the event loop's clock (``loop.time()``)."""

    def __init__(self, path: str, index: int, n: int, give):
        self.arr = np.memmap(path, dtype=np.int64, mode="r+", shape=(n,))
        self.i = index
        self.give = give  # (target process, fd) -> None; OSError: keep it
        self.conns: set = set()  # this process's connections (protocols)
        self.count = 0  # the busy ones among them, as last published
        self.arr[index] = 0
        #: connections given to a process recently: (until when, the count its slot
        #: should reach once it has taken them) -- its slot lags while the hand-over travels
        self.lent: dict[int, list[tuple[float, int]]] = {}
        self._timer = None

    @staticmethod
    def _is_busy(c, edge: float) -> bool:
        return c._opened_at > edge or c._answered > edge or c._active_at > edge

    def busy(self, now: float) -> int:
        """This process's connections opened or used within the last _ACTIVE_S seconds."""
        edge = now - _ACTIVE_S
        return sum(1 for c in self.conns if self._is_busy(c, edge))

    def publish(self, now: float) -> None:
        """Recount (every _REPUBLISH_S; between recounts opens and closes adjust the
        count, so an accept costs O(1) however many connections are open)."""
        self.count = self.busy(now)
        self.arr[self.i] = self.count

    def opened(self, conn, now: float) -> None:
        conn._opened_at = now
        self.conns.add(conn)
        self.count += 1
        self.arr[self.i] = self.count

    def closed(self, conn, now: float) -> None:
        if conn in self.conns:
            self.conns.discard(conn)
            if self._is_busy(conn, now - _ACTIVE_S) and self.count > 0:
                self.count -= 1
        self.arr[self.i] = self.count

    def watch(self, loop) -> None:
        """Republish this process's count every _REPUBLISH_S while it has connections
        (a connection going idle changes it without an event)."""
        if self._timer is None:
            self._timer = loop.call_later(_REPUBLISH_S, self._tick, loop)

    def _tick(self, loop) -> None:
        self._timer = None
        self.publish(loop.time())
        if self.conns:
            self.watch(loop)

    def target(self, now: float) -> int | None:
        """The process to give a connection just accepted to, or None (keep it). A
        connection given away counts for its new process until that one's slot shows
        it (at most 0.2 s): as the larger of the slot and what the slot should read,
        never both (counted twice, the receiver looked busier than it was and a
        burst of 8 connections could end 5 / 3 instead of 4 / 4)."""
        c = self.arr.tolist()
        for j, owed in self.lent.items():
            owed[:] = [o for o in owed if o[0] > now and o[1] > c[j]]
            if owed:
                c[j] = max(o[1] for o in owed)
        c[self.i] = self.count
        j = min(range(len(c)), key=c.__getitem__)
        if c[self.i] - c[j] < 2:
            return None
        self.lent.setdefault(j, []).append((now + 0.2, c[j] + 1))
        return j


_BALANCE: _Balance | None = None


def _balanced(base):
    """``base`` (a uvicorn protocol class) counting its connections in :data:`_BALANCE`
    and giving a freshly accepted one away when this process holds too many."""

    class Balanced(base):
        _adopted = False  # handed here by another process: kept
        _given = False

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            b = _BALANCE
            if b is None:
                return
            now = self.loop.time()
            b.opened(self, now)
            b.watch(self.loop)
            if self._adopted:
                return
            j = b.target(now)
            sock = transport.get_extra_info("socket") if j is not None else None
            if sock is None:
                return
            try:
                b.give(j, sock.fileno())
            except OSError:
                return  # keep it
            self._given = True
            b.closed(self, now)
            transport.close()  # our descriptor only: no FIN

        def connection_lost(self, exc) -> None:
            b = _BALANCE
            if b is not None and not self._given:
                b.closed(self, self.loop.time())
            super().connection_lost(exc)

    return Balanced


_PRIMARY_PROTOCOL = None


def primary_protocol_class():
    """The primary's HTTP protocol: :mod:`server.app`'s fast lane, balanced."""
    global _PRIMARY_PROTOCOL
    if _PRIMARY_PROTOCOL is None:
        from server.app import _fast_lane_class

        _PRIMARY_PROTOCOL = _balanced(_fast_lane_class())
    return _PRIMARY_PROTOCOL


# ------------------------------------------------------------------ query process side
class _Channel:
    """The query process's end of the control socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.lock = threading.Lock()
        self.handed_over = 0

    def send(self, msg: bytes) -> None:
        with self.lock:
            self.sock.send(msg)

    def give(self, target: int, fd: int) -> None:
        """A fresh connection to balance: to the primary, which places it at ``target``."""
        with self.lock:
            socket.send_fds(self.sock, [_GIVE + target.to_bytes(2, "little")], [fd])

    def hand_over(self, fd: int, data: bytes) -> None:
        """The connection ``fd`` and the bytes read from it, in pieces of at most ``_PIECE``."""
        pieces = [data[k:k + _PIECE] for k in range(0, len(data), _PIECE)] or [b""]
        with self.lock:
            for k, piece in enumerate(pieces):
                head = (_CONN if k == 0 else _MORE) + (b"1" if k < len(pieces) - 1 else b"0")
                if k == 0:
                    socket.send_fds(self.sock, [head + piece], [fd])
                else:
                    self.sock.sendall(head + piece)


_CHANNEL: _Channel | None = None
_UNAVAILABLE_BODY = b'{"error":"unavailable","detail":"the primary process is not up"}'
_UNAVAILABLE = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
                b"connection: close\r\ncontent-length: " + str(len(_UNAVAILABLE_BODY)).encode() + b"\r\n\r\n"
                + _UNAVAILABLE_BODY)
_READER_PROTOCOL = None


def reader_protocol_class():
    """The fast-lane protocol of :mod:`server.app` that first looks at each request
    starting on a connection: a query runs here, anything else goes (connection and
    bytes read) to the primary."""
    global _READER_PROTOCOL
    if _READER_PROTOCOL is not None:
        return _READER_PROTOCOL
    from server.app import _fast_lane_class

    base = _balanced(_fast_lane_class())

    class ReaderProtocol(base):
        _peek = b""  # the start of a request not classified yet

        def data_received(self, data: bytes) -> None:
            busy = (self._mid or self.pipeline or (self.cycle is not None and not self.cycle.response_complete)
                    or self._held is not None)  # (a lane POST whose body is arriving: read here)
            if busy or self.transport.is_closing():
                # a pipelined request: parsed here; a non-query is refused (_gate)
                super().data_received(data)
                return
            if not self._peek and (self._lean or (self._lean is None and self._lean_ok())) \
                    and not self.flow.write_paused:
                # plain lane requests (server.lane: GET /sparql) are queries: answered here
                rest = self._answer_heads(data)
                if not rest or self.transport.is_closing():
                    return
                if rest is not data:
                    # pipelined behind answers written here: parsed here, as any pipelined
                    # request (a non-query gets 503 from _Gate; the connection stays)
                    super().data_received(rest)
                    return
            buf = self._peek + data if self._peek else data
            verdict = classify(buf)
            if verdict is None:
                self._unset_keepalive_if_required()
                self._peek = buf
                return
            self._peek = b""
            if verdict == "read":
                super().data_received(buf)
            else:
                self._hand_over(buf)

        def _hand_over(self, buf: bytes) -> None:
            self._flush_out()  # lane answers written here go first (the primary answers the rest)
            self._unset_keepalive_if_required()
            ch = _CHANNEL
            sock = self.transport.get_extra_info("socket")
            try:
                if ch is None or sock is None:
                    raise OSError("no primary")
                ch.hand_over(sock.fileno(), buf)
                ch.handed_over += 1
            except OSError as e:
                log.warning("cannot hand a connection to the primary: %s", e)
                self.transport.write(_UNAVAILABLE)
            # our descriptor only: the primary holds the connection now (no FIN is sent)
            self.transport.close()

    _READER_PROTOCOL = ReaderProtocol
    return ReaderProtocol


class _Gate:
    """ASGI wrapper of a query process's app: only /sparql reaches it (a pipelined
    request of another kind, which cannot be handed over mid-connection, gets 503)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in ("/sparql", "/sparql/"):
            body = b'{"error":"unavailable","detail":"send this request on a new connection"}'
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"), (b"retry-after", b"0"),
                                    (b"connection", b"close"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def process_cpus(config) -> list[int] | None:
    """The CPU of each serving process by index (the primary's first), or None to leave
    them to the kernel (``--cpu-affinity off``, one process, or fewer CPUs than processes).

    Two processes on two cores otherwise meet on one CPU while the client threads their
    answers wake take the other; bound, each keeps its core (docs/BENCHMARKS.md "Batched
    writes, scheduling and the serving processes' CPUs": more queries/s on a machine that
    serves only this, an uneven split when another program keeps one CPU busy)."""
    n = int(config.processes)
    if getattr(config, "cpu_affinity", "off") != "auto" or n < 2 or not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[:n] if len(cpus) >= n else None


def own_session(config) -> bool:
    """Whether a query process starts in a session of its own (``--process-session own``).

    With the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``,
    on in most distributions' kernels) CPU is shared fairly between *sessions* first: all
    N serving processes in the primary's session together weigh as much as one program
    (the client in another session, any other program), so two processes on a busy
    machine got about one process's share between them, waited for it, and each ran
    colder (docs/BENCHMARKS.md, "Several serving processes on two cores ..., wave 2m").
    In a session of its own each query process weighs as one program. It still dies
    with the primary (PR_SET_PDEATHSIG) and is stopped by it; a terminal's Ctrl-C reaches
    only the primary, which stops it."""
    return int(config.processes) > 1 and getattr(config, "process_session", "shared") == "own"


def bind_cpu(cpu: int | None) -> None:
    """Bind the calling thread (and the threads it starts from now on) to ``cpu``."""
    if cpu is None:
        return
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as e:  # a CPU taken away meanwhile (cpuset): the kernel places us
        log.warning("cannot bind to CPU %d: %s", cpu, e)


def _die_with_parent() -> None:
    """SIGKILL this process when the primary dies (Linux), so no query process outlives it."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def reader_main(argv: list[str]) -> int:
    import argparse
    import gc

    import uvicorn

    import server.app as app_module
    from server.app import _make_database, create_app
    from server.logs import RequestLog
    from server.logs import setup as setup_logging
    from server.settings import Settings

    ap = argparse.ArgumentParser(prog="python -m server.processes")
    ap.add_argument("--no", type=int, required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--listen-fd", type=int, required=True)
    ap.add_argument("--ctrl-fd", type=int, required=True)
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--cpu", type=int, default=None)
    a = ap.parse_args(argv)
    bind_cpu(a.cpu)
    _die_with_parent()
    if not pid_alive(a.parent) or os.getppid() != a.parent:
        return 1
    with open(os.path.join(a.dir, "config.json"), encoding="utf-8") as f:
        config = Settings.model_validate_json(f.read())
    setup_logging(config.log_level, config.log_format)
    global _CHANNEL
    ch = _CHANNEL = _Channel(socket.socket(fileno=a.ctrl_fd))
    global _BALANCE
    _BALANCE = _Balance(os.path.join(a.dir, "connections"), a.no, int(config.processes), ch.give)
    store = ReaderStore(a.store)
    db = _make_database(config.model_copy(update={"workers": 0, "cluster": None}))
    db.store = store
    # join: say where we are, switch to what the primary has published, then serve
    ch.send(_HELLO + _SN.pack(store.snapshot().sn))
    ch.sock.settimeout(max(30.0, config.process_sync_timeout))
    while True:
        msg = ch.sock.recv(_MAX_MSG)
        if not msg:
            return 1
        if msg[:1] == _SWITCH:
            ch.send(_ACK + _SN.pack(store.refresh()))
            break
    ch.sock.settimeout(None)
    # the primary owns streams and continuous queries: none here (this process's module only)
    app_module._make_stream_manager = _no_streams
    app = create_app(config, database=db)
    gc.collect()
    gc.freeze()
    listen = socket.socket(fileno=a.listen_fd)
    server_cls = _reader_server_class(ch, store, db)
    server = server_cls(uvicorn.Config(RequestLog(_Gate(app), access=config.access_log), host=config.host,
                                       port=config.port, loop=_loop_name(), http=reader_protocol_class(),
                                       access_log=False, log_config=None, log_level=config.log_level,
                                       lifespan="on", timeout_keep_alive=config.keep_alive,
                                       server_header=False))  # (no `server: uvicorn`: a header less per answer)
    server.run(sockets=[listen])
    return 0


def _no_streams(config, database):
    return None


def _loop_name() -> str:
    try:
        import uvloop  # noqa: F401

        return "uvloop"
    except ImportError:
        return "asyncio"


def _reader_server_class(ch: _Channel, store: ReaderStore, db):
    import uvicorn

    class ReaderServer(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            loop = asyncio.get_running_loop()
            ch.sock.settimeout(5.0)  # never blocks the loop for long; reads only when readable
            loop.add_reader(ch.sock.fileno(), self._on_control)
            loop.call_later(1.0, self._report)
            await super().startup(sockets=sockets)

        def _on_control(self) -> None:
            try:
                msg, fds, _, _ = socket.recv_fds(ch.sock, _MAX_MSG, 4)
            except (BlockingIOError, InterruptedError, TimeoutError):
                return
            except OSError:
                msg, fds = b"", []
            if msg[:1] == _PLACE and fds:
                self._adopt(fds[0])
                fds = fds[1:]
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if not msg:  # the primary is gone: stop serving
                asyncio.get_running_loop().remove_reader(ch.sock.fileno())
                self.should_exit = True
                return
            if msg[:1] == _SWITCH:
                try:
                    sn = store.refresh()
                except Exception:  # noqa: BLE001 - one that cannot follow must not serve: restart
                    log.exception("query process cannot switch to the new store version: exiting")
                    os._exit(3)
                with contextlib.suppress(OSError):
                    ch.send(_ACK + _SN.pack(sn))

        def _adopt(self, fd: int) -> None:
            """A connection the primary placed here (balance): served as if accepted here."""
            try:
                sock = socket.socket(fileno=fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.close(fd)
                return
            if self.should_exit:
                sock.close()
                return
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            config, state = self.config, self.server_state

            def protocol():
                proto = config.http_protocol_class(config=config, server_state=state,
                                                   app_state=self.lifespan.state, _loop=loop)
                proto._adopted = True
                return proto

            async def connect() -> None:
                try:
                    await loop.connect_accepted_socket(protocol, sock=sock)
                except Exception:  # noqa: BLE001 - the client went away meanwhile
                    sock.close()

            loop.create_task(connect())

        def _report(self) -> None:
            if self.should_exit:
                return
            doc = {"requests": self.server_state.total_requests, "queries": db.queries,
                   "handed_over": ch.handed_over, "version": store.snapshot().sn}
            with contextlib.suppress(OSError):
                ch.send(_STATS + json.dumps(doc).encode())
            asyncio.get_running_loop().call_later(1.0, self._report)

        def handle_exit(self, sig, frame) -> None:
            if sig == signal.SIGINT:
                return  # a terminal's Ctrl-C reaches the whole group: the primary stops us
            super().handle_exit(sig, frame)

    return ReaderServer


if __name__ == "__main__":
    sys.exit(reader_main(sys.argv[1:]))
