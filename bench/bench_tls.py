"""TLS's cost at the broker: fetch throughput over TLS beside PLAINTEXT and raw
sendfile(2), with kernel TLS on and off where the kernel has it, and produce throughput
over SASL_SSL (SCRAM-SHA-512 inside TLS) beside PLAINTEXT. `pylog serve` runs in its own
process with PLAINTEXT, SSL and SASL_SSL listeners; certificates are made for the run.

    .venv/bin/python bench/bench_tls.py              # ~2 min
    .venv/bin/python bench/bench_tls.py --quick      # smaller counts
    .venv/bin/python bench/bench_tls.py --markdown   # tables for bench/RESULTS.md

Fetch: one client connection reads a 1 KiB-record partition (--fetch-mb of it) from
offset 0 in 8 MiB fetches into one buffer (bench_broker.fetch_loop's loop, here over an
ssl.SSLSocket for the TLS rows: the client decrypts with OpenSSL in C). Rows: PLAINTEXT
(sendfile), SSL with the broker's default engine (kTLS where available: sendfile of the
segment, encrypted by the kernel), SSL with pylog.ssl.ktls.enable=false (a second broker
over the same dirs: copies through OpenSSL), and raw sendfile / read+send of the segment
file by a minimal server (bench_broker.raw_file_mb_s). The broker's CPU seconds per GB
out come from its /proc/PID/stat. Where the kernel has no tls module (this VM's), the
"kTLS" row is the user-space one and says so: tools/ktls-vm runs it on a kernel with one.

Produce: confluent-kafka (librdkafka) sends --produce-records 1 KiB records, acks=1, to
one partition over PLAINTEXT and over SASL_SSL with SCRAM-SHA-512; records/s and the
broker's CPU per GB in. The issue's target is >= 0.8x PLAINTEXT. With --kafka, Apache
Kafka's broker (KRaft, one node, the jars of tools/kafka/fetch) takes the same producer
over the same two listeners afterwards, its JVM's CPU per GB in beside pylog's.

    .venv/bin/python bench/bench_tls.py --only produce --kafka   # produce rows, and Kafka's
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import socket
import ssl
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from bench_broker import cpu_seconds, raw_file_mb_s  # noqa: E402
from report import cpu_report, cpu_snapshot, render, verdict  # noqa: E402

import pylog  # noqa: E402
from pylog.common import scram  # noqa: E402
from pylog.protocol import encode_request  # noqa: E402
from pylog.protocol import messages as m  # noqa: E402
from pylog.protocol.codec import Reader  # noqa: E402

USER, PASSWORD = "bench", "bench-secret"


def serve(data: str, certs, ktls: bool):
    from broker.process import ServeProcess
    return ServeProcess(data, "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL",
                        "ssl.keystore.type=PEM", f"ssl.keystore.location={certs.server}",
                        "sasl.enabled.mechanisms=SCRAM-SHA-512", "log.segment.bytes=1073741824",
                        f"pylog.ssl.ktls.enable={'true' if ktls else 'false'}",
                        listen="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0")


def fetch_mb_s(address: str, context: ssl.SSLContext | None, topic: str, end_offset: int,
               pid: int, max_bytes: int = 8 << 20) -> tuple[float, float]:
    """(MB/s, broker CPU s per GB out) reading `topic`'s partition 0 to `end_offset`."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if context is not None:
        sock = context.wrap_socket(sock, server_hostname=host)
    buf = bytearray(max_bytes + (1 << 20))
    view = memoryview(buf)
    offset, total, cid = 0, 0, 0
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    while offset < end_offset:
        cid += 1
        req = m.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes,
                             session_epoch=-1, topics=[m.FetchRequestFetchTopic(topic=topic, partitions=[
                                 m.FetchRequestFetchPartition(partition=0, fetch_offset=offset,
                                                              partition_max_bytes=max_bytes)])])
        sock.sendall(encode_request(1, 11, cid, "bench", req))
        got = 0
        while got < 4:
            got += sock.recv_into(view[got:4])
        size = struct.unpack_from(">i", buf)[0]
        got = 0
        while got < size:
            got += sock.recv_into(view[got:size], size - got)
        r = Reader(view[:size])
        r.int32()
        records = m.FetchResponse.read(r, 11).responses[0].partitions[0].records
        total += len(records)
        pos, last = 0, offset - 1          # the next offset: the last whole batch's end
        while pos + 61 <= len(records):
            length = struct.unpack_from(">i", records, pos + 8)[0]
            if pos + 12 + length > len(records):
                break
            last = struct.unpack_from(">q", records, pos)[0] + struct.unpack_from(">i", records, pos + 23)[0]
            pos += 12 + length
        offset = last + 1
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    sock.close()
    return total / elapsed / 1e6, cpu / (total / 1e9)


