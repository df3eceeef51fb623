"""``pylog console-producer`` to a topic that does not exist: created where the store or
broker would create it for a producer (auto.create.topics.enable), as Kafka's console
producer gets its topic created by the broker; a clear error where it would not."""

from __future__ import annotations

import pylog

from .test_cli import run


def test_console_producer_creates_a_missing_topic_in_log_dirs(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a\nb\nc\n")
    dirs = str(tmp_path / "store")
    out = run("console-producer", "--log-dirs", dirs, "--topic", "fresh", "--file", str(source))
    assert "3 records appended to fresh" in out.stderr
    with pylog.open(dirs) as store:
        assert store.partition_count("fresh") == store.config["num.partitions"]
        assert [r.value for r in store.log("fresh", 0).read_records(0)] == [b"a", b"b", b"c"]


def test_console_producer_names_a_topic_it_may_not_create(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    bad = run("console-producer", "--log-dirs", str(tmp_path), "--topic", "bad/name",
              "--file", str(source), check=False)
    assert bad.returncode != 0
    assert "bad/name" in bad.stderr and "Traceback" not in bad.stderr


def test_console_producer_gets_a_missing_topic_created_by_the_broker(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("x\ny\n")
    with pylog.open(tmp_path / "store") as store, pylog.Broker(store, listen="127.0.0.1:0") as broker:
        out = run("console-producer", "--bootstrap-server", broker.bootstrap_servers,
                  "--topic", "made-by-metadata", "--file", str(source))
        assert "2 records produced" in out.stderr
        assert store.partition_count("made-by-metadata") == store.config["num.partitions"]
        assert [r.value for r in store.log("made-by-metadata", 0).read_records(0)] == [b"x", b"y"]


def test_console_producer_reports_a_broker_that_does_not_auto_create(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("x\n")
    with pylog.open(tmp_path / "store", auto_create_topics_enable=False) as store, \
            pylog.Broker(store, listen="127.0.0.1:0") as broker:
        out = run("console-producer", "--bootstrap-server", broker.bootstrap_servers,
                  "--topic", "absent", "--file", str(source), check=False)
        assert out.returncode != 0
        assert "UNKNOWN_TOPIC_OR_PARTITION" in out.stderr and "auto.create.topics.enable" in out.stderr
        assert store.partition_count("absent") is None
