"""engine.exec.values.format_doubles (BIND/RAND double results written for a whole
column by Arrow kernels) against the per-value canonical writer format_double."""

from __future__ import annotations

import math
import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.exec import values as V

_special = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, -5e-324, 1.7976931348623157e308,
                            1e16, 1e15, 1e21, 1e22, 1e-5, 1e-4, 0.1, 123456789012345680.0, 2.5e-5, 100.0, 1.0])
_bits = st.integers(0, 2**64 - 1).map(lambda b: struct.unpack("<d", struct.pack("<Q", b))[0])
_doubles = st.one_of(st.floats(allow_nan=True, allow_infinity=True), _bits, _special,
                     st.integers(-10**6, 10**6).map(float))


@settings(max_examples=200, deadline=None)
@given(st.lists(_doubles, min_size=0, max_size=300))
def test_column_equals_per_value_writer(xs):
    arr = np.array(xs, dtype=np.float64)
    assert V.format_doubles(arr) == [V.format_double(v) for v in arr.tolist()]
    assert V.format_doubles(arr, '"', '"^^<d>') == ['"' + V.format_double(v) + '"^^<d>' for v in arr.tolist()]


def test_arrow_variant_matches_the_list_one():
    """format_doubles_arrow (RAND()'s keys) writes what format_doubles writes."""
    from engine.exec.values import format_doubles, format_doubles_arrow  # noqa: PLC0415

    rng = np.random.default_rng(3)
    for x in (rng.random(500), rng.normal(0, 1e12, 300), np.array([0.5, -0.0, np.inf, 1e-300] * 20),
              rng.random(10)):
        assert format_doubles_arrow(x, '"', '"^^<d>').to_pylist() == format_doubles(x, '"', '"^^<d>')
