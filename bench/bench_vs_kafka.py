"""pylog serve and Apache Kafka's broker side by side: the same librdkafka clients, the
same machine, disk and run, the same topic settings (1 partition, 256 MiB segments,
Kafka's default flush policy in both). Each figure is shown as pylog/Kafka.

    .venv/bin/python bench/bench_vs_kafka.py [--markdown] [--repeat 3] [--quick]

Kafka runs with its start script's default heap (-Xmx1G -Xms1G), in KRaft mode, from the
jars tools/kafka/fetch downloads (tools/kafka/pom.xml pins the version).
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

import bench_broker as bb  # noqa: E402
from report import render  # noqa: E402

from pylog.protocol import messages as m  # noqa: E402
from pylog.protocol.client import ProtocolClient  # noqa: E402


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def create(bootstrap: str, name: str, partitions: int = 1) -> str:
    with ProtocolClient(bootstrap) as c:
        c.request(19, m.CreateTopicsRequest(topics=[m.CreateTopicsRequestCreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1,
            configs=[m.CreateTopicsRequestCreatableTopicConfig(name="segment.bytes",
                                                               value="268435456")])],
            timeout_ms=30000))
    time.sleep(0.5)                 # Kafka: the leader is elected asynchronously
    return name


def _produce_part(args) -> int:
    """One of four_clients' producer processes: bench_broker's loop on one partition."""
    boot, topic, partition, count, size, pid = args
    bb.produce_throughput(boot, topic, count, size, "1", pid, partition)
    return count


def _consume_part(args) -> int:
    boot, topic, partition, count, size, pid = args
    bb.consume_throughput(boot, topic, count, size, pid, partition)
    return count


def four_clients(boot: str, topic: str, count: int, size: int, pid: int) -> tuple[float, float]:
    """Aggregate records/s of 4 producer processes, then 4 consumer processes, one
    partition each of a 4-partition topic."""
    from concurrent.futures import ProcessPoolExecutor
    per = count // 4
    with ProcessPoolExecutor(4) as pool:
        t0 = time.perf_counter()
        sent = sum(pool.map(_produce_part, [(boot, topic, p, per, size, pid) for p in range(4)]))
        produce = sent / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        got = sum(pool.map(_consume_part, [(boot, topic, p, per, size, pid) for p in range(4)]))
        consume = got / (time.perf_counter() - t0)
    return produce, consume


def startup_with_segments(root: Path, segments: int, partitions: int = 10) -> tuple[float, float]:
    """Seconds from start to first answer with `segments` segments, pylog and Kafka on the
    same files: pylog writes them, `pylog export-to-kafka` hands them to Kafka, Kafka
    recovers them once; then each broker is stopped cleanly and timed on a clean start."""
    import subprocess

    from kafka_reference.support import KafkaBroker, run_tool

    import pylog
    logs = str(root / "seg-pylog")
    per = segments // partitions
    with pylog.open(logs) as store:
        store.create_topic("segs", partitions)
        for p in range(partitions):
            log = store.log("segs", p)
            for _ in range(per):
                log.append_records([b"x" * 100] * 10)
                log.roll()
    (root / "seg-kafka").mkdir()
    kafka = KafkaBroker(root / "seg-kafka", **{"log.segment.bytes": "1073741824"})
    kafka.start()
    run_tool("kafka-topics", "--bootstrap-server", kafka.bootstrap, "--create", "--topic", "segs",
             "--partitions", str(partitions), "--replication-factor", "1")
    kafka.stop()
    subprocess.run([sys.executable, "-m", "pylog.cli", "export-to-kafka", "--log-dirs", logs,
                    "--topic", "segs", "--kafka-log-dir", str(kafka.log_dir)], check=True,
                   capture_output=True)
    kafka.start(format=False, timeout=1800)            # first start: recovers the import
    kafka.stop()
    t0 = time.monotonic()
    kafka.start(format=False, timeout=1800)
    kafka_s = time.monotonic() - t0
    kafka.stop()
    t0 = time.monotonic()
    with bb.serve(logs):
        pylog_s = time.monotonic() - t0
    return pylog_s, kafka_s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--segments", type=int, default=10_000,
                    help="start-up with this many segments (0: skip)")
    args = ap.parse_args(argv)
    from kafka_reference.support import KafkaBroker
    n100 = 300_000 if args.quick else 2_000_000
    n1k = 100_000 if args.quick else 500_000
    root = Path(tempfile.mkdtemp(prefix="pylog-vs-kafka-"))
    atexit.register(shutil.rmtree, root, True)      # GBs of logs: never left behind
    (root / "kafka").mkdir()
    t0 = time.monotonic()
    kafka = KafkaBroker(root / "kafka").start()
    kafka_start = time.monotonic() - t0
    brokers = {}
    try:
        t0 = time.monotonic()
        with bb.serve(str(root / "pylog"), "log.segment.bytes=268435456") as pylog_broker:
            pylog_start = time.monotonic() - t0
            brokers = {"pylog": (pylog_broker.bootstrap, pylog_broker.pid),
                       "kafka": (kafka.bootstrap, kafka.proc.pid)}
            rows = []
            for size, count in ((100, n100), (1024, n1k)):
                for acks in ("1", "all"):
                    med = {}
                    for name, (boot, pid) in brokers.items():
                        runs = sorted(bb.produce_throughput(boot, create(boot, f"p-{size}-{acks}-{r}"),
                                                            count, size, acks, pid)
                                      for r in range(args.repeat))
                        med[name] = runs[len(runs) // 2]
                    rows.append([f"produce {size} B", f"acks={acks}",
                                 f"{med['pylog'][0] / 1e3:,.0f}", f"{med['kafka'][0] / 1e3:,.0f}",
                                 f"{med['pylog'][0] / med['kafka'][0]:.2f}",
                                 f"{med['pylog'][1]:.1f}", f"{med['kafka'][1]:.1f}"])
            # Alternating runs, median: single consume runs vary by up to 2x here (the first
            # runs of either broker are slower).
            runs = {name: [] for name in brokers}
            for _ in range(max(args.repeat, 5)):
                for name, (boot, pid) in brokers.items():
                    runs[name].append(bb.consume_throughput(boot, "p-1024-1-0", n1k, 1024, pid))
            cons = {name: sorted(r)[len(r) // 2] for name, r in runs.items()}
            rows.append(["consume 1 KiB", "-", f"{cons['pylog'][0] / 1e3:,.0f}",
                         f"{cons['kafka'][0] / 1e3:,.0f}", f"{cons['pylog'][0] / cons['kafka'][0]:.2f}",
                         f"{cons['pylog'][2]:.2f}", f"{cons['kafka'][2]:.2f}"])
            four = {name: four_clients(boot, create(boot, "four", 4), n100, 100, pid)
                    for name, (boot, pid) in brokers.items()}
            rows.append(["4 producers, 100 B (4 partitions)", "acks=1",
                         f"{four['pylog'][0] / 1e3:,.0f}", f"{four['kafka'][0] / 1e3:,.0f}",
                         f"{four['pylog'][0] / four['kafka'][0]:.2f}", "", ""])
            rows.append(["4 consumers, 100 B (4 partitions)", "-",
                         f"{four['pylog'][1] / 1e3:,.0f}", f"{four['kafka'][1] / 1e3:,.0f}",
                         f"{four['pylog'][1] / four['kafka'][1]:.2f}", "", ""])
            out = [render("Throughput, k records/s (median of %d), librdkafka clients" % args.repeat,
                          ["load", "acks", "pylog", "Kafka", "pylog/Kafka", "pylog CPU s/GB",
                           "Kafka CPU s/GB"], rows, args.markdown,
                          ["pylog answers acks=all after an fsync; Kafka after the in-sync "
                           "replicas (here only itself) have it, without an fsync"])]
            lat_rows = []
            for rate, linger in (((10_000, 0),) if args.quick else ((10_000, 0), (100_000, 1))):
                res = {name: bb.latency(boot, create(boot, f"lat-{rate}-{linger}"), rate,
                                        5 if args.quick else 10, linger)
                       for name, (boot, pid) in brokers.items()}
                for q, i in (("p50", 0), ("p99", 1), ("p99.9", 2)):
                    lat_rows.append([f"{rate / 1e3:.0f} k/s", str(linger), q,
                                     f"{res['pylog'][1][i]:.2f}", f"{res['kafka'][1][i]:.2f}",
                                     f"{res['pylog'][2][i]:.2f}", f"{res['kafka'][2][i]:.2f}"])
            out.append(render("Latency, ms (100 B, acks=1)", ["rate", "linger.ms", "", "pylog produce",
                                                              "Kafka produce", "pylog end-to-end",
                                                              "Kafka end-to-end"], lat_rows, args.markdown))
            out.append(render("Resources", ["", "pylog", "Kafka", "pylog/Kafka"], [
                ["resident memory after the run, MiB", f"{rss_mib(brokers['pylog'][1]):,.0f}",
                 f"{rss_mib(brokers['kafka'][1]):,.0f}",
                 f"{rss_mib(brokers['pylog'][1]) / rss_mib(brokers['kafka'][1]):.2f}"],
                ["start-up to first answer (empty store), s", f"{pylog_start:.1f}", f"{kafka_start:.1f}",
                 f"{pylog_start / kafka_start:.2f}"]], args.markdown))
    finally:
        kafka.stop()
    if args.segments:
        pylog_s, kafka_s = startup_with_segments(root, args.segments)
        out.append(render(f"Clean start-up with {args.segments:,} segments (the same files)",
                          ["", "pylog", "Kafka", "pylog/Kafka"],
                          [["start to first answer, s", f"{pylog_s:.1f}", f"{kafka_s:.1f}",
                            f"{pylog_s / kafka_s:.2f}"]], args.markdown))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
