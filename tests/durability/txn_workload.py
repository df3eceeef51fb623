"""The process the transaction power-loss test crashes (test_power_loss_transactions.py).

Usage: python txn_workload.py ROOT EVENTS_FILE

Opens a store in ROOT/d with the topic ``tx`` (3 partitions) and runs two in-process
transactional Producers in threads (ids ``tx-a`` and ``tx-b``: concurrent transactions
share the coordinator's fsyncs), each forever: transaction ``i`` sends keys
``<id>-<i>-<j>`` for j < RECORDS over the partitions, then commits, or every fourth one
aborts. What it was promised goes to EVENTS_FILE, one ``write(2)`` per line, with the
fault layer's journal position (workload.Events):

    commit <pos> <id> <i>    (commit_transaction returned)
    abort  <pos> <id> <i>    (abort_transaction was called: never visible)
"""

from __future__ import annotations

import os
import sys
import threading

import pylog
from pylog import Producer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workload import Events  # noqa: E402

RECORDS, PARTITIONS = 9, 3
IDS = ("tx-a", "tx-b")


def run(store, transactional_id: str, events: Events) -> None:
    producer = Producer(store, transactional_id=transactional_id, acks="all", linger_ms=1)
    producer.init_transactions()
    i = 0
    while True:
        producer.begin_transaction()
        for j in range(RECORDS):
            producer.send("tx", b"%s-%d-%d" % (transactional_id.encode(), i, j), partition=j % PARTITIONS)
        if i % 4 == 3:
            events("abort", transactional_id, i)
            producer.abort_transaction()
        else:
            producer.commit_transaction()
            events("commit", transactional_id, i)
        i += 1


def main() -> None:
    root, events_path = sys.argv[1:3]
    events = Events(events_path)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)
    store = pylog.Store([os.path.join(root, "d")], {"pylog.io.engine": "portable"})
    if store.partition_count("tx") is None:
        store.create_topic("tx", PARTITIONS)
    threads = [threading.Thread(target=run, args=(store, tid, events), daemon=True) for tid in IDS]
    for t in threads:
        t.start()
    print("ready", flush=True)
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
