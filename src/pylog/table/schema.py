"""Typed value columns: a topic's values parsed by a schema into table columns,
the records that do not parse into a dead-letter table (docs/TABLES.md
"Schemas and dead letters").

Topic configs (the ``pylog.table.schema.*`` family):

``pylog.table.schema.type``
    ``none`` (default: the table holds Kafka's columns only), ``json`` (JSON
    Schema) or ``avro``.
``pylog.table.schema.file``
    Path of the schema: a JSON Schema document or an Avro ``.avsc``. Read again
    when the file changes: a changed schema evolves the table or stops its
    conversion (:mod:`pylog.table.schema_evolution`).
``pylog.table.schema.registry.url`` + ``pylog.table.schema.subject``
    A Confluent-style schema registry instead of a file: the subject's latest
    version (``GET /subjects/<subject>/versions/latest``). Values are then in
    Confluent's wire format: magic byte 0, a 4-byte big-endian schema id, the
    payload. A value with another magic byte is a dead letter; an Avro value
    written with another schema id than the latest is a dead letter too
    (its writer schema is not the table's; JSON values parse whatever their id).
``pylog.table.schema.dead.letter``
    The dead-letter table's name (same namespace); default ``<table>__dead_letter``.

A typed table's row: Kafka's columns (key, value, topic, partition, offset,
timestamp, timestampType, headers: ids 1-11, the raw value kept for
reprocessing) followed by the value's top-level fields as columns. A field
may not be named like a Kafka column. A record whose value does not parse is
not in the table: it is in the dead-letter table with its topic, partition,
offset, timestamp, key, value and the reason (:mod:`pylog.table.dead_letter`),
so the table and its dead letters together hold every record of the log.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pylog.table.columns import ARROW_SCHEMA
from pylog.table.schema_avro import AvroSchema, compile_avro_schema, parse_avro_values
from pylog.table.schema_errors import SchemaError, SchemaEvolutionError
from pylog.table.schema_json import JsonSchemaNode, compile_json_schema, parse_json_values

__all__ = ["SCHEMA_KEYS", "SchemaSettings", "ValueSchema", "Parsed", "schema_settings",
           "load_value_schema", "hook_for", "TypedValues", "SchemaError",
           "SchemaEvolutionError"]

#: The keys of the pylog.table.schema.* family (without the prefix) and what they mean.
SCHEMA_KEYS = {
    "type": "none | json | avro",
    "file": "path of the JSON Schema or Avro .avsc",
    "registry.url": "base URL of a Confluent-style schema registry",
    "subject": "the registry subject whose latest version is the schema",
    "dead.letter": "the dead-letter table's name (default <table>__dead_letter)",
}
KAFKA_COLUMNS = frozenset(ARROW_SCHEMA.names)
#: How long a registry's latest version is trusted before it is asked again.
REGISTRY_TTL_S = 60.0


@dataclass(frozen=True)
class SchemaSettings:
    """A topic's pylog.table.schema.* configs, checked."""

    type: str
    file: str | None
    registry_url: str | None
    subject: str | None
    dead_letter: str | None

    @property
    def enabled(self) -> bool:
        return self.type != "none"


def schema_settings(properties: Mapping[str, str]) -> SchemaSettings:
    """The settings from ``pylog.table.schema.*`` (keys without the prefix, as
    TableConfig.schema_properties holds them); SchemaError names a bad key."""
    unknown = sorted(set(properties) - SCHEMA_KEYS.keys())
    if unknown:
        raise SchemaError(f"unknown config pylog.table.schema.{unknown[0]} "
                          f"(known: {', '.join('pylog.table.schema.' + k for k in SCHEMA_KEYS)})")
    kind = properties.get("type", "none").strip().lower() or "none"
    if kind not in ("none", "json", "avro"):
        raise SchemaError(f"pylog.table.schema.type={kind!r}: must be none, json or avro")
    file = properties.get("file") or None
    url = properties.get("registry.url") or None
    subject = properties.get("subject") or None
    if kind != "none":
        if file and url:
            raise SchemaError("pylog.table.schema.file and pylog.table.schema.registry.url are "
                              "both set: the schema comes from one of them")
        if not file and not url:
            raise SchemaError(f"pylog.table.schema.type={kind} needs pylog.table.schema.file or "
                              "pylog.table.schema.registry.url")
        if url and not subject:
            raise SchemaError("pylog.table.schema.registry.url needs pylog.table.schema.subject")
    return SchemaSettings(kind, file, url, subject, properties.get("dead.letter") or None)


