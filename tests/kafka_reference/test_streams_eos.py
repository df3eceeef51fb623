"""Kafka Streams with ``processing.guarantee=exactly_once_v2`` against ``pylog serve``
(issue 44): a small Streams application (java/StreamsEos.java: words upper-cased into
one topic, and counted through a repartition topic into another) is killed with SIGKILL
mid-run and started again while its input is still being produced. Read read_committed,
the upper-cased topic holds each input record exactly once, and each word's last count
is its number of occurrences: no output of the killed instance's open transactions
shows, none is lost, no count is taken twice.

Kafka Streams and RocksDB's JNI jar come from Maven Central (tools/kafka/fetch-streams).
"""

from __future__ import annotations

import collections
import functools
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from broker.process import ServeProcess

from . import support
from .support import ROOT, unavailable

ck = pytest.importorskip("confluent_kafka")
cka = pytest.importorskip("confluent_kafka.admin")

SOURCE = Path(__file__).resolve().parent / "java" / "StreamsEos.java"
FETCH = ROOT / "tools" / "kafka" / "fetch-streams"
WORDS = [f"word{i}" for i in range(17)]
RECORDS = 3000


def streams_libs() -> Path:
    if shutil.which("javac") is None:
        unavailable("no JDK (javac): the Kafka Streams application is a Java source file")
    try:
        out = subprocess.run([str(FETCH)], check=True, capture_output=True, text=True, timeout=900)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        unavailable(f"could not fetch Kafka Streams with tools/kafka/fetch-streams: {exc}")
    return Path(out.stdout.strip())


@functools.lru_cache(maxsize=None)
def compiled() -> str:
    """StreamsEos.java compiled once per machine against Kafka Streams' jars (support.compiled)."""
    return support.compiled(SOURCE, streams_libs())


def start_streams(bootstrap: str, state_dir: str) -> subprocess.Popen:
    libs = streams_libs()
    return subprocess.Popen(
        ["java", "-Xmx384m", "-XX:TieredStopAtLevel=1", "-cp", f"{compiled()}:{libs}/*",
         "StreamsEos", bootstrap, "eos-app", state_dir, "words", "upper", "counts"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_committed(bootstrap: str, topic: str, partitions: int,
                   isolation: str = "read_committed") -> list[tuple[bytes, bytes]]:
    """Every (key, value) of `topic` a consumer of `isolation` sees now (read until idle)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "isolation.level": isolation})
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        out = []
        while True:
            got = [m for m in c.consume(1000, 1.5) if not m.error()]
            if not got:
                return out
            out += [(m.key(), m.value()) for m in got]
    finally:
        c.close()


def last_counts(records) -> dict[str, int]:
    counts = {}
    for key, value in records:
        counts[key.decode()] = int.from_bytes(value, "big", signed=True)
    return counts


def test_exactly_once_v2_survives_a_killed_streams_instance(tmp_path):
    streams_libs()
    words = [WORDS[(i * 7) % len(WORDS)] for i in range(RECORDS)]
    expected = collections.Counter(words)
    with ServeProcess(str(tmp_path / "data"), "group.initial.rebalance.delay.ms=0",
                      "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000") as served:
        admin = cka.AdminClient({"bootstrap.servers": served.bootstrap})
        for f in admin.create_topics([cka.NewTopic(t, 2, 1)
                                      for t in ("words", "upper", "counts")]).values():
            f.result(30)
        producer = ck.Producer({"bootstrap.servers": served.bootstrap, "enable.idempotence": True,
                                "linger.ms": 5})
        first_third, rest = words[:RECORDS // 3], words[RECORDS // 3:]
        for word in first_third:
            producer.produce("words", word.encode())
        producer.flush(30)
        flowing, sent = threading.Event(), threading.Event()

        def produce() -> None:          # the rest arrives over seconds, across the kill
            for i, word in enumerate(rest):
                producer.produce("words", word.encode())
                if i % 100 == 99:
                    producer.flush(30)
                    flowing.set()
                    time.sleep(1.0)
            producer.flush(30)
            sent.set()
        feeder = threading.Thread(target=produce, daemon=True)
        state_dir = str(tmp_path / "state")
        first = start_streams(served.bootstrap, state_dir)
        second = None
        try:
            assert first.stdout.readline().strip() == "RUNNING", first.stderr.read()[-3000:]
            deadline = time.monotonic() + 180
            while not read_committed(served.bootstrap, "upper", 2):
                assert first.poll() is None, first.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "the first instance committed nothing"
            feeder.start()
            assert flowing.wait(60)
            # Kill once its open transaction holds output (commit.interval.ms is 3 s).
            while True:
                committed = len(read_committed(served.bootstrap, "upper", 2))
                if len(read_committed(served.bootstrap, "upper", 2, "read_uncommitted")) > committed:
                    break
                assert first.poll() is None, first.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "no open transaction with output seen"
            first.kill()                # SIGKILL mid-run: its open transaction is left behind
            first.wait()
            second = start_streams(served.bootstrap, state_dir)
            assert second.stdout.readline().strip() == "RUNNING", second.stderr.read()[-3000:]
            assert sent.wait(180)
            deadline = time.monotonic() + 240
            while True:
                upper = read_committed(served.bootstrap, "upper", 2)
                counts = last_counts(read_committed(served.bootstrap, "counts", 2))
                if len(upper) >= RECORDS and counts == dict(expected):
                    break
                assert second.poll() is None, second.stderr.read()[-3000:]
                assert time.monotonic() < deadline, (len(upper), counts, dict(expected))
            # Each input record once, upper-cased: no duplicate from the killed instance.
            assert collections.Counter(v.decode() for _, v in upper) == \
                collections.Counter(w.upper() for w in words)
        finally:
            for proc in (first, second):
                if proc is not None:
                    if proc.poll() is None:
                        proc.kill()
                    proc.wait()
                    proc.stdout.close()
                    proc.stderr.close()
