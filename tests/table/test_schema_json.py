"""JSON values parsed by a JSON Schema (pylog.table.schema_json), against
json.loads and a reference validator as the oracle."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog.table import schema_json
from pylog.table.schema_errors import SchemaError
from pylog.table.schema_json import compile_json_schema, parse_json_values

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": ["string", "null"]},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "kind": {"type": "string", "enum": ["a", "b"]},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "point": {"type": "object", "properties": {"x": {"type": "integer"},
                                                   "y": {"type": "integer"}},
                  "required": ["x"]},
    },
    "required": ["id"],
}
NODE = compile_json_schema(SCHEMA)


def parse(values):
    table, ok, reasons = parse_json_values(NODE, pa.array(values, pa.binary()), NODE.arrow_schema())
    return table.to_pylist(), list(ok), reasons.to_pylist()


# -- the oracle: json.loads plus the rules the module docstring states ---------

class Bad(Exception):
    pass


def _finite_literal(text):
    """A number literal; one too large for a double is refused (the reader's rule)."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise Bad("number too big for a double")
    return value


def _pairs(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise Bad("duplicate key")
    return dict(pairs)


def _check_str(s):
    for ch in s:
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise Bad("lone surrogate")


def _check(value, schema, path):
    """The value as the table holds it, or Bad."""
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if value is None:
        return None
    kind = [t for t in types if t != "null"][0]
    if kind == "integer":
        if type(value) is not int or not -2**63 <= value < 2**63:
            raise Bad(path)
        return value
    if kind == "number":
        if type(value) not in (int, float):
            raise Bad(path)
        return float(value)
    if kind == "boolean":
        if type(value) is not bool:
            raise Bad(path)
        return value
    if kind == "string":
        if type(value) is not str:
            raise Bad(path)
        _check_str(value)
        if "enum" in schema and value not in schema["enum"]:
            raise Bad(path)
        if schema.get("format") == "date-time":
            return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return value
    if kind == "array":
        if type(value) is not list:
            raise Bad(path)
        return [_check(v, schema["items"], path + "[]") for v in value]
    if type(value) is not dict:
        raise Bad(path)
    for k in value:
        _check_str(k)
    out = {}
    for name, sub in schema["properties"].items():
        out[name] = _check(value.get(name), sub, f"{path}/{name}")
        if name in schema.get("required", ()) and out[name] is None:
            raise Bad(f"{path}/{name} required")
    return out


def oracle(raw):
    """The row json.loads + the schema's rules make of `raw`, or None for a bad record."""
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, object_pairs_hook=_pairs, parse_float=_finite_literal)
        if type(value) is not dict:
            return None
        return _check(value, SCHEMA, "")
    except (Bad, ValueError, RecursionError):
        return None


# -- strategies: records that fit, records that almost fit, and noise ---------

_timestamps = st.datetimes(min_value=datetime.datetime(1970, 1, 1),
                           max_value=datetime.datetime(2100, 1, 1)).map(
    lambda d: d.replace(microsecond=0).isoformat() + "Z")
_text = st.text(max_size=8)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), _text)

good_record = st.fixed_dictionaries(
    {"id": st.integers(-2**63, 2**63 - 1)},
    optional={
        "name": st.one_of(st.none(), _text),
        "score": st.one_of(st.integers(-2**53, 2**53),
                           st.floats(allow_nan=False, allow_infinity=False)),
        "ok": st.booleans(),
        "kind": st.sampled_from(["a", "b"]),
        "at": _timestamps,
        "tags": st.lists(_text, max_size=3),
        "point": st.fixed_dictionaries({"x": st.integers(-5, 5)},
                                       optional={"y": st.integers(-5, 5)}),
        "extra": _scalar,
    })
near_record = good_record.flatmap(lambda r: st.fixed_dictionaries({
    k: st.one_of(st.just(v), _scalar) for k, v in r.items()}))


def _encode(r, indent):
    return json.dumps(r, indent=indent, ensure_ascii=False).encode()


