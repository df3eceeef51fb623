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

How a batch is parsed (no per-record Python): pylog._core.avro.decode_values
walks every value against the schema in C, with the GIL released, appending
each datum to growable column buffers (one column per schema node: validity
bytes, fixed-width values, int32 offsets and bytes), and gives every value a
verdict: exactly one datum of the schema, or the reason it is not (truncated,
trailing bytes, invalid UTF-8, an index out of range...) with its byte
position. A bad value's partial writes are rolled back, so the columns hold
the good values in order. The columns become Arrow arrays by
``Array.from_buffers`` (a call per column, not per value); enum indices
become their symbols by one ``take``, millisecond timestamps microseconds by
one cast. A value the cast or Arrow's full validation refuses (a decimal past
its precision), or a top-level date or timestamp outside the years 1-9999
(which Python readers of the table cannot hold; nested ones are not checked),
is isolated by bisecting the batch.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pylog._core.avro import decode_values
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
    11: "a decimal wider than 16 bytes",
    13: "a column past 2 GiB",
}
DECIMAL_BYTES, DECIMAL_FIXED = 14, 15
_RAW_LOGICAL = {"timestamp-millis", "timestamp-micros", "date",
                "local-timestamp-millis", "local-timestamp-micros"}


@dataclass(frozen=True)
class AvroSchema:
    """A compiled Avro value schema: the parsed schema, its program for
    pylog._core.avro, the Arrow schema of its columns."""

    parsed: Any
    program: np.ndarray
    arrow: pa.Schema
    exact: pa.Schema                      # millisecond timestamps in milliseconds
    symbols: dict[int, tuple[str, ...]]   # program node index -> an enum's symbols


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
        _SYMBOLS.clear()
        _collect_names(parsed)
        program: list[int] = []
        _emit(parsed, program, "$", ())
        arrow = pa.schema([_field(f, "$." + f["name"], ()) for f in parsed["fields"]])
        exact = pa.schema([_field(f, "$." + f["name"], (), True) for f in parsed["fields"]])
        symbols = dict(_SYMBOLS)
    return AvroSchema(parsed, np.array(program, dtype=np.int64), arrow, exact, symbols)


# The named types (records, enums, fixed) of the schema being compiled, by full
# name: a later use of a name is a reference to its definition. Guarded by
# _COMPILE_LOCK, with the enum symbols of the program being built.
_NAMES: dict[str, Any] = {}
_SYMBOLS: dict[int, tuple[str, ...]] = {}   # program node index -> an enum's symbols
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


def _emit(t: Any, out: list[int], path: str, seen: tuple[str, ...],
          in_union: bool = False) -> None:
    """Appends the walk program of type `t` (see pylog._core.avro)."""
    at = len(out)
    t = _resolve(t, path)
    if isinstance(t, list):
        out += [OPS["union"], len(t), 0]
        for b in t:
            _emit(b, out, path, seen, True)
    elif isinstance(t, str):
        if t not in OPS:
            raise SchemaError(f"Avro schema at {path}: unknown type {t!r}")
        if t == "null" and not in_union:
            raise SchemaError(f"Avro schema at {path}: null alone has no column type")
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
        elif kind == "fixed" and t.get("logicalType") == "decimal":
            if t["size"] > 16:
                raise SchemaError(f"Avro schema at {path}: a decimal of {t['size']} bytes "
                                  f"is wider than decimal128's 16")
            out += [DECIMAL_FIXED, t["size"], 0]
        elif kind == "bytes" and t.get("logicalType") == "decimal":
            out += [DECIMAL_BYTES, 0, 0]
        elif kind == "fixed":
            out += [OPS["fixed"], t["size"], 0]
        elif kind == "enum":
            _SYMBOLS[at // 3] = tuple(t["symbols"])
            out += [OPS["enum"], len(t["symbols"]), 0]
        elif kind == "null":
            raise SchemaError(f"Avro schema at {path}: null alone has no column type")
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


def _bitmap(valid: bytes, n: int) -> pa.Buffer | None:
    """Arrow's validity bitmap from one byte per element; None when all are valid."""
    flags = np.frombuffer(valid, dtype=np.uint8, count=n)
    if flags.all():
        return None
    return pa.py_buffer(np.packbits(flags, bitorder="little"))


def _assemble(schema: AvroSchema, columns: list, at: int, t: pa.DataType) -> pa.Array:
    """The Arrow array of the program node at `at` (an int index into the program),
    of Arrow type `t`, from decode_values' columns."""
    program = schema.program
    op = int(program[at])
    if op == OPS["union"]:
        branch = at + 3
        if program[branch] == OPS["null"]:
            branch += int(program[branch + 2])
        return _assemble(schema, columns, branch, t)
    valid, data, offsets, key_offsets, key_data, n = columns[at // 3]
    validity = _bitmap(valid, n)
    if op == OPS["boolean"]:
        bits = pa.py_buffer(np.packbits(np.frombuffer(data, np.uint8, count=n),
                                        bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), n, [validity, bits])
    if op == OPS["enum"]:
        indices = pa.Array.from_buffers(pa.int32(), n, [validity, pa.py_buffer(data)])
        return pa.array(schema.symbols[at // 3], pa.string()).take(indices)
    if op in (OPS["string"], OPS["bytes"], OPS["fixed"]):
        return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
    if op == OPS["record"]:
        children, child = [], at + 3
        for f in t:
            children.append(_assemble(schema, columns, child, f.type))
            child += int(program[child + 2])
        return pa.Array.from_buffers(t, n, [validity], children=children)
    if op == OPS["array"]:
        items = _assemble(schema, columns, at + 3, t.value_type)
        return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(offsets)], children=[items])
    if op == OPS["map"]:
        count = len(key_offsets) // 4 - 1
        keys = pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(key_offsets),
                                                          pa.py_buffer(key_data)])
        values = _assemble(schema, columns, at + 3, t.item_type)
        entries = pa.StructArray.from_arrays([keys, values],
                                             fields=[t.key_field, t.item_field])
        return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(offsets)],
                                     children=[entries])
    # int, long, float, double, decimals; timestamps and dates are longs and ints
    return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(data)])


