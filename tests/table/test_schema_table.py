"""Typed tables end to end: a topic with pylog.table.schema.* converted by the real
converter into a real pyiceberg SQL catalog, its bad records in the dead-letter
table, its schema evolving or refused, a crash between the two commits."""

from __future__ import annotations

import http.server
import io
import json
import os
import struct
import subprocess
import sys
import threading

import fastavro
import pyarrow as pa
import pytest

import pylog
from pylog.store import Store
from pylog.table.converter import KILL_AT_ENV, TableConverter
from pylog.table.dead_letter import KILL_AFTER_DEAD_LETTERS
from pylog.table.schema import SchemaError, SchemaEvolutionError, schema_settings

JSON_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"},
                                                "name": {"type": "string"}},
               "required": ["id"]}
VALUES = [b'{"id":1,"name":"a"}', b'{"name":"no id"}', b"not json", b'{"id":2}', None,
          b'{"id":3,"name":"c"}', b'{"id":"4"}', b'{"id":5}']
GOOD = {0: 1, 3: 2, 5: 3, 7: 5}          # offset -> id (one partition)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def make_topic(store, topic, schema_path, values, kind="json", extra=None):
    config = {"pylog.table.enable": "true", "pylog.table.schema.type": kind,
              "pylog.table.schema.file": schema_path, **(extra or {})}
    store.create_topic(topic, partitions=1, config=config)
    with pylog.Producer(store) as producer:
        for v in values:
            producer.send(topic, value=v, partition=0)


@pytest.fixture
def store(tmp_path):
    s = Store([str(tmp_path / "logs")], background=False)
    yield s
    s.close()


def table_rows(converter, columns):
    return sorted(converter.table().scan().to_arrow().select(columns).to_pylist(),
                  key=lambda r: r["offset"])


def dead_rows(converter, name):
    dead = converter.table().catalog.load_table(("pylog", name))
    return sorted(dead.scan().to_arrow().select(["offset", "value", "reason"]).to_pylist(),
                  key=lambda r: r["offset"])


class TestTypedTable:
    def test_good_rows_typed_bad_rows_dead_lettered(self, store, tmp_path):
        """Every record is in the table (typed, with Kafka's columns) or in the
        dead-letter table with its reason: together exactly the log."""
        schema = tmp_path / "clicks.json"
        write_json(schema, JSON_SCHEMA)
        make_topic(store, "clicks", str(schema), VALUES)
        converter = TableConverter(store, "clicks")
        result = converter.run_once()
        assert 4 == result.records
        rows = table_rows(converter, ["offset", "id", "name", "value"])
        assert GOOD == {r["offset"]: r["id"] for r in rows}
        assert VALUES[0] == rows[0]["value"] and "a" == rows[0]["name"]
        dead = dead_rows(converter, "clicks__dead_letter")
        assert [1, 2, 4, 6] == [r["offset"] for r in dead]
        assert [VALUES[o] for o in (1, 2, 4, 6)] == [r["value"] for r in dead]
        assert "field /id: required, absent or null" == dead[0]["reason"]
        assert "value is null (a tombstone)" == dead[2]["reason"]
        assert all(r["reason"] for r in dead)
        assert {"id", "name"} <= set(converter.table().schema().column_names)

    def test_dead_letters_carry_timestamp_type_and_headers(self, store, tmp_path):
        """A dead letter has the Kafka columns a union reader needs; a dead-letter table
        made before timestampType and headers existed gains them (old rows: null)."""
        from pyiceberg.schema import Schema

        from pylog.table.dead_letter import iceberg_schema
        schema = tmp_path / "clicks.json"
        write_json(schema, JSON_SCHEMA)
        make_topic(store, "clicks", str(schema), [b'{"id":1}'])
        converter = TableConverter(store, "clicks")
        converter.run_once()
        old = Schema(*iceberg_schema().fields[:7])            # the columns before ids 8-12
        catalog = converter.table().catalog
        catalog.create_table(("pylog", "clicks__dead_letter"), old).append(pa.table({
            "topic": ["clicks"], "partition": pa.array([0], pa.int32()),
            "offset": [0], "timestamp": pa.array([0], pa.timestamp("us", tz="UTC")),
            "key": pa.array([None], pa.binary()), "value": [b"old"], "reason": ["old"]},
            schema=old.as_arrow()))
        with pylog.Producer(store) as producer:
            producer.send("clicks", value=b"bad", headers=[("h", b"v")], partition=0)
        converter.run_once()
        dead = catalog.load_table(("pylog", "clicks__dead_letter")).scan().to_arrow()
        rows = sorted(dead.select(["value", "timestampType", "headers"]).to_pylist(),
                      key=lambda r: r["value"])
        assert [{"value": b"bad", "timestampType": 0, "headers": [{"key": "h", "value": b"v"}]},
                {"value": b"old", "timestampType": None, "headers": None}] == rows

    def test_avro_topic(self, store, tmp_path):
        """An Avro topic: typed columns from the .avsc, damaged values dead-lettered."""
        avsc = {"type": "record", "name": "Order", "fields": [
            {"name": "order_id", "type": "long"}, {"name": "item", "type": ["null", "string"]}]}
        path = tmp_path / "order.avsc"
        write_json(path, avsc)
        parsed = fastavro.parse_schema(avsc)

        def encode(r):
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, r)
            return out.getvalue()

        good = encode({"order_id": 7, "item": "pen"})
        make_topic(store, "orders", str(path), [good, good[:-2], good + b"!", good], kind="avro")
        converter = TableConverter(store, "orders")
        converter.run_once()
        rows = table_rows(converter, ["offset", "order_id", "item"])
        assert [(0, 7, "pen"), (3, 7, "pen")] == [(r["offset"], r["order_id"], r["item"])
                                                for r in rows]
        assert [1, 2] == [r["offset"] for r in dead_rows(converter, "orders__dead_letter")]

    def test_a_named_dead_letter_table(self, store, tmp_path):
        """pylog.table.schema.dead.letter names the dead-letter table."""
        schema = tmp_path / "s.json"
        write_json(schema, JSON_SCHEMA)
        make_topic(store, "named", str(schema), [b"{"],
                   extra={"pylog.table.schema.dead.letter": "rejects"})
        converter = TableConverter(store, "named")
        converter.run_once()
        assert [0] == [r["offset"] for r in dead_rows(converter, "rejects")]


