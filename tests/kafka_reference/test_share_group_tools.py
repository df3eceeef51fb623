"""Kafka 4.1's ``kafka-share-groups.sh`` (ShareGroupCommand, unmodified, through the tool
JVM) and Kafka's Java Admin (alterShareGroupOffsets, listShareGroupOffsets:
tests/kafka_reference/java/ShareClients.java) against pylog's share groups: --list
(ListGroups v5, type share), --describe --offsets / --members / --state,
--delete-offsets and --delete refused while the group has a member and done once it is
empty; the Admin's alter refused (GroupNotEmptyException) then applied. Kafka 4.1's tool
does not implement --reset-offsets ("not yet implemented"): the Admin call it would make
is what resets a share group's start offsets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pylog.coordinator.share_group import share_coordinator

from share_support import ACCEPT, ShareMember

from . import support
from .support import kafka_libs, run_tool

pytestmark = pytest.mark.xdist_group("java-clients")

SOURCE = Path(__file__).resolve().parent / "java" / "ShareClients.java"


def rows(out: str) -> list[list[str]]:
    """The table the tool printed, one list of cells per line after the header."""
    lines = [ln.split() for ln in out.strip().splitlines() if ln.strip()]
    return lines[1:]


def admin_offsets(bootstrap: str, group: str, *alter: str) -> list[str]:
    """ShareClients offsets: ALTERED / ERROR ..., then OFFSET lines."""
    run = subprocess.run(["java", "-Xmx256m", "-XX:TieredStopAtLevel=1",
                          "-Dlog4j.configuration=file:/dev/null",
                          "-cp", f"{support.compiled(SOURCE)}:{kafka_libs()}/*", "ShareClients",
                          "offsets", bootstrap, group, *alter],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip().splitlines()


def test_kafka_share_groups_tool_and_admin_against_pylog(pylog_broker):
    store, broker = pylog_broker
    bootstrap = broker.bootstrap_servers
    b = ["--bootstrap-server", bootstrap]
    topic, group = "tool-queue", "tool-share-group"
    store.create_topic(topic, 2)
    store.log(topic, 0).append_records([b"r%d" % i for i in range(10)])
    store.log(topic, 1).append_records([b"s%d" % i for i in range(4)])
    store.commit_offsets("tool-classic-group", {(topic, 0): 1})
    share_coordinator(store).group(group).set_configs({"share.auto.offset.reset": "earliest"})
    member = ShareMember(broker, store, group, [topic])
    try:
        assert member.beat().error_code == 0
        assert len(member.acquired(member.fetch(topic, partitions=(0,)))) == 10
        assert member.acknowledge(topic, {0: [(0, 5, [ACCEPT])]}).error_code == 0

        listed = run_tool("kafka-share-groups", *b, "--list").stdout.split()
        assert group in listed and "tool-classic-group" not in listed
        offsets = rows(run_tool("kafka-share-groups", *b, "--describe", "--group", group,
                                "--offsets").stdout)
        assert offsets == [[group, topic, "0", "6"]]
        members = rows(run_tool("kafka-share-groups", *b, "--describe", "--group", group,
                                "--members").stdout)
        assert len(members) == 1 and members[0][1] == member.member_id
        assert members[0][-1] == f"{topic}:0,1"
        state = rows(run_tool("kafka-share-groups", *b, "--describe", "--group", group,
                              "--state").stdout)
        assert state[0][0] == group and state[0][-2:] == ["Stable", "1"]

        # A member holds the group: offsets and the group stay.
        out = run_tool("kafka-share-groups", *b, "--delete-offsets", "--group", group,
                       "--topic", topic, check=False)
        assert "is not empty" in out.stdout + out.stderr
        out = run_tool("kafka-share-groups", *b, "--delete", "--group", group, check=False)
        assert "GroupNotEmptyException" in out.stdout + out.stderr
        refused = admin_offsets(bootstrap, group, f"{topic}:0=0")
        assert refused[0].startswith("ERROR GroupNotEmptyException")
        assert refused[1:] == [f"OFFSET {topic} 0 6"]
        assert share_coordinator(store).group(group).start_offsets() == {(topic, 0): 6}

        assert member.beat(epoch=-1).error_code == 0
        # Kafka's Admin resets the start offsets (what --reset-offsets would send):
        # earliest on 0, the log end ("latest") on 1.
        assert admin_offsets(bootstrap, group, f"{topic}:0=0", f"{topic}:1=4") == [
            "ALTERED", f"OFFSET {topic} 0 0", f"OFFSET {topic} 1 4"]
        offsets = rows(run_tool("kafka-share-groups", *b, "--describe", "--group", group,
                                "--offsets").stdout)
        assert offsets == [[group, topic, "0", "0"], [group, topic, "1", "4"]]
        again = ShareMember(broker, store, group, [topic])
        try:
            again.beat()
            got = again.acquired(again.fetch(topic, partitions=(0, 1)))
            assert got == {(0, o): 1 for o in range(10)}        # from 0 again, none from 1
            again.beat(epoch=-1)
        finally:
            again.close()

        out = run_tool("kafka-share-groups", *b, "--delete-offsets", "--group", group,
                       "--topic", topic).stdout
        assert rows(out) == [[topic, "Successful"]]
        assert rows(run_tool("kafka-share-groups", *b, "--describe", "--group", group,
                             "--offsets").stdout) == []
        out = run_tool("kafka-share-groups", *b, "--delete", "--group", group).stdout
        assert "was successful" in out
        assert group not in run_tool("kafka-share-groups", *b, "--list").stdout.split()
        assert share_coordinator(store).group(group, create=False) is None
    finally:
        member.close()
