"""Continuous-query time semantics: stream progress, windows, instants and triggers.

Adaptor, dispatcher, injector, coordinator and query registry build on these.
"""

from engine.stream.progress import ARRIVAL, EVENT, LateElementError, StreamClock
from engine.stream.windows import (
    DEFAULT_COUNT_STEP_MS,
    Trigger,
    Window,
    first_instant,
    query_step,
    window_member,
)

__all__ = [
    "ARRIVAL", "EVENT", "LateElementError", "StreamClock", "DEFAULT_COUNT_STEP_MS", "Trigger",
    "Window", "first_instant", "query_step", "window_member",
]