value = st.one_of(
    st.builds(_encode, good_record, st.sampled_from([None, 1])),
    st.builds(_encode, near_record, st.sampled_from([None, 2])),
    st.binary(max_size=20),
    st.sampled_from([b"", b" ", b"null", b"[]", b"1", b'"x"', b'{"id":1}{"id":2}',
                     b'{"id":1}}{"v":{"id":2}', b'{"id":1,"id":2}', b'{"id":1,"name":"a\nb"}',
                     b'{"id":1,"name":"\xff"}', b'{"id":NaN}', b'{"id":1,"score":Infinity}',
                     b'{"id":1,"name":"\\ud800"}', b'{"id":1}\n', b'\n{"id":1}', b'{"id":1.0}',
                     b'{"id":1}\x00', b'{"id":\r1}', None]),
)


@given(st.lists(value, max_size=30))
def test_parse_matches_json_loads(values):
    """Every value is good exactly when json.loads and the schema's rules accept
    it, good rows come out in order with the oracle's values, bad ones have a reason."""
    rows, ok, reasons = parse(values)
    expected = [oracle(v) for v in values]
    assert [e is not None for e in expected] == ok
    assert [e for e in expected if e is not None] == rows
    assert all((r is None) == o for r, o in zip(reasons, ok, strict=True))


@given(st.lists(value, max_size=40))
def test_parse_matches_json_loads_across_blocks(values):
    """The same with reader blocks of a few records: a failing block's row numbers
    count from the block, and the isolation must still find each bad record."""
    size = schema_json.BLOCK_SIZE
    schema_json.BLOCK_SIZE = 256
    try:
        test_parse_matches_json_loads.hypothesis.inner_test(values)
    finally:
        schema_json.BLOCK_SIZE = size


class TestReasons:
    def test_each_bad_record_has_its_own_reason(self):
        """A batch with bad records at several places reports each one's reason."""
        rows, ok, reasons = parse([b'{"id":1}', b'{"id":"x"}', b'{"id":2}', None, b"{",
                                   b'{"name":"q"}', b'{"id":3,"kind":"z"}',
                                   b'{"id":4,"point":{}}'])
        assert [True, False, True, False, False, False, False, False] == ok
        assert [1, 2] == [r["id"] for r in rows]
        assert "field /id: expected number, got string" == reasons[1]
        assert "value is null (a tombstone)" == reasons[3]
        assert reasons[4].startswith("not JSON")
        assert "field /id: required, absent or null" == reasons[5]
        assert "field /kind: not one of ['a', 'b']" == reasons[6]
        assert "field /point/x: required, absent or null" == reasons[7]

    def test_a_newline_inside_a_string_is_bad_outside_is_whitespace(self):
        """A raw newline between tokens is JSON whitespace; inside a string it is not JSON."""
        rows, ok, _ = parse([b'{\n"id":\r\n1}', b'{"id":1,"name":"a\nb"}'])
        assert [True, False] == ok
        assert 1 == rows[0]["id"]

    def test_two_values_in_one_record_are_bad(self):
        """A record holding two JSON values, even ones that close the wrapper, is bad."""
        _, ok, reasons = parse([b'{"id":1}', b'{"id":1}}{"v":{"id":2}', b'{"id":3}'])
        assert [True, False, True] == ok
        assert reasons[1] is not None


class TestCompile:
    def test_types(self):
        """Each supported JSON Schema type becomes its Arrow type; required top-level
        fields are non-nullable."""
        schema = NODE.arrow_schema()
        assert pa.int64() == schema.field("id").type and not schema.field("id").nullable
        assert pa.timestamp("us", tz="UTC") == schema.field("at").type
        assert pa.list_(pa.field("element", pa.string())) == schema.field("tags").type
        assert schema.field("name").nullable

    @pytest.mark.parametrize("schema, words", [
        ({"type": "string"}, "top level must be an object"),
        ({"type": "object", "properties": {"a": {"type": ["string", "integer"]}}}, "$.a"),
        ({"type": "object", "properties": {"a": {"type": "object"}}}, "free-form"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "'items'"),
        ({"type": "object", "properties": {"a": {}}}, "no 'type'"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
         "not in properties"),
    ])
    def test_refused_schemas_name_the_place(self, schema, words):
        """A schema a column cannot hold is refused with the path and the reason."""
        with pytest.raises(SchemaError, match=words.replace("$", r"\$").replace("[", r"\[")
                           .replace("(", r"\(")):
            compile_json_schema(schema)
