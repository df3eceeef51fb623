"""The consumer-protocol group (coordinator/consumer_group.py) driven by simulated honest
clients through random sequences of joins, heartbeats (with and without their owned
partitions), leaves and partition additions: at every step no partition is owned by two
clients, and once everyone has heartbeated a few times the group is Stable with every
partition owned exactly once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pylog.coordinator.consumer_group import ConsumerProtocolGroup, GroupError, TopicsView
from pylog.coordinator.timer import DeadlineTimer

TIMER = DeadlineTimer("test-consumer-group")


class Client:
    def __init__(self, name: str) -> None:
        self.member_id = name
        self.epoch = 0
        self.owned: set[int] = set()
        self.revoking: set[int] = set()      # still owned until its revocation callback ran
        self.joined = False

    def beat(self, group, topics, epoch=None, report=True):
        try:
            res = group.heartbeat(
                self.member_id, self.epoch if epoch is None else epoch, instance_id=None,
                rack_id=None, rebalance_timeout_ms=60_000 if not self.joined else -1,
                subscribed_names=["t"] if not self.joined else None, subscribed_regex=None,
                server_assignor=None, owned=None if not self.joined else (
                    {"t": set(self.owned)} if report else None),
                client_id="sim", client_host="127.0.0.1", topics=topics)
        except GroupError:
            self.owned, self.revoking, self.joined, self.epoch = set(), set(), False, 0  # lost
            return
        self.joined = True
        self.epoch = res.member_epoch
        if res.assignment is not None:
            target = res.assignment.get("t", set())
            # Revocation runs later (its callback, "revoked" below); new partitions now.
            self.revoking = self.owned - target
            self.owned |= target

    def revoked(self) -> None:
        self.owned -= self.revoking
        self.revoking = set()

    def leave(self, group, topics) -> None:
        if self.joined:
            group.heartbeat(self.member_id, -1, instance_id=None, rack_id=None,
                            rebalance_timeout_ms=-1, subscribed_names=None, subscribed_regex=None,
                            server_assignor=None, owned=None, client_id="sim",
                            client_host="127.0.0.1", topics=topics)
        self.owned, self.revoking, self.joined, self.epoch = set(), set(), False, 0


ops = st.lists(st.tuples(st.sampled_from(["beat", "beat-silent", "revoked", "leave", "grow"]),
                         st.integers(0, 4)), max_size=60)


@settings(deadline=None)
@given(ops, st.sampled_from(["uniform", "range"]))
def test_no_partition_is_owned_twice(steps, assignor):
    group = ConsumerProtocolGroup("sim", TIMER, [assignor], 600_000, 5000)
    counts = {"t": 6}
    epoch = [1]

    def view():
        return TopicsView(epoch[0], lambda t: counts.get(t), lambda: list(counts))

    clients = [Client(f"m{i}") for i in range(5)]
    try:
        for op, i in steps:
            c = clients[i]
            if op == "beat":
                c.beat(group, view())
            elif op == "beat-silent":
                c.beat(group, view(), report=False)
            elif op == "revoked":
                c.revoked()
            elif op == "leave":
                c.leave(group, view())
            else:
                counts["t"] += 1
                epoch[0] += 1
            owners: dict[int, str] = {}
            for cl in clients:
                for p in cl.owned:
                    assert p not in owners, f"partition {p}: {owners[p]} and {cl.member_id}"
                    owners[p] = cl.member_id
        live = [c for c in clients if c.joined]
        for _ in range(4):
            for c in live:
                c.beat(group, view())
                c.revoked()
        if live:
            assert group.state() == "Stable"
            owned = sorted(p for c in live for p in c.owned)
            assert owned == list(range(counts["t"]))
            if assignor == "uniform":
                sizes = [len(c.owned) for c in live]
                assert max(sizes) - min(sizes) <= 1
    finally:
        group.mark_dead()
