"""Simulated hosts for cluster tests: Linux network namespaces joined to this one by veth pairs.

``Hosts(n)`` gives n "machines", each with its own network stack and one address from
198.18.0.0/15 (the benchmarking range, never routed on real networks). The namespace of the
test (the "root" side) is the coordinator's network: it reaches every host over that host's veth
(a /30 link); hosts cannot reach each other or anything else (no default route, no forwarding
route, IPv6 address generation off). Everything is built and removed with ``ip`` (iproute2) only,
and removed on every exit path, including a setup that fails half way.

Addresses are chosen under a lock file among the /30s no interface of this namespace uses yet,
so parallel test runs do not clash. Namespaces and links left by a run that was killed
(names ``jd<hex pid>x...`` whose pid is gone) are swept before a new allocation.
"""

from __future__ import annotations

import fcntl
import functools
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from server.processes import pid_alive

NET = ipaddress.IPv4Network("198.18.0.0/15")
_SLOTS = NET.num_addresses // 4                  # /30 links in the range
_LOCK = os.path.join(tempfile.gettempdir(), "jindou-netns.lock")
_NAME = re.compile(r"^jd([0-9a-f]+)x\d+[hvp]\d+$")
_seq = itertools.count()


class NetnsError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {r.stderr.strip() or r.returncode}")
    return r


def namespaces() -> list[str]:
    """Names from ``ip netns list`` (each line is ``NAME`` or ``NAME (id: N)``)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def links() -> list[str]:
    """Interface names of this namespace (``ip -o link`` prints ``N: NAME@PEER: ...``)."""
    out = _ip("-o", "link", "show", check=False).stdout
    return [line.split(":", 2)[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


@functools.cache
def unavailable_reason() -> str | None:
    """Why namespaces cannot be used here (None when they can): probed by really making one."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 `ip` is not installed"
    probe = f"jd{os.getpid():x}x{next(_seq)}h0"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    try:
        v = f"jd{os.getpid():x}x{next(_seq)}v0"
        r = _ip("link", "add", v, "type", "veth", "peer", "name", v.replace("v0", "p0"), check=False)
        if r.returncode != 0:
            return f"cannot create a veth pair: {r.stderr.strip()}"
        _ip("link", "del", v, check=False)
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def sweep_stale() -> None:
    """Remove namespaces and links named by a Hosts() of a process that no longer exists."""
    for name in namespaces():
        m = _NAME.match(name)
        if m and not pid_alive(int(m.group(1), 16)):
            _kill_all_in(name)
            _ip("netns", "del", name, check=False)
    for name in links():
        m = _NAME.match(name)
        if m and not pid_alive(int(m.group(1), 16)):
            _ip("link", "del", name, check=False)


def _kill_all_in(ns: str) -> None:
    """SIGKILL every process still in namespace ns (they would keep it alive after ``netns del``)."""
    for _ in range(50):
        pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _used_slots() -> set[int]:
    """/30 slots of NET that some address of this namespace already falls in."""
    used = set()
    for line in _ip("-o", "-4", "addr", "show", check=False).stdout.splitlines():
        m = re.search(r"\binet (\S+)", line)
        if not m:
            continue
        iface = ipaddress.IPv4Interface(m.group(1))
        if iface.network.overlaps(NET):
            lo = max(int(iface.network.network_address), int(NET.network_address))
            hi = min(int(iface.network.broadcast_address), int(NET.broadcast_address))
            used.update(range((lo - int(NET.network_address)) // 4, (hi - int(NET.network_address)) // 4 + 1))
    return used


@dataclass
class Host:
    """One simulated machine: its namespace, its address and the coordinator-side (gateway) address."""

    index: int
    netns: str
    address: str                     # inside the namespace (198.18.x.y+2)
    gateway: str                     # this namespace's end of the veth (198.18.x.y+1)
    link: str                        # veth end in this namespace
    peer: str                        # veth end inside the namespace
    procs: list[subprocess.Popen] = field(default_factory=list)

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        """Start argv inside this host's namespace (``ip netns exec`` execs it: same pid)."""
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(["ip", "netns", "exec", self.netns, *argv], **kw)
        self.procs.append(p)
        return p

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.netns, *argv], **kw)

    def stop(self) -> None:
        """Kill what popen started (whole sessions) and anything else left in the namespace."""
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for s in (p.stdin, p.stdout, p.stderr):
                if s is not None:
                    s.close()
        _kill_all_in(self.netns)


class Hosts:
    """Context manager: n hosts (``hosts[k].address``, ``hosts[k].popen(argv)``), all removed on exit."""

    def __init__(self, n: int):
        if not 1 <= n <= 64:
            raise ValueError("1..64 hosts")
        self.n = n
        self.tag = f"jd{os.getpid():x}x{next(_seq)}"
        self.hosts: list[Host] = []
        self._made_ns: list[str] = []
        self._made_links: list[str] = []

    def __getitem__(self, k: int) -> Host:
        return self.hosts[k]

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def __enter__(self) -> Hosts:
        reason = unavailable_reason()
        if reason:
            raise NetnsError(reason)
        try:
            with open(_LOCK, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                sweep_stale()
                used = _used_slots()
                start = (os.getpid() * 61) % _SLOTS          # spread runs out; skip used slots
                slots = []
                for i in range(_SLOTS):
                    s = (start + i) % _SLOTS
                    if s not in used:
                        slots.append(s)
                        if len(slots) == self.n:
                            break
                for k, s in enumerate(slots):
                    self._add(k, s)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _add(self, k: int, slot: int) -> None:
        ns, link, peer = f"{self.tag}h{k}", f"{self.tag}v{k}", f"{self.tag}p{k}"
        base = NET.network_address + 4 * slot
        gw, addr = base + 1, base + 2
        _ip("netns", "add", ns)
        self._made_ns.append(ns)
        _ip("link", "add", link, "type", "veth", "peer", "name", peer)
        self._made_links.append(link)
        _ip("link", "set", "dev", link, "addrgenmode", "none")     # no IPv6 link-local addresses
        _ip("link", "set", peer, "netns", ns)
        _ip("-n", ns, "link", "set", "dev", peer, "addrgenmode", "none")
        _ip("addr", "add", f"{gw}/30", "dev", link)
        _ip("link", "set", link, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", peer)
        _ip("-n", ns, "link", "set", peer, "up")
        self.hosts.append(Host(k, ns, str(addr), str(gw), link, peer))

    def __exit__(self, *exc) -> None:
        for h in self.hosts:
            h.stop()
        for ns in self._made_ns:                    # processes not started by popen, too
            _kill_all_in(ns)
        for link in reversed(self._made_links):     # deleting one end deletes the pair
            if link in links():
                _ip("link", "del", link, check=False)
        for ns in reversed(self._made_ns):
            _ip("netns", "del", ns, check=False)
        self._made_links.clear()
        self._made_ns.clear()
