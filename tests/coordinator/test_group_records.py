"""Group membership records (coordinator/group_records.py) and the groups rebuilt from
them: each record decodes to what was encoded; a consumer-protocol group driven through
random joins, heartbeats, leaves and partition additions is, after every step, rebuilt
from the records its writer got (applied as the coordinator applies them: changes only,
tombstones) into the same state; a classic group too."""

from __future__ import annotations

import time

from hypothesis import given, settings

from pylog.coordinator import group_records as gr
from pylog.coordinator.classic_group import ClassicGroup
from pylog.coordinator.consumer_group import ConsumerProtocolGroup, TopicsView
from pylog.errors import ErrorCode

from .test_consumer_group import TIMER, Client, ops

TOPIC_ID = bytes(range(16))


def test_records_decode_to_what_was_encoded():
    meta = gr.MemberMetadata("inst", None, "client", "/10.0.0.1", ["b", "a"], "x.*", 5000, "range")
    back = gr.decode_member_metadata(gr.encode_member_metadata(meta))
    assert back == gr.MemberMetadata("inst", None, "client", "/10.0.0.1", ["a", "b"], "x.*", 5000, "range")
    share = gr.decode_member_metadata(gr.encode_member_metadata(meta, share=True), share=True)
    assert (share.rack_id, share.client_id, share.subscribed_names) == (None, "client", ["a", "b"])
    for share_ in (False, True):
        assert gr.decode_group_epoch(gr.encode_group_epoch(7, -12345, share_), share_) == (7, -12345)
    assert gr.decode_group_epoch(gr.encode_group_epoch(3, 0)) == (3, 0)
    assert gr.decode_assignment_epoch(gr.encode_assignment_epoch(9)) == 9
    assert gr.decode_target_member(gr.encode_target_member({TOPIC_ID: [2, 0]})) == {TOPIC_ID: [0, 2]}
    current = gr.CurrentAssignment(5, 4, "UNREVOKED_PARTITIONS", {TOPIC_ID: [1]}, {TOPIC_ID: [3]})
    assert gr.decode_current_assignment(gr.encode_current_assignment(current)) == current
    classic = gr.ClassicGroupRecord("consumer", 4, "range", "m1", 1234, [
        gr.ClassicMemberRecord("m1", None, "c", "/h", 300000, 45000, b"sub", b"asg"),
        gr.ClassicMemberRecord("m2", "i2", "c", "/h", 300000, 10000, b"", b"")])
    assert gr.decode_classic_group(gr.encode_classic_group(classic)) == classic
    assert gr.decode_group_key(gr.member_key(gr.CONSUMER_TARGET_MEMBER, "g", "m")) == (7, "g", "m")
    assert gr.decode_group_key(gr.group_key(gr.GROUP_METADATA, "g")) == (2, "g", None)
    assert gr.decode_group_key(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00") is None   # an offset


class Image:
    """The records a group's writer got, applied as the coordinator applies them."""

    def __init__(self) -> None:
        self.records: dict[bytes, bytes] = {}

    def write(self, records, full) -> bool:
        if full:
            for key in [k for k in self.records if k not in records]:
                del self.records[key]
        for key, value in records.items():
            if value is None:
                self.records.pop(key, None)
            else:
                self.records[key] = value
        return True


def _state(group: ConsumerProtocolGroup):
    # (An empty group's subscribed counts are moot: the next member resolves them anew.)
    return (group.group_epoch, group.assignment_epoch,
            group._subscribed_counts if group.members else None,
            {mid: (m.epoch, m.previous_epoch, m.state, m.assigned, m.revoking, m.instance_id,
                   sorted(m.subscribed_names), m.rebalance_timeout_ms)
             for mid, m in group.members.items()},
            {mid: t for mid, t in group.target.items() if mid in group.members},
            group.owners())


@settings(deadline=None, max_examples=300)
@given(ops)
def test_a_group_rebuilt_from_its_records_is_the_group(steps):
    counts = {"t": 6}
    epoch = [1]

    def view():
        now = dict(counts)          # the topics as of this heartbeat
        return TopicsView(epoch[0], now.get, lambda: list(now))

    group = ConsumerProtocolGroup("sim", TIMER, ["uniform"], 600_000, 5000)
    seen = view()
    image = Image()
    group.attach_persistence(image.write, lambda t: TOPIC_ID if t == "t" else None)
    clients = [Client(f"m{i}") for i in range(5)]
    try:
        for op, i in steps:
            c = clients[i]
            now = view()
            if op in ("beat", "beat-silent"):
                c.beat(group, now, report=op == "beat")
                if c.joined:                    # (a fenced member's beat saw nothing)
                    seen = now
            elif op == "revoked":
                c.revoked()
            elif op == "leave":
                c.leave(group, now)             # (a leave looks at no topic)
            else:
                counts["t"] += 1
                epoch[0] += 1
            # Rebuilt seeing the topics the group last saw (a partition added since is
            # noticed by both at their next heartbeat).
            rebuilt = ConsumerProtocolGroup("sim", TIMER, ["uniform"], 600_000, 5000)
            rebuilt.restore(image.records, {TOPIC_ID: "t"}, seen)
            try:
                assert _state(rebuilt) == _state(group)
            finally:
                rebuilt.mark_dead()
    finally:
        group.mark_dead()


def test_a_classic_group_rebuilt_from_its_record_is_stable_with_its_members():
    image = Image()
    group = ClassicGroup("cg", 0, TIMER)
    group.attach_persistence(image.write)
    answers = {}
    for name in ("a", "b"):
        group.join("", name, "/h", "consumer", [("range", b"sub-" + name.encode())], 30000, 60000,
                   False, None, lambda r, name=name: answers.__setitem__(name, r))
    assert not image.records                    # PreparingRebalance: nothing stored yet
    deadline = time.monotonic() + 10
    while len(answers) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)                        # the initial delay (0 ms) runs on the timer
    assert {r.error for r in answers.values()} == {ErrorCode.NONE}
    leader = answers["a"].leader
    ids = {name: r.member_id for name, r in answers.items()}
    synced = []
    for r in answers.values():
        group.sync(r.member_id, r.generation, {ids["a"]: b"asg-a", ids["b"]: b"asg-b"}
                   if r.member_id == leader else {}, synced.append)
    assert group.state == "Stable" and len(image.records) == 1
    rebuilt = ClassicGroup("cg", 0, TIMER)
    rebuilt.restore(gr.decode_classic_group(next(iter(image.records.values()))))
    try:
        assert (rebuilt.state, rebuilt.generation, rebuilt.protocol, rebuilt.leader) == \
            ("Stable", group.generation, "range", leader)
        assert rebuilt.describe()["members"] == group.describe()["members"]
        assert rebuilt.heartbeat(ids["b"], group.generation) == ErrorCode.NONE
    finally:
        rebuilt.mark_dead()
        group.mark_dead()