@dataclass(frozen=True)
class Parsed:
    """One batch of values parsed: `table` holds the good rows in order (as
    many as `ok` has True), `ok` says per value whether it parsed, `reasons`
    says why not (null where ok)."""

    table: pa.Table
    ok: np.ndarray
    reasons: pa.StringArray


@dataclass(frozen=True)
class ValueSchema:
    """A compiled value schema: its columns (`arrow`) and how to parse values."""

    kind: str                      # json | avro
    arrow: pa.Schema
    source: str                    # the file, or registry subject@version
    compiled: JsonSchemaNode | AvroSchema
    registry_id: int | None = None  # values carry Confluent's 5-byte prefix when set

    def parse(self, values: pa.Array) -> Parsed:
        """Parses a batch of values (binary, nulls allowed: tombstones are bad)."""
        refused: list[tuple[np.ndarray, str]] = []
        if self.registry_id is not None:
            values, refused = _confluent_prefix(values, self.kind, self.registry_id)
        if self.kind == "json":
            table, ok, reasons = parse_json_values(self.compiled, values, self.arrow)
        else:
            table, ok, reasons = parse_avro_values(self.compiled, values,
                                                   confluent=self.registry_id is not None)
        for mask, reason in refused:
            reasons = pc.if_else(pa.array(mask), pa.scalar(reason), reasons)
            # A value refused for its prefix may still have parsed: drop its row.
            drop = mask[ok]
            if drop.any():
                table = table.filter(pa.array(~drop))
            ok = ok & ~mask
        return Parsed(table, ok, reasons)

    def iceberg_schema(self):
        """The typed columns as an Iceberg schema (ids in field order from 1: a
        table assigns its own when it evolves to it)."""
        from pyiceberg.catalog import Catalog
        return Catalog._convert_schema_if_needed(self.arrow)


def _confluent_prefix(values: pa.Array, kind: str,
                      registry_id: int) -> tuple[pa.Array, list[tuple[np.ndarray, str]]]:
    """Checks Confluent's prefix (magic 0, 4-byte schema id) of every value,
    vectorised: the values (JSON ones without the prefix; the Avro path skips
    it in place) and (mask, reason) of the values refused."""
    if not pa.types.is_binary(values.type):
        values = values.cast(pa.binary())
    n = len(values)
    lengths = pc.binary_length(values).fill_null(0).to_numpy(zero_copy_only=False)
    # The first 5 bytes of every value, padded: one row of a (n, 5) byte matrix each.
    padded = pc.binary_join_element_wise(pc.binary_slice(values.fill_null(b""), 0, 5),
                                         pa.scalar(b"\xff" * 5), b"")
    first5 = pc.binary_slice(padded, 0, 5)
    offs = np.frombuffer(first5.buffers()[1], dtype=np.int32, count=n + 1,
                         offset=first5.offset * 4)
    raw = np.frombuffer(first5.buffers()[2], dtype=np.uint8)
    five = raw[offs[0]:offs[0] + 5 * n].reshape(n, 5) if n else np.zeros((0, 5), np.uint8)
    ids = five[:, 1:].copy().view(">u4").reshape(n).astype(np.int64)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    not_wire = valid & ((lengths < 5) | (five[:, 0] != 0))
    refused = [(not_wire, "not in Confluent's wire format (magic byte 0, a 4-byte schema id)")]
    if kind == "avro":
        other = valid & ~not_wire & (ids != registry_id)
        refused.append((other, f"written with another schema id than the subject's latest "
                               f"({registry_id}): its writer schema is not the table's"))
        return values, refused
    return pc.binary_slice(values, 5), refused


# -- loading -----------------------------------------------------------------

_cache_lock = threading.Lock()
_file_cache: dict[tuple[str, str], tuple[float, int, ValueSchema]] = {}
_registry_cache: dict[tuple[str, str], tuple[float, ValueSchema]] = {}


def compile_value_schema(kind: str, text: str | bytes, source: str,
                         registry_id: int | None = None) -> ValueSchema:
    """A ValueSchema from the schema's text; SchemaError says what is wrong and where."""
    if kind == "json":
        node = compile_json_schema(text, source)
        arrow = node.arrow_schema()
        compiled: JsonSchemaNode | AvroSchema = node
    elif kind == "avro":
        compiled = compile_avro_schema(text, source)
        arrow = compiled.arrow
    else:
        raise SchemaError(f"schema type {kind!r}: must be json or avro")
    clash = [n for n in arrow.names if n in KAFKA_COLUMNS]
    if clash:
        raise SchemaError(f"{source}: field {clash[0]!r} has the name of a Kafka column "
                          f"({', '.join(ARROW_SCHEMA.names)}); rename it in the schema")
    return ValueSchema(kind, arrow, source, compiled, registry_id)


