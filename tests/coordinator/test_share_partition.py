"""The share-partition state machine (KIP-932): unit cases, and hypothesis sequences of
acquire / acknowledge / release / timeout / restore checked against a plain per-offset
model of Kafka's rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog.coordinator.share_partition import (
    ACCEPT, ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, GAP, REJECT, RELEASE,
    AcknowledgeError, SharePartition)
from pylog.errors import ErrorCode

LOCK = 1000


def test_acquire_hands_each_offset_to_one_member_in_ranges_of_one_delivery_count():
    sp = SharePartition(10, delivery_count_limit=3)
    got = sp.acquire("a", 10, 20, 4, now_ms=0, lock_ms=LOCK)
    assert [(r.first, r.last, r.delivery_count) for r in got] == [(10, 13, 1)]
    assert (sp.start_offset, sp.end_offset) == (10, 14)      # the SPEO: one past the last acquired
    got = sp.acquire("b", 10, 20, 100, now_ms=0, lock_ms=LOCK)
    assert [(r.first, r.last) for r in got] == [(14, 19)]
    assert sp.holder(12) == "a" and sp.holder(15) == "b" and sp.state(15) == (ACQUIRED, 1)


def test_accept_release_reject_and_the_spso_moving_past_done_offsets():
    sp = SharePartition(0, delivery_count_limit=3)
    sp.acquire("a", 0, 6, 100, 0, LOCK)
    sp.acknowledge("a", 0, 1, [ACCEPT])
    assert sp.start_offset == 2
    sp.acknowledge("a", 2, 5, [RELEASE, REJECT, GAP, ACCEPT])
    assert sp.start_offset == 2 and sp.state(2) == (AVAILABLE, 1)
    assert sp.state(3)[0] == ARCHIVED and sp.state(5)[0] == ACKNOWLEDGED
    got = sp.acquire("b", 0, 6, 100, 0, LOCK)
    assert [(r.first, r.last, r.delivery_count) for r in got] == [(2, 2, 2)]
    sp.acknowledge("b", 2, 2, [ACCEPT])
    assert (sp.start_offset, sp.end_offset) == (6, 6)


def test_an_acknowledgement_of_offsets_not_held_changes_nothing():
    sp = SharePartition(0)
    sp.acquire("a", 0, 3, 100, 0, LOCK)
    sp.acquire("b", 0, 6, 100, 0, LOCK)
    for member, first, last, types, code in [
            ("a", 2, 3, [ACCEPT], ErrorCode.INVALID_RECORD_STATE),    # 3 is b's
            ("a", 0, 9, [ACCEPT], ErrorCode.INVALID_RECORD_STATE),    # past the SPEO
            ("a", 0, 2, [ACCEPT, ACCEPT], ErrorCode.INVALID_REQUEST),  # 2 types for 3 offsets
            ("a", 0, 0, [7], ErrorCode.INVALID_REQUEST)]:
        with pytest.raises(AcknowledgeError) as err:
            sp.acknowledge(member, first, last, types)
        assert err.value.code == code
    with pytest.raises(AcknowledgeError):       # all or none: the first batch is not applied
        sp.acknowledge_batches("a", [(0, 0, [ACCEPT]), (3, 3, [ACCEPT])])
    assert sp.state(0) == (ACQUIRED, 1) and sp.start_offset == 0


def test_locks_time_out_and_the_delivery_count_limit_archives():
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("a", 0, 2, 100, now_ms=0, lock_ms=LOCK)
    assert not sp.expire_locks(LOCK - 1) and sp.expire_locks(LOCK)
    assert sp.state(0) == (AVAILABLE, 1)
    sp.acquire("b", 0, 2, 100, now_ms=LOCK, lock_ms=LOCK)
    assert sp.release_member("b")                  # b leaves: delivered twice, the limit
    assert (sp.start_offset, sp.end_offset) == (2, 2)


def test_snapshot_and_restore_keep_done_offsets_and_delivery_counts_but_no_locks():
    sp = SharePartition(5, delivery_count_limit=3)
    sp.acquire("a", 5, 12, 100, 0, LOCK)
    sp.acknowledge("a", 6, 6, [ACCEPT])
    sp.acknowledge("a", 8, 8, [REJECT])
    sp.acknowledge("a", 10, 10, [RELEASE])
    start, runs = sp.snapshot()
    back = SharePartition.restore(start, runs, delivery_count_limit=3)
    assert back.start_offset == 5 and back.end_offset == 12 and back.acquired_count() == 0
    assert [back.state(o) for o in range(5, 12)] == [
        (AVAILABLE, 1), (ACKNOWLEDGED, 1), (AVAILABLE, 1), (ARCHIVED, 1), (AVAILABLE, 1),
        (AVAILABLE, 1), (AVAILABLE, 1)]
    got = back.acquire("b", 5, 12, 100, 0, LOCK)
    assert {o for r in got for o in range(r.first, r.last + 1)} == {5, 7, 9, 10, 11}
    assert {r.delivery_count for r in got} == {2}


def test_the_window_never_grows_past_max_in_flight_and_follows_the_log_start():
    sp = SharePartition(0, max_in_flight=100)
    assert len(sp.acquire("a", 0, 1000, 1000, 0, LOCK)) == 1 and sp.end_offset == 100
    assert sp.acquire("b", 0, 1000, 1000, 0, LOCK) == []
    assert sp.move_start(40) and sp.start_offset == 40 and sp.acquired_count() == 60
    sp.acknowledge("a", 40, 99, [ACCEPT])
    assert [(r.first, r.last) for r in sp.acquire("b", 100, 1000, 1000, 0, LOCK)] == [(100, 199)]


# ================================================================ the model

class Model:
    """Kafka's rules offset by offset over the whole log: no window, no arrays."""

    def __init__(self, log_end: int, limit: int) -> None:
        self.limit = limit
        self.log_end = log_end
        self.state = {o: [AVAILABLE, 0, None, 0] for o in range(log_end)}   # state, count, holder, deadline

    def spso(self) -> int:
        o = 0
        while o < self.log_end and self.state[o][0] in (ACKNOWLEDGED, ARCHIVED):
            o += 1
        return o

    def expire(self, now: int) -> None:
        for rec in self.state.values():
            if rec[0] == ACQUIRED and rec[3] <= now:
                self._release(rec)

    def _release(self, rec) -> None:
        rec[0] = ARCHIVED if rec[1] >= self.limit else AVAILABLE
        rec[2] = None

    def acquire(self, member, max_records, now) -> list[int]:
        got = []
        for o in range(self.spso(), self.log_end):
            rec = self.state[o]
            if len(got) < max_records and rec[0] == AVAILABLE:
                rec[0], rec[1], rec[2], rec[3] = ACQUIRED, rec[1] + 1, member, now + LOCK
                got.append(o)
        return got

    def acknowledge(self, member, first, last, kind) -> bool:
        if first < 0 or last >= self.log_end or any(self.state[o][2] != member
                                                    for o in range(first, last + 1)):
            return False
        for o in range(first, last + 1):
            rec = self.state[o]
            if kind == RELEASE:
                self._release(rec)
            else:
                rec[0], rec[2] = (ACKNOWLEDGED if kind == ACCEPT else ARCHIVED), None
        return True

    def leave(self, member) -> None:
        for rec in self.state.values():
            if rec[2] == member:
                self._release(rec)


