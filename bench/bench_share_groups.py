"""Share groups (KIP-932): records acknowledged per second by 4 members of one share
group, in-process (pylog.ShareConsumer, implicit acknowledgement) and over the wire (raw
ShareFetch with the previous fetch's acknowledgements piggybacked, one connection and one
thread per member, to one in-process broker on 127.0.0.1).

With --java: Kafka's own KafkaShareConsumer (kafka-clients 4.1, implicit acknowledgement,
one JVM per member: tests/kafka_reference/java/ShareClients.java "count") against
`pylog serve` (its own process) and against Apache Kafka 4.1's broker (KRaft, one node,
share groups turned on with the `share.version=1` feature), the same topic, records and
group config (share.auto.offset.reset=earliest, set with kafka-configs) on each: records
delivered per second from the first poll that returned records to the one that reached
--records (a record is acknowledged by the member's next fetch).

    PYTHONPATH=src:tests python bench/bench_share_groups.py [--records 100000] [--members 4]
        [--partitions 4] [--max-records 500] [--java [--no-kafka]]

Every acquisition and acknowledgement is written (fsynced) to the group's state file
before it is answered; the members' concurrent requests share those writes (group
commit, coordinator/share_group.py).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

import pylog
from pylog.coordinator.share_group import share_coordinator


def fill(store, topic: str, partitions: int, records: int) -> None:
    store.create_topic(topic, partitions)
    per = records // partitions
    with pylog.Producer(store, linger_ms=5) as producer:
        for p in range(partitions):
            for i in range(0, per, 1000):
                producer.send_batch(topic, [b"x" * 100] * min(1000, per - i), partition=p)


def in_process(store, topic: str, group: str, members: int, records: int, max_records: int) -> float:
    done = [0] * members
    start = time.perf_counter()

    def run(i: int) -> None:
        with pylog.ShareConsumer(store, topic, group_id=group, max_poll_records=max_records) as c:
            idle = 0
            while sum(done) < records and idle < 20:
                got = c.poll(0.1)
                idle = 0 if got else idle + 1
                done[i] += len(got)
            c.commit_sync()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(members)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    assert sum(done) == records, (sum(done), records)
    return records / elapsed


def remote(store, broker, topic: str, group: str, members: int, partitions: int,
           records: int, max_records: int) -> float:
    from share_support import ACCEPT, ShareMember

    done = [0] * members
    start = time.perf_counter()

    def run(i: int) -> None:
        member = ShareMember(broker, store, group, [topic])
        member.beat()
        acks: dict[int, list] = {}
        idle = 0
        while sum(done) < records and idle < 20:
            resp = member.fetch(topic, partitions=range(partitions), acks=acks,
                                max_records=max_records, max_wait_ms=100)
            got = member.acquired(resp)
            idle = 0 if got else idle + 1
            acks = {}
            for p, o in got:
                acks.setdefault(p, []).append(o)
            acks = {p: [(min(os_), max(os_), [ACCEPT])] if max(os_) - min(os_) + 1 == len(os_)
                    else [(o, o, [ACCEPT]) for o in sorted(os_)] for p, os_ in acks.items()}
            done[i] += len(got)
        if acks:
            member.acknowledge(topic, acks)
        member.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(members)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    assert sum(done) == records, (sum(done), records)
    return records / elapsed


def java_rate(bootstrap: str, topic: str, members: int, partitions: int, records: int,
              max_records: int) -> float:
    """Kafka's KafkaShareConsumer x `members` on a topic of `records` records."""
    import subprocess
    import sys
    from pathlib import Path

    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka_reference import support

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                         "batch.num.messages": 1000})
    per = records // partitions
    for p in range(partitions):
        for _ in range(per):
            while True:
                try:
                    producer.produce(topic, b"x" * 100, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(120) == 0
    group = f"java-{topic}"
    support.run_tool("kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "groups",
                     "--entity-name", group, "--alter", "--add-config",
                     "share.auto.offset.reset=earliest")
    classes = support.compiled(Path(support.__file__).parent / "java" / "ShareClients.java")
    cmd = ["java", "-Xmx512m", "-Dlog4j.configuration=file:/dev/null",
           "-cp", f"{classes}:{support.kafka_libs()}/*", "ShareClients", "count", bootstrap,
           topic, group, str(max_records)]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(members)]
    firsts: list[int | None] = [None] * members
    lasts = [(0, 0)] * members

    def read(i: int) -> None:
        for line in procs[i].stdout:
            if line.startswith("AT "):
                _, ms, n = line.split()
                if firsts[i] is None:
                    firsts[i] = int(ms)
                lasts[i] = (int(ms), int(n))

    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(members)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + 600
    try:
        while sum(n for _, n in lasts) < per * partitions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sum(n for _, n in lasts)} of {per * partitions} records "
                                   f"delivered in 600 s")
            time.sleep(0.2)
    finally:
        for proc in procs:
            proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    delivered = sum(n for _, n in lasts)
    assert delivered == per * partitions, (delivered, per * partitions, sys.argv)
    start = min(f for f in firsts if f is not None)
    end = max(ms for ms, n in lasts if n)
    return delivered / max((end - start) / 1000, 1e-3)