def load_value_schema(settings: SchemaSettings) -> ValueSchema | None:
    """The topic's value schema now (None for type none): the file (compiled
    again when it changes) or the registry subject's latest version (asked
    again after REGISTRY_TTL_S)."""
    if not settings.enabled:
        return None
    if settings.file:
        path = os.path.abspath(settings.file)
        try:
            st = os.stat(path)
        except OSError as e:
            raise SchemaError(f"pylog.table.schema.file {path}: {e.strerror}") from None
        key = (settings.type, path)
        with _cache_lock:
            hit = _file_cache.get(key)
        if hit is not None and hit[:2] == (st.st_mtime, st.st_size):
            return hit[2]
        with open(path, "rb") as f:
            schema = compile_value_schema(settings.type, f.read(), path)
        with _cache_lock:
            _file_cache[key] = (st.st_mtime, st.st_size, schema)
        return schema
    key = (settings.registry_url, settings.subject)
    now = time.monotonic()
    with _cache_lock:
        hit = _registry_cache.get(key)
    if hit is not None and now - hit[0] < REGISTRY_TTL_S:
        return hit[1]
    schema = fetch_registry_schema(settings.registry_url, settings.subject, settings.type)
    with _cache_lock:
        _registry_cache[key] = (now, schema)
    return schema


def fetch_registry_schema(url: str, subject: str, kind: str, timeout: float = 10.0) -> ValueSchema:
    """The latest version of `subject` from a Confluent-style registry's REST API."""
    where = f"{url.rstrip('/')}/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest"
    request = urllib.request.Request(where, headers={
        "Accept": "application/vnd.schemaregistry.v1+json, application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise SchemaError(f"schema registry {where}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise SchemaError(f"schema registry {where}: {e}") from None
    registered = str(body.get("schemaType", "AVRO")).lower()
    if registered != kind:
        raise SchemaError(f"schema registry subject {subject!r} holds a {registered} schema, "
                          f"pylog.table.schema.type is {kind}")
    source = f"registry subject {subject!r} version {body.get('version')} (id {body.get('id')})"
    return compile_value_schema(kind, body["schema"], source, registry_id=int(body["id"]))


# -- the converter's hook ----------------------------------------------------

def hook_for(topic: str, tc: Any) -> TypedValues | None:
    """The converter's hook for a topic (pylog.table.converter calls it each run
    when pylog.table.schema.* is set); None for type none."""
    settings = schema_settings(tc.schema_properties)
    if not settings.enabled:
        return None
    schema = load_value_schema(settings)
    dead_letter = settings.dead_letter or f"{tc.name}__dead_letter"
    return TypedValues(topic, schema, (tc.namespace, dead_letter))


class TypedValues:
    """What a schema changes in a conversion: before reading, the table's schema
    evolves to the value schema (or the conversion stops with
    SchemaEvolutionError); each batch of rows gets its typed columns, and its
    bad records are committed to the dead-letter table first (the rule in
    :mod:`pylog.table.dead_letter`)."""

    def __init__(self, topic: str, schema: ValueSchema, dead_letter: tuple[str, str]):
        self.topic = topic
        self.schema = schema
        self.dead_letter = dead_letter

    def evolve(self, table):
        """The table, its schema evolved to hold the value's columns."""
        from pylog.table.schema_evolution import evolve_table
        return evolve_table(table, self.schema.iceberg_schema(), KAFKA_COLUMNS)

    def transform(self, rows: pa.Table, table) -> pa.Table:
        """The good rows with their typed columns; the bad ones committed as dead letters."""
        from pylog.table.dead_letter import commit_dead_letters
        parsed = self.schema.parse(rows.column("value").combine_chunks())
        if not parsed.ok.all():
            bad = ~parsed.ok
            commit_dead_letters(table, self.dead_letter, self.topic,
                                rows.filter(pa.array(bad)), parsed.reasons.filter(pa.array(bad)),
                                rows)
        good = rows.filter(pa.array(parsed.ok)) if not parsed.ok.all() else rows
        columns = list(good.columns) + list(parsed.table.columns)
        fields = list(good.schema) + list(parsed.table.schema)
        return pa.Table.from_arrays(columns, schema=pa.schema(fields))