class TestEvolution:
    def test_an_added_optional_field_evolves_the_table(self, store, tmp_path):
        """A schema file that gains an optional field adds the column; old rows read null."""
        schema = tmp_path / "s.json"
        write_json(schema, JSON_SCHEMA)
        make_topic(store, "evolving", str(schema), [b'{"id":1}'])
        converter = TableConverter(store, "evolving")
        converter.run_once()
        evolved = json.loads(json.dumps(JSON_SCHEMA))
        evolved["properties"]["age"] = {"type": ["integer", "null"]}
        write_json(schema, evolved)
        os.utime(schema, ns=(1, 1))      # a new mtime even within the clock's resolution
        with pylog.Producer(store) as producer:
            producer.send("evolving", value=b'{"id":2,"age":30}', partition=0)
        converter.run_once()
        rows = table_rows(converter, ["offset", "id", "age"])
        assert [(0, 1, None), (1, 2, 30)] == [(r["offset"], r["id"], r["age"]) for r in rows]

    @pytest.mark.parametrize("change, field", [
        (lambda s: s["properties"].__setitem__("id", {"type": "string"}), "id"),
        (lambda s: (s["properties"].pop("id"), s.__setitem__("required", [])), "id"),
        (lambda s: (s["properties"].__setitem__("new", {"type": "integer"}),
                    s["required"].append("new")), "new"),
    ])
    def test_an_incompatible_change_stops_only_that_topic(self, store, tmp_path, change, field):
        """A changed type, a removed required field or a new required field is refused
        naming the field; the topic's conversion stops, another topic's goes on."""
        bad_schema, other_schema = tmp_path / "bad.json", tmp_path / "other.json"
        write_json(bad_schema, JSON_SCHEMA)
        write_json(other_schema, JSON_SCHEMA)
        make_topic(store, "changing", str(bad_schema), [b'{"id":1}'])
        make_topic(store, "steady", str(other_schema), [b'{"id":1}'])
        TableConverter(store, "changing").run_once()
        changed = json.loads(json.dumps(JSON_SCHEMA))
        change(changed)
        write_json(bad_schema, changed)
        os.utime(bad_schema, ns=(2, 2))
        with pytest.raises(SchemaEvolutionError) as info:
            TableConverter(store, "changing").run_once()
        assert field == info.value.field
        assert f"field {field}" in str(info.value)
        with pylog.Producer(store) as producer:
            producer.send("changing", value=b'{"id":2}', partition=0)
            producer.send("steady", value=b'{"id":2}', partition=0)
        store.tables.run_due(0)           # schedules: each topic due an interval later
        store.tables.run_due(1 << 62)
        assert "changing" in store.tables.errors()
        assert f"field {field}" in store.tables.errors()["changing"]
        assert "steady" not in store.tables.errors()
        assert 2 == len(table_rows(TableConverter(store, "steady"), ["offset"]))
        assert 1 == len(table_rows(TableConverter(store, "changing"), ["offset"]))


_CONVERT = """
import sys
from pylog.table.converter import TableConverter
TableConverter([sys.argv[1]], sys.argv[2]).run_once()
"""


