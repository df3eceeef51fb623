"""The broker's network layer and its errors, over raw sockets and pylog's protocol
client: version negotiation, malformed and oversized frames, pipelining, idle timeout,
long polls, graceful shutdown, and Kafka's error codes for bad produce requests (with
the stored data intact after each)."""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

import pylog
from pylog.protocol import encode_request
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient
from pylog.protocol.codec import Reader
from pylog.record import encode_batch

from .conftest import parked
from .process import wait_until


def raw(served) -> socket.socket:
    host, port = served.broker.address
    s = socket.create_connection((host, port), timeout=10)
    return s


def read_frame(s: socket.socket) -> bytes:
    head = recv_exact(s, 4)
    return recv_exact(s, struct.unpack(">i", head)[0])


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def closed_by_peer(s: socket.socket) -> bool:
    s.settimeout(10)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_unknown_api_versions_version_gets_a_v0_answer(served):
    with raw(served) as s:
        s.sendall(encode_request(18, 99, 5, "probe", m.ApiVersionsRequest()))
        frame = read_frame(s)
        assert struct.unpack(">i", frame[:4])[0] == 5                # header v0: no tags
        body = m.ApiVersionsResponse.decode(frame[4:], 0)
        assert body.error_code == 35                                  # UNSUPPORTED_VERSION
        assert {k.api_key for k in body.api_keys} >= {0, 1, 2, 3, 18, 22}
        # The connection stays usable: the client retries with a version we speak.
        s.sendall(encode_request(18, 3, 6, "probe", m.ApiVersionsRequest(
            client_software_name="probe", client_software_version="1")))
        assert m.ApiVersionsResponse.decode(read_frame(s)[4:], 3).error_code == 0


def test_advertised_versions_are_the_documented_ones(served):
    """ApiVersions lists exactly the "pylog" column of docs/COMPATIBILITY.md, and its
    "Kafka defines" column is what the generated codec knows: moving the codec to another
    Kafka release changes neither what the broker advertises nor, silently, the docs."""
    table = {}
    doc = (Path(__file__).resolve().parents[2] / "docs" / "COMPATIBILITY.md").read_text()
    for row in re.finditer(r"^\| (\w+) \| (\d+) \| ([\d-]+) \| ([\d-]+) \|", doc, re.M):
        table[int(row[2])] = tuple(tuple(int(x) for x in (c.split("-") * 2)[:2])
                                   for c in (row[3], row[4]))
    with ProtocolClient(served.bootstrap) as client:
        advertised = dict(client.versions)
    assert advertised == {key: pylog_ for key, (pylog_, _) in table.items()}
    assert {key: m.REQUESTS[key].VERSIONS for key in table} == \
        {key: kafka for key, (_, kafka) in table.items()}


@pytest.mark.parametrize("join_version,produce_version", [(8, 13), (9, 13)])
def test_versions_pylog_does_not_speak_get_unsupported_version(served, join_version,
                                                                produce_version):
    """JoinGroup 8-9 (join reasons), which Kafka 4.1 defines and pylog does not speak:
    Kafka's error code in the message's own place, and the connection stays usable.
    Produce 13 (topic ids), served since: an id no topic has gets UNKNOWN_TOPIC_ID (100)
    per partition, the topic named by its id in the answer."""
    topic_id = bytes(range(1, 17))
    with raw(served) as s:
        s.sendall(encode_request(11, join_version, 7, "probe", m.JoinGroupRequest(
            group_id="g", session_timeout_ms=10000, member_id="", protocol_type="consumer")))
        frame = read_frame(s)
        assert struct.unpack(">i", frame[:4])[0] == 7
        body = m.JoinGroupResponse.read(Reader(memoryview(frame)[5:]), join_version)  # a tag byte
        assert body.error_code == 35
        produce = m.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
            m.ProduceRequestTopicProduceData(name="t", topic_id=topic_id, partition_data=[
                m.ProduceRequestPartitionProduceData(index=0, records=b""),
                m.ProduceRequestPartitionProduceData(index=3, records=b"")])])
        s.sendall(encode_request(0, produce_version, 8, "probe", produce))
        frame = read_frame(s)
        body = m.ProduceResponse.read(Reader(memoryview(frame)[5:]), produce_version)
        topic = body.responses[0]
        assert (topic.topic_id if produce_version >= 13 else topic.name) == \
            (topic_id if produce_version >= 13 else "t")
        assert [(p.index, p.error_code) for p in topic.partition_responses] == [(0, 100), (3, 100)]
        s.sendall(encode_request(18, 3, 9, "probe", m.ApiVersionsRequest(
            client_software_name="probe", client_software_version="1")))
        assert m.ApiVersionsResponse.decode(read_frame(s)[4:], 3).error_code == 0


