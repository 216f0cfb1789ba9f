"""tests/support/netns.py for real: namespaces, veths, the promised reachability (the root namespace
reaches every host and each host its gateway; hosts do not reach each other or anything else)
and complete removal, also after an exception, a half-failed setup or a process left running."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.support import netns
from tests.support.netns import Hosts, NetnsError

pytestmark = pytest.mark.skipif(netns.unavailable_reason() is not None,
                                reason=str(netns.unavailable_reason()))

ECHO = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 0))
s.listen()
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    with c:
        while d := c.recv(65536):
            c.sendall(d)
"""

CLIENT = r"""
import errno, socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3) as c:
        c.sendall(sys.argv[3].encode())
        print("ok", c.recv(100).decode())
except OSError as e:
    print("err", errno.errorcode.get(e.errno, e.errno) if e.errno else type(e).__name__)
"""


def _echo(host_popen, address: str) -> tuple[subprocess.Popen, int]:
    p = host_popen([sys.executable, "-c", ECHO, address], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.strip().isdigit(), f"echo server did not start: {line!r}"
    return p, int(line)


def _client_in(host, address: str, port: int, msg: str) -> str:
    r = host.run([sys.executable, "-c", CLIENT, address, str(port), msg], capture_output=True, text=True,
                 timeout=30)
    return r.stdout.strip() or r.stderr.strip()


def _gone(names: list[str]) -> list[str]:
    present = set(netns.namespaces()) | set(netns.links())
    return [n for n in names if n in present]


def test_root_reaches_hosts_and_hosts_are_isolated():
    with Hosts(2) as hs:
        h1, h2 = hs[0], hs[1]
        assert h1.address != h2.address and h1.netns != h2.netns
        srv, port = _echo(h1.popen, h1.address)
        # the coordinator's namespace reaches host 1's service
        with socket.create_connection((h1.address, port), timeout=3) as c:
            c.sendall(b"hello from root")
            assert c.recv(100) == b"hello from root"
        # host 2 does not: it has no route to host 1's link (workers never talk to each other)
        assert _client_in(h2, h1.address, port, "x") == "err ENETUNREACH"
        # nor to anything outside 198.18.0.0/15 links: no default route inside a host
        assert _client_in(h2, "192.0.2.1", 80, "x") == "err ENETUNREACH"
        # host 1 reaches its own service on loopback (lo is up) and its own address
        assert _client_in(h1, h1.address, port, "self") == "ok self"
        # the server bound to host 1's address is not reachable on the root's loopback
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        assert srv.poll() is None


def test_host_reaches_coordinator_at_its_gateway():
    with Hosts(2) as hs:
        root_srv = subprocess.Popen([sys.executable, "-c", ECHO, hs[1].gateway], stdout=subprocess.PIPE, text=True)
        try:
            port = int(root_srv.stdout.readline())
            assert _client_in(hs[1], hs[1].gateway, port, "up") == "ok up"
            assert _client_in(hs[0], hs[1].gateway, port, "x") == "err ENETUNREACH"
        finally:
            root_srv.kill()
            root_srv.wait()
            root_srv.stdout.close()


def test_only_link_routes_and_addresses():
    with Hosts(3) as hs:
        addrs = {h.address for h in hs}
        assert len(addrs) == 3
        for h in hs:
            assert netns.NET.supernet_of(netns.ipaddress.ip_network(f"{h.address}/30", strict=False))
            routes = subprocess.run(["ip", "-n", h.netns, "-o", "route", "show", "table", "all"],
                                    capture_output=True, text=True, check=True).stdout
            main = [r for r in routes.splitlines() if " table " not in r]
            assert len(main) == 1 and main[0].split()[:3] == [
                str(netns.ipaddress.ip_interface(f"{h.address}/30").network), "dev", h.peer], routes
            assert "default" not in routes
            a = subprocess.run(["ip", "-n", h.netns, "-o", "addr", "show"], capture_output=True, text=True,
                               check=True).stdout
            inet = sorted(line.split()[3] for line in a.splitlines())
            assert inet == sorted(["127.0.0.1/8", "::1/128", f"{h.address}/30"]), a
            r = subprocess.run(["ip", "-o", "addr", "show", "dev", h.link], capture_output=True, text=True,
                               check=True).stdout
            assert [line.split()[3] for line in r.splitlines()] == [f"{h.gateway}/30"]


def test_everything_removed_after_exit():
    with Hosts(2) as hs:
        names = [n for h in hs for n in (h.netns, h.link)]
        assert _gone(names) == names
        sleeper = hs[0].popen(["sleep", "600"])
        # a grandchild in its own session, not started by popen, still inside the namespace
        daemon = hs[1].run(["sh", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True,
                           text=True, check=True)
        orphan = int(daemon.stdout)
    assert _gone(names) == []
    assert sleeper.poll() is not None
    assert _dead(orphan)


def _dead(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (the orphan's new parent may be a non-reaping pid 1)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_removed_after_exception():
    with pytest.raises(RuntimeError, match="boom"), Hosts(2) as hs:
        names = [n for h in hs for n in (h.netns, h.link)]
        raise RuntimeError("boom")
    assert _gone(names) == []


def test_half_failed_setup_removes_what_was_made():
    hosts = Hosts(3)
    # a real clash: an interface named like the third host's veth already exists
    blocker = f"{hosts.tag}v2"
    subprocess.run(["ip", "link", "add", blocker, "type", "veth", "peer", "name", f"{hosts.tag}b2"], check=True)
    try:
        with pytest.raises(NetnsError, match="exists"), hosts:
            pass
        made = [f"{hosts.tag}{kind}{k}" for k in range(3) for kind in "hv"]
        assert _gone(made) == [blocker]              # only the blocker, which Hosts did not make
    finally:
        subprocess.run(["ip", "link", "del", blocker], check=True)


def test_parallel_sets_do_not_clash():
    with Hosts(2) as a, Hosts(2) as b:
        assert {h.address for h in a}.isdisjoint({h.address for h in b})
        assert {h.netns for h in a}.isdisjoint({h.netns for h in b})
        srv, port = _echo(b[0].popen, b[0].address)
        with socket.create_connection((b[0].address, port), timeout=3) as c:
            c.sendall(b"b0")
            assert c.recv(10) == b"b0"
        assert _client_in(a[0], b[0].address, port, "x") == "err ENETUNREACH"


def test_stale_run_is_swept():
    """Leftovers named for a pid that no longer exists (a killed run) are removed by the next Hosts()."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    ns, link = f"jd{dead.pid:x}x0h0", f"jd{dead.pid:x}x0v0"
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        subprocess.run(["ip", "link", "add", link, "type", "veth", "peer", "name", f"jd{dead.pid:x}x0p0"],
                       check=True)
        with Hosts(1):
            assert _gone([ns, link]) == []
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", link], capture_output=True)
