"""The KIP-848 server-side assignors (coordinator/assignors.py): every subscribed partition
to exactly one subscribed member; uniform balanced (within one among members of one
subscription) and sticky; range in Kafka's per-topic ranges."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pylog.coordinator.assignors import range_assign, uniform_assign

TOPICS = ["a", "b", "c"]

subscriptions = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(8)]),
    st.sets(st.sampled_from(TOPICS), min_size=1), min_size=1)
partitions = st.fixed_dictionaries({t: st.integers(0, 12) for t in TOPICS})


def check_complete(subs, counts, out) -> None:
    assert set(out) == set(subs)
    seen = {}
    for member, topics in out.items():
        for topic, parts in topics.items():
            assert topic in subs[member], f"{member} got {topic} it does not subscribe to"
            for p in parts:
                assert 0 <= p < counts[topic]
                assert (topic, p) not in seen, f"{topic}-{p} to {seen[(topic, p)]} and {member}"
                seen[(topic, p)] = member
    wanted = {(t, p) for t, n in counts.items() for p in range(n)
              if any(t in s for s in subs.values())}
    assert set(seen) == wanted


def load(out, member) -> int:
    return sum(len(ps) for ps in out[member].values())


@given(subscriptions, partitions)
def test_uniform_assigns_everything_once(subs, counts):
    out = uniform_assign(subs, counts, {})
    check_complete(subs, counts, out)


@given(st.sets(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1), partitions)
def test_uniform_balances_members_of_one_subscription(members, counts):
    subs = {m: set(TOPICS) for m in members}
    out = uniform_assign(subs, counts, {})
    loads = [load(out, m) for m in members]
    assert max(loads) - min(loads) <= 1


@given(st.sets(st.sampled_from([f"m{i}" for i in range(8)]), min_size=2), partitions)
def test_uniform_is_sticky_when_a_member_joins_or_leaves(members, counts):
    members = sorted(members)
    subs = {m: set(TOPICS) for m in members[:-1]}
    before = uniform_assign(subs, counts, {})
    # A member joins: the others only give partitions up, never swap among themselves.
    subs_after = {m: set(TOPICS) for m in members}
    after = uniform_assign(subs_after, counts, before)
    check_complete(subs_after, counts, after)
    for m in members[:-1]:
        for t, ps in after[m].items():
            assert ps <= before[m].get(t, set()), f"{m} gained {t} {ps - before[m].get(t, set())}"
    loads = [load(after, m) for m in members]
    assert max(loads) - min(loads) <= 1
    # It leaves again: the others keep what they had and share its partitions.
    back = uniform_assign(subs, counts, after)
    check_complete(subs, counts, back)
    for m in members[:-1]:
        for t, ps in after[m].items():
            assert ps <= back[m].get(t, set())


@given(subscriptions, partitions)
def test_range_assigns_everything_once(subs, counts):
    check_complete(subs, counts, range_assign(subs, counts, {}))


def test_range_gives_ranges_in_member_order():
    out = range_assign({"m1": {"a", "b"}, "m2": {"a", "b"}}, {"a": 3, "b": 3}, {})
    assert out == {"m1": {"a": {0, 1}, "b": {0, 1}}, "m2": {"a": {2}, "b": {2}}}
    # A third member: each keeps what its quota allows; the new one gets the rest.
    out = range_assign({"m1": {"a"}, "m2": {"a"}, "m3": {"a"}}, {"a": 6},
                       {"m1": {"a": {0, 1, 2}}, "m2": {"a": {3, 4, 5}}})
    assert out == {"m1": {"a": {0, 1}}, "m2": {"a": {3, 4}}, "m3": {"a": {2, 5}}}
