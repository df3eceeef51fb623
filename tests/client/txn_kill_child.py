"""A process that runs transactions with pylog's in-process transactional Producer until
it is killed (tests/client/test_transactional_producer.py): transaction i writes
"i-j" for j < RECORDS across PARTITIONS partitions, commits (prints "COMMITTED i")
or, every third one, aborts (prints "ABORTED i"). argv: log dir, first i."""

from __future__ import annotations

import sys

import pylog

RECORDS, PARTITIONS = 12, 3


def main() -> None:
    store = pylog.open(sys.argv[1])
    first = int(sys.argv[2])
    producer = pylog.Producer(store, transactional_id="killed-app", linger_ms=1)
    producer.init_transactions()           # fences the killed run's producer, aborts its open one
    print("READY", flush=True)
    i = first
    while True:
        producer.begin_transaction()
        for j in range(RECORDS):
            producer.send("kill", b"%d-%d" % (i, j), partition=j % PARTITIONS)
        if i % 3 == 2:
            producer.abort_transaction()
            print(f"ABORTED {i}", flush=True)
        else:
            producer.commit_transaction()
            print(f"COMMITTED {i}", flush=True)
        i += 1


if __name__ == "__main__":
    main()
