"""The process the durability tests crash: a whole store at work.

Usage: python workload.py ROOT SESSION SEED ENGINE EVENTS_FILE [RECORDS]

Opens a store (pylog.Store) over two log dirs below ROOT (JBOD) with the background
thread flushing, rolling, applying retention and writing checkpoints, then
runs until it is killed (or has sent RECORDS records, then closes cleanly):

- an idempotent ``acks=all`` Producer sends keyed records to ``keep`` (no
  retention) and ``churn`` (tiny segments and ``retention.bytes``);
- a consumer group's offsets are committed to ``__consumer_offsets``
  (``flush.messages=1`` there, so a returned commit is durable), with small
  offsets segments so the offsets log is rewritten and trimmed as it runs;
- ``init_producer_id`` is called now and then, as a broker serving
  InitProducerId would.

Every value is a pure function of its key (:func:`value_for`). What the
process has been promised is appended to EVENTS_FILE, one line per event,
each written by one ``write(2)`` right after the promise was made, so a
SIGKILL leaves whole lines. The first field after the kind is the fault
layer's journal position at that moment (0 without the layer): a simulated
power loss just after journal entry ``k`` must keep every promise logged
with a position ``<= k``.

    open    <pos> <topic> <partition> <log end offset>
    pid     <pos> <producer id>            (init_producer_id)
    producer <pos> <producer id> <session> (the Producer's own id)
    ack     <pos> <topic> <partition> <offset> <key>
    committing <pos> <topic> <partition> <offset>   (about to commit)
    commit  <pos> <topic> <partition> <offset>      (the commit returned)
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import random
import sys
import threading

import pylog
from pylog import Producer

TOPICS = {"keep": 2, "churn": 2}
GROUP = "durability"

STORE_CONFIG = {
    "log.flush.scheduler.interval.ms": 20,
    "log.retention.check.interval.ms": 50,
    "log.flush.offset.checkpoint.interval.ms": 100,
    "log.flush.start.offset.checkpoint.interval.ms": 100,
    "offsets.topic.num.partitions": 2,
    "offsets.topic.segment.bytes": 16 * 1024,
    "log.index.size.max.bytes": 64 * 1024,
    "log.segment.delete.delay.ms": 0,
}
TOPIC_CONFIG = {
    "keep": {"segment.bytes": 48 * 1024, "flush.ms": 200},
    "churn": {"segment.bytes": 16 * 1024, "retention.bytes": 32 * 1024, "flush.ms": 50},
}


def value_for(key: bytes) -> bytes:
    """The value every record with this key carries (checked byte for byte)."""
    digest = hashlib.blake2b(key, digest_size=16).hexdigest().encode()
    return digest * (1 + digest[0] % 5)


def log_dirs(root: str) -> list[str]:
    return [os.path.join(root, "d0"), os.path.join(root, "d1")]


class Events:
    """EVENTS_FILE, written one whole line per write(2) (O_APPEND)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self._pos = ctypes.CDLL(None).faultfs_seq
            self._pos.restype = ctypes.c_ulonglong
        except AttributeError:
            self._pos = lambda: 0   # no fault layer: only real crashes are tested
        self._lock = threading.Lock()

    def __call__(self, kind: str, *fields) -> None:
        with self._lock:       # the position is read after the promise was made
            line = " ".join([kind, str(self._pos()), *map(str, fields)]) + "\n"
            os.write(self._fd, line.encode())


def main() -> None:
    root, session, seed, engine, events_path = sys.argv[1:6]
    limit = int(sys.argv[6]) if len(sys.argv) > 6 else None
    rng = random.Random(f"{seed}:{session}")
    events = Events(events_path)
    # The root exists before the store: make its (empty) entry list durable.
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)
    store = pylog.Store(log_dirs(root), {**STORE_CONFIG, "pylog.io.engine": engine})
    for topic, partitions in TOPICS.items():
        if store.partition_count(topic) is None:
            store.create_topic(topic, partitions, config=TOPIC_CONFIG[topic])
    if store.committed(GROUP, "keep", 0) is None:
        store.commit_offsets(GROUP, {("keep", 0): 0})     # creates __consumer_offsets
    store.alter_topic_config("__consumer_offsets", {"flush.messages": 1})
    for p in range(TOPICS["keep"]):
        events("open", "keep", p, store.log("keep", p).log_end_offset)
    producer = Producer(store, acks="all", linger_ms=rng.choice([0, 1, 5]),
                        batch_size=rng.choice([512, 4096, 16384]))
    producer.send("keep", b"", key=b"warm-up", partition=0).result()
    events("producer", producer._producer_id, session)
    print("ready", flush=True)

    def acked(topic, key):
        def callback(meta, exc):
            if exc is None:
                events("ack", topic, meta.partition, meta.offset, key.decode())
        return callback

    n = 0
    commits = 0
    while limit is None or n < limit:
        for _ in range(rng.randint(1, 40)):
            topic = "keep" if rng.random() < 0.6 else "churn"
            key = f"{session}-{n}".encode()
            n += 1
            producer.send(topic, value_for(key), key=key, callback=acked(topic, key))
        if rng.random() < 0.3:
            producer.flush()
        if rng.random() < 0.2:
            commits += 1
            partition = rng.randrange(TOPICS["keep"])
            offset = int(session) * 1_000_000 + commits
            events("committing", "keep", partition, offset)     # may be stored even if killed now
            store.commit_offsets(GROUP, {("keep", partition): offset})
            events("commit", "keep", partition, offset)
        if rng.random() < 0.05:
            events("pid", store.init_producer_id()[0])
    producer.close()
    store.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
