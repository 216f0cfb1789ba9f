"""RDMA transport: the coordinator reads a worker's arrays with one-sided RDMA READs.

Wukong's remote reads: the worker registers its immutable CSR arrays as memory
regions readable by its peer and hands out descriptors ``{addr, rkey, length,
dtype}``; the coordinator's :class:`RdmaRangeReader` posts RDMA READs of element
ranges into its own registered buffer, so a read uses no worker CPU.
:class:`engine.cluster.ranged.RangedShard` over an :class:`RdmaRangeReader` is a
shard read in place.

Uses pyverbs (rdma-core's Python binding, the ``rdma`` extra), imported lazily:
this module imports without it and :func:`unavailable_reason` says why RDMA
cannot be used here. Connections are RC queue pairs; the queue-pair details
(:meth:`endpoint`) travel over a channel the caller supplies (the cluster's
Flight control actions), since RDMA connection setup needs an out-of-band
exchange.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable

import numpy as np

__all__ = ["unavailable_reason", "RdmaError", "RdmaExporter", "RdmaRangeReader"]

_PORT = 1
_MAX_RD_ATOMIC = 16  # outstanding RDMA READs per QP we ask for (capped by the device)
_MAX_MSG = 1 << 30  # one READ moves at most this many bytes (capped by the port)
_ALIGN = 64  # byte alignment of each range in the local buffer
# QP timing (ibv_rc_pingpong's values): ACK timeout 4.096us * 2**14, 7 retries
_TIMEOUT, _RETRY, _RNR_RETRY, _MIN_RNR_TIMER = 14, 7, 7, 12


class RdmaError(RuntimeError):
    """A failed RDMA operation (registration, connection, or a READ completion)."""


def unavailable_reason() -> str | None:
    """None when RDMA can be used here (pyverbs loads and lists a device), else why not.
    The kernel's device list is asked first: without a device, whether pyverbs is
    installed does not matter."""
    ib = "/sys/class/infiniband"
    if not os.path.isdir(ib) or not os.listdir(ib):
        return "no RDMA device on this host (/sys/class/infiniband is empty or absent)"
    try:
        import pyverbs.device as dev
    except ModuleNotFoundError as ex:
        if (ex.name or "").split(".")[0] == "pyverbs":
            return "pyverbs is not installed"
        return f"pyverbs does not load ({ex})"
    except ImportError as ex:  # e.g. built against a newer libibverbs than the system's
        return f"pyverbs does not load ({ex})"
    try:
        devices = dev.get_device_list()
    except Exception:  # pyverbs raises when the kernel has no RDMA support at all
        devices = []
    if not devices:
        return "no RDMA device on this host"
    return None


def _zero_gid(gid: str) -> bool:
    return not gid.replace(":", "").strip("0")


class _Verbs:
    """One opened device port: context, protection domain, and the RC queue-pair
    plumbing both sides share (create, describe, connect)."""

    def __init__(self, device: str | None, port: int, gid_index: int | None):
        reason = unavailable_reason()
        if reason is not None:
            raise RdmaError(reason)
        import pyverbs.enums as e
        from pyverbs.device import Context, get_device_list
        from pyverbs.pd import PD

        self._e = e
        names = [d.name.decode() for d in get_device_list()]
        if device is None:
            device = names[0]
        elif device not in names:
            raise RdmaError(f"no RDMA device {device!r} (have {', '.join(names)})")
        self.device = device
        self.port = port
        self.ctx = Context(name=device)
        try:
            self.pd = PD(self.ctx)
            self.port_attr = self.ctx.query_port(port)
            if self.port_attr.state != e.IBV_PORT_ACTIVE:
                raise RdmaError(f"port {port} of {device} is not active")
            dev_attr = self.ctx.query_device()
            self.dest_rd_atomic = max(1, min(_MAX_RD_ATOMIC, dev_attr.max_qp_rd_atom))
            self.init_rd_atomic = max(1, min(_MAX_RD_ATOMIC, dev_attr.max_qp_init_rd_atom))
            self.max_send_wr = max(1, min(64, dev_attr.max_qp_wr))
            self.max_msg = max(1, min(_MAX_MSG, self.port_attr.max_msg_sz))
            self.ethernet = self.port_attr.link_layer == e.IBV_LINK_LAYER_ETHERNET
            self.gid_index = self._pick_gid() if gid_index is None else gid_index
            self.gid = str(self.ctx.query_gid(port, self.gid_index))
        except BaseException:
            self.ctx.close()
            raise
        self._closed = False

    def _pick_gid(self) -> int:
        """A usable GID index: on RoCE the first RoCE v2 GID (routable), else the
        first non-zero one; on InfiniBand index 0 (LID routing is used anyway)."""
        if not self.ethernet:
            return 0
        first = None
        for idx in range(self.port_attr.gid_tbl_len):
            try:
                gid = str(self.ctx.query_gid(self.port, idx))
            except Exception:
                continue
            if _zero_gid(gid):
                continue
            if first is None:
                first = idx
            try:
                if self.ctx.query_gid_type(self.port, idx) == self._e.IBV_GID_TYPE_SYSFS_ROCE_V2:
                    return idx
            except Exception:
                pass
        if first is None:
            raise RdmaError(f"port {self.port} of {self.device} has no GID (no IP address on its netdev?)")
        return first

    def create_qp(self, cq_depth: int):
        """A new RC QP (and its CQ) moved to INIT, remote reads allowed: (qp, cq, psn)."""
        from pyverbs.cq import CQ
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

        e = self._e
        cq = CQ(self.ctx, cq_depth, None, None, 0)
        cap = QPCap(max_send_wr=self.max_send_wr, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, sq_sig_all=0)
        attr = QPAttr(port_num=self.port)
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ
        qp = QP(self.pd, init, attr)  # an RC QP given attributes stops in INIT
        return qp, cq, random.getrandbits(24)

    def info(self, qp, psn: int) -> dict:
        """What the peer needs to connect to ``qp`` (JSON-able)."""
        return {"lid": int(self.port_attr.lid), "gid": self.gid, "qpn": int(qp.qp_num), "psn": int(psn),
                "mtu": int(self.port_attr.active_mtu), "dest_rd_atomic": self.dest_rd_atomic,
                "ethernet": bool(self.ethernet)}

    def connect(self, qp, psn: int, peer: dict) -> None:
        """Move ``qp`` through RTR to RTS, connected to the peer's QP."""
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        from pyverbs.qp import QPAttr

        e = self._e
        attr = QPAttr(port_num=self.port)
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ
        attr.path_mtu = min(int(self.port_attr.active_mtu), int(peer["mtu"]))
        attr.dest_qp_num = int(peer["qpn"])
        attr.rq_psn = int(peer["psn"])
        attr.sq_psn = psn
        attr.max_dest_rd_atomic = self.dest_rd_atomic
        attr.max_rd_atomic = min(self.init_rd_atomic, int(peer["dest_rd_atomic"]))
        attr.min_rnr_timer = _MIN_RNR_TIMER
        attr.timeout = _TIMEOUT
        attr.retry_cnt = _RETRY
        attr.rnr_retry = _RNR_RETRY
        routed = self.ethernet or int(peer["lid"]) == 0  # RoCE needs a GRH; IB uses the LID
        if routed:
            gr = GlobalRoute(dgid=GID(peer["gid"]), sgid_index=self.gid_index)
            attr.ah_attr = AHAttr(port_num=self.port, is_global=1, gr=gr, dlid=int(peer["lid"]))
        else:
            attr.ah_attr = AHAttr(port_num=self.port, is_global=0, dlid=int(peer["lid"]))
        try:
            qp.to_rts(attr)
        except Exception as ex:
            raise RdmaError(f"connecting QP {qp.qp_num} to peer QP {peer['qpn']} failed: {ex}") from ex

    def register(self, addr: int, nbytes: int, access: int):
        from pyverbs.mr import MR
        return MR(self.pd, nbytes, access, address=addr)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.ctx.close()  # closes the PD, MRs, CQs and QPs made from it


