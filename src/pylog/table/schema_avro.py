"""Avro values -> typed Arrow columns, with every bad record isolated.

==============================  =====================================
Avro                            Arrow (then Iceberg)
==============================  =====================================
record                          struct (the top level: the row)
null/boolean/int/long           null/bool/int32/int64
float/double                    float32/float64
bytes, fixed                    binary
string, enum                    string (an enum holds its symbol)
array, map                      list, map<string, T>
union ``[null, T]``             T, nullable
timestamp-millis/-micros        timestamp[us, UTC] (timestamptz)
date                            date32
decimal (bytes or fixed)        decimal128(precision, scale)
==============================  =====================================

A field is required when its type is not a union with null. Unions of two
or more non-null types have no column type and are refused, so are
recursive records.

How a batch is parsed (no per-record Python): pylog._core.avro.frame_values
walks every value against the schema in C (GIL released) and finds the bad
ones with a reason and byte position: Avro has no per-value framing, so this
is what makes the next step safe. The good values are then concatenated into
one block of an Avro object container file and decoded by fastavro's reader
(Cython) into Arrow in one call. The container's schema is the value schema
with timestamp and date logical types removed: their raw longs/ints become
Arrow timestamps and dates by a cast, not by a datetime object per value. If
that decode still fails on a value the walk accepted (a decimal too wide for
its precision, a timestamp past Arrow's range), the good values are bisected
to isolate it, as the JSON path does.
"""

from __future__ import annotations

import copy
import io
import json
import threading
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from pylog._core.avro import frame_values
from pylog.table.schema_errors import SchemaError
from pylog.table.schema_json import Reasons

__all__ = ["AvroSchema", "compile_avro_schema", "parse_avro_values"]

OPS = {"null": 0, "boolean": 1, "int": 2, "long": 3, "float": 4, "double": 5, "bytes": 6,
       "string": 7, "fixed": 8, "enum": 9, "record": 10, "array": 11, "map": 12, "union": 13}
VERDICTS = {
    1: "truncated: the value ends inside a datum",
    2: "a varint longer than 10 bytes",
    3: "a negative length",
    4: "invalid UTF-8 in a string",
    5: "a union branch index out of range",
    6: "an enum index out of range",
    7: "a boolean byte other than 0 or 1",
    8: "trailing bytes after the datum",
    9: "an int out of the 32-bit range",
    10: "an array or map count larger than the bytes left",
}
_RAW_LOGICAL = {"timestamp-millis", "timestamp-micros", "date",
                "local-timestamp-millis", "local-timestamp-micros"}


@dataclass(frozen=True)
class AvroSchema:
    """A compiled Avro value schema: the parsed schema, its walk program, the
    Arrow schema of its columns and of fastavro's raw output."""

    parsed: Any
    program: np.ndarray
    arrow: pa.Schema
    exact: pa.Schema        # millisecond timestamps in milliseconds
    raw: pa.Schema          # timestamps/dates as their longs/ints
    container_header: bytes
    sync: bytes


def compile_avro_schema(schema: Any, where: str = "the Avro schema") -> AvroSchema:
    """Compiles an Avro schema (a dict or its JSON text); raises SchemaError
    naming the first construct a column cannot hold."""
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise SchemaError(f"{where} is not JSON: {e}") from None
    try:
        parsed = fastavro.parse_schema(copy.deepcopy(schema), _write_hint=False)
    except Exception as e:      # fastavro raises SchemaParseException, ValueError, KeyError
        raise SchemaError(f"{where} is not a valid Avro schema: {e}") from None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise SchemaError(f"{where}: the top level must be a record, not {parsed!r:.80}")
    with _COMPILE_LOCK:
        _NAMES.clear()
        _collect_names(parsed)
        program: list[int] = []
        _emit(parsed, program, "$", ())
        arrow = pa.schema([_field(f, "$." + f["name"], ()) for f in parsed["fields"]])
        exact = pa.schema([_field(f, "$." + f["name"], (), True) for f in parsed["fields"]])
    raw_schema = _strip_logical(parsed)
    raw = pa.schema([pa.field(f.name, _raw_type(f.type), f.nullable) for f in exact])
    header = io.BytesIO()
    fastavro.writer(header, raw_schema, [], codec="null")
    head = header.getvalue()
    return AvroSchema(parsed, np.array(program, dtype=np.int64), arrow, exact, raw,
                      head, head[-16:])


# The named types (records, enums, fixed) of the schema being compiled, by full
# name: a later use of a name is a reference to its definition.
_NAMES: dict[str, Any] = {}
_COMPILE_LOCK = threading.Lock()
_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))


def _collect_names(t: Any) -> None:
    if isinstance(t, list):
        for b in t:
            _collect_names(b)
    elif isinstance(t, dict):
        if t.get("type") in ("record", "enum", "fixed") and "name" in t:
            _NAMES.setdefault(t["name"], t)
        for f in t.get("fields", ()):
            _collect_names(f["type"])
        for k in ("items", "values"):
            if k in t:
                _collect_names(t[k])
        if isinstance(t.get("type"), (dict, list)):
            _collect_names(t["type"])


