"""Apache Kafka's own command-line tools, unmodified, against pylog's broker; and Kafka's
DumpLogSegments reading pylog's segment files."""

from __future__ import annotations

import pylog

from .support import run_tool


def test_kafka_topics_create_list_describe_alter_delete(pylog_broker):
    store, broker = pylog_broker
    b = ["--bootstrap-server", broker.bootstrap_servers]
    run_tool("kafka-topics", *b, "--create", "--topic", "tools-t", "--partitions", "3",
             "--replication-factor", "1", "--config", "retention.ms=3600000")
    assert store.partition_count("tools-t") == 3
    assert store.describe_topic("tools-t").config["retention.ms"] == 3600000
    assert "tools-t" in run_tool("kafka-topics", *b, "--list").stdout.split()
    described = run_tool("kafka-topics", *b, "--describe", "--topic", "tools-t").stdout
    assert "PartitionCount: 3" in described and "retention.ms=3600000" in described
    run_tool("kafka-topics", *b, "--alter", "--topic", "tools-t", "--partitions", "4")
    assert store.partition_count("tools-t") == 4
    run_tool("kafka-topics", *b, "--delete", "--topic", "tools-t")
    assert "tools-t" not in store.list_topics()


def test_console_producer_and_consumer_with_keys_and_headers(pylog_broker):
    store, broker = pylog_broker
    b = ["--bootstrap-server", broker.bootstrap_servers]
    store.create_topic("console", 1)
    lines = "".join(f"h1:v{i}\tk{i}:value {i}\n" for i in range(5))
    run_tool("kafka-console-producer", *b, "--topic", "console", "--property", "parse.key=true",
             "--property", "key.separator=:", "--property", "parse.headers=true",
             "--property", "headers.delimiter=\t", input=lines)
    got = [(r.key, r.value, [(k, bytes(v)) for k, v in r.headers])
           for r in store.log("console", 0).read(0).records()]
    assert got == [(b"k%d" % i, b"value %d" % i, [("h1", b"v%d" % i)]) for i in range(5)]
    out = run_tool("kafka-console-consumer", *b, "--topic", "console", "--from-beginning",
                   "--max-messages", "5", "--property", "print.key=true", "--property",
                   "key.separator=|", "--group", "console-group").stdout
    assert out.splitlines() == [f"k{i}|value {i}" for i in range(5)]
    groups = run_tool("kafka-consumer-groups", *b, "--list").stdout.split()
    assert "console-group" in groups
    described = run_tool("kafka-consumer-groups", *b, "--describe", "--group", "console-group").stdout
    assert "console" in described
    offsets = run_tool("kafka-get-offsets", *b, "--topic", "console").stdout
    assert offsets.strip() == "console:0:5"


def test_producer_perf_test_against_pylog(pylog_broker):
    store, broker = pylog_broker
    store.create_topic("perf", 1)
    out = run_tool("kafka-producer-perf-test", "--topic", "perf", "--num-records", "20000",
                   "--record-size", "100", "--throughput", "-1", "--producer-props",
                   f"bootstrap.servers={broker.bootstrap_servers}", "acks=all").stdout
    assert "20000 records sent" in out
    assert store.log("perf", 0).log_end_offset == 20000


def test_dump_log_segments_reads_pylog_files(tmp_path):
    with pylog.open(tmp_path / "store") as store:
        store.create_topic("dump", 1)
        log = store.log("dump", 0)
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            log.append_records([b"v-" + codec.encode()] * 3, [b"k"] * 3, compression=codec,
                               headers=[[("h", b"x")]] * 3)
        segment = sorted((tmp_path / "store").glob("dump-0/*.log"))[0]
    out = run_tool("kafka-dump-log", "--files", str(segment), "--deep-iteration",
                   "--print-data-log").stdout
    assert out.count("baseOffset:") == 5 and out.count("isvalid: true") == 5
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert f"compresscodec: {codec} " in out
        assert f"key: k payload: v-{codec}" in out
    assert out.count("headerKeys: [h]") == 15
    for suffix in (".index", ".timeindex"):
        check = run_tool("kafka-dump-log", "--files", str(segment.with_suffix(suffix)),
                         "--index-sanity-check").stdout
        assert "Dumping" in check and "mismatch" not in check.lower() and "corrupt" not in check.lower()


