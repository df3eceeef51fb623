"""tools/protocol_codegen.py's merge of two Kafka releases' schemas (Kafka 4.x for every
version it defines, 3.9 for the versions KIP-896 removed): fields come back where and
when the older release had them, and a merge that would change any version's bytes is
refused, not generated."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("protocol_codegen", ROOT / "tools" / "protocol_codegen.py")
codegen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(codegen)


def field(name, versions, type_="int32", **more):
    return {"name": name, "type": type_, "versions": versions, **more}


def schema(valid, fields, flexible="3+"):
    return {"name": "ExampleRequest", "apiKey": 99, "type": "request", "validVersions": valid,
            "flexibleVersions": flexible, "fields": fields}


def test_removed_versions_come_back_with_their_fields_in_order():
    old = schema("0-3", [field("A", "0+"), field("Gone", "0-1"), field("B", "0+", "string",
                                                                   nullableVersions="0-2"),
                         field("Tags", "0+", "[]Tag", fields=[field("T", "0+"),
                                                              field("OldOnly", "0")])])
    new = schema("2-4", [field("A", "0+"), field("B", "0+", "string", nullableVersions="0-2"),
                         field("Tags", "0+", "[]Tag", fields=[field("T", "0+")]),
                         field("New", "4+", "int64", taggedVersions="4+", tag=0)])
    merged = codegen.merge_schemas(old, new)
    assert merged["validVersions"] == "0-4"
    assert [(f["name"], f["versions"]) for f in merged["fields"]] == \
        [("A", "0+"), ("Gone", "0-1"), ("B", "0+"), ("Tags", "0+"), ("New", "4+")]
    assert [(f["name"], f["versions"]) for f in merged["fields"][3]["fields"]] == \
        [("T", "0+"), ("OldOnly", "0")]
    assert merged["fields"][2]["nullableVersions"] == "0-2"
    for v in range(0, 5):
        assert codegen.project(merged, v) == codegen.project(old if v < 2 else new, v)


def test_a_merge_that_changes_an_old_version_is_refused():
    """Kafka 4 giving a field another type would make the merged class write the old
    versions as 4.x says: the generator stops, naming the message and the version."""
    old = schema("0-3", [field("A", "0+", "int32")])
    new = schema("2-4", [field("A", "0+", "int64")])
    with pytest.raises(SystemExit, match=r"ExampleRequest v0: the merged schema differs"):
        codegen.merge_schemas(old, new)


def test_a_gap_between_the_releases_is_refused():
    with pytest.raises(SystemExit, match="a gap"):
        codegen.merge_schemas(schema("0-1", [field("A", "0+")]), schema("3-4", [field("A", "0+")]))


def test_version_ranges_are_kafkas_text():
    assert codegen.range_text({2, 3, 4}, 4) == "2+"
    assert codegen.range_text({0, 1}, 4) == "0-1"
    assert codegen.range_text({1}, 4) == "1"
    assert codegen.range_text(set(), 4) is None
    with pytest.raises(SystemExit, match="not contiguous"):
        codegen.range_text({0, 2}, 4)