MEMBERS = ("a", "b", "c")
operations = st.lists(st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 12)),
    st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.integers(0, 39), st.integers(0, 5),
              st.sampled_from([ACCEPT, RELEASE, REJECT, GAP])),
    st.tuples(st.just("tick"), st.integers(0, 2 * LOCK)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("restart"))), max_size=60)


@given(ops=operations, limit=st.integers(2, 5))
def test_every_sequence_matches_the_model(ops, limit):
    log_end = 40
    sp = SharePartition(0, delivery_count_limit=limit)
    model = Model(log_end, limit)
    now = 0
    for op in ops:
        if op[0] == "tick":
            now += op[1]
            sp.expire_locks(now)
            model.expire(now)
        elif op[0] == "acquire":
            sp.expire_locks(now)
            model.expire(now)
            ranges = sp.acquire(op[1], sp.first_available(), log_end, op[2], now, LOCK)
            got = [o for r in ranges for o in range(r.first, r.last + 1)]
            assert got == model.acquire(op[1], op[2], now)
            assert all(sp.state(o)[1] == r.delivery_count for r in ranges
                       for o in range(r.first, r.last + 1))
        elif op[0] == "ack":
            _, member, first, length, kind = op
            last = min(first + length, log_end - 1)
            sp.expire_locks(now)
            model.expire(now)
            try:
                sp.acknowledge(member, first, last, [kind])
                applied = True
            except AcknowledgeError:
                applied = False
            assert applied == model.acknowledge(member, first, last, kind)
        elif op[0] == "leave":
            sp.release_member(op[1])
            model.leave(op[1])
        else:                                         # a crash: locks gone, counts kept
            start, runs = sp.snapshot()
            sp = SharePartition.restore(start, runs, delivery_count_limit=limit)
            for rec in model.state.values():
                if rec[0] == ACQUIRED:
                    model._release(rec)
                elif rec[0] == AVAILABLE and rec[1] >= limit:
                    rec[0] = ARCHIVED
        # Invariants: the SPSO is the model's; every offset's state and count agree.
        assert sp.start_offset == model.spso()
        assert sp.end_offset - sp.start_offset <= sp.max_in_flight
        for o in range(sp.start_offset, log_end):
            state, count, holder, _ = model.state[o]
            if o >= sp.end_offset:
                assert (state, count) == (AVAILABLE, 0)
            else:
                assert sp.state(o) == (state, count)
                assert sp.holder(o) == holder
