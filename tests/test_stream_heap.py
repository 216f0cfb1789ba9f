"""engine.stream.heap: the allocator thresholds that keep a large event's memory for the next one."""

import platform

from engine.stream.heap import keep_freed_heap


def test_keep_freed_heap_is_idempotent_and_reports_glibc():
    first = keep_freed_heap()
    assert keep_freed_heap() is first
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert first is True


def test_large_bytes_reuse_memory_after_the_thresholds():
    """With the thresholds in force, a dropped block of several MiB is reused by the next one of
    the same size: the second join touches no fresh page (glibc only)."""
    import resource
    import threading

    if not keep_freed_heap():
        return
    frags = [b"x" * 200] * 40_000   # 8 MB
    faults = []

    def work():
        keep = []
        for _ in range(12):
            r0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            b = b"".join(frags)
            faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - r0)
            keep = [*keep[-3:], b]

    th = threading.Thread(target=work)
    th.start()
    th.join()
    # warm-up grows the heap; afterwards the dropped blocks are reused
    assert max(faults[6:]) < 100, faults
