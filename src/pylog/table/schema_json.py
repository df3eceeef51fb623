"""JSON Schema values -> typed Arrow columns, with every bad record isolated.

The subset of JSON Schema a table column can hold:

==========================  ======================================
JSON Schema                 Arrow (then Iceberg)
==========================  ======================================
``"type": "object"`` +      struct (the top level: the row)
``properties``, ``required``
``"string"``                string
``"string"`` + ``format:    timestamp[us, UTC] (timestamptz); an
date-time``                 offset-less time is read as UTC
``"string"`` + ``enum``     string, checked against the symbols
``"integer"``               int64 (a number with a fraction or an
                            exponent is not an integer)
``"number"``                float64
``"boolean"``               bool
``"array"`` + ``items``     list
``"type": [T, "null"]``     T, nullable
==========================  ======================================

A field is required when its object lists it in ``required`` and its type
does not admit ``null``; an explicit ``null`` counts as absent. Parsing
enforces it at every level; the column is non-nullable only at the top level
(a required field of an absent nested object is null in Arrow).
Fields not in the schema are ignored (``additionalProperties`` is not
enforced). A value is bad when it is not one JSON object in UTF-8 (the whole value is
checked, ignored fields too), a field has the wrong type, a required field
is absent, a key repeats, an enum field holds another symbol, a string holds
a lone surrogate, or a number overflows a double. ``NaN`` and ``Infinity``
are read as floats, as Python's json module reads them. A date-time takes at
most microseconds.

How a batch is parsed (no per-record Python): every value is wrapped as one
line ``{"v":<value>}`` (``pyarrow.compute.binary_join_element_wise``), raw
CR/LF bytes in the values become TAB and NUL becomes 0x01 (one numpy table
lookup: TAB is whitespace outside a string and, like CR/LF, invalid inside
one; NUL and 0x01 are invalid everywhere, so no value changes verdict), and
Arrow's JSON reader reads the whole buffer once with the explicit schema.
The wrapper makes every line exactly one row or an error (a value cannot
make its line empty, and ``}{"v":`` tricks surface as an extra row). When
the read fails, the failing row is isolated: Arrow's parse errors name it
("in row K"), which splits the range around it; conversion errors do not, and
the range is read again in 16 parts (the reader's row counts from its block,
so a named row is read alone to confirm it first). A good batch costs one
read (its blocks on Arrow's threads); bad records cost a few more reads of
the batch (one per level of the 16-way search), however they are spread. Checks Arrow's reader does not make
(UTF-8 validity, required fields, enum symbols, a top-level non-object) run
as Arrow compute over the whole result.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from pylog.table.schema_errors import SchemaError

__all__ = ["JsonSchemaNode", "compile_json_schema", "parse_json_values"]


@dataclass(frozen=True)
class JsonSchemaNode:
    """One compiled JSON Schema node: its Arrow type and the checks Arrow's
    reader does not make (required children, enum symbols)."""

    arrow_type: pa.DataType
    nullable: bool
    children: tuple[tuple[str, JsonSchemaNode, bool], ...] = ()   # (name, node, required)
    items: JsonSchemaNode | None = None
    enum: tuple[str, ...] | None = None

    def arrow_field(self, name: str, required: bool) -> pa.Field:
        return pa.field(name, self.arrow_type, nullable=not (required and not self.nullable))

    def arrow_schema(self) -> pa.Schema:
        """The columns of a top-level (object) node."""
        return pa.schema([c.arrow_field(n, r) for n, c, r in self.children])


def _load(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise SchemaError(f"{where} is not JSON: {e}") from None


def compile_json_schema(schema: Any, where: str = "the JSON Schema") -> JsonSchemaNode:
    """The top-level node of a JSON Schema document (a dict or its JSON text);
    raises SchemaError naming the path of the first construct a column cannot hold."""
    if isinstance(schema, (str, bytes)):
        schema = _load(schema if isinstance(schema, str) else schema.decode(), where)
    node = _compile(schema, "$")
    if not pa.types.is_struct(node.arrow_type):
        raise SchemaError(f"{where}: the top level must be an object with properties, "
                          f"not {node.arrow_type}")
    return node


def _compile(s: Any, path: str) -> JsonSchemaNode:
    if not isinstance(s, dict):
        raise SchemaError(f"JSON Schema at {path} is not an object")
    t = s.get("type")
    types = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else None
    if types is None:
        if "properties" in s:
            types = ["object"]
        else:
            raise SchemaError(f"JSON Schema at {path} has no 'type' "
                              f"(a column needs one type, optionally with null)")
    nullable = "null" in types
    rest = [x for x in types if x != "null"]
    if len(rest) != 1:
        raise SchemaError(f"JSON Schema at {path}: type {t!r} is not one type "
                          f"(optionally with 'null')")
    kind = rest[0]
    if kind == "string":
        enum = s.get("enum")
        if enum is not None and not all(isinstance(x, str) for x in enum if x is not None):
            raise SchemaError(f"JSON Schema at {path}: enum of a string holds a non-string")
        fmt = s.get("format")
        arrow_type = pa.timestamp("us", tz="UTC") if fmt == "date-time" else pa.string()
        return JsonSchemaNode(arrow_type, nullable,
                              enum=tuple(x for x in enum if x is not None) if enum else None)
    if kind == "integer":
        return JsonSchemaNode(pa.int64(), nullable)
    if kind == "number":
        return JsonSchemaNode(pa.float64(), nullable)
    if kind == "boolean":
        return JsonSchemaNode(pa.bool_(), nullable)
    if kind == "array":
        if "items" not in s:
            raise SchemaError(f"JSON Schema at {path}: an array needs 'items'")
        items = _compile(s["items"], path + "[]")
        return JsonSchemaNode(pa.list_(pa.field("element", items.arrow_type)), nullable,
                              items=items)
    if kind == "object":
        props = s.get("properties")
        if not isinstance(props, dict) or not props:
            raise SchemaError(f"JSON Schema at {path}: an object needs 'properties' "
                              f"(a free-form object has no column type)")
        required = set(s.get("required", ()))
        unknown = required - props.keys()
        if unknown:
            raise SchemaError(f"JSON Schema at {path}: required {sorted(unknown)} "
                              f"not in properties")
        children = tuple((name, _compile(sub, f"{path}.{name}"), name in required)
                         for name, sub in props.items())
        # Nested fields stay nullable in Arrow (a required field of an absent
        # object is null there); parse enforces `required` at every level.
        arrow_type = pa.struct([pa.field(n, c.arrow_type) for n, c, r in children])
        return JsonSchemaNode(arrow_type, nullable, children=children)
    raise SchemaError(f"JSON Schema at {path}: type {kind!r} is not supported")


# -- parsing -----------------------------------------------------------------

BLOCK_SIZE = 1 << 20        # bytes of JSON per reader block (per thread task)
_PREFIX = b'{"v":'
_SUFFIX = b'}\n'
_ROW = re.compile(r" in row (\d+)$")
_CHANGED = re.compile(r"Column\(/v(/[^)]*)?\) changed from (\w+) to (\w+)")

# Byte translation for the values: CR/LF -> TAB, NUL -> 0x01 (see the module docstring).
_TRANSLATE = np.arange(256, dtype=np.uint8)
_TRANSLATE[[0x0A, 0x0D]] = 0x09
_TRANSLATE[0x00] = 0x01


def _relaxed(t: pa.DataType) -> pa.DataType:
    """The type with every nested field nullable: what the reader is told
    (required fields are checked after the read, with a reason)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _relaxed(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(pa.field("element", _relaxed(t.value_type)))
    return t


def _message(error: Exception) -> str:
    if isinstance(error, UnicodeDecodeError):
        return f"invalid UTF-8 ({error.reason})"
    if "Invalid UTF8" in str(error):
        return "invalid UTF-8 in a string"
    return str(error)


def _reason(message: str) -> str:
    syntax = message.startswith("JSON parse error: ")
    message = _ROW.sub("", message.removeprefix("JSON parse error: "))
    m = _CHANGED.search(message)
    if m:
        where = f"field {m.group(1)}" if m.group(1) else "value"
        return f"{where}: expected {m.group(2)}, got {m.group(3)}"
    if "was specified twice" in message:
        return message.replace("Column(/v/", "field /").replace(")", "", 1)
    return f"not JSON: {message}" if syntax else message


class _Reader:
    """Reads row ranges of the wrapped, newline-joined buffer."""

    def __init__(self, node: JsonSchemaNode, data: pa.Buffer, offsets: np.ndarray):
        self.schema = pa.schema([pa.field("v", _relaxed(node.arrow_type))])
        self.data = data
        self.offsets = offsets
        self.parse_options = pj.ParseOptions(explicit_schema=self.schema,
                                             unexpected_field_behavior="ignore")

    def read(self, lo: int, hi: int) -> pa.Table:
        start, end = int(self.offsets[lo]), int(self.offsets[hi])
        chunk = self.data.slice(start, end - start)
        # Blocks parse on Arrow's threads; a failing block's "in row K" counts
        # from its own start, so K is only a candidate (_read_isolating checks it).
        options = pj.ReadOptions(use_threads=end - start > BLOCK_SIZE, block_size=BLOCK_SIZE)
        table = pj.read_json(pa.BufferReader(chunk), read_options=options,
                             parse_options=self.parse_options)
        if table.num_rows != hi - lo:
            raise pa.ArrowInvalid("more than one JSON value")
        return table


class Reasons:
    """The reasons of the bad rows of one batch: set per bad row (the bad
    path), turned into one Arrow string column at the end."""

    def __init__(self, n: int):
        self.n = n
        self.bad = np.zeros(n, dtype=bool)
        self.texts: list[str] = []
        self.code = np.full(n, -1, dtype=np.int64)

    def set(self, rows: np.ndarray | int, reason: str) -> None:
        """Marks `rows` (not yet bad) bad with `reason`."""
        mask = np.zeros(self.n, dtype=bool)
        mask[rows] = True
        mask &= ~self.bad
        if mask.any():
            self.code[mask] = len(self.texts)
            self.texts.append(reason)
            self.bad |= mask

    def array(self) -> pa.StringArray:
        """The reason per row, null where the row is good."""
        return pc.take(pa.array(self.texts, pa.string()),
                       pa.array(self.code, mask=self.code < 0))


SPLIT = 16     # a failing range is read again as this many parts


def _split(lo: int, hi: int) -> list[tuple[int, int]]:
    """[lo, hi) in up to SPLIT parts, last part first (the stack pops the first).
    Many parts, not two: with bad records spread over a batch, each level of the
    search reads the batch about once, so isolating costs a few reads of it."""
    edges = np.linspace(lo, hi, min(SPLIT, hi - lo) + 1).astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(edges[-2::-1], edges[:0:-1], strict=True)]


