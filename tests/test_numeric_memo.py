"""The memoised numeric parse of computed/query-local keys (engine.exec.evaluate._local_numeric)
equals the Arrow parse (engine.kv.dictionary.numeric_values), on first and repeated calls."""

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.exec import evaluate as E
from engine.kv.dictionary import numeric_values

XSD = "http://www.w3.org/2001/XMLSchema#"
_TYPES = ["integer", "decimal", "double", "float", "int", "byte", "unsignedByte", "nonNegativeInteger",
          "string", "boolean"]
_LEX = st.one_of(
    st.integers(-10**22, 10**22).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1.", ".5", "-0", "+3", "1e3", "INF", "-INF", "NaN", "abc", "", " 1", "0x1", "1_0"]),
    st.text(alphabet="0123456789.+-eE", max_size=8),
)
_KEY = st.one_of(
    st.tuples(_LEX, st.sampled_from(_TYPES)).map(lambda t: f'"{t[0]}"^^<{XSD}{t[1]}>'),
    _LEX.map(lambda x: f'"{x}"'),
    st.sampled_from(["<http://example.org/x>", "_:b0", '"1"@en']),
)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


@settings(max_examples=200, deadline=None)
@given(st.lists(_KEY, max_size=12))
def test_local_numeric_equals_arrow_parse(keys):
    want = numeric_values(pa.array(keys, type=pa.large_string()))
    assert _same(E._local_numeric(keys), want)
    assert _same(E._local_numeric(keys), want)  # the memoised answers


def test_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(E, "_NUMERIC_MEMO", {})
    monkeypatch.setattr(E, "_NUMERIC_MEMO_MAX", 8)
    keys = [f'"{i}"^^<{XSD}integer>' for i in range(20)]
    for k in keys:
        E._local_numeric([k])
    assert len(E._NUMERIC_MEMO) <= 8
    assert E._local_numeric(keys).tolist() == [float(i) for i in range(20)]
    long_key = '"' + "1" * 100 + f'"^^<{XSD}decimal>'
    E._local_numeric([long_key])
    assert long_key not in E._NUMERIC_MEMO