def _aligned_bytes(nbytes: int) -> tuple[np.ndarray, int]:
    """A page-aligned writable uint8 buffer of ``nbytes`` (the owning array, its address)."""
    raw = np.empty(nbytes + 4096, dtype=np.uint8)
    skip = (-raw.ctypes.data) % 4096
    buf = raw[skip:skip + nbytes]
    return buf, buf.ctypes.data


class RdmaExporter:
    """Worker side: registers arrays for remote reading and accepts connections.

    :meth:`register` pins an array's memory as a memory region readable by
    connected peers (an array whose memory cannot be registered, e.g. a
    read-only file mapping on some providers, is copied into a buffer that can)
    and returns its descriptor; registering the same memory again returns the
    same region. Each coordinator gets its own RC QP: :meth:`accept` (or
    :meth:`endpoint` then :meth:`connect`)."""

    def __init__(self, device: str | None = None, port: int = _PORT, gid_index: int | None = None):
        self._v = _Verbs(device, port, gid_index)
        self._lock = threading.Lock()
        self._regions: dict[tuple[int, int], tuple[object, np.ndarray, dict]] = {}
        self._pending: tuple | None = None
        self._qps: list[tuple] = []

    def register(self, arr: np.ndarray) -> dict:
        """``{addr, rkey, length, dtype}`` of a 1-d array, readable remotely until
        :meth:`unregister`; the array must not change meanwhile."""
        arr = np.ascontiguousarray(arr)
        if arr.ndim != 1:
            raise ValueError("only 1-d arrays are exported")
        desc = {"addr": 0, "rkey": 0, "length": len(arr), "dtype": arr.dtype.str}
        if arr.nbytes == 0:
            return desc
        key = (arr.ctypes.data, arr.nbytes)
        access = self._v._e.IBV_ACCESS_REMOTE_READ
        with self._lock:
            hit = self._regions.get(key)
            if hit is None:
                try:
                    mr, held = self._v.register(arr.ctypes.data, arr.nbytes, access), arr
                except Exception:
                    held, addr = _aligned_bytes(arr.nbytes)
                    held[:] = arr.view(np.uint8)
                    try:
                        mr = self._v.register(addr, arr.nbytes, access)
                    except Exception as ex:
                        raise RdmaError(f"registering {arr.nbytes} bytes failed: {ex}") from ex
                hit = (mr, held, {"addr": int(held.ctypes.data), "rkey": int(mr.rkey)})
                self._regions[key] = hit
        desc.update(hit[2])
        return desc

    def unregister(self, desc: dict) -> None:
        """Release the region behind ``desc`` (readers must no longer use it)."""
        with self._lock:
            for key, (mr, _held, d) in list(self._regions.items()):
                if d["addr"] == desc.get("addr") and d["rkey"] == desc.get("rkey"):
                    del self._regions[key]
                    mr.close()

    def endpoint(self) -> dict:
        """This side's QP details for the next connection (a new QP in INIT)."""
        with self._lock:
            if self._pending is None:
                qp, cq, psn = self._v.create_qp(cq_depth=4)  # it only answers READs: no completions
                self._pending = (qp, cq, psn)
            qp, _cq, psn = self._pending
            return self._v.info(qp, psn)

    def connect(self, peer_info: dict) -> None:
        """Connect the QP of the last :meth:`endpoint` to the peer's QP (RTR, RTS)."""
        with self._lock:
            if self._pending is None:
                raise RdmaError("connect() before endpoint()")
            qp, cq, psn = self._pending
            self._v.connect(qp, psn, peer_info)
            self._pending = None
            self._qps.append((qp, cq))

    def accept(self, peer_info: dict) -> dict:
        """One-call handshake for a coordinator: a new QP connected to ``peer_info``;
        returns its details for the coordinator to connect to."""
        with self._lock:
            qp, cq, psn = self._v.create_qp(cq_depth=4)
            self._v.connect(qp, psn, peer_info)
            self._qps.append((qp, cq))
            return self._v.info(qp, psn)

    def close(self) -> None:
        with self._lock:
            self._regions.clear()
            self._qps.clear()
            self._pending = None
            self._v.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RdmaRangeReader:
    """Coordinator side: a :class:`engine.cluster.ranged.RangeReader` over one RC
    connection to a worker's :class:`RdmaExporter`.

    ``exchange(my_info) -> peer_info`` carries the QP details to the worker and
    back (e.g. a Flight action calling :meth:`RdmaExporter.accept`). Reads land
    in a registered local buffer (grown on demand) and are returned as copies;
    one reader serves one thread at a time (a lock serializes reads)."""

    def __init__(self, exchange: Callable[[dict], dict], device: str | None = None, port: int = _PORT,
                 gid_index: int | None = None, buffer_bytes: int = 1 << 20, timeout: float = 10.0):
        self._v = _Verbs(device, port, gid_index)
        self._lock = threading.Lock()
        self._timeout = timeout
        self._e = self._v._e
        self._broken: str | None = None
        try:
            self._depth = min(self._v.max_send_wr, self._v.init_rd_atomic * 4)
            self._qp, self._cq, psn = self._v.create_qp(cq_depth=self._v.max_send_wr)
            peer = exchange(self._v.info(self._qp, psn))
            self._v.connect(self._qp, psn, peer)
            self._mr = None
            self._buf = np.zeros(0, dtype=np.uint8)
            self._grow(buffer_bytes)
        except BaseException:
            self._v.close()
            raise

    def _grow(self, nbytes: int) -> None:
        if nbytes <= len(self._buf):
            return
        size = max(nbytes, 2 * len(self._buf), 4096)
        buf, addr = _aligned_bytes(size)
        mr = self._v.register(addr, size, self._e.IBV_ACCESS_LOCAL_WRITE)
        if self._mr is not None:
            self._mr.close()
        self._buf, self._mr = buf, mr

    def read(self, desc: dict, start: int, stop: int) -> np.ndarray:
        return self.read_many(desc, [start], [stop])[0]

    def read_many(self, desc: dict, starts, stops) -> list[np.ndarray]:
        """Several ranges of one array: all READs posted before any completion is
        awaited (up to the QP's depth in flight)."""
        dt = np.dtype(desc["dtype"])
        n = int(desc["length"])
        item = dt.itemsize
        spans, off = [], 0
        for a, b in zip(starts, stops, strict=True):
            a, b = int(a), int(b)
            if not 0 <= a <= b <= n:
                raise ValueError(f"range [{a}, {b}) outside an array of {n} elements")
            spans.append((off, a, b))
            off += -(-(b - a) * item // _ALIGN) * _ALIGN
        with self._lock:
            if self._broken is not None:
                raise RdmaError(f"the connection failed earlier: {self._broken}")
            self._grow(off)
            pieces = []  # (local address, remote address, bytes), each at most max_msg
            base = self._buf.ctypes.data
            for o, a, b in spans:
                lo, hi = a * item, b * item
                while lo < hi:
                    k = min(hi - lo, self._v.max_msg)
                    pieces.append((base + o, int(desc["addr"]) + lo, k))
                    o += k
                    lo += k
            self._transfer(pieces, int(desc["rkey"]))
            return [self._buf[o:o + (b - a) * item].view(dt).copy() for o, a, b in spans]

    def _transfer(self, pieces: list, rkey: int) -> None:
        from pyverbs.wr import SGE, SendWR

        e = self._e
        lkey = self._mr.lkey
        posted = done = 0
        while done < len(pieces):
            while posted < len(pieces) and posted - done < self._depth:
                laddr, raddr, k = pieces[posted]
                wr = SendWR(wr_id=posted, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(laddr, k, lkey)],
                            send_flags=e.IBV_SEND_SIGNALED)
                wr.set_wr_rdma(rkey, raddr)
                try:
                    self._qp.post_send(wr)
                except Exception as ex:
                    self._broken = str(ex)
                    raise RdmaError(f"posting an RDMA READ failed: {ex}") from ex
                posted += 1
            done += self._poll(posted - done)

    def _poll(self, want: int) -> int:
        """Wait for at least one completion (of up to ``want``); raise on an error one."""
        deadline = time.monotonic() + self._timeout
        while True:
            n, wcs = self._cq.poll(want)
            for wc in wcs:
                if wc.status != self._e.IBV_WC_SUCCESS:
                    self._broken = f"work completion status {wc.status} (vendor error {wc.vendor_err})"
                    raise RdmaError(f"an RDMA READ failed: {self._broken}")
            if n:
                return n
            if time.monotonic() > deadline:
                self._broken = f"no completion within {self._timeout}s"
                raise RdmaError(self._broken)

    def close(self) -> None:
        with self._lock:
            self._v.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