def _read_isolating(reader: _Reader, n: int, reasons: Reasons) -> list[pa.Table]:
    """Tables of the good rows of [0, n) in order; the bad rows marked in `reasons`."""
    out: list[tuple[int, pa.Table]] = []
    pending = [(0, n)]
    while pending:
        lo, hi = pending.pop()
        if lo >= hi:
            continue
        try:
            out.append((lo, reader.read(lo, hi)))
            continue
        except (pa.ArrowInvalid, UnicodeDecodeError) as e:
            error = e
        message = _message(error)
        if hi - lo == 1:
            reasons.set(lo, _reason(message))
            continue
        m = _ROW.search(message)
        k = int(m.group(1)) if m else -1
        # The reader's row K is lo + K when the range is one block and no earlier
        # line held two values: the candidate row is read alone to confirm.
        if 0 <= k < hi - lo:
            try:
                out.append((lo + k, reader.read(lo + k, lo + k + 1)))
            except (pa.ArrowInvalid, UnicodeDecodeError) as e:
                reasons.set(lo + k, _reason(_message(e)))
                pending += [(lo + k + 1, hi), (lo, lo + k)]
                continue
            out.pop()
        pending += _split(lo, hi)
    out.sort(key=lambda x: x[0])
    return [t for _, t in out]


