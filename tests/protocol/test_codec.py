"""The generated protocol codec: fresh against its generator, byte-identical to an
independent implementation (kafka-python 3's JSON-driven codec) for every message and
version both know, and safe on hostile input."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog.protocol import MalformedMessageError, Reader, decode_request, encode_request
from pylog.protocol.codec import TooManyElementsError
from pylog.protocol import messages as m
from pylog.protocol.api import SUPPORTED

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS_UNAVAILABLE = 3     # tools/protocol_codegen.py's exit status without Kafka's jar


def test_generated_codec_is_fresh():
    """messages.py is what the generator makes from the pinned Kafka jars (4.1.0, and 3.9.0
    for the versions KIP-896 removed; fetched with Maven into ~/.cache/pylog on first use,
    tools/setup.sh fetches them). In CI a missing jar fails."""
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "protocol_codegen.py"), "--check"],
                         capture_output=True, text=True, timeout=600)
    if run.returncode == SCHEMAS_UNAVAILABLE and not os.environ.get("CI"):
        pytest.skip(run.stderr.strip())
    assert run.returncode == 0, run.stderr


def present(rng, v) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


def random_value(kind: str, cls_name, v: int, flexible: bool, nullable: bool, rnd: random.Random):
    if nullable and rnd.random() < 0.2:
        return None
    ints = {"int8": 7, "int16": 15, "uint16": 16, "int32": 31, "uint32": 32, "int64": 63}
    if kind in ints:
        bits = ints[kind]
        if kind.startswith("u"):
            return rnd.randrange(0, 1 << bits)
        return rnd.randrange(-(1 << bits), 1 << bits)
    if kind == "bool":
        return rnd.random() < 0.5
    if kind == "float64":
        return rnd.uniform(-1e9, 1e9)
    if kind == "uuid":
        return bytes(rnd.randrange(256) for _ in range(16))
    if kind == "string":
        return "".join(rnd.choice("abcdé-_.0123") for _ in range(rnd.randrange(0, 12)))
    if kind in ("bytes", "records"):
        return bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 40)))
    if kind == "struct":
        return random_struct(getattr(m, cls_name), v, flexible, rnd)
    inner = kind[2:]
    return [random_value(inner, cls_name, v, flexible, False, rnd) for _ in range(rnd.randrange(0, 3))]


def random_struct(cls, v: int, flexible: bool, rnd: random.Random):
    values = {}
    for name, kind, cls_name, versions, nullable, tagged in cls._SCHEMA:
        if present(versions, v) and (tagged is None or (flexible and present(tagged, v))):
            values[name] = random_value(kind, cls_name, v, flexible, present(nullable, v), rnd)
    return cls(**values)


def kafka_python_class(name: str):
    import importlib
    for module in ("kafka.protocol.metadata", "kafka.protocol.producer", "kafka.protocol.consumer",
                   "kafka.protocol.admin"):
        mod = importlib.import_module(module)
        if hasattr(mod, name):
            return getattr(mod, name)
    return None


MESSAGES = [(cls, v) for key in sorted(SUPPORTED) for cls in (m.REQUESTS[key], m.RESPONSES[key])
            for v in range(cls.VERSIONS[0], cls.VERSIONS[1] + 1)]


@pytest.mark.parametrize("cls,version", MESSAGES, ids=[f"{c.__name__}-v{v}" for c, v in MESSAGES])
def test_bytes_match_kafka_python(cls, version):
    theirs = kafka_python_class(cls.__name__)
    if theirs is None or not theirs.min_version <= version <= theirs.max_version:
        pytest.skip(f"kafka-python has no {cls.__name__} v{version}")
    rnd = random.Random(f"{cls.__name__}-{version}")
    flexible = cls.FLEXIBLE is not None and version >= cls.FLEXIBLE
    for _ in range(5):
        ours = random_struct(cls, version, flexible, rnd)
        if cls is m.ApiVersionsResponse:
            ours.error_code = 0      # kafka-python reads an error response as v0 (KIP-511)
        data = ours.encode(version)
        decoded = theirs[version].decode(data, header=False)
        decoded._header = None
        assert decoded.encode(version=version) == data        # their reading, re-encoded
        assert cls.decode(data, version) == ours              # our own round trip
        assert cls.decode(data, version).encode(version) == data


def test_records_field_is_a_zero_copy_view_of_the_request():
    body = m.ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[m.ProduceRequestTopicProduceData(
        name="t", partition_data=[m.ProduceRequestPartitionProduceData(index=0, records=b"x" * 100)])])
    frame = bytearray(encode_request(0, 9, 7, "me", body)[4:])
    header, decoded, problem = decode_request(frame)
    assert problem is None and header.correlation_id == 7 and header.client_id == "me"
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is frame


def test_unsupported_versions_are_named_not_parsed():
    body = m.FetchRequest()
    header, decoded, problem = decode_request(encode_request(1, 13, 1, None, body)[4:])
    assert decoded is None and "Fetch version 13 is not supported (this broker speaks 4-12)" in problem
    header, decoded, problem = decode_request(b"\x03\xe7\x00\x00\x00\x00\x00\x01\xff\xff")
    assert decoded is None and "unknown or unsupported API key 999" in problem


def test_hostile_lengths_are_refused_before_any_allocation():
    with pytest.raises(MalformedMessageError, match="array of 2147483647 elements at byte 4 cannot fit"):
        Reader(b"\x7f\xff\xff\xff").array(False, lambda: 0)
    with pytest.raises(MalformedMessageError, match="negative-length array"):
        Reader(b"\xff\xff\xff\xfe").array(False, lambda: 0)
    with pytest.raises(MalformedMessageError, match="bytes of 2147483647 bytes at byte 4 runs past"):
        Reader(b"\x7f\xff\xff\xff").bytes(False)
    with pytest.raises(MalformedMessageError, match="varint at byte 0 is longer than 5 bytes"):
        Reader(b"\xff" * 6).uvarint()
    r = Reader(b"\x00\x01\x02")
    r.int16()
    with pytest.raises(MalformedMessageError, match="int32 of 4 bytes at byte 2 runs past"):
        r.int32()


@given(st.binary(max_size=300), st.sampled_from(sorted(SUPPORTED)), st.integers(0, 12))
def test_random_bodies_raise_only_malformed(data, key, version):
    lo, hi = SUPPORTED[key]
    version = lo + version % (hi - lo + 1)
    frame = key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\x00\x00\x00\x01\xff\xff" + data
    try:
        decode_request(frame)
    except MalformedMessageError:
        pass


def _fetch_frame(partitions_per_topic: list[int], version: int = 12) -> bytes:
    body = m.FetchRequest(topics=[m.FetchRequestFetchTopic(topic=f"t{i}", partitions=[
        m.FetchRequestFetchPartition(partition=p) for p in range(n)])
        for i, n in enumerate(partitions_per_topic)])
    return encode_request(1, version, 1, "c", body)[4:]


def test_the_element_budget_counts_every_array_of_the_request():
    """Fetch v4 (no tagged fields) with 3 topics of 4 partitions: 3 + 12 elements."""
    frame = _fetch_frame([4, 4, 4], 4)
    assert len(decode_request(frame, max_elements=15)[1].topics) == 3
    with pytest.raises(TooManyElementsError) as refused:
        decode_request(frame, max_elements=14)
    # The third topic's partitions cross it: refused before they are read.
    assert (refused.value.count, refused.value.used, refused.value.needed) == (4, 11, 15)
    assert "array of 4 elements at byte" in str(refused.value)


def test_the_element_budget_is_checked_before_allocating():
    """A count within the frame's bytes but past the budget fails at once, whatever it
    claims (2 million one-byte elements fit a 4 MB frame)."""
    r = Reader(b"\x00\x1e\x84\x80" + b"\x00" * 2_000_000, max_elements=1000)
    with pytest.raises(TooManyElementsError, match="array of 2000000 elements at byte 4 takes"):
        r.array(False, r.int8)
    assert r.pos == 4                               # nothing past the count was read


def test_tagged_fields_spend_the_same_budget():
    """Flexible versions: each struct's tagged fields are counted, and arrays read inside
    a tagged field spend the message's budget."""
    frame = _fetch_frame([2], 12)                   # 1 topic, 2 partitions, tag blocks of 0
    assert decode_request(frame, max_elements=3)[1].topics[0].partitions[1].partition == 1
    many_tags = Reader(b"\x05" + b"\x00\x00" * 5, max_elements=4)
    with pytest.raises(TooManyElementsError, match="tagged fields of 5 elements"):
        many_tags.skip_tagged_fields()
    # One tagged field holding a compact array of 3 int8s: 1 + 3 elements.
    inner = b"\x01" + b"\x07\x04" + b"\x04\x01\x02\x03"
    r = Reader(inner, max_elements=4)
    for _tag, sub in r.tagged_fields():
        assert sub.array(True, sub.int8) == [1, 2, 3]
    assert r.left == 0
    r = Reader(inner, max_elements=3)
    with pytest.raises(TooManyElementsError):
        for _tag, sub in r.tagged_fields():
            sub.array(True, sub.int8)
