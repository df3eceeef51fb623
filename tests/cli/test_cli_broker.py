"""The pylog command's ``--bootstrap-server`` forms against one real broker (``pylog.Broker``
on 127.0.0.1, shared by the module): console producer and consumer, topics --alter and
consumer-groups, through the installed console script; a real Kafka client
(confluent-kafka) reads what the console producer wrote and owns a group the tool
describes and refuses to reset."""

from __future__ import annotations

import json

import pytest

import pylog

from .test_cli import run


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with pylog.open(str(tmp_path_factory.mktemp("cli-broker"))) as store, \
            pylog.Broker(store, listen="127.0.0.1:0") as b:
        yield store, b.bootstrap_servers


def test_console_producer_and_consumer_round_trip(broker, tmp_path):
    store, bootstrap = broker
    b = ["--bootstrap-server", bootstrap]
    run("topics", *b, "--create", "--topic", "lines", "--partitions", "3")
    source = tmp_path / "in.txt"
    source.write_text("".join(f"h{i}:v{i}\tk{i}\tvalue {i}\n" for i in range(50)) + "\tk-null\tnull\n")
    out = run("console-producer", *b, "--topic", "lines", "--file", str(source),
              "--compression-codec", "zstd", "--batch-lines", "7", "--property", "parse.key=true",
              "--property", "parse.headers=true", "--property", "null.marker=null")
    assert "51 records produced" in out.stderr
    # Keys went where Kafka's partitioner puts them: a real client agrees.
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("lines", p, 0) for p in range(3)])
        seen = {}
        while len(seen) < 51:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            seen[msg.key()] = (msg.partition(), msg.value(), msg.headers())
    finally:
        consumer.close()
    assert seen[b"k7"][1:] == (b"value 7", [("h7", b"v7")])
    assert seen[b"k-null"][1] is None
    from pylog._core.producer import murmur2
    for key, (partition, _, _) in seen.items():
        assert partition == (murmur2(key) & 0x7FFFFFFF) % 3

    printed = run("console-consumer", *b, "--topic", "lines", "--from-beginning", "--formatter",
                  "json", "--timeout-ms", "1500").stdout.splitlines()
    rows = [json.loads(line) for line in printed]
    assert len(rows) == 51
    assert {(r["key"], r["value"]) for r in rows} >= {("k3", "value 3"), ("k-null", None)}
    assert sum(r["partition"] == 1 for r in rows) == store.log("lines", 1).log_end_offset

    one = run("console-consumer", *b, "--topic", "lines", "--partition", "2", "--offset", "1",
              "--max-messages", "2", "--property", "print.offset=true", "--property",
              "print.key=true").stdout.splitlines()
    assert [line.split("\t")[0] for line in one] == ["Offset:1", "Offset:2"]

    missing = run("console-consumer", *b, "--topic", "nope", "--timeout-ms", "100", check=False)
    assert missing.returncode != 0 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_topics_alter_at_a_broker(broker):
    store, bootstrap = broker
    b = ["--bootstrap-server", bootstrap]
    run("topics", *b, "--create", "--topic", "grow", "--partitions", "1")
    run("topics", *b, "--alter", "--topic", "grow", "--partitions", "4",
        "--config", "retention.ms=123456")
    assert store.partition_count("grow") == 4
    assert store.log("grow", 3).config.retention_ms == 123456
    shrink = run("topics", *b, "--alter", "--topic", "grow", "--partitions", "2", check=False)
    assert shrink.returncode != 0 and "INVALID_PARTITIONS" in shrink.stderr
    bad = run("topics", *b, "--alter", "--topic", "grow", "--config", "retention.ms=soon", check=False)
    assert bad.returncode != 0 and "INVALID_CONFIG" in bad.stderr and "Traceback" not in bad.stderr


def test_consumer_groups_at_a_broker(broker):
    store, bootstrap = broker
    b = ["--bootstrap-server", bootstrap]
    store.create_topic("shipments", 2)
    for p in range(2):
        store.log("shipments", p).append_records([b"o"] * 10, timestamps=list(range(1000, 11000, 1000)))

    # The console consumer as group "printer": starts at nothing committed (earliest here),
    # commits what it printed.
    run("console-consumer", *b, "--topic", "shipments", "--group", "printer", "--from-beginning",
        "--max-messages", "20")
    assert "printer" in run("consumer-groups", *b, "--list").stdout.split()
    described = json.loads(run("consumer-groups", *b, "--describe", "--group", "printer",
                               "--json").stdout)
    assert [(r["partition"], r["current_offset"], r["lag"]) for r in described] == [(0, 10, 0), (1, 10, 0)]

    run("consumer-groups", *b, "--reset-offsets", "--group", "printer", "--topic", "shipments:1",
        "--to-datetime", "1970-01-01T00:00:04.500", "--execute")
    assert store.committed("printer", "shipments", 1) == 4
    run("consumer-groups", *b, "--reset-offsets", "--group", "printer", "--all-topics",
        "--shift-by", "-3", "--execute")
    assert [store.committed("printer", "shipments", p) for p in range(2)] == [7, 1]
    # The group resumes where the reset put it.
    again = run("console-consumer", *b, "--topic", "shipments", "--group", "printer",
                "--property", "print.offset=true", "--property", "print.partition=true",
                "--timeout-ms", "1500").stdout.splitlines()
    assert sorted(again)[:4] == ["Partition:0\tOffset:7\to", "Partition:0\tOffset:8\to",
                                 "Partition:0\tOffset:9\to", "Partition:1\tOffset:1\to"]
    assert len(again) == 3 + 9

    # An active member (a real client in the group): described with its id, not reset.
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "live",
                         "client.id": "live-client", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["shipments"])
        got = 0
        while got < 20:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            got += 1
        consumer.commit(asynchronous=False)
        rows = json.loads(run("consumer-groups", *b, "--describe", "--group", "live", "--json").stdout)
        assert {r["client_id"] for r in rows} == {"live-client"}
        assert all(r["lag"] == 0 and r["consumer_id"] != "-" for r in rows)
        busy = run("consumer-groups", *b, "--reset-offsets", "--group", "live", "--all-topics",
                   "--to-earliest", "--execute", check=False)
        assert busy.returncode != 0 and "inactive" in busy.stderr and "Stable" in busy.stderr
    finally:
        consumer.close()
    run("consumer-groups", *b, "--delete", "--group", "live")
    assert "live" not in run("consumer-groups", *b, "--list").stdout.split()


def test_operations_page_bootstrap_server_block(broker):
    """docs/OPERATIONS.md's --bootstrap-server block, pasted into a shell against this broker."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path
    _, bootstrap = broker
    page = (Path(__file__).resolve().parents[2] / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    section = page[page.index("## Against a broker"):]
    block = re.search(r"```\n(.*?)```", section, re.S).group(1)
    assert "--bootstrap-server 127.0.0.1:9092" in block
    script = block.replace("\\\n", " ").replace("127.0.0.1:9092", bootstrap)
    bindir = os.path.dirname(sys.executable)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"]))
    assert out.returncode == 0, out.stderr
    assert "k1\tfirst" in out.stdout and "k2\tsecond" in out.stdout
    assert "audit" in out.stdout and "NEW-OFFSET" in out.stdout
    ends = [int(line.rsplit(":", 1)[1]) for line in out.stdout.splitlines()
            if line.startswith("orders:")]
    assert len(ends) == 4 and sum(ends) == 2             # altered to 4 partitions; 2 records
