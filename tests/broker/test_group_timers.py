"""Deadlines fire when they are due, not at the next tick of a polling loop: a member's
session, and an idle connection's ``connections.max.idle.ms``.

Kafka's timers fire on time, so a client that waits ``session.timeout.ms`` after a
member's last heartbeat finds the group empty (and may delete it). A poll of the groups
every 100 ms, or a sweep of the connections once a second, made them up to that late.
How late a timer fires on this machine is a benchmark (bench/bench_timer.py); these tests
check the order of events (never before the deadline) and bound lateness loosely
(``LATE``), so that a loaded machine does not fail them.
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

NONE, NON_EMPTY_GROUP = 0, 68
LATE = 0.5              # a loose bound: a sweep once a second is late by up to 1 s


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("timers")))
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0,
                          group_min_session_timeout_ms=500, connections_max_idle_ms=1000).start()
    store.create_topic("t", 2)
    try:
        yield broker
    finally:
        broker.shutdown()
        store.close()


def test_a_group_can_be_deleted_exactly_when_its_last_session_expires(broker):
    for round in range(3):
        group = f"expiring-{uuid.uuid4().hex[:6]}"
        with RawMember(broker.bootstrap_servers, group, session_ms=600) as member, \
                RawMember(broker.bootstrap_servers, group) as admin:
            assert member.join_and_sync() == NONE
            sent = time.monotonic()                      # the broker sees it after this
            assert member.heartbeat() == NONE
            last_heartbeat = time.monotonic()            # ... and before this
            member.close()                               # gone, without a LeaveGroup
            assert admin.delete_group() == NON_EMPTY_GROUP
            while (code := admin.delete_group()) == NON_EMPTY_GROUP:
                assert time.monotonic() < last_heartbeat + 0.6 + LATE, \
                    f"round {round}: the session outlived its timeout"
                time.sleep(0.01)
            deleted = time.monotonic()
            assert code == NONE
            assert deleted >= sent + 0.6, f"round {round}: the session ended before its timeout"


def test_librdkafka_static_member_group_deleted_at_session_expiry(broker):
    """A static member sends no LeaveGroup on close: its session ends the membership,
    and an admin deleting the group right after session.timeout.ms succeeds."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient
    group = f"static-exp-{uuid.uuid4().hex[:6]}"
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                            "group.instance.id": "only", "session.timeout.ms": 1000,
                            "heartbeat.interval.ms": 100, "enable.auto.commit": False})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    consumer.subscribe(["t"])
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline
        consumer.poll(0.05)
    consumer.close()
    closed = time.monotonic()
    with pytest.raises(ck.KafkaException) as busy:
        admin.delete_consumer_groups([group])[group].result(10)
    assert busy.value.args[0].code() == ck.KafkaError.NON_EMPTY_GROUP
    while True:                 # NON_EMPTY_GROUP until the session ends, then deleted
        try:
            admin.delete_consumer_groups([group])[group].result(10)
            break
        except ck.KafkaException as e:
            assert e.args[0].code() == ck.KafkaError.NON_EMPTY_GROUP
            assert time.monotonic() < closed + 1.0 + LATE, "the session outlived its timeout"
            time.sleep(0.02)


def test_idle_connections_close_at_their_deadline(broker):
    """connections.max.idle.ms after its last request, each connection closes, never
    early and not ``LATE`` (4 connections, 150 ms apart: a once-a-second sweep is late for
    most of them)."""
    request = encode_request(18, 0, 1, "idle", m.ApiVersionsRequest())
    socks = []
    for _ in range(4):
        s = socket.create_connection(broker.address, timeout=10)
        s.sendall(request)
        size = int.from_bytes(s.recv(4), "big")
        while size:
            size -= len(s.recv(size))
        socks.append((s, time.monotonic()))
        time.sleep(0.15)
    late = []
    for s, answered in socks:
        s.settimeout(5)
        assert s.recv(1) == b""                       # closed by the broker
        late.append(time.monotonic() - answered - 1.0)
        s.close()
    assert all(-0.01 < x < LATE for x in late), [f"{x * 1000:.0f} ms" for x in late]
