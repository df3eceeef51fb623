"""Fetch sessions (KIP-227) at 1,000 partitions: request and response bytes and broker
time per idle fetch, full (a sessionless fetch naming every partition, what pylog's
clients sent before sessions) against incremental (a session, nothing new).

    PYTHONPATH=src python bench/bench_fetch_sessions.py [--partitions 1000] [--fetches 200]

One in-process broker on 127.0.0.1, one topic, one record per partition already read
(the consumer is at the log end: every fetch is idle, max_wait_ms 0). Bytes are the
frames on the wire (size prefix included); time is the client's round trip, median.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import pylog
from pylog.broker.admin import topic_id_bytes
from pylog.protocol import encode_request
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient


def request(tid, partitions, session_id, epoch):
    return m.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[m.FetchRequestFetchTopic(topic_id=tid, partitions=[
            m.FetchRequestFetchPartition(partition=p, fetch_offset=1, partition_max_bytes=1 << 20,
                                         current_leader_epoch=0, log_start_offset=-1)
            for p in partitions])] if partitions else [])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--fetches", type=int, default=200)
    args = ap.parse_args()
    n, version = args.partitions, 18
    with tempfile.TemporaryDirectory() as d, pylog.open(d) as store, \
            pylog.Broker(store, listen="127.0.0.1:0") as broker:
        store.create_topic("s", n)
        for p in range(n):
            store.log("s", p).append_records([b"x"])
        tid = topic_id_bytes(store.describe_topic("s").topic_id)
        with ProtocolClient(broker.bootstrap_servers) as c:
            rows = {}
            for mode in ("full", "incremental"):
                times, resp_bytes = [], 0
                if mode == "incremental":
                    opened = c.request(1, request(tid, range(n), 0, 0), version)
                    sid, epoch = opened.session_id, 1
                for _ in range(args.fetches):
                    body = request(tid, range(n), 0, -1) if mode == "full" else \
                        request(tid, (), sid, epoch)
                    frame = encode_request(1, version, 1, "bench", body)
                    started = time.perf_counter()
                    corr, _ = c.send(1, body, version)
                    resp_frame = c.receive_frame()
                    times.append(time.perf_counter() - started)
                    resp_bytes = len(resp_frame) + 4
                    if mode == "incremental":
                        epoch += 1
                rows[mode] = (len(frame), resp_bytes, statistics.median(times) * 1e3)
            print(f"{n} partitions, Fetch v{version}, idle consumer, {args.fetches} fetches each")
            print(f"{'':12} {'request B':>10} {'response B':>11} {'round trip ms (median)':>23}")
            for mode, (req_b, resp_b, ms) in rows.items():
                print(f"{mode:12} {req_b:>10} {resp_b:>11} {ms:>23.3f}")


if __name__ == "__main__":
    main()