@pytest.mark.parametrize("frame,why", [
    (struct.pack(">ihhih", 10, 999, 0, 1, -1), "unknown API key"),
    (struct.pack(">ihhih", 10, 47, 0, 1, -1), "an API left out of ApiVersions (OffsetDelete)"),
    (struct.pack(">i", 200 << 20), "size above socket.request.max.bytes"),
    (struct.pack(">i", 3) + b"abc", "size below a header"),
    (struct.pack(">ihhih", 12, 3, 12, 1, -1) + b"\xff\xff", "Metadata body that does not parse"),
])
def test_bad_frames_close_only_their_connection(served, frame, why):
    with raw(served) as s:
        s.sendall(frame)
        assert closed_by_peer(s), why
    with ProtocolClient(served.bootstrap) as client:          # the broker still serves
        assert client.metadata().brokers[0].port == served.broker.address[1]


def test_requests_are_pipelined_and_answered_in_order(served):
    topic = served.topic()
    with raw(served) as s:
        frames = b"".join(encode_request(k, v, cid, "p", body) for cid, (k, v, body) in enumerate([
            (18, 3, m.ApiVersionsRequest()),
            (3, 12, m.MetadataRequest(topics=[m.MetadataRequestMetadataRequestTopic(name=topic)])),
            (2, 7, m.ListOffsetsRequest(replica_id=-1, topics=[m.ListOffsetsRequestListOffsetsTopic(
                name=topic, partitions=[m.ListOffsetsRequestListOffsetsPartition(timestamp=-1)])])),
        ] * 20, start=100))
        s.sendall(frames)
        ids = [struct.unpack(">i", read_frame(s)[:4])[0] for _ in range(60)]
        assert ids == list(range(100, 160))


def test_idle_connections_are_closed(tmp_path):
    with pylog.open(tmp_path) as store, pylog.Broker(store, listen="127.0.0.1:0",
                                                     connections_max_idle_ms=300) as broker:
        s = socket.create_connection(broker.address, timeout=10)
        start = time.monotonic()
        assert closed_by_peer(s)
        assert 0.25 < time.monotonic() - start < 5
        s.close()


def test_fetch_long_poll_is_woken_by_an_append(served):
    topic = served.topic()
    with ProtocolClient(served.bootstrap) as client:
        done = {}

        def fetch():
            start = time.monotonic()
            done["part"] = client.fetch(topic, 0, 0, max_wait_ms=20_000, min_bytes=1)
            done["seconds"] = time.monotonic() - start
        t = threading.Thread(target=fetch)
        t.start()
        assert wait_until(lambda: parked(served.broker) == 1)
        assert t.is_alive()                                   # parked: nothing to return yet
        served.store.log(topic, 0).append_records([b"wake"])
        t.join(10)
        assert done["part"].error_code == 0 and done["seconds"] < 5    # woken, not timed out
        assert pylog.records.decode_arrow(bytes(done["part"].records)).column("value").to_pylist() == [b"wake"]


def test_fetch_without_data_waits_max_wait_ms(served):
    topic = served.topic()
    with ProtocolClient(served.bootstrap) as client:
        start = time.monotonic()
        part = client.fetch(topic, 0, 0, max_wait_ms=400, min_bytes=1)
        waited = time.monotonic() - start
        assert 0.35 < waited < 5
        assert part.error_code == 0 and not part.records


def test_shutdown_answers_parked_fetches_and_finishes_in_flight_requests(tmp_path):
    store = pylog.open(tmp_path)
    store.create_topic("t", 1)
    broker = pylog.Broker(store, listen="127.0.0.1:0").start()
    client = ProtocolClient(broker.bootstrap_servers)
    result = {}

    def fetch():
        result["part"] = client.fetch("t", 0, 0, max_wait_ms=60_000)
    t = threading.Thread(target=fetch)
    t.start()
    assert wait_until(lambda: parked(broker) == 1)
    start = time.monotonic()
    broker.shutdown()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - start < 5
    assert result["part"].error_code == 0                   # answered, not dropped
    with pytest.raises(OSError):
        ProtocolClient(broker.bootstrap_servers, timeout=2)   # no longer accepting
    client.close()
    store.close()


def batch(values, **kw) -> bytes:
    return encode_batch(values, None, [int(time.time() * 1000)] * len(values), **kw)