def produce_rate(bootstrap: str, topic: str, count: int, size: int, pid: int,
                 **security) -> tuple[float, float, float]:
    """(records/s, broker CPU s per GB in, the client's CPU s per GB out) of
    confluent-kafka, acks=1, one partition. The client is this process (the Python
    loop and librdkafka's threads: its encryption over TLS)."""
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                     "batch.size": 1 << 20, "queue.buffering.max.messages": 2_000_000, **security})
    p.list_topics(timeout=30)                   # connected (and authenticated) first
    value = os.urandom(size)
    produce = p.produce
    cpu0, t0, mine0 = cpu_seconds(pid), time.perf_counter(), time.process_time()
    for _ in range(count):
        try:
            produce(topic, value, partition=0)
        except BufferError:
            p.poll(0.01)
            produce(topic, value, partition=0)
    assert p.flush(120) == 0
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    gb = count * size / 1e9
    return count / elapsed, cpu / gb, (time.process_time() - mine0) / gb


def kafka_broker(workdir: Path, certs):
    """Apache Kafka's broker with PLAINTEXT and SASL_SSL (SCRAM-SHA-512, PEM stores)
    listeners and the bench's SCRAM user; (broker, {listener name: address})."""
    from broker.tls_certs import KEY_PASSWORD
    from kafka_reference.support import KafkaBroker, free_port, run_tool
    workdir.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_SSL", "CONTROLLER")}
    while len(set(ports.values())) < len(ports):
        ports = {name: free_port() for name in ports}
    listeners = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    broker = KafkaBroker(workdir, **{
        "listeners": ",".join(f"{name}://{address}" for name, address in listeners.items()),
        "advertised.listeners": f"PLAINTEXT://{listeners['PLAINTEXT']},SASL_SSL://{listeners['SASL_SSL']}",
        "controller.quorum.voters": f"1@{listeners['CONTROLLER']}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server_encrypted),
        "ssl.key.password": KEY_PASSWORD, "log.segment.bytes": "1073741824"})
    broker.bootstrap = listeners["PLAINTEXT"]
    broker.start()
    run_tool("kafka-configs", "--bootstrap-server", listeners["PLAINTEXT"], "--alter",
             "--add-config", f"SCRAM-SHA-512=[password={PASSWORD}]", "--entity-type", "users",
             "--entity-name", USER)
    for topic in ("p-plain", "p-sasl-ssl"):
        run_tool("kafka-topics", "--bootstrap-server", listeners["PLAINTEXT"], "--create",
                 "--topic", topic, "--partitions", "1", "--replication-factor", "1")
    return broker, listeners


