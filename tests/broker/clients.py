"""The four real Kafka clients, driven the same way: produce a list of records, consume
a partition from an offset. Each returns or takes ``Rec`` tuples so tests compare what
every client sent and saw, byte for byte.

kcat (librdkafka 2.0, Debian), confluent-kafka (librdkafka 2.x), kafka-python 3 (pure
Python, flexible versions, idempotent by default) and aiokafka (asyncio, non-flexible
versions only) negotiate different API versions with the broker: together they cover
most of the version ranges it advertises.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import threading
import time
import uuid
from typing import NamedTuple

CLIENTS = ("kcat", "confluent", "kafka-python", "aiokafka")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class Rec(NamedTuple):
    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    partition: int = 0
    offset: int = -1
    timestamp: int = -1

    def content(self):
        return (self.key, self.value, tuple(self.headers))


# ================================================================== produce

def produce(client: str, bootstrap: str, topic: str, records: list[Rec], codec: str = "none",
            acks: str = "1", partition: int = 0, **extra) -> None:
    """Sends `records` to one partition and waits for every acknowledgement."""
    PRODUCERS[client](bootstrap, topic, records, codec, acks, partition, extra)


def _kcat_produce(bootstrap, topic, records, codec, acks, partition, extra):
    from .conftest import need_kcat
    # One kcat run per distinct header set (kcat's -H applies to every message).
    groups: dict[tuple, list[Rec]] = {}
    for r in records:
        groups.setdefault(tuple(r.headers), []).append(r)
    for headers, recs in groups.items():
        cmd = [need_kcat(), "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K", "\t",
               "-D", "\n", "-z", codec, "-X", f"acks={'all' if acks == 'all' else acks}"]
        for k, v in headers:
            cmd += ["-H", f"{k}={v.decode()}"]
        for k, v in extra.items():
            cmd += ["-X", f"{k}={v}"]
        data = b"".join((r.key or b"") + b"\t" + r.value + b"\n" for r in recs)
        subprocess.run(cmd, input=data, check=True, timeout=60, capture_output=True)


def _confluent_produce(bootstrap, topic, records, codec, acks, partition, extra):
    import confluent_kafka as ck
    errors = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "acks": acks,
                     "linger.ms": 5, **extra})
    for r in records:
        p.produce(topic, value=r.value, key=r.key, headers=list(r.headers) or None, partition=partition,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    left = p.flush(30)
    assert left == 0 and not errors, (left, errors)


def _kafka_python_produce(bootstrap, topic, records, codec, acks, partition, extra):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                      acks=1 if acks == "1" else "all", linger_ms=5, **extra)
    futures = [p.send(topic, value=r.value, key=r.key, headers=list(r.headers), partition=partition)
               for r in records]
    for f in futures:
        f.get(30)
    p.close()


def _aiokafka_produce(bootstrap, topic, records, codec, acks, partition, extra):
    import aiokafka

    async def run():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1 if acks == "1" else "all",
                                      compression_type=None if codec == "none" else codec,
                                      linger_ms=5, **extra)
        await p.start()
        try:
            futures = [await p.send(topic, value=r.value, key=r.key, headers=list(r.headers),
                                    partition=partition) for r in records]
            for f in futures:
                await f
        finally:
            await p.stop()
    asyncio.run(run())


PRODUCERS = {"kcat": _kcat_produce, "confluent": _confluent_produce,
             "kafka-python": _kafka_python_produce, "aiokafka": _aiokafka_produce}


# ================================================================== consume

def consume(client: str, bootstrap: str, topic: str, count: int, partition: int = 0,
            offset: int | str = "beginning", timeout: float = 30, **extra) -> list[Rec]:
    """`count` records of one partition from `offset` (an int, "beginning", or
    ("timestamp", ms)), by assignment (no group). `extra`: the client's own settings
    (as for produce)."""
    return CONSUMERS[client](bootstrap, topic, count, partition, offset, timeout, extra)[:count]


def _kcat_consume(bootstrap, topic, count, partition, offset, timeout, extra):
    from .conftest import need_kcat
    if isinstance(offset, tuple):
        where = f"s@{offset[1]}"
    else:
        where = str(offset)
    settings = [arg for k, v in extra.items() for arg in ("-X", f"{k}={v}")]
    out = subprocess.run([need_kcat(), "-C", "-b", bootstrap, "-t", topic, "-p", str(partition),
                          "-o", where, "-c", str(count), "-e", "-J", "-q", *settings],
                         check=True, timeout=timeout, capture_output=True).stdout
    recs = []
    for line in out.decode().splitlines():
        j = json.loads(line)
        headers = tuple((j["headers"][i], j["headers"][i + 1].encode())
                        for i in range(0, len(j.get("headers") or []), 2))
        recs.append(Rec(None if j["key"] is None else j["key"].encode(),
                        None if j["payload"] is None else j["payload"].encode(), headers,
                        j["partition"], j["offset"], j["ts"]))
    return recs


def _confluent_consume(bootstrap, topic, count, partition, offset, timeout, extra):
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, **extra})
    try:
        if isinstance(offset, tuple):
            found = c.offsets_for_times([ck.TopicPartition(topic, partition, offset[1])], 10)
            start = found[0].offset
        else:
            start = ck.OFFSET_BEGINNING if offset == "beginning" else offset
        c.assign([ck.TopicPartition(topic, partition, start)])
        recs: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(recs) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert not msg.error(), msg.error()
            recs.append(Rec(msg.key(), msg.value(), tuple(msg.headers() or ()), msg.partition(),
                            msg.offset(), msg.timestamp()[1]))
        return recs
    finally:
        c.close()


def _kafka_python_consume(bootstrap, topic, count, partition, offset, timeout, extra):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **extra)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        if isinstance(offset, tuple):
            c.seek(tp, c.offsets_for_times({tp: offset[1]})[tp].offset)
        elif offset == "beginning":
            c.seek_to_beginning(tp)
        else:
            c.seek(tp, offset)
        recs: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(recs) < count and time.monotonic() < deadline:
            for batch in c.poll(500).values():
                recs += [Rec(m.key, m.value, tuple(m.headers), m.partition, m.offset, m.timestamp)
                         for m in batch]
        return recs
    finally:
        c.close()


def _aiokafka_consume(bootstrap, topic, count, partition, offset, timeout, extra):
    import aiokafka
    from aiokafka.structs import TopicPartition

    async def run():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **extra)
        await c.start()
        try:
            tp = TopicPartition(topic, partition)
            c.assign([tp])
            if isinstance(offset, tuple):
                found = await c.offsets_for_times({tp: offset[1]})
                c.seek(tp, found[tp].offset)
            elif offset == "beginning":
                await c.seek_to_beginning(tp)
            else:
                c.seek(tp, offset)
            recs: list[Rec] = []
            deadline = time.monotonic() + timeout
            while len(recs) < count and time.monotonic() < deadline:
                got = await c.getmany(tp, timeout_ms=500)
                recs += [Rec(m.key, m.value, tuple(m.headers), m.partition, m.offset, m.timestamp)
                         for m in got.get(tp, [])]
            return recs
        finally:
            await c.stop()
    return asyncio.run(run())


CONSUMERS = {"kcat": _kcat_consume, "confluent": _confluent_consume,
             "kafka-python": _kafka_python_consume, "aiokafka": _aiokafka_consume}


def attempt_produce(client: str, bootstrap: str, topic: str, **extra) -> str:
    """`client` tries to produce one record to partition 0 of `topic` (a few seconds'
    timeouts): what it reported, empty if it produced. For connections that must fail."""
    if client == "kcat":
        run = subprocess.run([_kcat(), "-P", "-b", bootstrap, "-t", topic, "-p", "0",
                              "-m", "6", "-X", "message.timeout.ms=5000",
                              *[a for k, v in extra.items() for a in ("-X", f"{k}={v}")]],
                             input=b"v\n", capture_output=True, timeout=60)
        return run.stderr.decode() if run.returncode or b"SSL" in run.stderr else ""
    if client == "confluent":
        import confluent_kafka as ck
        errors: list[str] = []
        producer = ck.Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000,
                                "error_cb": lambda e: errors.append(str(e)), **extra})
        producer.produce(topic, b"v", partition=0,
                         on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
        producer.flush(15)
        return "; ".join(errors)
    if client == "kafka-python":
        from kafka import KafkaProducer
        # Its log records' tracebacks would keep the failed handshakes' sockets alive past
        # the caller's collection (a captured record lives to the test's end): none made.
        kafka_log = logging.getLogger("kafka")
        level = kafka_log.level
        kafka_log.setLevel(logging.CRITICAL + 1)
        try:
            producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=(2, 6),
                                     max_block_ms=5000, request_timeout_ms=5000, **extra)
            try:
                producer.send(topic, b"v", partition=0).get(15)
                return ""
            except Exception as exc:          # noqa: BLE001 - what it reports is the point
                return repr(exc)
            finally:
                producer.close(0)
                # Its network thread outlives close(0), holding the last socket: wait for it.
                for thread in threading.enumerate():
                    if thread.name.startswith("kafka-python-producer"):
                        thread.join(15)
        finally:
            kafka_log.setLevel(level)

    async def run() -> str:
        import aiokafka
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000,
                                             **extra)
        try:
            await producer.start()
            await producer.send_and_wait(topic, b"v", partition=0)
            return ""
        except Exception as exc:          # noqa: BLE001
            return repr(exc)
        finally:
            await producer.stop()
    return asyncio.run(run())


def _kcat() -> str:
    from .conftest import need_kcat
    return need_kcat()


def stored(store, topic: str, partition: int = 0) -> list[Rec]:
    """What the store holds, read straight from its log (no broker)."""
    log = store.log(topic, partition)
    out = []
    for r in log.read(log.log_start_offset, 1 << 30).records():
        out.append(Rec(r.key, r.value, tuple((k, bytes(v)) for k, v in r.headers), partition,
                       r.offset, r.timestamp))
    return out
