"""Rebalance time, 1 -> 8 -> 1 members, with the classic protocol (cooperative-sticky) and
the consumer protocol (KIP-848, uniform), against pylog serve and Apache Kafka's broker:
the same librdkafka (confluent-kafka) consumers, the same machine and run.

    .venv/bin/python bench/bench_rebalance.py [--repeat 3] [--no-kafka]

A topic of 8 partitions; one member owns all; 7 more subscribe at once: "scale up" is the
time until each of the 8 owns exactly one partition (by their rebalance callbacks); then 7
close at once: "scale down" is the time until the one left owns all 8 again. Each step
starts at a random phase of the heartbeats (both protocols learn of a change at a
member's next heartbeat, so the phase alone moves a figure by up to an interval). Both brokers
run with group.initial.rebalance.delay.ms=0 and a 500 ms heartbeat interval (classic:
the clients' heartbeat.interval.ms; consumer protocol: the broker's
group.consumer.heartbeat.interval.ms, which Kafka also bounds by
group.consumer.min.heartbeat.interval.ms).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import confluent_kafka  # noqa: E402

import pylog  # noqa: E402
from pylog.protocol import messages as m  # noqa: E402
from pylog.protocol.client import ProtocolClient  # noqa: E402

PARTITIONS = 8
HEARTBEAT_MS = 500


class Member:
    def __init__(self, bootstrap: str, topic: str, group: str, protocol: str) -> None:
        config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        if protocol == "consumer":
            config["group.protocol"] = "consumer"
        else:
            config.update({"partition.assignment.strategy": "cooperative-sticky",
                           "heartbeat.interval.ms": HEARTBEAT_MS, "session.timeout.ms": 10000})
        self.consumer = confluent_kafka.Consumer(config)
        self.owned: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke,
                                on_lost=self._revoke)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assign(self, consumer, partitions) -> None:
        with self.lock:
            self.owned |= {p.partition for p in partitions}

    def _revoke(self, consumer, partitions) -> None:
        with self.lock:
            self.owned -= {p.partition for p in partitions}

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.02)
        self.consumer.close()

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.owned)

    def close(self) -> None:
        self.stop.set()

    def join(self) -> None:
        self.thread.join(60)


def wait(condition, timeout: float = 120) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise TimeoutError("the group did not settle")
        time.sleep(0.005)
    return time.monotonic() - start


def one_run(bootstrap: str, protocol: str) -> tuple[float, float]:
    topic = f"rebalance-{uuid.uuid4().hex[:8]}"
    with ProtocolClient(bootstrap) as c:
        c.request(19, m.CreateTopicsRequest(topics=[m.CreateTopicsRequestCreatableTopic(
            name=topic, num_partitions=PARTITIONS, replication_factor=1)], timeout_ms=30000))
    time.sleep(1)                   # Kafka elects leaders asynchronously
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = Member(bootstrap, topic, group, protocol)
    wait(lambda: first.partitions() == set(range(PARTITIONS)))
    time.sleep(1 + random.random() * HEARTBEAT_MS / 1000)     # any phase of the heartbeats
    start = time.monotonic()
    more = [Member(bootstrap, topic, group, protocol) for _ in range(PARTITIONS - 1)]
    members = [first, *more]
    wait(lambda: all(len(mm.partitions()) == 1 for mm in members)
         and set().union(*(mm.partitions() for mm in members)) == set(range(PARTITIONS)))
    up = time.monotonic() - start
    time.sleep(1 + random.random() * HEARTBEAT_MS / 1000)
    start = time.monotonic()
    for mm in more:
        mm.close()
    wait(lambda: first.partitions() == set(range(PARTITIONS)))
    down = time.monotonic() - start
    first.close()
    for mm in members:
        mm.join()
    return up, down


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-kafka", action="store_true")
    args = ap.parse_args()
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="bench-rebalance-"))
    store = pylog.open(str(workdir / "pylog"))
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0,
                          group_consumer_heartbeat_interval_ms=HEARTBEAT_MS).start()
    targets = {"pylog": broker.bootstrap_servers}
    kafka = None
    if not args.no_kafka:
        from kafka_reference.support import KafkaBroker
        (workdir / "kafka").mkdir()
        kafka = KafkaBroker(workdir / "kafka", **{
            "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
            "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_MS)}).start()
        targets["kafka"] = kafka.bootstrap
    try:
        for _ in range(args.repeat):
            for name, bootstrap in targets.items():
                for protocol in ("classic", "consumer"):
                    results.setdefault((name, protocol), []).append(one_run(bootstrap, protocol))
    finally:
        broker.shutdown()
        store.close()
        if kafka is not None:
            kafka.stop()
    print(f"librdkafka {confluent_kafka.libversion()[0]}; {PARTITIONS} partitions; median of "
          f"{args.repeat}; seconds")
    print("| broker | protocol | 1 -> 8 | 8 -> 1 |")
    print("|---|---|---|---|")
    for (name, protocol), runs in results.items():
        up = statistics.median(r[0] for r in runs)
        down = statistics.median(r[1] for r in runs)
        print(f"| {name} | {protocol} | {up:.2f} | {down:.2f} |")


if __name__ == "__main__":
    main()