def test_kafka_configs_describe_and_alter(pylog_broker):
    store, broker = pylog_broker
    b = ["--bootstrap-server", broker.bootstrap_servers]
    store.create_topic("configs", 1)
    run_tool("kafka-configs", *b, "--entity-type", "topics", "--entity-name", "configs", "--alter",
             "--add-config", "retention.ms=7200000,cleanup.policy=compact")
    config = store.describe_topic("configs").config
    assert config["retention.ms"] == 7200000 and config["cleanup.policy"] == ("compact",)
    out = run_tool("kafka-configs", *b, "--entity-type", "topics", "--entity-name", "configs",
                   "--describe").stdout
    assert "retention.ms=7200000" in out and "cleanup.policy=compact" in out
    run_tool("kafka-configs", *b, "--entity-type", "topics", "--entity-name", "configs", "--alter",
             "--delete-config", "retention.ms")
    assert "retention.ms" not in store.describe_topic("configs").overrides


def test_consumer_groups_reset_offsets_and_delete(pylog_broker):
    store, broker = pylog_broker
    b = ["--bootstrap-server", broker.bootstrap_servers]
    store.create_topic("resets", 1)
    store.log("resets", 0).append_records([b"r%d" % i for i in range(10)])
    store.commit_offsets("resetting", {("resets", 0): 8})
    run_tool("kafka-consumer-groups", *b, "--group", "resetting", "--topic", "resets",
             "--reset-offsets", "--to-earliest", "--execute")
    assert store.committed("resetting", "resets", 0) == 0
    run_tool("kafka-consumer-groups", *b, "--group", "resetting", "--topic", "resets",
             "--reset-offsets", "--shift-by", "3", "--execute")
    assert store.committed("resetting", "resets", 0) == 3
    plan = run_tool("kafka-consumer-groups", *b, "--group", "resetting", "--topic", "resets",
                    "--reset-offsets", "--to-latest", "--dry-run").stdout
    assert "10" in plan and store.committed("resetting", "resets", 0) == 3
    described = run_tool("kafka-consumer-groups", *b, "--describe", "--group", "resetting").stdout
    assert "resets" in described and " 7 " in f" {' '.join(described.split())} "   # lag 10 - 3
    run_tool("kafka-consumer-groups", *b, "--delete", "--group", "resetting")
    assert store.committed("resetting", "resets", 0) is None


def test_delete_records_and_consumer_perf_test(pylog_broker, tmp_path):
    store, broker = pylog_broker
    b = ["--bootstrap-server", broker.bootstrap_servers]
    store.create_topic("trim", 1)
    store.log("trim", 0).append_records([b"x" * 100] * 1000)
    plan = tmp_path / "offsets.json"
    plan.write_text('{"partitions": [{"topic": "trim", "partition": 0, "offset": 400}], "version": 1}')
    run_tool("kafka-delete-records", *b, "--offset-json-file", str(plan))
    assert store.log("trim", 0).log_start_offset == 400
    out = run_tool("kafka-consumer-perf-test", *b, "--topic", "trim", "--messages", "600",
                   "--timeout", "30000").stdout
    header, values = out.strip().splitlines()[-2:]
    row = dict(zip(header.split(", "), values.split(", ")))
    assert int(row["data.consumed.in.nMsg"]) == 600          # offsets 400..999: all that is left


def test_dump_log_segments_reads_idempotent_rolled_segments_and_snapshots(tmp_path):
    """An idempotent producer's batches in a rolled and an active segment: Kafka's
    DumpLogSegments reads the .log (producer fields), checks both indexes with
    --verify-index-only, and reads the producer-state .snapshot pylog wrote at the roll."""
    with pylog.open(tmp_path / "store") as store:
        store.create_topic("idem", 1)
        producer = pylog.Producer(store, enable_idempotence=True, acks="all")
        for i in range(200):
            producer.send("idem", value=b"value %d" % i, key=b"k%d" % (i % 5), partition=0)
            if i == 99:
                producer.flush()
                store.log("idem", 0).roll()
        producer.flush()
        producer.close()
        producer_id = store.log("idem", 0).read(0).batches()[0].producer_id
    files = sorted((tmp_path / "store" / "idem-0").iterdir())
    logs = [f for f in files if f.suffix == ".log"]
    snapshots = [f for f in files if f.suffix == ".snapshot"]
    assert len(logs) == 2 and snapshots
    out = run_tool("kafka-dump-log", "--files", ",".join(map(str, logs)), "--deep-iteration").stdout
    assert out.count("isvalid: true") >= 2 and "Exception" not in out
    assert f"producerId: {producer_id}" in out and "producerEpoch: 0" in out
    assert out.count("baseSequence: 0 ") >= 1            # the first batch's sequence
    for f in files:
        if f.suffix in (".index", ".timeindex"):
            check = run_tool("kafka-dump-log", "--files", str(f), "--verify-index-only").stdout
            assert "Dumping" in check and "mismatch" not in check.lower(), check
    for snapshot in snapshots:         # <offset>.snapshot: the state after offset - 1
        end = int(snapshot.stem) - 1
        state = run_tool("kafka-dump-log", "--files", str(snapshot)).stdout
        assert f"producerId: {producer_id} " in state, state
        assert f"lastSequence: {end} lastOffset: {end} " in state, state


