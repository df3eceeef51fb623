"""What a waiting request costs the broker: no thread.

A client that sends a Fetch and never reads the answer leaves the rest of a sendfile
waiting for room in its socket; a JoinGroup waits for the other members of its group.
Both wait on the event loop (a writer callback, a future the group completes), so a
thousand of them cost a thousand small objects, never a thread each, and a well-behaved
group beside them forms at once. (Before: a pool of up to 1,024 threads held each of
them, and the JoinGroup of an unrelated group queued behind them.)
"""

from __future__ import annotations

import socket
import time
import uuid

import pytest

import pylog
from pylog.protocol import encode_request
from pylog.protocol import messages as m

from .group_client import RawMember
from .process import ServeProcess

# Long: handed out first on the xdist workers. The tests that time a calm group's forming
# or an idle connection's close run alone (tests/conftest.py); the last beside other tests.
pytestmark = pytest.mark.slow

HOSTILE = 1100


@pytest.fixture()
def serve(tmp_path):
    """`pylog serve` in a child (its threads counted in /proc), over a store holding
    "big" (4 batches of ~1 MB) and "calm" (one record)."""
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("big", 1)
        for _ in range(4):
            store.log("big", 0).append_records([bytes(range(256)) * 64] * 60)
        store.create_topic("calm", 1)
        store.log("calm", 0).append_records([b"hello"])
    with ServeProcess(str(tmp_path), "group.initial.rebalance.delay.ms=0",
                      "group.min.session.timeout.ms=500") as served:
        yield served
        assert served.alive()
    assert "Traceback" not in served.stderr, served.stderr[-3000:]


def connect(served, small_window: bool = False) -> socket.socket:
    host, port = served.bootstrap.rsplit(":", 1)
    s = socket.socket()
    if small_window:
        # A small window and segments (before connect), so that the broker's socket
        # buffer stays small: the kernel's memory for 1,100 of them stays ~100 MB.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1024)
    s.settimeout(10)
    s.connect((host, int(port)))
    return s


def well_behaved_group_forms(served, topic: str) -> float:
    """Seconds a raw member takes to join and sync a fresh group (it is alone: no delay)."""
    start = time.monotonic()
    with RawMember(served.bootstrap, f"calm-{uuid.uuid4().hex[:6]}", topics=[topic]) as member:
        assert member.join_and_sync() == 0
    return time.monotonic() - start


