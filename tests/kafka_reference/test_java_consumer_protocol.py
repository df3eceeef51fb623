"""Kafka's Java consumer with ``group.protocol=consumer`` (KIP-848) against pylog's broker:
members join, the partitions split, a member leaves and the others take over, and no
partition is ever owned by two members at once (by the members' own rebalance callbacks,
timed by the wall clock they share); static members return to their partitions;
kafka-consumer-groups describes the group through ConsumerGroupDescribe."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

import pylog

from .support import run_tool
from .test_java_clients import java_command

pytestmark = pytest.mark.xdist_group("java-clients")


class Member:
    """One Java consumer of the consumer protocol in its own JVM (JavaClients "kip848")."""

    def __init__(self, broker, topic: str, group: str, instance: str = "-", assignor: str = "-") -> None:
        self.proc = subprocess.Popen(
            java_command("kip848", broker.bootstrap_servers, topic, group, instance, assignor),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.errors), daemon=True)]
        for r in self._readers:
            r.start()

    @staticmethod
    def _read(pipe, into) -> None:
        for line in pipe:
            into.append(line.strip())

    def events(self) -> list[tuple[str, int, set[int]]]:
        out = []
        for line in list(self.lines):
            parts = line.split(" ")
            if parts[0] in ("ASSIGNED", "REVOKED", "LOST"):
                out.append((parts[0], int(parts[1]),
                            {int(p) for p in parts[2].split(",") if p} if len(parts) > 2 else set()))
        return out

    def owned(self) -> set[int]:
        owned: set[int] = set()
        for what, _, parts in self.events():
            owned = owned | parts if what == "ASSIGNED" else owned - parts
        return owned

    def intervals(self, now: int) -> list[tuple[int, int, int]]:
        """(partition, from ms, to ms) for each time it owned a partition."""
        start: dict[int, int] = {}
        out = []
        for what, at, parts in self.events():
            for p in parts:
                if what == "ASSIGNED":
                    start[p] = at
                elif p in start:
                    out.append((p, start.pop(p), at))
        out += [(p, at, now) for p, at in start.items()]
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("close\n")
                self.proc.stdin.flush()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for r in self._readers:
            r.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                pipe.close()
            except OSError:
                pass


def until(condition, what: str, members=(), timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            detail = "\n".join(f"member {i}: {m.lines[-10:]} {m.errors[-5:]}" for i, m in enumerate(members))
            raise AssertionError(f"not in {timeout}s: {what}\n{detail}")
        time.sleep(0.05)


def no_partition_owned_twice(members) -> None:
    now = int(time.time() * 1000)
    spans = [(p, a, b, i) for i, m in enumerate(members) for p, a, b in m.intervals(now)]
    for p, a, b, i in spans:
        for q, c, d, j in spans:
            if p == q and i < j:
                assert b <= c or d <= a, f"partition {p} owned by members {i} and {j} at once"


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_java_consumers_share_and_hand_over_partitions(kip848_broker, assignor):
    store, broker = kip848_broker
    topic, group = f"kip848-{assignor}", f"kip848-group-{assignor}"
    store.create_topic(topic, 6)
    with pylog.Producer(store) as producer:
        for p in range(6):
            producer.send_batch(topic, [b"v%d-%d" % (p, i) for i in range(100)], partition=p)
    members = [Member(broker, topic, group, assignor=assignor)]
    try:
        until(lambda: members[0].owned() == set(range(6)), "the first member owns all", members)
        members.append(Member(broker, topic, group, assignor=assignor))
        until(lambda: [len(m.owned()) for m in members] == [3, 3], "3 and 3", members)
        members.append(Member(broker, topic, group, assignor=assignor))
        until(lambda: [len(m.owned()) for m in members] == [2, 2, 2], "2, 2 and 2", members)
        assert set().union(*(m.owned() for m in members)) == set(range(6))
        # The group as Kafka's tool sees it (ConsumerGroupDescribe).
        described = run_tool("kafka-consumer-groups", "--bootstrap-server", broker.bootstrap_servers,
                             "--describe", "--group", group, "--members").stdout
        rows = [line.split() for line in described.splitlines() if line.startswith(group)]
        assert len(rows) == 3 and sorted(int(r[-1]) for r in rows) == [2, 2, 2], described
        state = run_tool("kafka-consumer-groups", "--bootstrap-server", broker.bootstrap_servers,
                         "--describe", "--group", group, "--state").stdout
        assert assignor in state and "Stable" in state, state
        # The middle member leaves: the other two take its partitions.
        leaving = members[1]
        leaving.close()
        assert "CLOSED" in leaving.lines
        rest = [members[0], members[2]]
        until(lambda: [len(m.owned()) for m in rest] == [3, 3], "3 and 3 after a leave", members)
        assert rest[0].owned() | rest[1].owned() == set(range(6))
        # Everything was consumed and committed once through the group.
        until(lambda: sum(store.committed(group, topic, p) or 0 for p in range(6)) == 600,
              "all committed", members)
        no_partition_owned_twice(members)
        assert not any(what == "LOST" for m in members for what, _, _ in m.events())
    finally:
        for m in members:
            m.close()


def test_java_static_member_returns_to_its_partitions(kip848_broker):
    """A static member that closes (member epoch -2) and restarts with its instance id
    within the session gets its partitions back; the other member keeps its own throughout."""
    store, broker = kip848_broker
    topic, group = "kip848-static", "kip848-static-group"
    store.create_topic(topic, 4)
    a = Member(broker, topic, group, instance="a")
    b = Member(broker, topic, group, instance="b")
    again = None
    try:
        until(lambda: len(a.owned()) == 2 and len(b.owned()) == 2, "2 and 2", [a, b])
        b_had = b.owned()
        seen_by_a = len(a.events())
        b.close()
        again = Member(broker, topic, group, instance="b")
        until(lambda: again.owned() == b_had, "the restarted static member has its partitions back",
              [a, again])
        assert a.events()[seen_by_a:] == [], "the other member saw a rebalance"
        no_partition_owned_twice([a, b, again])
    finally:
        for m in (a, b, again):
            if m is not None:
                m.close()