def test_dump_log_segments_verifies_a_cleaned_log(tmp_path):
    """A compacted log after one cleaning and after two (a copy of the files taken
    between them): Kafka's DumpLogSegments --verify-index-only reported "The
    following indexed offsets are not found in the log" for every segment the cleaner
    had emptied (a time index entry with timestamp -1); now it reports nothing, and
    every cleaned batch reads back valid."""
    import shutil

    partition = tmp_path / "store" / "cleaned-0"
    for round_ in range(2):
        with pylog.open(tmp_path / "store") as store:
            if round_ == 0:
                store.create_topic("cleaned", 1, {"cleanup.policy": "compact",
                                                  "segment.bytes": 2000,
                                                  "min.cleanable.dirty.ratio": 0.01})
            log = store.log("cleaned", 0)
            for i in range(200):
                log.append_records([b"value %d %d" % (round_, i)], [b"key%d" % (i % 5)])
            log.roll()
            assert store.clean_once() is not None
        if round_ == 0:             # closed: every index trimmed, as Kafka's tool expects
            shutil.copytree(partition, tmp_path / "after-one-cleaning" / "cleaned-0")
    files = sorted(partition.iterdir()) + \
        sorted((tmp_path / "after-one-cleaning" / "cleaned-0").iterdir())
    indexes = [str(f) for f in files if f.suffix in (".index", ".timeindex")]
    check = run_tool("kafka-dump-log", "--files", ",".join(indexes), "--verify-index-only")
    assert check.stdout.count("Dumping") == len(indexes)
    assert all(line.startswith("Dumping ") or line.endswith(" is empty.")
               for line in check.stdout.splitlines()), check.stdout
    # Its findings go to stderr ("The following indexed offsets are not found in the log.").
    findings = [line for line in check.stderr.splitlines() if not line.startswith("log4j:")]
    assert findings == [], check.stderr
    logs = [str(f) for f in files if f.suffix == ".log"]
    out = run_tool("kafka-dump-log", "--files", ",".join(logs), "--deep-iteration").stdout
    assert "isvalid: false" not in out and "Exception" not in out
    assert out.count("| offset:") == 5 + 5        # one record per key in each copy


def test_pylog_dump_log_prints_what_kafkas_dump_log_prints(tmp_path):
    """`pylog dump-log` beside Kafka's DumpLogSegments on the same files: the same lines
    (a null value printed no ` payload:` in Kafka's, an empty one in pylog's)."""
    with pylog.open(tmp_path / "store") as store:
        store.create_topic("same", 1)
        log = store.log("same", 0)
        log.append_records([b"v1", b"v2"], [b"k", None], compression="gzip",
                           headers=[[("h", b"x"), ("g", None)], []])
        log.append_records([None, b"", None], [b"gone", b"empty", None])    # null values
        producer = pylog.Producer(store, enable_idempotence=True, compression_type="zstd")
        for i in range(50):
            producer.send("same", value=b"value %d" % i, key=b"key", partition=0)
        producer.flush()
        log.roll()
        producer.send("same", value=b"after the roll", partition=0)
        producer.close()
    files = sorted((tmp_path / "store" / "same-0").iterdir())
    segments = [p for p in files if p.suffix == ".log"]
    others = [p for p in files if p.suffix in (".index", ".timeindex", ".snapshot")]
    assert len(segments) == 2 and others
    for paths, flags in ((segments, ["--deep-iteration", "--print-data-log"]), (others, [])):
        kafka, ours = dump_both(paths, flags)
        assert ours.keys() == kafka.keys() == {str(p) for p in paths}
        for path in paths:
            assert ours[str(path)] == kafka[str(path)], path.name