def pylog_serve(workdir: str):
    """`pylog serve` in its own process on a free port: (process, bootstrap)."""
    import subprocess
    import sys

    from kafka_reference.support import free_port
    from pylog.protocol.client import ProtocolClient

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pylog.cli", "serve", "--log-dirs", workdir,
                             "--listen", f"127.0.0.1:{port}", "--log-level", "warning"])
    bootstrap = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            ProtocolClient(bootstrap).close()
            return proc, bootstrap
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("pylog serve did not start") from None
            time.sleep(0.1)


def java_section(args) -> None:
    from pathlib import Path

    from kafka_reference.support import KafkaBroker, run_tool

    with tempfile.TemporaryDirectory() as d:
        proc, bootstrap = pylog_serve(os.path.join(d, "pylog"))
        try:
            rate = java_rate(bootstrap, "java-queue", args.members, args.partitions, args.records,
                             args.max_records)
        finally:
            proc.terminate()
            proc.wait(60)
        print(f"Kafka's KafkaShareConsumer x{args.members} -> pylog serve: "
              f"{rate:,.0f} records/s delivered (load {os.getloadavg()[0]:.1f})")
        if args.no_kafka:
            return
        (Path(d) / "kafka").mkdir()
        # The share coordinator's __share_group_state on one node (Kafka's defaults: 3, 2).
        kafka = KafkaBroker(Path(d) / "kafka", **{
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1"}).start()
        try:
            run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", kafka.bootstrap,
                     "upgrade", "--feature", "share.version=1")
            kafka_rate = java_rate(kafka.bootstrap, "java-queue", args.members, args.partitions,
                                   args.records, args.max_records)
        finally:
            kafka.stop()
        print(f"Kafka's KafkaShareConsumer x{args.members} -> Kafka 4.1: "
              f"{kafka_rate:,.0f} records/s delivered (load {os.getloadavg()[0]:.1f})")
        print(f"pylog / Kafka: {rate / kafka_rate:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-records", type=int, default=500)
    ap.add_argument("--java", action="store_true",
                    help="Kafka's KafkaShareConsumer against pylog serve and Kafka 4.1 only")
    ap.add_argument("--no-kafka", action="store_true", help="with --java: pylog serve only")
    args = ap.parse_args()
    if args.java:
        java_section(args)
        return
    with tempfile.TemporaryDirectory() as d:
        with pylog.open(d) as store:
            shares = share_coordinator(store)
            for name in ("local", "wire"):
                fill(store, name, args.partitions, args.records)
                shares.group(name).set_configs({"share.auto.offset.reset": "earliest"})
            rate = in_process(store, "local", "local", args.members, args.records, args.max_records)
            print(f"in-process ShareConsumer x{args.members}: {rate:,.0f} records/s acknowledged")
            with pylog.Broker(store, listen="127.0.0.1:0") as broker:
                rate = remote(store, broker, "wire", "wire", args.members, args.partitions,
                              args.records, args.max_records)
            print(f"ShareFetch over the wire x{args.members}: {rate:,.0f} records/s acknowledged")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