def test_produce_errors_are_kafkas_and_leave_the_log_intact(served):
    topic = served.topic()
    served.store.create_topic("small", 1, {"max.message.bytes": 200})
    with ProtocolClient(served.bootstrap) as client:
        ok = client.produce(topic, 0, batch([b"kept"]))
        assert (ok.error_code, ok.base_offset) == (0, 0)
        corrupt = bytearray(batch([b"x" * 50]))
        corrupt[-1] ^= 0xFF                                     # the CRC no longer matches
        assert client.produce(topic, 0, bytes(corrupt)).error_code == 2      # CORRUPT_MESSAGE
        assert client.produce("small", 0, batch([b"y" * 500])).error_code == 10  # MESSAGE_TOO_LARGE
        assert client.produce("nope", 0, batch([b"z"])).error_code == 3      # UNKNOWN_TOPIC_OR_PARTITION
        assert client.produce(topic, 9, batch([b"z"])).error_code == 3
        assert client.produce("__consumer_offsets", 0, batch([b"z"])).error_code == 17
        assert client.produce(topic, 0, batch([b"a"]) + batch([b"b"])).error_code == 87  # two batches
        assert client.produce(topic, 0, batch([b"z"], compression="zstd"),
                              version=6).error_code == 76     # zstd before produce v7
        assert client.produce(topic, 0, batch([b"z"]), acks=2).error_code == 21
        assert client.produce(topic, 0, b"\x00" * 30).error_code == 2        # shorter than a header
        # Idempotent: a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER; a retry is a duplicate
        # (answered with success and the original offset, as Kafka does).
        pid = served.store.init_producer_id()[0]
        first = batch([b"s0"], producer_id=pid, producer_epoch=0, base_sequence=0)
        assert client.produce(topic, 0, first).base_offset == 1
        gap = batch([b"s5"], producer_id=pid, producer_epoch=0, base_sequence=5)
        assert client.produce(topic, 0, gap).error_code == 45
        again = client.produce(topic, 0, first)
        assert (again.error_code, again.base_offset) == (0, 1)
    log = served.store.log(topic, 0)
    assert [r.value for r in log.read(0).records()] == [b"kept", b"s0"]


def test_a_fetch_larger_than_the_socket_buffer_to_a_slow_reader(served):
    topic = served.topic()
    log = served.store.log(topic, 0)
    value = bytes(range(256)) * 16                   # 4 KiB
    for _ in range(24):
        log.append_records([value] * 250)            # ~1 MB per batch, ~24 MB in all
    with ProtocolClient(served.bootstrap) as client:
        correlation, version = client.send(1, m.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, session_epoch=-1,
            topics=[m.FetchRequestFetchTopic(topic=topic, partitions=[m.FetchRequestFetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=64 << 20)])]), 12)
        time.sleep(0.5)                               # the broker fills the socket buffer, waits
        part = client.receive(1, version, correlation).responses[0].partitions[0]
        assert part.error_code == 0 and len(part.records) == log.size
        assert bytes(part.records) == log.read(0, 64 << 20).read()
        # The connection is still in step: the next request is answered.
        assert client.list_offset(topic, 0, -1) == 24 * 250


def test_pipelined_fetches_to_a_slow_reader_arrive_whole(served):
    """Fetch responses carry their records as file regions sent with sendfile(2) on the
    socket itself, around byte parts that wait in the connection (pipelined responses
    leave together): every byte before a region must be on the socket first. A client
    that pipelines 24 fetches and starts reading late gets each response whole, in
    order, with intact batches (the socket is full while the broker answers)."""
    topic = served.topic()
    log = served.store.log(topic, 0)
    value = bytes(range(256)) * 4
    for _ in range(8):
        log.append_records([value] * 500)           # 8 batches of ~0.5 MB
    fetch = m.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1,
                           topics=[m.FetchRequestFetchTopic(topic=topic, partitions=[
                               m.FetchRequestFetchPartition(partition=0, fetch_offset=0,
                                                            partition_max_bytes=1 << 20,
                                                            current_leader_epoch=-1,
                                                            log_start_offset=-1)])])
    for _ in range(3):
        with ProtocolClient(served.bootstrap) as client:
            sent = [client.send(1, fetch, 12) for _ in range(24)]
            time.sleep(0.2)                         # the broker meets a full socket
            for correlation, version in sent:
                part = client.receive(1, version, correlation).responses[0].partitions[0]
                assert part.error_code == 0
                got = pylog.records.decode_arrow(bytes(part.records))
                assert got.num_rows >= 500 and set(got.column("value").to_pylist()) == {value}