def _transactional_and_legacy_files(d) -> list:
    """A v2 file with transactional batches and COMMIT/ABORT markers (pylog's encoder), and
    magic 0 and 1 message sets, plain and gzip (kafka-python's legacy builder: an
    independent writer)."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    from pylog.record import encode_batch, encode_control_batch
    paths = []
    txn = d / "txn-0" / "00000000000000000000.log"
    txn.parent.mkdir()
    txn.write_bytes(b"".join([
        encode_batch([b"a", b"b"], [b"k1", None], 1000, producer_id=7, producer_epoch=1,
                     base_sequence=0, transactional=True),
        encode_control_batch("commit", producer_id=7, producer_epoch=1, base_offset=2,
                             timestamp=1001, coordinator_epoch=5),
        encode_batch([b"c"], None, 1002, base_offset=3, producer_id=7, producer_epoch=1,
                     base_sequence=2, transactional=True, compression="lz4"),
        encode_control_batch("abort", producer_id=7, producer_epoch=1, base_offset=4,
                             timestamp=1003, coordinator_epoch=5)]))
    paths.append(txn)
    for magic in (0, 1):
        for codec, name in ((0, "none"), (1, "gzip")):
            builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
            for i in range(3):
                builder.append(i, timestamp=2000 + i if magic else None,
                               key=None if i == 1 else b"key%d" % i, value=b"value %d" % i)
            path = d / f"legacy{magic}{name}-0" / "00000000000000000000.log"
            path.parent.mkdir()
            path.write_bytes(bytes(builder.build()))
            paths.append(path)
    return paths


def test_pylog_dump_log_matches_kafka_on_control_and_legacy_batches(tmp_path):
    """Transaction markers print as Kafka's endTxnMarker lines; magic 0/1 message sets as
    Kafka's legacy batch and record lines (NoTimestampType, inner CRCs)."""
    paths = _transactional_and_legacy_files(tmp_path)
    for flags in ([], ["--deep-iteration"], ["--deep-iteration", "--print-data-log"]):
        kafka, by_file = dump_both(paths, flags)
        assert by_file.keys() == kafka.keys() == {str(p) for p in paths}
        for path in paths:
            ours = by_file[str(path)]
            assert ours == kafka[str(path)], (path.parent.name, flags)
            if path.parent.name == "txn-0" and flags:
                assert "endTxnMarker: COMMIT coordinatorEpoch: 5" in "\n".join(ours)
                assert "endTxnMarker: ABORT coordinatorEpoch: 5" in "\n".join(ours)
            if path.parent.name.startswith("legacy0"):
                assert "NoTimestampType: -1" in "\n".join(ours)


def dump_both(paths, flags) -> tuple[dict, dict]:
    """Kafka's DumpLogSegments and `pylog dump-log` each run once over `paths` (the
    pylog command in its own process, as installed): each one's lines by file, split at
    the "Dumping FILE" line both print before a file."""
    import os
    import subprocess
    import sys
    files = ",".join(map(str, paths))
    kafka = run_tool("kafka-dump-log", "--files", files, *flags).stdout
    script = os.path.join(os.path.dirname(sys.executable), "pylog")
    ours = subprocess.run([script, "dump-log", "--files", files, *flags],
                          capture_output=True, text=True, check=True).stdout
    return _by_file(kafka), _by_file(ours)


def _by_file(printed: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    lines = None
    for line in printed.splitlines():
        if line.startswith("Dumping "):
            lines = sections.setdefault(line.removeprefix("Dumping "), [line])
        else:
            assert lines is not None, f"a line before any file: {line!r}"
            lines.append(line)
    return sections


def test_consumer_groups_delete_offsets(pylog_broker):
    """kafka-consumer-groups --delete-offsets (OffsetDelete): an empty group's offsets of
    one topic go, those of another stay; a group that does not exist is GROUP_ID_NOT_FOUND."""
    store, broker = pylog_broker
    b = ["--bootstrap-server", broker.bootstrap_servers]
    store.create_topic("drop-me", 2)
    store.create_topic("keep-me", 1)
    store.commit_offsets("pruning", {("drop-me", 0): 4, ("drop-me", 1): 5, ("keep-me", 0): 6})
    out = run_tool("kafka-consumer-groups", *b, "--delete-offsets", "--group", "pruning",
                   "--topic", "drop-me").stdout
    assert "drop-me" in out and "Successful" in out
    assert store.committed("pruning", "drop-me", 0) is None
    assert store.committed("pruning", "drop-me", 1) is None
    assert store.committed("pruning", "keep-me", 0) == 6
    absent = run_tool("kafka-consumer-groups", *b, "--delete-offsets", "--group", "no-group",
                      "--topic", "keep-me").stdout
    assert "GroupIdNotFoundException: The group id does not exist" in absent