class TestCrashBetweenCommits:
    @pytest.mark.parametrize("step", ["read", KILL_AFTER_DEAD_LETTERS, "written", "committed"])
    def test_no_dead_letter_lost_or_repeated(self, tmp_path, step):
        """kill -9 at each step of a conversion (between the dead-letter commit and
        the table's too), then a clean run: every record once, in one table or the other."""
        schema = tmp_path / "s.json"
        write_json(schema, JSON_SCHEMA)
        logs = str(tmp_path / "logs")
        with Store([logs], background=False) as s:
            make_topic(s, "crashy", str(schema), VALUES)
        env = dict(os.environ, **{KILL_AT_ENV: step})
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        killed = subprocess.run([sys.executable, "-c", _CONVERT, logs, "crashy"], env=env,
                                timeout=300)
        assert -9 == killed.returncode
        converter = TableConverter([logs], "crashy")
        converter.run_once()
        converter.run_once()          # nothing more, nothing repeated
        assert GOOD == {r["offset"]: r["id"] for r in table_rows(converter, ["offset", "id"])}
        assert [1, 2, 4, 6] == [r["offset"] for r in dead_rows(converter, "crashy__dead_letter")]


class _Registry(http.server.BaseHTTPRequestHandler):
    """A Confluent-style registry with one subject (its REST API's latest-version call)."""

    subjects: dict[str, dict] = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        parts = self.path.strip("/").split("/")
        if len(parts) == 4 and parts[0] == "subjects" and parts[2:] == ["versions", "latest"]:
            body = self.subjects.get(parts[1])
            if body is not None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def registry():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class TestRegistry:
    def test_confluent_wire_format_from_a_registry_subject(self, store, registry):
        """The subject's latest schema types the table; values lose Confluent's 5-byte
        prefix; another magic byte or (Avro) another schema id is a dead letter."""
        avsc = {"type": "record", "name": "Pay", "fields": [{"name": "amount", "type": "long"}]}
        _Registry.subjects["pay-value"] = {"subject": "pay-value", "version": 3, "id": 42,
                                           "schema": json.dumps(avsc)}
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(avsc), {"amount": 99})
        payload = out.getvalue()
        values = [b"\x00" + struct.pack(">I", 42) + payload,
                  b"\x01" + struct.pack(">I", 42) + payload,
                  b"\x00" + struct.pack(">I", 41) + payload,
                  b"\x00\x00"]
        store.create_topic("pay", partitions=1, config={
            "pylog.table.enable": "true", "pylog.table.schema.type": "avro",
            "pylog.table.schema.registry.url": registry,
            "pylog.table.schema.subject": "pay-value"})
        with pylog.Producer(store) as producer:
            for v in values:
                producer.send("pay", value=v, partition=0)
        converter = TableConverter(store, "pay")
        converter.run_once()
        assert [(0, 99)] == [(r["offset"], r["amount"])
                             for r in table_rows(converter, ["offset", "amount"])]
        dead = dead_rows(converter, "pay__dead_letter")
        assert [1, 2, 3] == [r["offset"] for r in dead]
        assert "not in Confluent's wire format" in dead[0]["reason"]
        assert "another schema id than the subject's latest (42)" in dead[1]["reason"]
        assert "not in Confluent's wire format" in dead[2]["reason"]

    def test_json_subject_any_schema_id(self, store, registry):
        """A JSON subject: values of any schema id parse with the latest schema."""
        _Registry.subjects["hits-value"] = {"subject": "hits-value", "version": 1, "id": 5,
                                            "schemaType": "JSON",
                                            "schema": json.dumps(JSON_SCHEMA)}
        store.create_topic("hits", partitions=1, config={
            "pylog.table.enable": "true", "pylog.table.schema.type": "json",
            "pylog.table.schema.registry.url": registry,
            "pylog.table.schema.subject": "hits-value"})
        with pylog.Producer(store) as producer:
            for v in (b"\x00" + struct.pack(">I", 5) + b'{"id":1}',
                      b"\x00" + struct.pack(">I", 4) + b'{"id":2}',
                      b'{"id":3}'):
                producer.send("hits", value=v, partition=0)
        converter = TableConverter(store, "hits")
        converter.run_once()
        assert [1, 2] == [r["id"] for r in table_rows(converter, ["offset", "id"])]
        assert [2] == [r["offset"] for r in dead_rows(converter, "hits__dead_letter")]

    def test_an_unknown_subject_is_a_clear_error(self, registry):
        """A subject the registry does not have is refused with the URL and status."""
        from pylog.table.schema import fetch_registry_schema
        with pytest.raises(SchemaError, match="HTTP 404"):
            fetch_registry_schema(registry, "missing", "avro")


class TestSettings:
    @pytest.mark.parametrize("props, words", [
        ({"type": "xml"}, "must be none, json or avro"),
        ({"type": "json"}, "needs pylog.table.schema.file"),
        ({"type": "avro", "registry.url": "http://x"}, "needs pylog.table.schema.subject"),
        ({"typo": "json"}, "unknown config pylog.table.schema.typo"),
    ])
    def test_bad_settings_name_the_key(self, props, words):
        """Bad pylog.table.schema.* settings are refused naming the key."""
        with pytest.raises(SchemaError, match=words):
            schema_settings(props)