def _violations(arr: pa.Array, node: JsonSchemaNode, path: str, present: np.ndarray,
                found: list[tuple[np.ndarray, str]]) -> np.ndarray:
    """Bad mask per element of `arr` (where `present`) for required fields and
    enum symbols; appends (mask, reason) per violated rule to `found`."""
    bad = np.zeros(len(arr), dtype=bool)

    def mark(mask: np.ndarray, reason: str) -> None:
        if mask.any():
            found.append((mask, reason))
            bad[mask] = True

    if node.enum is not None:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        inside = pc.is_in(arr, value_set=pa.array(node.enum, pa.string())) \
            .fill_null(True).to_numpy(zero_copy_only=False)
        mark(present & valid & ~inside, f"field {path or '/'}: not one of {list(node.enum)}")
    if node.children:
        valid = present & arr.is_valid().to_numpy(zero_copy_only=False)
        for name, child, required in node.children:
            sub = arr.field(name)
            if required and not child.nullable:
                mark(valid & sub.is_null().to_numpy(zero_copy_only=False),
                     f"field {path}/{name}: required, absent or null")
            bad |= _violations(sub, child, f"{path}/{name}", valid, found)
    if node.items is not None and (node.items.children or node.items.enum):
        flat = pc.list_flatten(arr)
        if len(flat):
            parents = pc.list_parent_indices(arr).to_numpy()
            inner: list[tuple[np.ndarray, str]] = []
            _violations(flat, node.items, path + "[]", np.ones(len(flat), dtype=bool), inner)
            for mask, reason in inner:
                rows = np.zeros(len(arr), dtype=bool)
                rows[parents[mask]] = True
                mark(rows & present, reason)
    return bad