# Years 1-9999: what Python's datetime (pyiceberg's, pyarrow's to_pylist) can hold.
_DAYS = (-719_162, 2_932_896)
_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)


def _finish(batch: pa.RecordBatch, schema: AvroSchema) -> pa.Table:
    """The exact columns as the Arrow schema (ms -> us), fully validated, their
    top-level dates and timestamps within years 1-9999."""
    table = pa.Table.from_batches([batch]).cast(schema.arrow)
    table.validate(full=True)
    for f in table.schema:
        if pa.types.is_timestamp(f.type) or pa.types.is_date32(f.type):
            lo, hi = _DAYS if pa.types.is_date32(f.type) else _MICROS
            raw = table.column(f.name).cast(
                pa.int32() if pa.types.is_date32(f.type) else pa.int64())
            bounds = pc.min_max(raw)
            if bounds["min"].as_py() is not None and (
                    bounds["min"].as_py() < lo or bounds["max"].as_py() > hi):
                raise ValueError(f"field {f.name}: outside the years 1-9999")
    return table


def parse_avro_values(schema: AvroSchema, values: pa.Array, *,
                      confluent: bool = False) -> tuple[pa.Table, np.ndarray, pa.StringArray]:
    """(good rows as a table of ``schema.arrow``, ok mask, reason per row: null where ok).
    With `confluent`, each value starts with Confluent's 5-byte prefix (magic 0,
    schema id), skipped here; the caller has checked the ids."""
    n = len(values)
    reasons = Reasons(n)
    if n == 0:
        return schema.arrow.empty_table(), np.ones(0, dtype=bool), reasons.array()
    if not pa.types.is_binary(values.type):
        values = values.cast(pa.binary())
    tombstone = values.is_null().to_numpy(zero_copy_only=False)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=n + 1,
                            offset=values.offset * 4).astype(np.int64)
    data_buffer = values.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None \
        else np.zeros(0, dtype=np.uint8)
    starts, ends = offsets[:-1].copy(), offsets[1:].copy()
    if confluent:
        starts = np.minimum(starts + 5, ends)
    ends[tombstone] = starts[tombstone]
    verdicts = np.zeros(n, dtype=np.int8)
    where = np.zeros(n, dtype=np.int64)
    columns = decode_values(schema.program, data, starts, ends, verdicts, where)
    reasons.set(tombstone, "value is null (a tombstone)")
    for code in np.unique(verdicts[verdicts != 0]):
        reasons.set(verdicts == code, f"not a datum of the schema: {VERDICTS[int(code)]}")
    good = np.flatnonzero(verdicts == 0)     # the rows of the columns, in order
    root = _assemble(schema, columns, 0, pa.struct(list(schema.exact)))
    batch = pa.RecordBatch.from_struct_array(root)
    try:
        table = _finish(batch, schema)
    except (pa.ArrowInvalid, ValueError):
        table, kept = _isolate(batch, schema, good, reasons)
        good = good[kept]
    if tombstone.any():
        # A null value decodes like an empty one (a record of no bytes can be good).
        table = table.filter(pa.array(~tombstone[good]))
    return table, ~reasons.bad, reasons.array()


def _isolate(batch: pa.RecordBatch, schema: AvroSchema, rows: np.ndarray,
             reasons: Reasons) -> tuple[pa.Table, np.ndarray]:
    """The rows of `batch` that cast and validate, by bisection, and the mask of
    them; the others marked in `reasons` (`rows`: their row numbers)."""
    out: list[tuple[int, pa.Table]] = []
    keep = np.ones(batch.num_rows, dtype=bool)
    pending = [(0, batch.num_rows)]
    while pending:
        lo, hi = pending.pop()
        if lo >= hi:
            continue
        try:
            out.append((lo, _finish(batch.slice(lo, hi - lo), schema)))
        except (pa.ArrowInvalid, ValueError) as e:
            if hi - lo == 1:
                reasons.set(rows[lo], f"not representable: {e}")
                keep[lo] = False
            else:
                mid = (lo + hi) // 2
                pending += [(mid, hi), (lo, mid)]
    out.sort(key=lambda x: x[0])
    table = pa.concat_tables([t for _, t in out]) if out else schema.arrow.empty_table()
    return table, keep