def _resolve(t: Any, path: str) -> Any:
    """A named type's definition for a reference by name; other types as they are."""
    if isinstance(t, str) and t not in _PRIMITIVES:
        if t not in _NAMES:
            raise SchemaError(f"Avro schema at {path}: unknown type {t!r}")
        return _NAMES[t]
    return t


def _branches(t: Any) -> tuple[Any, bool]:
    """(the one non-null type, nullable) of a type that may be a union with null."""
    if isinstance(t, list):
        rest = [b for b in t if b != "null"]
        if len(rest) != 1:
            return None, True
        return rest[0], len(rest) < len(t)
    return t, False


def _emit(t: Any, out: list[int], path: str, seen: tuple[str, ...]) -> None:
    """Appends the walk program of type `t` (see pylog._core.avro)."""
    at = len(out)
    t = _resolve(t, path)
    if isinstance(t, list):
        out += [OPS["union"], len(t), 0]
        for b in t:
            _emit(b, out, path, seen)
    elif isinstance(t, str):
        if t not in OPS:
            raise SchemaError(f"Avro schema at {path}: unknown type {t!r}")
        out += [OPS[t], 0, 0]
    else:
        kind = t["type"]
        if kind == "record":
            if t["name"] in seen:
                raise SchemaError(f"Avro schema at {path}: record {t['name']} is recursive "
                                  f"(a table column cannot be)")
            out += [OPS["record"], len(t["fields"]), 0]
            for f in t["fields"]:
                _emit(f["type"], out, f"{path}.{f['name']}", (*seen, t["name"]))
        elif kind == "array":
            out += [OPS["array"], 0, 0]
            _emit(t["items"], out, path + "[]", seen)
        elif kind == "map":
            out += [OPS["map"], 0, 0]
            _emit(t["values"], out, path + "{}", seen)
        elif kind == "fixed":
            out += [OPS["fixed"], t["size"], 0]
        elif kind == "enum":
            out += [OPS["enum"], len(t["symbols"]), 0]
        elif kind in OPS:
            out += [OPS[kind], 0, 0]
        else:
            raise SchemaError(f"Avro schema at {path}: unknown type {kind!r}")
    out[at + 2] = len(out) - at


def _field(f: dict, path: str, seen: tuple[str, ...], exact: bool = False) -> pa.Field:
    inner, nullable = _branches(f["type"])
    if inner is None:
        raise SchemaError(f"Avro schema at {path}: union {f['type']!r} has more than one "
                          f"non-null type (a column has one type)")
    return pa.field(f["name"], _arrow_type(inner, path, seen, exact), nullable=nullable)


def _arrow_type(t: Any, path: str, seen: tuple[str, ...], exact: bool = False) -> pa.DataType:
    """The column type of Avro type `t`; `exact` keeps millisecond timestamps
    in milliseconds (the step between fastavro's raw longs and microseconds)."""
    if isinstance(t, list):
        inner, _ = _branches(t)
        if inner is None:
            raise SchemaError(f"Avro schema at {path}: union {t!r} has more than one "
                              f"non-null type (a column has one type)")
        return _arrow_type(inner, path, seen, exact)
    t = _resolve(t, path)
    if isinstance(t, str):
        t = {"type": t}
    kind, logical = t["type"], t.get("logicalType")
    if logical in _RAW_LOGICAL and logical != "date" and kind == "long":
        unit = "ms" if exact and logical.endswith("-millis") else "us"
        return pa.timestamp(unit, tz=None if logical.startswith("local-") else "UTC")
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = t.get("precision"), t.get("scale", 0)
        if not isinstance(precision, int) or not 0 < precision <= 38:
            raise SchemaError(f"Avro schema at {path}: decimal precision {precision!r} "
                              f"is not 1..38")
        return pa.decimal128(precision, scale)
    simple = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
              "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(),
              "string": pa.string(), "fixed": pa.binary(), "enum": pa.string()}
    if kind in simple:
        return simple[kind]
    if kind == "record":
        if t["name"] in seen:
            raise SchemaError(f"Avro schema at {path}: record {t['name']} is recursive")
        return pa.struct([_field(f, f"{path}.{f['name']}", (*seen, t["name"]), exact)
                          for f in t["fields"]])
    if kind == "array":
        return pa.list_(pa.field("element", _arrow_type(t["items"], path + "[]", seen, exact),
                                 nullable=_branches(t["items"])[1]))
    if kind == "map":
        return pa.map_(pa.string(), pa.field("value", _arrow_type(t["values"], path + "{}", seen, exact),
                                             nullable=_branches(t["values"])[1]))
    raise SchemaError(f"Avro schema at {path}: type {kind!r} is not supported")


