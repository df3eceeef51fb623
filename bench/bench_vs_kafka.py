"""pylog serve and Apache Kafka's broker side by side: the same librdkafka clients, the
same machine, disk and run, the same topic settings (1 partition, 256 MiB segments,
Kafka's default flush policy in both). Each figure is shown as pylog/Kafka.

    .venv/bin/python bench/bench_vs_kafka.py [--markdown] [--repeat 3] [--quick]

Kafka runs with its start script's default heap (-Xmx1G -Xms1G), in KRaft mode, from the
jars tools/kafka/fetch downloads (tools/kafka/pom.xml pins the version).
"""

from __future__ import annotations

import argparse
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


def create(bootstrap: str, name: str) -> str:
    with ProtocolClient(bootstrap) as c:
        c.request(19, m.CreateTopicsRequest(topics=[m.CreateTopicsRequestCreatableTopic(
            name=name, num_partitions=1, replication_factor=1,
            configs=[m.CreateTopicsRequestCreatableTopicConfig(name="segment.bytes",
                                                               value="268435456")])],
            timeout_ms=30000))
    time.sleep(0.5)                 # Kafka: the leader is elected asynchronously
    return name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    from kafka_reference.support import KafkaBroker
    n100 = 300_000 if args.quick else 2_000_000
    n1k = 100_000 if args.quick else 500_000
    root = Path(tempfile.mkdtemp(prefix="pylog-vs-kafka-"))
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
            cons = {name: bb.consume_throughput(boot, "p-1024-1-0", n1k, 1024, pid)
                    for name, (boot, pid) in brokers.items()}
            rows.append(["consume 1 KiB", "-", f"{cons['pylog'][0] / 1e3:,.0f}",
                         f"{cons['kafka'][0] / 1e3:,.0f}", f"{cons['pylog'][0] / cons['kafka'][0]:.2f}",
                         f"{cons['pylog'][2]:.2f}", f"{cons['kafka'][2]:.2f}"])
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
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