def _invalid_utf8(values: pa.Array) -> np.ndarray:
    """Mask of the values that are not UTF-8. The reader checks only what it
    keeps, so the whole batch is validated by one cast to string (C); a batch
    that fails is bisected down to its bad values."""
    bad = np.zeros(len(values), dtype=bool)
    pending = [(0, len(values))]
    while pending:
        lo, hi = pending.pop()
        if lo >= hi:
            continue
        try:
            values.slice(lo, hi - lo).cast(pa.string())
        except pa.ArrowInvalid:
            if hi - lo == 1:
                bad[lo] = True
            else:
                mid = (lo + hi) // 2
                pending += [(mid, hi), (lo, mid)]
    return bad


def parse_json_values(node: JsonSchemaNode, values: pa.Array,
                      schema: pa.Schema) -> tuple[pa.Table, np.ndarray, pa.StringArray]:
    """(good rows as a table of `schema`, ok mask, reason per row: null where ok)."""
    n = len(values)
    reasons = Reasons(n)
    if n == 0:
        return schema.empty_table(), np.ones(0, dtype=bool), reasons.array()
    if not (pa.types.is_binary(values.type) or pa.types.is_string(values.type)):
        values = values.cast(pa.binary())
    tombstone = values.is_null().to_numpy(zero_copy_only=False)
    joined = pc.binary_join_element_wise(_PREFIX, values.fill_null(b"null"), _SUFFIX, b"")
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32,
                            count=n + 1, offset=joined.offset * 4).astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    data = _TRANSLATE[np.frombuffer(joined.buffers()[2], dtype=np.uint8)[start:end]]
    offsets -= start
    data[offsets[1:] - 1] = 0x0A
    reader = _Reader(node, pa.py_buffer(data), offsets)

    tables = _read_isolating(reader, n, reasons)
    read_rows = np.flatnonzero(~reasons.bad)        # the rows of `column`, in order
    reasons.set(tombstone, "value is null (a tombstone)")
    reasons.set(_invalid_utf8(values), "invalid UTF-8")
    merged = pa.concat_tables(tables) if tables else reader.schema.empty_table()
    column = merged.column("v").combine_chunks()

    is_object = column.is_valid().to_numpy(zero_copy_only=False)
    reasons.set(read_rows[~is_object], "value: expected object, got null")
    found: list[tuple[np.ndarray, str]] = []
    _violations(column, node, "", is_object, found)
    for mask, reason in found:
        reasons.set(read_rows[mask], reason)
    ok = ~reasons.bad
    struct = column.filter(pa.array(ok[read_rows]))
    arrays = [struct.field(f.name).cast(f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema), ok, reasons.array()
