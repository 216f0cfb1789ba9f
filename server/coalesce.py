"""One write per small HTTP answer on the ordinary (ASGI) path.

uvicorn's request cycle writes a response's head as soon as the app sends
``http.response.start`` and its body on the next message: two ``write`` calls
on the socket for an answer the app had complete. On loopback each write wakes
the client; its first wake-up finds only the head and it sleeps again until
the body comes, and on two cores the server is often pre-empted by the client
in between (POST ``ASK {}``: ~0.11 ms of the server's ~0.3 ms went to the two
sends). :class:`HeldHead` sits between the cycle and its transport and holds
a small write (the head) until the next one (the body), then writes both in
one call; what is still held when the event loop comes round (an answer whose
body follows later, an ``HTTP 100 Continue``) is written then. Nothing is
reordered and no write waits beyond the current loop iteration.
"""

from __future__ import annotations

import asyncio

#: writes up to this size are held for the next one (a response head is a few hundred bytes)
HOLD_MAX = 8 << 10


class HeldHead:
    """A transport for one request cycle whose small writes wait for the next write
    (or the end of this loop iteration) to go out together. Every other transport
    call passes through, a held write flushed first where order matters."""

    __slots__ = ("_t", "_loop", "_held", "_armed")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._t = transport
        self._loop = loop
        self._held: bytes | None = None
        self._armed = False

    def write(self, data) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= HOLD_MAX:
                self._t.write(held + data)
            else:  # one writev, the body not copied
                self._t.writelines([held, data])
            return
        if len(data) <= HOLD_MAX and not self._t.is_closing():
            self._held = bytes(data)  # the caller may reuse its buffer
            if not self._armed:
                self._armed = True
                self._loop.call_soon(self._flush)
            return
        self._t.write(data)

    def _flush(self) -> None:
        self._armed = False
        held = self._held
        if held is not None:
            self._held = None
            if not self._t.is_closing():
                self._t.write(held)

    def flush(self) -> None:
        """Write what is held now (before a close, an EOF or a pause check)."""
        held = self._held
        if held is not None:
            self._held = None
            self._t.write(held)

    def writelines(self, chunks) -> None:
        self.write(b"".join(chunks))

    def close(self) -> None:
        self.flush()
        self._t.close()

    def write_eof(self) -> None:
        self.flush()
        self._t.write_eof()

    def abort(self) -> None:
        self._held = None
        self._t.abort()

    def is_closing(self) -> bool:
        return self._t.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._t.get_write_buffer_size() + (len(self._held) if self._held is not None else 0)

    def __getattr__(self, name):
        return getattr(self._t, name)


def hold_heads(cycle, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
    """Give ``cycle`` (uvicorn's ``RequestResponseCycle`` just created for a request,
    its task not yet run) a :class:`HeldHead` over ``transport``."""
    if cycle is not None and cycle.transport is transport:
        cycle.transport = HeldHead(transport, loop)


class HeldHeads:
    """Mixin for uvicorn's httptools protocol (before it in the bases): every
    request cycle it creates writes through a :class:`HeldHead`. The cycle is
    made in ``on_headers_complete`` and its task has not run yet when this
    wraps it, so no write of it bypasses the wrapper."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        hold_heads(self.cycle, self.transport, self.loop)
