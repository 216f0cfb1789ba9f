"""The XSD value model (engine.exec.values)."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.exec import values as V
from engine.exec.values import DECIMAL, DOUBLE, FLOAT, INTEGER, ExprError, Num
from engine.terms import IRI, XSD, BNode, Literal


def test_parse_numeric_lexical_forms():
    assert V.parse_numeric("01", XSD + "integer") == Num(INTEGER, 1)
    assert V.parse_numeric(" +5 ", XSD + "integer") == Num(INTEGER, 5)
    assert V.parse_numeric("1.5", XSD + "integer") is None
    assert V.parse_numeric("1.", XSD + "decimal") == Num(DECIMAL, Decimal("1"))
    assert V.parse_numeric(".5", XSD + "decimal") == Num(DECIMAL, Decimal("0.5"))
    assert V.parse_numeric("1e3", XSD + "decimal") is None
    assert V.parse_numeric("-INF", XSD + "double") == Num(DOUBLE, -math.inf)
    assert V.parse_numeric("inf", XSD + "double") is None
    assert V.parse_numeric("1.25", XSD + "float") == Num(FLOAT, 1.25)
    assert V.parse_numeric("300", XSD + "byte") is None
    assert V.parse_numeric("-1", XSD + "nonNegativeInteger") is None
    assert V.parse_numeric("0", XSD + "positiveInteger") is None
    assert V.parse_numeric("1", XSD + "string") is None


def test_formatting_matches_w3c():
    assert V.format_double(32100.0) == "3.21E4"
    assert V.format_double(0.4) == "4.0E-1"
    assert V.format_double(2.5) == "2.5E0"
    assert V.format_double(100.0) == "1.0E2"
    assert V.format_double(0.0) == "0.0E0"
    assert V.format_double(math.inf) == "INF" and V.format_double(math.nan) == "NaN"
    assert V.format_float(V.to_float32(0.1)) == "1.0E-1"
    assert V.format_decimal(Decimal("2")) == "2.0"
    assert V.format_decimal(Decimal("11.10")) == "11.1"
    assert V.format_decimal(Decimal("-0.50")) == "-0.5"
    assert V.format_decimal(Decimal("1E+3")) == "1000.0"
    assert V.format_decimal(Decimal("1E-8")) == "0.00000001"
    assert V.format_decimal(Decimal("-0")) == "0.0"
    assert V.format_decimal_integral(Decimal("3")) == "3"
    assert V.format_decimal_integral(Decimal("1.50")) == "1.5"


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_format_round_trips(x):
    s = V.format_double(x)
    assert "E" in s
    assert float(s) == x
    mant = s.split("E")[0].lstrip("-")
    assert "." in mant and len(mant.split(".")[0]) == 1


@given(st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_float_format_round_trips(x):
    s = V.format_float(x)
    assert V.to_float32(float(s)) == x


@given(st.decimals(allow_nan=False, allow_infinity=False, places=6))
def test_decimal_format_round_trips(d):
    s = V.format_decimal(d)
    assert Decimal(s) == d
    assert V.parse_decimal(s) == d
    assert "E" not in s and "." in s


def test_numeric_ops():
    assert V.numeric_op("/", Num(INTEGER, 1), Num(INTEGER, 4)) == Num(DECIMAL, Decimal("0.25"))
    assert V.numeric_op("*", Num(INTEGER, 3), Num(DECIMAL, Decimal("0.5"))).v == Decimal("1.5")
    assert V.numeric_op("+", Num(FLOAT, 0.5), Num(DOUBLE, 0.25)) == Num(DOUBLE, 0.75)
    assert V.numeric_op("+", Num(FLOAT, 0.5), Num(INTEGER, 1)).rank == FLOAT
    with pytest.raises(ExprError):
        V.numeric_op("/", Num(DECIMAL, Decimal(1)), Num(INTEGER, 0))
    assert math.isnan(V.numeric_op("/", Num(DOUBLE, 0.0), Num(INTEGER, 0)).v)


def test_round_ceil_floor():
    assert V.num_round(Num(DECIMAL, Decimal("-2.5"))).v == Decimal(-2)
    assert V.num_round(Num(DECIMAL, Decimal("2.5"))).v == Decimal(3)
    assert V.num_round(Num(DECIMAL, Decimal("-2.51"))).v == Decimal(-3)
    assert V.num_round(Num(DOUBLE, -2.5)).v == -2.0
    assert V.num_ceil(Num(DOUBLE, -0.5)).v == 0 and math.copysign(1, V.num_ceil(Num(DOUBLE, -0.5)).v) < 0
    assert V.num_floor(Num(DECIMAL, Decimal("-1.6"))).v == Decimal(-2)


def test_string_cast_of_numerics():
    assert V.string_cast_of_num(Num(DECIMAL, Decimal("1.0"))) == "1"
    assert V.string_cast_of_num(Num(DOUBLE, 0.0)) == "0"
    assert V.string_cast_of_num(Num(DOUBLE, 1e6)) == "1.0E6"
    assert V.string_cast_of_num(Num(DOUBLE, 123.5)) == "123.5"
    assert V.string_cast_of_num(Num(FLOAT, V.to_float32(-7.875))) == "-7.875"


def test_datetime_parsing_and_compare():
    d = V.parse_datetime("2010-12-21T15:38:02.25-08:00")
    assert (d.year, d.month, d.day, d.hour, d.minute, d.second, d.tz) == (2010, 12, 21, 15, 38, Decimal("2.25"), -480)
    assert V.parse_datetime("2010-02-30T00:00:00Z") is None
    assert V.parse_datetime("2012-02-29T24:00:00") is not None
    assert V.parse_datetime("2010-01-01T24:00:01") is None
    assert V.parse_datetime("-0044-03-15T12:00:00Z").year == -44
    a = V.parse_datetime("2000-01-01T12:00:00Z")
    b = V.parse_datetime("2000-01-01T13:00:00+01:00")
    assert V.compare_datetimes(a, b) == 0
    local = V.parse_datetime("2000-01-01T12:00:00")
    with pytest.raises(ExprError):
        V.compare_datetimes(a, local)
    far = V.parse_datetime("2000-01-02T12:00:01")
    assert V.compare_datetimes(a, far) == -1 and V.compare_datetimes(far, a) == 1
    assert V.parse_date("2000-01-01Z").tz == 0
    assert V.format_timezone_duration(-480) == "-PT8H"
    assert V.format_timezone_duration(0) == "PT0S"
    assert V.format_timezone_duration(90) == "PT1H30M"


@given(st.datetimes(timezones=st.sampled_from([None])), st.datetimes(timezones=st.sampled_from([None])))
def test_datetime_order_matches_python(a, b):
    fa = V.parse_datetime(a.isoformat(timespec="microseconds") + "Z")
    fb = V.parse_datetime(b.isoformat(timespec="microseconds") + "Z")
    assert V.compare_datetimes(fa, fb) == (a > b) - (a < b)


def test_ebv():
    assert V.ebv(Literal("true", XSD + "boolean")) is True
    assert V.ebv(Literal("x", XSD + "boolean")) is False
    assert V.ebv(Literal("")) is False
    assert V.ebv(Literal("a", lang="en", datatype="http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"))
    assert V.ebv(Literal("0.0", XSD + "decimal")) is False
    assert V.ebv(Literal("NaN", XSD + "double")) is False
    assert V.ebv(Literal("bad", XSD + "integer")) is False
    for t in (IRI("http://a"), BNode("b"), Literal("2000-01-01", XSD + "date")):
        with pytest.raises(ExprError):
            V.ebv(t)


TERMS = [None, BNode("a"), BNode("b"), IRI("http://a"), IRI("http://b"), Literal("1", XSD + "integer"),
         Literal("1.0", XSD + "decimal"), Literal("NaN", XSD + "double"), Literal("-INF", XSD + "double"),
         Literal("a"), Literal("b"), Literal("a", "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString", "en"),
         Literal("true", XSD + "boolean"), Literal("2000-01-01T00:00:00Z", XSD + "dateTime"),
         Literal("x", "http://ex/dt"), Literal("bad", XSD + "integer")]


@given(st.lists(st.sampled_from(TERMS), min_size=3, max_size=3))
def test_order_key_is_a_total_preorder(ts):
    a, b, c = (V.order_key(t) for t in ts)
    if a <= b and b <= c:
        assert a <= c


def test_order_key_categories():
    keys = sorted(TERMS, key=V.order_key)
    assert keys[0] is None and isinstance(keys[1], BNode) and isinstance(keys[3], IRI)
    nums = [t for t in keys if isinstance(t, Literal) and V.numeric_of(t) is not None]
    assert [t.lexical for t in nums] == ["NaN", "-INF", "1.0", "1"] or [t.lexical for t in nums] == [
        "NaN", "-INF", "1", "1.0"]


def test_term_equal_and_less():
    one, onedec = Literal("1", XSD + "integer"), Literal("1.0", XSD + "decimal")
    assert V.term_equal(one, onedec)
    assert not V.term_equal(IRI("http://a"), Literal("http://a"))
    with pytest.raises(ExprError):
        V.term_equal(Literal("a", "http://ex/dt"), Literal("b", "http://ex/dt"))
    assert V.term_less(Literal("a"), Literal("b")) == -1
    with pytest.raises(ExprError):
        V.term_less(IRI("http://a"), IRI("http://b"))
    assert V.compare("<", Literal("NaN", XSD + "double"), one) is False


def test_float32_conversion_no_warning():
    with np.errstate(all="raise"):
        assert V.to_float32(1e300) == math.inf


def test_the_shared_error_does_not_keep_earlier_raises_frames():
    """ERR is one shared instance; raising an instance that holds a traceback extends it, so
    each raise must start a fresh one (else the frames of every earlier error, with their
    locals, stay alive and each raise gets slower)."""
    for _ in range(500):
        with pytest.raises(ExprError):
            V.ebv(IRI("http://ex.org/x"))
    depth, tb = 0, V.ERR.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    assert depth < 10, depth
