"""Stopping the processes a test started, and the cluster objects it opened, always the same way."""

from __future__ import annotations

import contextlib
import os
import subprocess


def stop_processes(procs, timeout: float = 10.0) -> None:
    """SIGTERM every process still running, then wait for each; one that does not end
    within ``timeout`` seconds is killed."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@contextlib.contextmanager
def closed_after(obj, root: str | None):
    """Yield ``obj`` (a cluster Database or anything with ``close()``), close it afterwards,
    and check its shared-memory directory ``root`` is gone then."""
    try:
        yield obj
    finally:
        obj.close()
    assert root is None or not os.path.exists(root), f"{root} left behind"