def librdkafka_group_forms(served, topic: str, timeout: float) -> float:
    """Seconds until a librdkafka consumer of a fresh group gets its first record."""
    import confluent_kafka as ck
    start = time.monotonic()
    consumer = ck.Consumer({"bootstrap.servers": served.bootstrap,
                            "group.id": f"real-{uuid.uuid4().hex[:6]}", "session.timeout.ms": 6000,
                            "heartbeat.interval.ms": 200, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        while time.monotonic() - start < timeout:
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                return time.monotonic() - start
        raise AssertionError(f"a librdkafka consumer group did not form in {timeout}s")
    finally:
        consumer.close()


def wait_until(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not in {timeout}s: {what}"
        time.sleep(0.05)


@pytest.mark.alone
def test_clients_that_never_read_their_fetch_hold_no_thread(serve):
    fetch = encode_request(1, 11, 1, "hostile", m.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[m.FetchRequestFetchTopic(topic="big", partitions=[
            m.FetchRequestFetchPartition(partition=0, fetch_offset=0, partition_max_bytes=8 << 20,
                                         current_leader_epoch=-1, log_start_offset=-1)])]))
    before = serve.status("Threads")
    hostile = []
    try:
        for _ in range(HOSTILE):
            s = connect(serve, small_window=True)
            s.sendall(fetch)                  # and never read the answer
            hostile.append(s)
        time.sleep(1)                         # every response is stuck on a full socket
        calm = well_behaved_group_forms(serve, "calm")
        threads = serve.status("Threads") - before
        assert threads < 10, f"{threads} more threads for {HOSTILE} stalled readers"
        # Loose (the machine's load is not the broker's): 3 s was seen beside other sessions'
        # builds with the test alone on its run. The thread counts are the exact checks.
        assert calm < 10, f"a well-behaved group took {calm:.2f}s to form beside {HOSTILE} stalled readers"
        assert librdkafka_group_forms(serve, "calm", timeout=20) < 20
        assert serve.status("Threads") - before < 10
    finally:
        for s in hostile:
            s.close()


@pytest.mark.alone
def test_parked_joins_hold_no_thread_and_delay_no_other_group(serve):
    join = m.JoinGroupRequest(group_id="crowded", session_timeout_ms=30_000, rebalance_timeout_ms=20_000,
                              member_id="", protocol_type="consumer",
                              protocols=[m.JoinGroupRequestJoinGroupRequestProtocol(name="range",
                                                                                    metadata=b"")])
    frame = encode_request(11, 3, 1, "crowd", join)          # v3: joins at once, no member id round
    before = serve.status("Threads")
    crowd = []
    try:
        for _ in range(HOSTILE):
            s = connect(serve)
            s.sendall(frame)                  # parked until the crowded group's rebalance ends
            crowd.append(s)
        with RawMember(serve.bootstrap, "crowded") as probe:
            wait_until(lambda: len(probe.describe().members) == HOSTILE, "the crowd joined")
        threads = serve.status("Threads") - before
        assert threads < 10, f"{threads} more threads for {HOSTILE} parked JoinGroups"
        calm = well_behaved_group_forms(serve, "calm")
        assert calm < 2, f"an unrelated group took {calm:.2f}s to form beside {HOSTILE} parked joins"
        assert librdkafka_group_forms(serve, "calm", timeout=20) < 20
    finally:
        for s in crowd:
            s.close()


@pytest.mark.alone
def test_a_reader_that_takes_nothing_is_closed_after_connections_max_idle_ms(tmp_path):
    """The rest of a sendfile waits for room on the loop, for connections.max.idle.ms at
    most; then the connection closes (and the stuck response with it)."""
    import threading
    with pylog.open(str(tmp_path)) as store, pylog.Broker(
            store, listen="127.0.0.1:0", connections_max_idle_ms=1000) as broker:
        store.create_topic("big", 1)
        for _ in range(4):
            store.log("big", 0).append_records([bytes(range(256)) * 64] * 60)
        before = threading.active_count()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(broker.address)
        s.sendall(encode_request(1, 11, 1, "stalled", m.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, topics=[m.FetchRequestFetchTopic(topic="big", partitions=[
                m.FetchRequestFetchPartition(partition=0, fetch_offset=0, partition_max_bytes=8 << 20,
                                             current_leader_epoch=-1, log_start_offset=-1)])])))
        sent = time.monotonic()
        wait_until(lambda: broker.stats["requests.Fetch"] == 1, "the fetch is served")
        assert threading.active_count() == before            # waiting for room: no thread
        wait_until(lambda: broker.connection_count == 0, "the stalled connection closes", timeout=10)
        assert 0.9 < time.monotonic() - sent < 5
        received = 0
        s.settimeout(5)
        while chunk := s.recv(1 << 16):
            received += len(chunk)
        assert 0 < received < 4 * 60 * 16384                  # a part, then the close
        s.close()


def test_a_parked_join_holds_few_objects_for_the_collector(tmp_path):
    """Every full pass of CPython's cyclic collector walks each object the process
    tracks, on whichever thread allocates, holding the GIL: on the event loop, a stall
    of every connection. A parked JoinGroup holds its objects until the rebalance ends,
    so their count is its share of that stall (counted here, not timed; the stall is
    bench_hostile's joins-parked, bench/RESULTS.md). Closures were most of them before:
    a function, a tuple and a cell per captured variable, in the join's path and in the
    group's session deadline."""
    import gc
    parked = 200
    join = m.JoinGroupRequest(group_id="crowded", session_timeout_ms=30_000, rebalance_timeout_ms=60_000,
                              member_id="", protocol_type="consumer",
                              protocols=[m.JoinGroupRequestJoinGroupRequestProtocol(name="range",
                                                                                    metadata=b"")])
    frame = encode_request(11, 3, 1, "crowd", join)          # v3: joins at once, no member id round
    # The initial rebalance's delay parks every join until it passes.
    with pylog.open(str(tmp_path)) as store, pylog.Broker(
            store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=60_000) as broker:
        crowd = [socket.create_connection(broker.address) for _ in range(parked)]
        try:
            wait_until(lambda: broker.connection_count == parked, "the crowd is connected")
            gc.collect()
            idle = len(gc.get_objects())
            for s in crowd:
                s.sendall(frame)

            def members() -> int:
                group = store.coordinator.classic_group("crowded", create=False)
                return 0 if group is None else len(group.describe()["members"])
            wait_until(lambda: members() == parked, "the crowd is parked", timeout=60)
            group = store.coordinator.classic_group("crowded", create=False)
            gc.collect()
            per_join = (len(gc.get_objects()) - idle) / parked
            assert group.describe()["state"] == "PreparingRebalance"
            assert per_join <= 24, f"a parked JoinGroup holds {per_join:.1f} objects the collector walks"
        finally:
            for s in crowd:
                s.close()
