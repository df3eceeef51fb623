"""Kafka's Java consumer over a topic of 200 partitions at pylog's broker: it opens a
fetch session (KIP-227) and addresses topics by id (Fetch 13+), and consumes every record,
those appended while it runs included (they reach it through incremental fetches)."""

from __future__ import annotations

import subprocess
import threading
import time

from .test_java_clients import java_command

PARTITIONS = 200


def test_java_consumer_many_partitions_with_fetch_session(pylog_broker):
    store, broker = pylog_broker
    topic = "java-sessions"
    store.create_topic(topic, PARTITIONS)
    for p in range(PARTITIONS):
        store.log(topic, p).append_records([b"first %d" % p])
    later = 3
    total = PARTITIONS * (1 + later)
    before = broker.stats["fetch.incremental"]
    proc = subprocess.Popen(java_command("consume", broker.bootstrap_servers, topic,
                                         "java-sessions-group", "-", str(total)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()

    def append_while_consuming() -> None:
        # Once the consumer has a session, a few rounds of one record per partition.
        deadline = time.monotonic() + 120
        while broker.stats["fetch.incremental"] == before and time.monotonic() < deadline:
            if stop.wait(0.05):
                return
        for i in range(later):
            for p in range(PARTITIONS):
                store.log(topic, p).append_records([b"later %d %d" % (i, p)])
            if stop.wait(0.3):
                return

    appender = threading.Thread(target=append_while_consuming)
    appender.start()
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        stop.set()
        appender.join()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-4000:]
    lines = out.splitlines()
    assert lines[-1] == f"DONE {total}", err[-4000:]
    seen = {(int(line.split("\t")[0]), int(line.split("\t")[1])) for line in lines[:-2]}
    assert seen == {(p, o) for p in range(PARTITIONS) for o in range(1 + later)}
    # Sessions were in use: the later records were appended only once the consumer's
    # session served an incremental fetch, so they reached it through the session;
    # topics by id (Fetch 13+).
    assert broker.stats["fetch.incremental"] - before >= 1
    assert len(broker.fetch_sessions) == 0     # closed by the consumer's close (epoch -1)
    assert broker.stats["fetch.by_id"] > 0
