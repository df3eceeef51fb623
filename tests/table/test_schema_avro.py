"""Avro values parsed by an Avro schema (pylog.table.schema_avro and the C decoder
pylog._core.avro), against fastavro's schemaless reader as the oracle."""

from __future__ import annotations

import datetime
import decimal
import io
import math

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog._core.avro import decode_values
from pylog.table.schema_avro import compile_avro_schema, parse_avro_values
from pylog.table.schema_errors import SchemaError

UTC = datetime.timezone.utc
SCHEMA = {
    "type": "record", "name": "Click", "fields": [
        {"name": "id", "type": "long"},
        {"name": "n", "type": "int"},
        {"name": "name", "type": ["null", "string"]},
        {"name": "score", "type": "double"},
        {"name": "ratio", "type": "float"},
        {"name": "raw", "type": "bytes"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                   "scale": 2}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "where", "type": {"type": "record", "name": "Where", "fields": [
            {"name": "x", "type": "int"}, {"name": "label", "type": ["null", "string"]}]}},
    ]}
PARSED = fastavro.parse_schema(SCHEMA)
COMPILED = compile_avro_schema(SCHEMA)


def encode(record) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED, record)
    return out.getvalue()


def oracle(raw):
    """fastavro's record for `raw` when it reads exactly `raw`, else None."""
    if raw is None:
        return None
    buf = io.BytesIO(raw)
    try:
        record = fastavro.schemaless_reader(buf, PARSED, None)
    except Exception:
        return None
    return record if buf.tell() == len(raw) else None


def parse(values):
    table, ok, reasons = parse_avro_values(COMPILED, pa.array(values, pa.binary()))
    return table.to_pylist(), list(ok), reasons.to_pylist()


def comparable(x):
    """`x` with NaN as a string (NaN != NaN) and maps as (key, value) lists, as the
    table holds them."""
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, dict):
        return {k: comparable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [comparable(v) for v in x]
    return x


def as_table_row(record):
    row = dict(record)
    row["attrs"] = list(record["attrs"].items())
    return comparable(row)


_i32 = st.integers(-2**31, 2**31 - 1)
_i64 = st.integers(-2**63, 2**63 - 1)
record = st.fixed_dictionaries({
    "id": _i64, "n": _i32, "name": st.one_of(st.none(), st.text(max_size=6)),
    "score": st.floats(allow_nan=False), "ratio": st.floats(width=32, allow_nan=False),
    "raw": st.binary(max_size=6), "kind": st.sampled_from(["A", "B", "C"]),
    "tags": st.lists(st.text(max_size=4), max_size=3),
    "attrs": st.dictionaries(st.text(max_size=3), _i64, max_size=3),
    "at": st.datetimes(min_value=datetime.datetime(1900, 1, 1),
                       max_value=datetime.datetime(2200, 1, 1), timezones=st.just(UTC))
    .map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
    "at_us": st.one_of(st.none(), st.datetimes(min_value=datetime.datetime(1900, 1, 1),
                                               max_value=datetime.datetime(2200, 1, 1),
                                               timezones=st.just(UTC))),
    "day": st.dates(min_value=datetime.date(1900, 1, 1)),
    "price": st.decimals(min_value=-9_999_999, max_value=9_999_999, places=2,
                         allow_nan=False, allow_infinity=False),
    "hash": st.binary(min_size=4, max_size=4),
    "where": st.fixed_dictionaries({"x": _i32, "label": st.one_of(st.none(), st.text(max_size=3))}),
})


@st.composite
def damaged(draw):
    """A good encoding cut, extended, or with a byte changed."""
    raw = encode(draw(record))
    how = draw(st.sampled_from(["cut", "extend", "flip"]))
    if how == "cut":
        return raw[:draw(st.integers(0, len(raw) - 1))]
    if how == "extend":
        return raw + draw(st.binary(min_size=1, max_size=3))
    i = draw(st.integers(0, len(raw) - 1))
    return raw[:i] + bytes([draw(st.integers(0, 255))]) + raw[i + 1:]


value = st.one_of(record.map(encode), damaged(), st.binary(max_size=12), st.none())

# Where the decoder is stricter than fastavro (the Avro spec's rules fastavro does not check).
# fastavro takes a negative union or enum index as Python does a list index (from the end).
STRICTER = ("a boolean byte", "an int out of the 32-bit range", "a varint longer",
            "an array or map count larger", "a union branch index out of range",
            "an enum index out of range")
# What fastavro reads but a table column cannot hold (Python's date range, decimal128).
UNREPRESENTABLE = ("outside the years 1-9999", "a decimal wider", "not representable")


@given(st.lists(value, max_size=25))
def test_parse_matches_fastavro(values):
    """A value is good exactly when fastavro reads it whole (except where the
    decoder applies a rule of the spec fastavro does not); good rows equal
    fastavro's records, in order."""
    rows, ok, reasons = parse(values)
    expected = [oracle(v) for v in values]
    for e, o, r in zip(expected, ok, reasons, strict=True):
        if o:
            assert e is not None
        elif e is not None:
            assert any(words in r for words in STRICTER + UNREPRESENTABLE), r
    assert [as_table_row(e) for e, o in zip(expected, ok, strict=True) if o] == \
        [comparable(r) for r in rows]
    assert all((r is None) == o for r, o in zip(reasons, ok, strict=True))


class TestDecoder:
    def test_reasons(self):
        """Each kind of damage is reported with its reason."""
        good = encode({"id": 1, "n": 2, "name": None, "score": 0.0, "ratio": 0.0, "raw": b"",
                       "kind": "A", "tags": [], "attrs": {}, "at": datetime.datetime.now(UTC),
                       "at_us": None, "day": datetime.date(2020, 1, 1),
                       "price": decimal.Decimal("1.00"), "hash": b"abcd",
                       "where": {"x": 1, "label": None}})
        rows, ok, reasons = parse([good, good[:-1], good + b"\x00", None, good])
        assert [True, False, False, False, True] == ok
        assert "truncated" in reasons[1]
        assert "trailing bytes" in reasons[2]
        assert "tombstone" in reasons[3]
        assert 2 == len(rows)

    def test_refuses_bounds_past_the_data(self):
        """The C decoder checks the value bounds it is given against the data."""
        with pytest.raises(ValueError, match="not inside the data"):
            decode_values(COMPILED.program, b"abc", np.array([0], dtype=np.int64),
                          np.array([5], dtype=np.int64), np.zeros(1, np.int8),
                          np.zeros(1, np.int64))


class TestCompile:
    def test_types(self):
        """Avro types become their Arrow types; unions with null are nullable."""
        schema = COMPILED.arrow
        assert pa.timestamp("us", tz="UTC") == schema.field("at").type
        assert pa.date32() == schema.field("day").type
        assert pa.decimal128(9, 2) == schema.field("price").type
        assert pa.string() == schema.field("kind").type
        assert schema.field("name").nullable and not schema.field("id").nullable

    @pytest.mark.parametrize("schema, words", [
        ('"int"', "must be a record"),
        ({"type": "record", "name": "R", "fields": [{"name": "a", "type": ["int", "string"]}]},
         "more than one non-null type"),
        ({"type": "record", "name": "R", "fields": [
            {"name": "next", "type": ["null", "R"]}]}, "recursive"),
        ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]},
         "not a valid Avro schema"),
    ])
    def test_refused_schemas(self, schema, words):
        """A schema a column cannot hold is refused with the reason."""
        with pytest.raises(SchemaError, match=words):
            compile_avro_schema(schema)
