"""Leader epochs (KIP-101, KIP-320) at `pylog serve`: each partition dir keeps Kafka's
``leader-epoch-checkpoint``; batches are stamped with the partition's epoch (the file's
latest: a log dir Kafka left at epoch 5 stays at 5, never goes back to 0); Metadata and
ListOffsets answer it; OffsetForLeaderEpoch answers where an epoch ends, as Kafka's
LeaderEpochFileCache does, across a kill -9 and restart."""

from __future__ import annotations

import os

import pytest

import pylog
from pylog.errors import CorruptCheckpointError
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient
from pylog.record import encode_batch
from pylog.storage.leader_epochs import LeaderEpochCache

from .process import ServeProcess

FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


def checkpoint(root, topic, partition=0) -> str:
    with open(os.path.join(root, f"{topic}-{partition}", "leader-epoch-checkpoint")) as f:
        return f.read()


def offsets_for(client, topic, *asks):
    """asks: (current_leader_epoch, leader_epoch) -> [(error, epoch, end offset)]."""
    req = m.OffsetForLeaderEpochRequest(replica_id=-2, topics=[
        m.OffsetForLeaderEpochRequestOffsetForLeaderTopic(topic=topic, partitions=[
            m.OffsetForLeaderEpochRequestOffsetForLeaderPartition(
                partition=0, current_leader_epoch=current, leader_epoch=epoch)
            for current, epoch in asks])])
    resp = client.request(23, req, 4)
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in resp.topics[0].partitions]


def test_leader_epochs_survive_kill_and_restart(tmp_path):
    root = str(tmp_path)
    with pylog.open(root) as store:
        store.create_topic("fresh", 1)
        store.create_topic("kafkas", 1)
    assert checkpoint(root, "fresh") == "0\n1\n0 0\n"
    # As Kafka leaves a partition whose leadership moved to epoch 5 before its records.
    with open(os.path.join(root, "kafkas-0", "leader-epoch-checkpoint"), "w") as f:
        f.write("0\n2\n3 0\n5 0\n")
    serve = ServeProcess(root)
    try:
        with ProtocolClient(serve.bootstrap) as c:
            for i in range(3):
                assert c.produce("kafkas", 0, encode_batch([b"r%d" % i])).error_code == 0
        serve.kill()
    finally:
        serve.stop()
    with ServeProcess(root) as serve, ProtocolClient(serve.bootstrap) as c:
        md = c.request(3, m.MetadataRequest(topics=[m.MetadataRequestMetadataRequestTopic(
            name=t) for t in ("fresh", "kafkas")]), 12)
        assert {t.name: t.partitions[0].leader_epoch for t in md.topics} == \
            {"fresh": 0, "kafkas": 5}
        fetched = c.fetch("kafkas", 0, 0)
        records = bytes(fetched.records)
        epochs, pos = [], 0
        while pos < len(records):           # partitionLeaderEpoch: bytes 12-16 of a batch
            epochs.append(int.from_bytes(records[pos + 12:pos + 16], "big", signed=True))
            pos += 12 + int.from_bytes(records[pos + 8:pos + 12], "big")
        assert epochs == [5, 5, 5]
        assert offsets_for(c, "kafkas", (-1, 5), (5, 5), (-1, 4), (-1, 3), (-1, 2), (-1, 6),
                           (-1, -1), (4, 5), (6, 5)) == [
            (0, 5, 3),              # the latest epoch ends at the log end
            (0, 5, 3),              # the current epoch named, and right
            (0, 3, 0),              # 4 was never a leader's: 3 is the one before, ending at 0
            (0, 3, 0),
            (0, 2, 0),              # older than any known: the first start offset
            (0, -1, -1),            # newer than any known
            (0, -1, -1),
            (FENCED_LEADER_EPOCH, -1, -1),
            (UNKNOWN_LEADER_EPOCH, -1, -1)]
        assert offsets_for(c, "fresh", (0, 0)) == [(0, 0, 0)]
        lo = c.request(2, m.ListOffsetsRequest(replica_id=-1, topics=[
            m.ListOffsetsRequestListOffsetsTopic(name="kafkas", partitions=[
                m.ListOffsetsRequestListOffsetsPartition(partition_index=0, timestamp=-1)])]), 7)
        assert (lo.topics[0].partitions[0].offset, lo.topics[0].partitions[0].leader_epoch) == (3, 5)
    assert checkpoint(root, "kafkas") == "0\n2\n3 0\n5 0\n"     # Kafka's bytes, unchanged


def test_an_empty_checkpoint_is_written_again(tmp_path):
    """A new partition's file is written without an fsync: a crash can leave it empty."""
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("t", 1)
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_text("")
    with pylog.open(str(tmp_path)) as store:
        assert store.log("t", 0).leader_epoch == 0
    assert checkpoint(str(tmp_path), "t") == "0\n1\n0 0\n"


@pytest.mark.parametrize("text,why", [
    ("1\n1\n0 0\n", "version"),
    ("0\n2\n0 0\n", "entries"),
    ("0\n1\n0 x\n", "epoch startOffset"),
    ("0\n2\n5 0\n3 10\n", "does not follow"),
])
def test_a_corrupt_checkpoint_is_named(tmp_path, text, why):
    (tmp_path / "leader-epoch-checkpoint").write_text(text)
    with pytest.raises(CorruptCheckpointError, match=why):
        LeaderEpochCache.read(str(tmp_path))


def test_fetch_and_list_offsets_check_the_current_leader_epoch(tmp_path):
    """Fetch v9+ and ListOffsets v4+ carry the client's current leader epoch: older than
    the partition's is FENCED_LEADER_EPOCH (the client refreshes its metadata), newer is
    UNKNOWN_LEADER_EPOCH, -1 or equal is served (Kafka's Partition.checkCurrentLeaderEpoch)."""
    root = str(tmp_path)
    with pylog.open(root) as store:
        store.create_topic("t", 1)
    with open(os.path.join(root, "t-0", "leader-epoch-checkpoint"), "w") as f:
        f.write("0\n1\n5 0\n")
    with pylog.open(root) as store, pylog.Broker(store, listen="127.0.0.1:0") as broker, \
            ProtocolClient(broker.bootstrap_servers) as c:
        assert c.produce("t", 0, encode_batch([b"a", b"b"])).error_code == 0

        def fetch(epoch, version=12):
            return c.request(1, m.FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, topics=[m.FetchRequestFetchTopic(topic="t", partitions=[
                    m.FetchRequestFetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20,
                                                 current_leader_epoch=epoch, log_start_offset=-1)])]),
                version).responses[0].partitions[0]

        def list_latest(epoch, version=7):
            return c.request(2, m.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                m.ListOffsetsRequestListOffsetsTopic(name="t", partitions=[
                    m.ListOffsetsRequestListOffsetsPartition(partition_index=0, timestamp=-1,
                                                             current_leader_epoch=epoch)])]),
                version).topics[0].partitions[0]

        for epoch, code in [(-1, 0), (5, 0), (4, FENCED_LEADER_EPOCH), (6, UNKNOWN_LEADER_EPOCH)]:
            got = fetch(epoch)
            assert got.error_code == code, epoch
            assert (len(bytes(got.records or b"")) > 0) == (code == 0)
            listed = list_latest(epoch)
            assert (listed.error_code, listed.offset) == (code, 2 if code == 0 else -1), epoch
        assert fetch(4, version=8).error_code == 0          # before v9 there is no such field
        assert list_latest(4, version=3).error_code == 0
