"""The pylog command through the installed console script, on real files: topics,
get-offsets and dump-log; every bad input one line on stderr and a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pylog

SCRIPT = os.path.join(os.path.dirname(sys.executable), "pylog")


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [SCRIPT] if os.path.exists(SCRIPT) else [sys.executable, "-m", "pylog.cli"]
    out = subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def test_help_lists_every_verb():
    out = run("--help").stdout
    for verb in ("serve", "export-to-kafka", "topics", "get-offsets", "console-producer",
                 "console-consumer", "consumer-groups", "dump-log", "verify", "recover"):
        assert verb in out
    assert "--log-level" in out
    assert "--files" in run("dump-log", "--help").stdout


def test_topics_create_list_describe_alter_delete(tmp_path):
    d = str(tmp_path)
    run("topics", "--log-dirs", d, "--create", "--topic", "clicks", "--partitions", "3",
        "--config", "retention.ms=60000")
    run("topics", "--log-dirs", d, "--create", "--topic", "views", "--partitions", "1")
    assert run("topics", "--log-dirs", d, "--list").stdout.split() == ["clicks", "views"]
    assert run("topics", "--log-dirs", d, "--list", "--topic", "cl.*").stdout.split() == ["clicks"]
    described = run("topics", "--log-dirs", d, "--describe", "--topic", "clicks").stdout
    assert "PartitionCount: 3" in described and "retention.ms=60000" in described
    assert described.count("\tTopic: clicks\tPartition:") == 3
    run("topics", "--log-dirs", d, "--alter", "--topic", "clicks", "--partitions", "4")
    as_json = json.loads(run("topics", "--log-dirs", d, "--describe", "--json").stdout)
    assert [len(t["partitions"]) for t in as_json] == [4, 1]
    run("topics", "--log-dirs", d, "--delete", "--topic", "views")
    assert run("topics", "--log-dirs", d, "--list").stdout.split() == ["clicks"]


@pytest.mark.parametrize("args, message", [
    (["topics", "--log-dirs", "{d}", "--create", "--topic", "bad name!", "--partitions", "1"],
     "bad name!"),
    (["topics", "--log-dirs", "{d}/missing", "--list"], "does not exist"),
    (["topics", "--log-dirs", "{d}", "--create"], "--create needs --topic"),
    (["get-offsets", "--log-dirs", "{d}", "--time", "yesterday"], "--time"),
    (["dump-log", "--files", "{d}/nope.log"], "does not exist"),
    (["topics", "--log-dirs", "{d}", "--frobnicate"], "No such option"),
])
def test_bad_input_is_one_line_and_a_non_zero_exit(tmp_path, args, message):
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("t", 1)
    out = run(*[a.format(d=tmp_path) for a in args], check=False)
    assert out.returncode != 0
    assert message in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_get_offsets_beside_a_running_store(tmp_path):
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("t", 2)
        store.log("t", 0).append_records([b"a"] * 5, timestamps=[1000, 2000, 3000, 4000, 5000])
        store.log("t", 1).append_records([b"b"] * 2)
        # The store is open in this process: get-offsets reads the dirs read-only.
        assert run("get-offsets", "--log-dirs", str(tmp_path)).stdout.split() == ["t:0:5", "t:1:2"]
        assert run("get-offsets", "--log-dirs", str(tmp_path), "--time", "-2",
                   "--partitions", "0").stdout.split() == ["t:0:0"]
        assert run("get-offsets", "--log-dirs", str(tmp_path), "--time", "2500",
                   "--partitions", "0").stdout.split() == ["t:0:2"]


def test_dump_log_prints_known_batches(tmp_path):
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("d", 1)
        log = store.log("d", 0)
        log.append_records([b"v1", b"v2"], [b"k", None], compression="gzip",
                           headers=[[("h", b"x")], []], timestamps=[1000, 1001])
        log.append_records([b"v3"], timestamps=[1002])
    seg = str(tmp_path / "d-0" / "00000000000000000000")
    out = run("dump-log", "--files", seg + ".log", "--print-data-log").stdout.splitlines()
    assert out[0] == f"Dumping {seg}.log" and out[1] == "Log starting offset: 0"
    assert out[2].startswith("baseOffset: 0 lastOffset: 1 count: 2 ") and "compresscodec: gzip" in out[2]
    assert "isvalid: true" in out[2] and "CreateTime: 1001" in out[2]
    assert out[3] == ("| offset: 0 CreateTime: 1000 keySize: 1 valueSize: 2 sequence: -1 "
                      "headerKeys: [h] key: k payload: v1")
    assert out[4] == ("| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 2 sequence: -1 "
                      "headerKeys: [] payload: v2")
    assert out[5].startswith("baseOffset: 2 lastOffset: 2 count: 1 ")
    times = run("dump-log", "--files", seg + ".timeindex").stdout.splitlines()
    assert times[1:] == ["timestamp: 1002 offset: 2"]


def test_console_producer_then_consumer_with_keys_headers_and_a_group(tmp_path):
    d = str(tmp_path)
    run("topics", "--log-dirs", d, "--create", "--topic", "c", "--partitions", "2")
    lines = "".join(f"h1:v{i},h2:w\tk{i % 3}:value {i}\n" for i in range(20))
    out = subprocess.run([SCRIPT, "console-producer", "--log-dirs", d, "--topic", "c",
                          "--property", "parse.key=true", "--property", "key.separator=:",
                          "--property", "parse.headers=true", "--compression-codec", "lz4"],
                         input=lines, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    printed = run("console-consumer", "--log-dirs", d, "--topic", "c", "--from-beginning",
                  "--max-messages", "20", "--property", "print.key=true", "--property",
                  "print.headers=true", "--property", "print.partition=true",
                  "--property", "key.separator=|").stdout.splitlines()
    assert len(printed) == 20
    from pylog.client.partitioner import key_partition
    for line in printed:
        partition, headers, key, value = line.split("|")
        i = int(value.split()[1])
        assert (key, headers) == (f"k{i % 3}", f"h1:v{i},h2:w")
        assert partition == f"Partition:{key_partition(key.encode(), 2)}"
    p0 = key_partition(b"k0", 2)
    as_json = [json.loads(x) for x in run("console-consumer", "--log-dirs", d, "--topic", "c",
                                          "--partition", str(p0), "--offset", "earliest",
                                          "--timeout-ms", "300", "--formatter", "json").stdout.splitlines()]
    assert as_json and all(r["partition"] == p0 for r in as_json)
    assert [r["offset"] for r in as_json] == list(range(len(as_json)))
    grouped = run("console-consumer", "--log-dirs", d, "--topic", "c", "--group", "g",
                  "--from-beginning", "--timeout-ms", "500").stdout.splitlines()
    assert sorted(grouped) == sorted(f"value {i}" for i in range(20))
    with pylog.open(d) as store:                # the group committed what it printed
        assert sum(store.committed("g", "c", p) or 0 for p in range(2)) == 20
    again = run("console-consumer", "--log-dirs", d, "--topic", "c", "--group", "g",
                "--timeout-ms", "300").stdout
    assert again == ""


def test_the_operations_page_commands_run(tmp_path):
    """docs/OPERATIONS.md's first block, pasted into a shell (the store moved to a temp dir;
    serve and export-to-kafka are proven by their own tests)."""
    import re
    from pathlib import Path
    page = (Path(__file__).resolve().parents[2] / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    section = page[page.index("## The pylog command"):]
    block = re.search(r"```\n(.*?)```", section, re.S).group(1)
    script = "\n".join(line for line in block.replace("\\\n", " ").splitlines()
                       if not line.startswith(("pylog serve", "pylog export-to-kafka")))
    script = script.replace("/data/pylog", str(tmp_path))
    bindir = os.path.dirname(sys.executable)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"]))
    assert out.returncode == 0, out.stderr
    assert "u1\t/home" in out.stdout and "u2\t/cart" in out.stdout
    assert "clicks:0:0" in out.stdout and "PartitionCount: 3" in out.stdout


def test_consumer_groups_describe_reset_and_delete(tmp_path):
    d = str(tmp_path)
    with pylog.open(d) as store:
        store.create_topic("t", 2)
        for p in range(2):
            store.log("t", p).append_records([b"x"] * 10, timestamps=list(range(1000, 11000, 1000)))
        store.commit_offsets("g", {("t", 0): 3, ("t", 1): 5})
    assert run("consumer-groups", "--log-dirs", d, "--list").stdout.split() == ["g"]
    described = run("consumer-groups", "--log-dirs", d, "--describe", "--group", "g",
                    "--json").stdout
    assert [(r["partition"], r["current_offset"], r["lag"]) for r in json.loads(described)] == \
        [(0, 3, 7), (1, 5, 5)]
    table = run("consumer-groups", "--log-dirs", d, "--describe", "--group", "g").stdout
    assert table.splitlines()[0].split()[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                                 "LOG-END-OFFSET", "LAG"]

    def committed():
        with pylog.open(d) as store:
            return [store.committed("g", "t", p) for p in range(2)]

    dry = run("consumer-groups", "--log-dirs", d, "--reset-offsets", "--group", "g", "--topic", "t",
              "--to-earliest").stdout
    assert "NEW-OFFSET" in dry and committed() == [3, 5]            # a dry run by default
    run("consumer-groups", "--log-dirs", d, "--reset-offsets", "--group", "g", "--topic", "t",
        "--to-earliest", "--execute")
    assert committed() == [0, 0]
    run("consumer-groups", "--log-dirs", d, "--reset-offsets", "--group", "g", "--all-topics",
        "--shift-by", "4", "--execute")
    assert committed() == [4, 4]
    run("consumer-groups", "--log-dirs", d, "--reset-offsets", "--group", "g", "--topic", "t:1",
        "--to-datetime", "1970-01-01T00:00:06.500", "--execute")
    assert committed() == [4, 6]
    run("consumer-groups", "--log-dirs", d, "--reset-offsets", "--group", "g", "--topic", "t",
        "--shift-by", "100", "--execute")
    assert committed() == [10, 10]                                  # clamped to the log end
    run("consumer-groups", "--log-dirs", d, "--delete", "--group", "g")
    assert run("consumer-groups", "--log-dirs", d, "--list").stdout.split() == []
    bad = run("consumer-groups", "--log-dirs", d, "--describe", "--group", "nope", check=False)
    assert bad.returncode != 0 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr


def _damaged_store(tmp_path):
    d = str(tmp_path)
    with pylog.open(d) as store:
        store.create_topic("t", 1, config={"segment.bytes": 1 << 20})
        log = store.log("t", 0)
        for i in range(60):
            log.append_records([b"record %d " % i + b"x" * 300] * 100)
    return d, sorted((tmp_path / "t-0").glob("*.log"))


def test_verify_a_clean_store_and_damaged_copies(tmp_path):
    import shutil
    d, logs = _damaged_store(tmp_path / "clean")
    assert len(logs) >= 2
    ok = run("verify", "--log-dirs", d)
    assert ok.returncode == 0 and "OK" in ok.stdout and "6,000 records" in ok.stdout

    torn = shutil.copytree(tmp_path / "clean", tmp_path / "torn")
    last = sorted((torn / "t-0").glob("*.log"))[-1]
    os.truncate(last, os.path.getsize(last) - 100)
    out = run("verify", "--log-dirs", str(torn), check=False)
    assert out.returncode == 1 and "torn tail" in out.stdout

    flipped = shutil.copytree(tmp_path / "clean", tmp_path / "flipped")
    first = sorted((flipped / "t-0").glob("*.log"))[0]
    with open(first, "r+b") as f:
        f.seek(5000)
        byte = f.read(1)
        f.seek(5000)
        f.write(bytes([byte[0] ^ 0x40]))
    out = run("verify", "--log-dirs", str(flipped), check=False)
    assert out.returncode == 1 and "checksum mismatch" in out.stdout and "keeps every byte" in out.stdout

    garbage = shutil.copytree(tmp_path / "clean", tmp_path / "garbage")
    index = sorted((garbage / "t-0").glob("*.index"))[0]
    with open(index, "r+b") as f:
        f.write(os.urandom(64))
    out = run("verify", "--log-dirs", str(garbage), check=False)
    assert out.returncode == 1 and ".index: entry 0" in out.stdout

    recovered = run("recover", "--log-dirs", str(torn), "--force").stdout
    assert "truncated" in recovered and "torn" in recovered.lower()
    assert run("verify", "--log-dirs", str(torn)).returncode == 0


def test_serve_exposes_prometheus_metrics(tmp_path):
    import urllib.request
    proc = subprocess.Popen([SCRIPT, "serve", "--log-dirs", str(tmp_path), "--listen", "127.0.0.1:0",
                             "--metrics-port", "0", "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "serving" in proc.stdout.readline()
        url = next(line for line in proc.stdout if line.startswith("metrics on")).split()[-1]
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "kafka_server_replicamanager_partitioncount" in text
        assert "kafka_log_logmanager_offlinelogdirectorycount 0.0" in text
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()


def test_bootstrap_server_forms_against_a_broker(tmp_path):
    with pylog.open(str(tmp_path)) as store, pylog.Broker(store, listen="127.0.0.1:0") as broker:
        b = ["--bootstrap-server", broker.bootstrap_servers]
        run("topics", *b, "--create", "--topic", "remote", "--partitions", "2")
        assert store.partition_count("remote") == 2
        store.log("remote", 1).append_records([b"x"] * 7)
        assert "remote" in run("topics", *b, "--list").stdout.split()
        described = json.loads(run("topics", *b, "--describe", "--topic", "remote", "--json").stdout)
        assert [p["partition"] for p in described[0]["partitions"]] == [0, 1]
        assert run("get-offsets", *b, "--topic", "remote").stdout.split() == ["remote:0:0", "remote:1:7"]
        dup = run("topics", *b, "--create", "--topic", "remote", "--partitions", "1", check=False)
        assert dup.returncode != 0 and "TOPIC_ALREADY_EXISTS" in dup.stderr
        run("topics", *b, "--delete", "--topic", "remote")
        assert "remote" not in store.list_topics()
    both = run("topics", "--log-dirs", str(tmp_path), "--bootstrap-server", "x:1", "--list",
               check=False)
    assert both.returncode != 0 and "one of them" in both.stderr


def test_serve_and_bootstrap_errors_name_the_address(tmp_path):
    """`serve --listen 9092x` opened and recovered the store before rejecting the
    address; "Address already in use" and "Connection refused" were printed without
    the address."""
    import socket

    bad = run("serve", "--log-dirs", str(tmp_path / "never"), "--listen", "9092x", check=False)
    assert bad.returncode == 2 and "listeners = '9092x': '9092x' is not host:port" in bad.stderr
    assert not (tmp_path / "never").exists(), "the store was opened before the address was checked"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = run("serve", "--log-dirs", str(tmp_path / "d"), "--listen", f"127.0.0.1:{port}",
                   "--log-level", "warning", check=False)
    assert busy.returncode == 2, busy.stderr
    assert f"cannot listen on 127.0.0.1:{port} (listeners: PLAINTEXT): Address already in use" in busy.stderr
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]            # closed below: nothing listens there
    for args in (["topics", "--list"], ["get-offsets", "--topic", "t"]):
        refused = run(*args, "--bootstrap-server", f"127.0.0.1:{port}", check=False)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert f"cannot connect to 127.0.0.1:{port}: Connection refused" in refused.stderr, \
            refused.stderr