def produce_rows(listeners: dict, certs, count: int, repeat: int, pid: int) -> list[list[str]]:
    """One row per listener (PLAINTEXT, then SASL_SSL): name, k records/s, MB/s, broker
    CPU s/GB in, x PLAINTEXT."""
    rows = []
    for name, security in (("PLAINTEXT", {}), ("SASL_SSL, SCRAM-SHA-512", {
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(certs.ca),
            "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD})):
        listener = "PLAINTEXT" if not security else "SASL_SSL"
        topic = "p-plain" if not security else "p-sasl-ssl"
        run = median([produce_rate(listeners[listener], topic, count, 1024, pid, **security)
                      for _ in range(repeat)])
        rows.append([name, f"{run[0] / 1e3:,.0f}", f"{run[0] * 1024 / 1e6:,.0f}", f"{run[1]:.2f}",
                     f"{run[1] * run[0] * 1024 / 1e9:.2f}", f"{run[2]:.2f}", run[0]])
    base = rows[0][-1]
    for row in rows:
        row[-1] = f"{row[-1] / base:.2f}"
    return rows


def median(runs: list[tuple]) -> tuple:
    return sorted(runs)[len(runs) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row (median shown)")
    ap.add_argument("--fetch-mb", type=int, default=512, help="MB of 1 KiB records to fetch")
    ap.add_argument("--produce-records", type=int, default=400_000)
    ap.add_argument("--only", choices=("fetch", "produce"), help="one of the two benchmarks")
    ap.add_argument("--kafka", action="store_true",
                    help="also Apache Kafka's broker taking the same produce (needs Java)")
    ap.add_argument("--dir", default=None, help="parent of the temporary dirs")
    args = ap.parse_args(argv)
    if args.quick:
        args.fetch_mb, args.produce_records, args.repeat = 128, 100_000, 1
    fetching, producing = args.only in (None, "fetch"), args.only in (None, "produce")
    from broker.tls_certs import make_certs
    root = tempfile.mkdtemp(prefix="pylog-bench-tls-", dir=args.dir)
    atexit.register(shutil.rmtree, root, True)
    certs = make_certs(Path(root) / "certs")
    data = str(Path(root) / "data")
    records = args.fetch_mb * 1024 if fetching else 0
    with pylog.open(data) as store:
        mech = scram.MECHANISMS["SCRAM-SHA-512"]
        store.alter_user_scram_credentials(upsertions=[(USER, mech.name, scram.new_credential(mech, PASSWORD))])
        store.create_topic("fetched", 1)
        log = store.log("fetched", 0)
        value = os.urandom(1024)
        for _ in range(0, records, 1000):
            log.append_records([value] * 1000)
        for name in ("p-plain", "p-sasl-ssl"):
            store.create_topic(name, 1)
        end = log.log_end_offset
    context = ssl.create_default_context(cafile=str(certs.ca))
    engine = pylog.tls_engine()
    ktls = engine.startswith("kTLS")
    out = []
    before = cpu_snapshot()
    fetch_rows, rows, kafka_rows = [], [], []
    load = [os.getloadavg()[0]]
    with serve(data, certs, ktls=True) as broker:
        if fetching:
            plain = median([fetch_mb_s(broker.listeners["PLAINTEXT"], None, "fetched", end, broker.pid)
                            for _ in range(args.repeat)])
            tls = median([fetch_mb_s(broker.listeners["SSL"], context, "fetched", end, broker.pid)
                          for _ in range(args.repeat)])
            fetch_rows.append(["PLAINTEXT (sendfile)", f"{plain[0]:,.0f}", f"{plain[1]:.2f}", "1.00"])
            fetch_rows.append([f"SSL, {'kTLS (sendfile)' if ktls else 'no kTLS here: user space'}",
                               f"{tls[0]:,.0f}", f"{tls[1]:.2f}", f"{tls[0] / plain[0]:.2f}"])
        if producing:
            rows = produce_rows(broker.listeners, certs, args.produce_records, args.repeat, broker.pid)
    load.append(os.getloadavg()[0])
    kafka_failed = None
    if producing and args.kafka:
        try:
            kafka, listeners = kafka_broker(Path(root) / "kafka", certs)
            try:
                kafka_rows = produce_rows(listeners, certs, args.produce_records, args.repeat,
                                          kafka.proc.pid)
            finally:
                kafka.stop()
        except Exception as exc:        # noqa: BLE001 (any failure: pylog's rows still print)
            kafka_failed = f"Kafka's broker did not run: {exc!r}"[:300]
        load.append(os.getloadavg()[0])
    if fetching:
        if ktls:
            with serve(data, certs, ktls=False) as broker:
                off = median([fetch_mb_s(broker.listeners["SSL"], context, "fetched", end, broker.pid)
                              for _ in range(args.repeat)])
            fetch_rows.append(["SSL, kTLS off (user space)", f"{off[0]:,.0f}", f"{off[1]:.2f}",
                               f"{off[0] / plain[0]:.2f}"])
        segment = str(sorted(Path(data).glob("fetched-0/*.log"))[0])
        raw = raw_file_mb_s(segment, "sendfile")
        naive = raw_file_mb_s(segment, "read")
        fetch_rows.append(["raw sendfile(2) of the segment", f"{raw:,.0f}", "", f"{raw / plain[0]:.2f}"])
        fetch_rows.append(["raw read()+send()", f"{naive:,.0f}", "", f"{naive / plain[0]:.2f}"])
    others, steal = cpu_report(before, cpu_snapshot())
    machine = [f"other processes used {others:.0f}% of the CPUs meanwhile (steal {steal:.0f}%); "
               f"load average (1 min) {', '.join(f'{x:.1f}' for x in load)} (start, after pylog"
               f"{', after Kafka' if kafka_rows else ''})"]
    if fetching:
        out.append(render(f"Fetch over TLS: {args.fetch_mb} MB of 1 KiB records, one connection, "
                          f"8 MiB fetches (median of {args.repeat})",
                          ["path", "MB/s", "broker CPU s/GB out", "x PLAINTEXT"], fetch_rows, args.markdown,
                          [f"TLS engine: {engine}",
                           "TLS 1.3 AES-256-GCM (OpenSSL's default); the client decrypts with OpenSSL",
                           f"target with kTLS: >= 0.8x PLAINTEXT: "
                           f"{verdict(tls[0] / plain[0] >= 0.8) if ktls else 'not measurable here (no kTLS)'}",
                           *machine], text_columns=1))
    if producing:
        table = [["pylog", *row] for row in rows] + [["Kafka", *row] for row in kafka_rows]
        notes = [f"target >= 0.8x PLAINTEXT: {verdict(float(rows[1][-1]) >= 0.8)}",
                 "broker CPUs busy: its CPU seconds per second of the run (1.00: one core); "
                 "the client's CPU is this process's (librdkafka's threads and the produce loop)",
                 "pylog: a TLS read decrypts into the connection's receive buffer, and a "
                 "request's frame is taken from it: no copy per record"]
        if kafka_failed:
            notes.append(kafka_failed)
        if kafka_rows:
            notes.append(f"pylog's SASL_SSL records/s x Kafka's: "
                         f"{float(rows[1][1].replace(',', '')) / float(kafka_rows[1][1].replace(',', '')):.2f}; "
                         f"broker CPU per GB in, Kafka's / pylog's: "
                         f"{float(kafka_rows[1][3]) / float(rows[1][3]):.2f}")
        out.append(render(f"Produce over SASL_SSL: confluent-kafka, {args.produce_records:,} records of "
                          f"1 KiB, acks=1, one partition (median of {args.repeat})",
                          ["broker", "listener", "k records/s", "MB/s", "broker CPU s/GB in",
                           "broker CPUs busy", "client CPU s/GB out", "x PLAINTEXT"],
                          table, args.markdown, notes + ([] if fetching else machine), text_columns=2))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