def _strip_logical(t: Any) -> Any:
    """`t` with timestamp and date logical types removed (decoded raw, cast in Arrow)."""
    if isinstance(t, list):
        return [_strip_logical(b) for b in t]
    if isinstance(t, dict):
        t = {k: _strip_logical(v) if k in ("fields", "items", "values", "type") else v
             for k, v in t.items() if k != "__fastavro_parsed" and k != "__named_schemas"}
        if t.get("logicalType") in _RAW_LOGICAL:
            t = {k: v for k, v in t.items() if k != "logicalType"}
            return t["type"] if len(t) == 1 else t
        if "fields" in t and isinstance(t["fields"], list):
            t["fields"] = [dict(f, type=_strip_logical(f["type"])) for f in t["fields"]]
        return t
    return t


def _raw_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _raw_type(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_type, pa.field("value", _raw_type(t.item_type),
                                            t.item_field.nullable))
    if pa.types.is_list(t):
        return pa.list_(pa.field("element", _raw_type(t.value_type), t.value_field.nullable))
    return t


def _varint(v: int) -> bytes:
    v = (v << 1) ^ (v >> 63)
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _decode(schema: AvroSchema, data: np.ndarray, offsets: np.ndarray) -> pa.Table:
    """Decodes the values [offsets[0], offsets[-1]) of `data` (all framed good)."""
    n = len(offsets) - 1
    body = data[offsets[0]:offsets[-1]].tobytes()
    block = b"".join((schema.container_header, _varint(n), _varint(len(body)), body, schema.sync))
    records = list(fastavro.reader(io.BytesIO(block)))
    raw = pa.Table.from_pylist(records, schema=schema.raw)
    return raw.cast(schema.exact).cast(schema.arrow)


def parse_avro_values(schema: AvroSchema, values: pa.Array, *,
                      confluent: bool = False) -> tuple[pa.Table, np.ndarray, pa.StringArray]:
    """(good rows as a table of ``schema.arrow``, ok mask, reason per row: null where ok).
    With `confluent`, each value starts with Confluent's 5-byte prefix (magic 0,
    schema id), stripped here; the caller has checked the ids."""
    n = len(values)
    reasons = Reasons(n)
    if n == 0:
        return schema.arrow.empty_table(), np.ones(0, dtype=bool), reasons.array()
    if not pa.types.is_binary(values.type):
        values = values.cast(pa.binary())
    reasons.set(values.is_null().to_numpy(zero_copy_only=False), "value is null (a tombstone)")
    values = values.fill_null(b"")
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=n + 1,
                            offset=values.offset * 4).astype(np.int64)
    data_buffer = values.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None \
        else np.zeros(0, dtype=np.uint8)
    starts = offsets[:-1].copy()
    if confluent:
        starts = np.minimum(starts + 5, offsets[1:])
    verdicts = np.zeros(n, dtype=np.int8)
    where = np.zeros(n, dtype=np.int64)
    # frame_values takes contiguous bounds: each value is [starts[i], offsets[i+1]).
    _frame(schema, data, starts, offsets[1:], verdicts, where)
    for code in np.unique(verdicts[verdicts != 0]):
        reasons.set(verdicts == code, f"not a datum of the schema: {VERDICTS[int(code)]}")

    good = np.flatnonzero(~reasons.bad)
    lengths = offsets[1:][good] - starts[good]
    packed_offsets = np.zeros(len(good) + 1, dtype=np.int64)
    np.cumsum(lengths, out=packed_offsets[1:])
    packed = _gather(data, starts[good], lengths, int(packed_offsets[-1]))

    tables: list[tuple[int, pa.Table]] = []
    pending = [(0, len(good))]
    while pending:
        lo, hi = pending.pop()
        if lo >= hi:
            continue
        try:
            tables.append((lo, _decode(schema, packed, packed_offsets[lo:hi + 1])))
        except (ValueError, TypeError, OverflowError, pa.ArrowException, EOFError) as e:
            if hi - lo == 1:
                reasons.set(good[lo], f"not decodable: {e}")
            else:
                mid = (lo + hi) // 2
                pending += [(mid, hi), (lo, mid)]
    tables.sort(key=lambda x: x[0])
    table = pa.concat_tables([t for _, t in tables]) if tables else schema.arrow.empty_table()
    return table, ~reasons.bad, reasons.array()


def _frame(schema: AvroSchema, data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
           verdicts: np.ndarray, where: np.ndarray) -> None:
    """frame_values over values that need not be adjacent ([starts[i], ends[i]))."""
    if np.array_equal(starts[1:], ends[:-1]):
        offsets = np.append(starts, ends[-1:]) if len(starts) else np.zeros(1, np.int64)
        frame_values(schema.program, data, np.ascontiguousarray(offsets), verdicts, where)
        return
    lengths = ends - starts
    packed_offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=packed_offsets[1:])
    packed = _gather(data, starts, lengths, int(packed_offsets[-1]))
    frame_values(schema.program, packed, packed_offsets, verdicts, where)


def _gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, total: int) -> np.ndarray:
    """The byte ranges [starts[i], starts[i]+lengths[i]) of `data`, concatenated (vectorised)."""
    if total == 0:
        return np.zeros(0, dtype=np.uint8)
    ends = np.cumsum(lengths)
    # index of each output byte = start of its value + its position in the value
    index = np.arange(total, dtype=np.int64) - np.repeat(ends - lengths - starts, lengths)
    return data[index]
