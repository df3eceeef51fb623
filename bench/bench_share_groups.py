"""Share groups (KIP-932): records acknowledged per second by 4 members of one share
group, in-process (pylog.ShareConsumer, implicit acknowledgement) and over the wire (raw
ShareFetch with the previous fetch's acknowledgements piggybacked, one connection and one
thread per member, to one in-process broker on 127.0.0.1).

    PYTHONPATH=src:tests python bench/bench_share_groups.py [--records 100000] [--members 4]
        [--partitions 4] [--max-records 500]

Every acquisition and acknowledgement is written (fsynced) to the group's state file
before it is answered, so the figures are bounded by that write per poll or fetch.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-records", type=int, default=500)
    args = ap.parse_args()
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
