"""Kafka's DumpLogSegments --offsets-decoder (Kafka's own record serde) reads the group
membership records pylog writes to __consumer_offsets: a classic group's GroupMetadata, a
consumer-protocol group's ConsumerGroup* records and a share group's ShareGroup* records,
every field where pylog put it."""

from __future__ import annotations

import json
import os

import pylog
from pylog.coordinator.consumer_group import TopicsView
from pylog.coordinator.share_group import share_coordinator

from .support import run_tool


def _dump(store) -> list[tuple[dict, dict | None]]:
    out = []
    for p in range(store.partition_count("__consumer_offsets") or 0):
        lg = store.log("__consumer_offsets", p)
        if lg.log_end_offset == 0:
            continue
        lg.flush()
        for seg in lg.segments:
            text = run_tool("kafka-dump-log", "--files",
                            os.path.join(lg.path, f"{seg.base_offset:020d}.log"),
                            "--offsets-decoder", "--print-data-log").stdout
            for line in text.splitlines():
                if " key: " not in line:
                    continue
                assert "Failed" not in line and "Unknown" not in line, line
                key_text, _, payload_text = line.split(" key: ", 1)[1].partition(" payload: ")
                payload = payload_text.strip()
                out.append((json.loads(key_text), None if payload in ("", "<DELETE>", "null")
                            else json.loads(payload)))
    return out


def test_kafka_decodes_pylogs_group_membership_records(tmp_path):
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("t", 2)
        coordinator = store.coordinator
        topics = TopicsView(store.topic_epoch, store.partition_count, lambda: ["t"])
        kip848 = coordinator.consumer_group("g848", create=True)
        kip848.heartbeat("m848", 0, instance_id=None, rack_id=None, rebalance_timeout_ms=30000,
                         subscribed_names=["t"], subscribed_regex=None, server_assignor="range",
                         owned=None, client_id="c848", client_host="/127.0.0.1", topics=topics)
        classic = coordinator.classic_group("gclassic", 0)
        joined = classic.join_blocking(30, member_id="", client_id="cc", client_host="/127.0.0.1",
                                       protocol_type="consumer", protocols=[("range", b"sub")],
                                       session_timeout_ms=30000, rebalance_timeout_ms=60000,
                                       require_known_member=False, group_instance_id=None)
        assert joined.error == 0
        synced = classic.sync_blocking(joined.member_id, joined.generation,
                                       {joined.member_id: b"asg"}, 30)
        assert synced.error == 0
        share_coordinator(store).group("gshare").heartbeat("mshare", 0, ["t"], store.partition_count,
                                                           client_id="cs", client_host="/127.0.0.1")
        topic_id = store.topic_id("t")
        records = _dump(store)
        kip848.mark_dead()
        classic.mark_dead()
    by = {}
    for key, payload in records:
        by[(int(key["type"]), key["data"].get("groupId") or key["data"].get("group"),
            key["data"].get("memberId"))] = payload
    assert by[(3, "g848", None)]["data"]["epoch"] == 1
    meta = by[(5, "g848", "m848")]["data"]
    assert (meta["clientId"], meta["subscribedTopicNames"], meta["serverAssignor"],
            meta["rebalanceTimeoutMs"]) == ("c848", ["t"], "range", 30000)
    assert by[(6, "g848", None)]["data"]["assignmentEpoch"] == 1
    assert by[(7, "g848", "m848")]["data"]["topicPartitions"] == [
        {"topicId": topic_id, "partitions": [0, 1]}]
    current = by[(8, "g848", "m848")]["data"]
    assert (current["memberEpoch"], current["state"], current["assignedPartitions"]) == \
        (1, 0, [{"topicId": topic_id, "partitions": [0, 1]}])
    group = by[(2, "gclassic", None)]
    assert (group["data"]["protocolType"], group["data"]["generation"], group["data"]["protocol"],
            group["data"]["leader"]) == ("consumer", 1, "range", joined.member_id)
    assert [m["memberId"] for m in group["data"]["members"]] == [joined.member_id]
    assert by[(11, "gshare", None)]["data"]["epoch"] == 1
    assert by[(10, "gshare", "mshare")]["data"]["subscribedTopicNames"] == ["t"]
    assert by[(14, "gshare", "mshare")]["data"]["assignedPartitions"] == [
        {"topicId": topic_id, "partitions": [0, 1]}]
