"""``pylog perf``: Kafka's perf tests through the installed command, on real files and
against a real broker on 127.0.0.1: their JSON lines, Kafka's line shapes, records in
the log, and clear refusals."""

from __future__ import annotations

import json
import re

import pytest

import pylog

from .test_cli import run

KAFKA_FINAL = re.compile(
    r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$")
KAFKA_WINDOW = re.compile(r"^\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), "
                          r"[\d.]+ ms avg latency, [\d.]+ ms max latency\.$")


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_produce_json_windows_and_summary(tmp_path):
    """A keyed send() run into given log dirs: window lines while it runs, then a
    summary whose counts match the log and whose percentiles are ordered."""
    d = str(tmp_path / "store")
    out = run("perf", "produce", "--num-records", "60000", "--record-size", "64", "--keys", "50",
              "--partitions", "3", "--log-dirs", d, "--reporting-interval", "1", "--json",
              "--acks", "1", "--linger-ms", "2")
    rows = json_lines(out.stdout)
    summary = rows[-1]
    assert summary["type"] == "summary" and all(r["type"] == "window" for r in rows[:-1])
    assert len(rows) >= 2                                  # at least one window line
    assert summary["records"] == 60000 and summary["bytes"] == 60000 * 64
    assert summary["records_in_log"] == 60000
    assert 0 <= summary["p50_ms"] <= summary["p95_ms"] <= summary["p99_ms"] <= summary["p999_ms"]
    assert summary["p999_ms"] <= summary["max_latency_ms"]
    assert summary["latency_samples"] >= 600
    with pylog.open([d]) as store:
        assert store.partition_count("perf-test") == 3
        counts = [store.log("perf-test", p).log_end_offset for p in range(3)]
    assert sum(counts) == 60000 and all(counts)           # keys spread over the partitions


def test_produce_prints_kafkas_lines(tmp_path):
    """Without --json the output is kafka-producer-perf-test's: window lines, then the
    final line with the four percentiles."""
    out = run("perf", "produce", "--num-records", "30000", "--throughput", "40000",
              "--reporting-interval", "200", "--log-dirs", str(tmp_path))
    lines = out.stdout.splitlines()
    assert KAFKA_FINAL.match(lines[-1]), lines[-1]
    assert int(KAFKA_FINAL.match(lines[-1]).group(1)) == 30000
    assert lines[:-1] and all(KAFKA_WINDOW.match(line) for line in lines[:-1])


def test_throughput_cap_holds(tmp_path):
    """--throughput caps the send rate (Kafka's throttler): 6,000 records at 20,000/s
    take at least about 0.3 s."""
    out = run("perf", "produce", "--num-records", "6000", "--throughput", "20000", "--json",
              "--log-dirs", str(tmp_path))
    summary = json_lines(out.stdout)[-1]
    assert summary["seconds"] >= 0.27
    assert summary["records_per_sec"] <= 22000


def test_send_batch_api_then_consume_both_apis(tmp_path):
    """send_batch writes what consume then reads whole, with poll and poll_arrow."""
    d = str(tmp_path)
    run("perf", "produce", "--num-records", "40000", "--api", "send_batch", "--batch-records",
        "700", "--partitions", "4", "--keys", "16", "--compression", "lz4", "--log-dirs", d)
    for api in ("poll", "poll_arrow"):
        out = run("perf", "consume", "--messages", "40000", "--api", api, "--consumers", "2",
                  "--log-dirs", d, "--json")
        summary = json_lines(out.stdout)[-1]
        assert summary["records"] == 40000 and summary["bytes"] == 40000 * 100
        assert summary["complete"] is True
    kafka = run("perf", "consume", "--messages", "40000", "--log-dirs", d).stdout.splitlines()
    assert kafka[0].startswith("start.time, end.time, data.consumed.in.MB, MB.sec")
    assert kafka[1].split(", ")[4] == "40000"


def test_consume_times_out_with_kafkas_warning(tmp_path):
    """Asking for more records than the topic holds ends after --timeout, exit 1."""
    d = str(tmp_path)
    run("perf", "produce", "--num-records", "1000", "--log-dirs", d)
    out = run("perf", "consume", "--messages", "5000", "--timeout", "500", "--log-dirs", d,
              check=False)
    assert out.returncode == 1
    assert "Exiting before consuming the expected number of messages" in out.stderr


def test_end_to_end_latency(tmp_path):
    """Kafka's EndToEndLatency lines, and the JSON form."""
    lines = run("perf", "end-to-end", "--num-records", "200", "--log-dirs",
                str(tmp_path)).stdout.splitlines()
    assert re.match(r"^Avg latency: [\d.]+ ms$", lines[0])
    assert re.match(r"^Percentiles: 50th = \d+, 99th = \d+, 99\.9th = \d+$", lines[1])
    summary = json_lines(run("perf", "end-to-end", "--num-records", "100", "--acks", "all",
                             "--json").stdout)[-1]
    assert summary["records"] == 100 and 0 < summary["p50_ms"] <= summary["max_latency_ms"]


def test_direct_flush_and_topic_configs_reach_the_topic(tmp_path):
    """--direct, --flush-messages and --topic-config configure the topics a run creates."""
    d = str(tmp_path)
    run("perf", "produce", "--num-records", "2000", "--direct", "--flush-messages", "500",
        "--topic-config", "segment.bytes=1048576", "--log-dirs", d)
    with pylog.open([d]) as store:
        config = store.describe_topic("perf-test").config
    assert str(config["pylog.io.direct"]) == "true" and int(config["flush.messages"]) == 500
    assert int(config["segment.bytes"]) == 1048576


@pytest.mark.parametrize("args, message", [
    (["--processes", "--producers", "2"], "--processes needs --bootstrap-server"),
    (["--producer-props", "nonsense"], "expected key=value"),
    (["--producer-props", "batch.sise=5"], "batch.sise"),
])
def test_bad_options_are_one_line_errors(tmp_path, args, message):
    out = run("perf", "produce", "--num-records", "10", "--log-dirs", str(tmp_path), *args,
              check=False)
    assert out.returncode != 0
    assert message in out.stderr
    assert "Traceback" not in out.stderr


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with pylog.open(str(tmp_path_factory.mktemp("perf-broker"))) as store, \
            pylog.Broker(store, listen="127.0.0.1:0") as b:
        store.create_topic("remote-perf", 3)
        yield store, b.bootstrap_servers


def test_against_a_broker(broker):
    """produce (threads, then processes), consume and end-to-end over the wire."""
    store, bootstrap = broker
    b = ["--bootstrap-server", bootstrap, "--topic", "remote-perf"]
    first = json_lines(run("perf", "produce", *b, "--num-records", "20000", "--keys", "30",
                           "--json").stdout)[-1]
    assert first["records"] == 20000
    second = json_lines(run("perf", "produce", *b, "--num-records", "10000", "--producers", "2",
                            "--processes", "--acks", "1", "--json").stdout)[-1]
    assert second["records"] == 10000
    assert sum(store.log("remote-perf", p).log_end_offset for p in range(3)) == 30000
    consumed = json_lines(run("perf", "consume", *b, "--messages", "30000", "--consumers", "2",
                              "--json").stdout)[-1]
    assert consumed["records"] == 30000 and consumed["bytes"] == 30000 * 100
    by_processes = json_lines(run("perf", "consume", *b, "--messages", "30000", "--consumers",
                                  "3", "--processes", "--json").stdout)[-1]
    assert by_processes["records"] == 30000 and by_processes["processes"] == 3
    lines = run("perf", "end-to-end", *b, "--num-records", "50").stdout.splitlines()
    assert lines[0].startswith("Avg latency:")
    missing = run("perf", "produce", "--bootstrap-server", bootstrap, "--topic", "absent",
                  "--num-records", "10", check=False)
    assert missing.returncode != 0 and "do not exist" in missing.stderr


def test_the_operations_page_perf_commands_run(tmp_path):
    """docs/OPERATIONS.md's pylog perf block, pasted into a shell (the store moved to a temp
    dir; record counts cut down)."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path
    page = (Path(__file__).resolve().parents[2] / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    section = page[page.index("## Measuring: pylog perf"):]
    block = re.search(r"```\n(.*?)```", section, re.S).group(1)
    script = block.replace("\\\n", " ").replace("/data/pylog", str(tmp_path))
    script = re.sub(r"--num-records \d+", "--num-records 20000", script)
    script = re.sub(r"--messages \d+", "--messages 40000", script)
    script = script.replace("--throughput 50000", "--throughput 200000")
    bindir = os.path.dirname(sys.executable)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"]))
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("records sent") >= 2 and "\"type\": \"summary\"" in out.stdout
    assert "start.time, end.time" in out.stdout and "Avg latency:" in out.stdout


def test_profile_writes_a_flame_graph(tmp_path):
    """--profile DIR attaches py-spy to the run (an SVG flame graph) and says why
    perf stat counts are missing where the machine has none."""
    import os
    import shutil
    import sys
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        pytest.skip("py-spy is not installed (the [dev] extra)")
    if os.geteuid() != 0:
        pytest.skip("py-spy attaches with ptrace: needs root here")
    prof = tmp_path / "prof"
    out = run("perf", "produce", "--num-records", "300000", "--log-dirs", str(tmp_path / "s"),
              "--profile", str(prof), "--json")
    summary = json_lines(out.stdout)[-1]
    assert summary["profile"] == str(prof)
    svg = (prof / "flame.svg").read_text()
    assert svg.startswith("<?xml") and "<svg" in svg
    assert "send" in svg or "produce" in svg          # the producer path is in the graph
    if "cycles_per_record" not in summary:
        assert "perf stat" in out.stderr or "perf is not installed" in out.stderr


def test_weighted_latency_percentiles():
    """A send_batch call's latency counts once per record of the call, without storing
    one sample per record: percentiles and the mean are weighted."""
    from pylog.perf import Stats
    s = Stats(1000, interval=1e9, report=lambda _: None)
    s.latency(1.0, weight=900)           # 900 records at 1 ms
    s.latency(50.0, weight=99)           # 99 at 50 ms
    s.latency(200.0, weight=1)           # one at 200 ms
    s.add(1000, 100_000)
    summary = s.finish()
    import numpy as np
    expanded = np.array([1.0] * 900 + [50.0] * 99 + [200.0])     # one sample per record
    assert (summary.p50_ms, summary.p95_ms, summary.p99_ms, summary.p999_ms) == \
        tuple(np.percentile(expanded, [50, 95, 99, 99.9], method="lower"))
    assert summary.max_latency_ms == 200 and summary.latency_samples == 1000
    assert abs(summary.avg_latency_ms - (900 * 1 + 99 * 50 + 200) / 1000) < 1e-9
    assert len(s._latencies) == 3
