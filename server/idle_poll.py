"""A short, bounded poll before the serving loop sleeps (``--poll-us``; issue 14).

Under a few concurrent keep-alive clients the serving thread answers the requests one
``epoll`` wait returned, writes them, and blocks in ``epoll_wait`` again: the clients' next
requests arrive tens of microseconds later and each costs a sleep, a wake-up (a futex /
scheduler round trip, often on the other CPU) and caches the clients cooled. Measured with a
light C client the process kept only ~0.7 of a core busy at 8 clients, below Oxigraph's
throughput (docs/BENCHMARKS.md, helper Q, wave 2m).

:class:`IdlePoll` keeps the event loop polling with timeout 0 for a bounded time after a pass
that answered a request of the same connection as the answer before (a lone client's next
request; with several clients answered in turn the loop seldom sleeps and a spin only
costs): a callback that re-schedules itself with ``call_soon`` while its window is open. A ready callback makes uvloop's ``uv_run`` (and asyncio's selector loop) poll
without blocking, and the poll itself runs without the GIL, so the other threads (the query
pool, the stream workers) still get it between the steps. The window is adaptive: a spin that
caught input re-opens at the full bound; one that ran out halves it, and under a quarter of
the bound the loop sleeps at once (it probes the full bound again every
:data:`PROBE_EVERY` answers). Nothing runs while the server is idle: a spin starts only after a
pass that answered requests and stops at its bound.
"""

from __future__ import annotations

from time import perf_counter_ns

#: while the window is closed (input did not come back within it), one answer in this many
#: spins the full bound again, to notice that the clients came back to a tight rhythm
PROBE_EVERY = 32


class IdlePoll:
    """One event loop's spin after the passes that answered requests (see the module)."""

    __slots__ = ("loop", "bound", "window", "deadline", "active", "caught", "quiet", "last",
                 "spins", "steps", "hits", "expired", "mixed")

    def __init__(self, loop, poll_us: int):
        self.loop = loop
        self.bound = int(poll_us) * 1000  # ns: no spin runs longer than this past its last input
        self.window = self.bound  # ns: the current spin's length (adaptive, 0..bound)
        self.deadline = 0  # perf_counter_ns() the current spin ends
        self.active = False  # a step is scheduled
        self.caught = False  # the current spin saw the same connection answered again
        self.quiet = 0  # answers since the window closed (for the probe)
        self.last = None  # the connection of the last answer
        # counters (tests, measurements): spins started, steps run, spins that caught input,
        # spins that ran out
        self.spins = self.steps = self.hits = self.expired = 0
        self.mixed = 0  # answers that went to another connection than the one before

    def after_pass(self, conn=None) -> None:
        """The loop's pass answered a request of connection ``conn`` (called per lane answer):
        keep polling a while after the pass instead of sleeping -- while the answers go to one
        connection. When they alternate between connections the others' requests fill the
        gaps anyway (the loop seldom sleeps), and a spin only takes CPU the clients need on
        a shared machine (docs/BENCHMARKS.md, helper W, wave 2m): no spin starts or goes on."""
        if conn != self.last:
            self.last = conn
            self.mixed += 1
            self.deadline = 0  # a running spin ends at its next step
            return
        if self.active:  # the spin picked this input up without a sleep
            self.caught = True
            self.deadline = perf_counter_ns() + self.window
            return
        window = self.window
        if window == 0:
            self.quiet += 1
            if self.quiet < PROBE_EVERY:
                return
            self.quiet = 0
            window = self.window = self.bound
        self.spins += 1
        self.active = True
        self.caught = False
        self.deadline = perf_counter_ns() + window
        self.loop.call_soon(self._step)

    def _step(self) -> None:
        """One poll with timeout 0 comes between two calls (the loop runs its ready I/O)."""
        self.steps += 1
        if perf_counter_ns() < self.deadline:
            self.loop.call_soon(self._step)
            return
        self.active = False
        if self.caught:
            self.hits += 1
            self.window = self.bound
        else:
            self.expired += 1
            window = self.window >> 1
            self.window = window if window * 4 >= self.bound else 0

    def stats(self) -> dict:
        return {"spins": self.spins, "steps": self.steps, "hits": self.hits, "expired": self.expired,
                "mixed": self.mixed, "window_us": self.window / 1000}


def idle_poll_for(loop, poll_us: int) -> IdlePoll | None:
    """The loop's poller for a ``--poll-us`` setting (None: off)."""
    return IdlePoll(loop, poll_us) if poll_us > 0 else None
