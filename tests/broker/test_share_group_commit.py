"""Group commit of a share group's state (share_group.py): concurrent ShareAcknowledges
share one write of the state file, and each is answered only once a write holding its
acknowledgement is on disk."""

from __future__ import annotations

import json
import threading
import uuid

import pylog
from pylog.coordinator.share_group import share_coordinator
from pylog.coordinator.share_partition import ACKNOWLEDGED

from share_support import ACCEPT, ShareMember, until

MEMBERS = 4
EACH = 5


def acknowledged_on_disk(path: str, topic: str, first: int, last: int) -> bool:
    """Whether the state file at `path` holds offsets first..last of `topic`-0 as
    ACKNOWLEDGED (below the SPSO, or in an ACKNOWLEDGED run)."""
    with open(path, "rb") as f:
        data = json.loads(f.read())
    entry = next(p for p in data["partitions"] if p["topic"] == topic and p["partition"] == 0)
    return all(o < entry["start_offset"] or any(a <= o <= b and state == ACKNOWLEDGED
                                                for a, b, _, state in entry["state_batches"])
               for o in range(first, last + 1))


def test_concurrent_acknowledgements_share_one_state_write(tmp_path):
    store = pylog.open(str(tmp_path))
    broker = pylog.Broker(store, listen="127.0.0.1:0").start()
    members = []
    try:
        topic = f"q-{uuid.uuid4().hex[:8]}"
        store.create_topic(topic, 1)
        with pylog.Producer(store, linger_ms=0) as producer:
            producer.send_batch(topic, [b"%d" % i for i in range(MEMBERS * EACH)], partition=0)
        group_id = f"sg-{uuid.uuid4().hex[:8]}"
        shares = share_coordinator(store)
        group = shares.group(group_id)
        group.set_configs({"share.auto.offset.reset": "earliest"})
        members = [ShareMember(broker, store, group_id, [topic]) for _ in range(MEMBERS)]
        held = []
        for member in members:
            member.beat()
            got = sorted(o for _, o in member.acquired(member.fetch(topic, max_records=EACH)))
            assert len(got) == EACH
            held.append((got[0], got[-1]))

        # Every write of the state file from here on is counted; the first one waits.
        real_write = shares.write_state
        writes: list[int] = []
        first_entered, let_first_go = threading.Event(), threading.Event()

        def counted_write(gid: str, encoded: bytes) -> None:
            writes.append(json.loads(encoded)["state_epoch"])
            if len(writes) == 1:
                first_entered.set()
                assert let_first_go.wait(30), "the test never released the first write"
            real_write(gid, encoded)

        shares.write_state = counted_write
        path = shares._path(group_id)
        answers: dict[int, tuple[int, bool]] = {}

        def acknowledge(i: int) -> None:
            first, last = held[i]
            resp = members[i].acknowledge(topic, {0: [(first, last, [ACCEPT])]})
            # Answered: the state file on disk already holds this acknowledgement.
            answers[i] = (resp.responses[0].partitions[0].error_code,
                          acknowledged_on_disk(path, topic, first, last))

        threads = [threading.Thread(target=acknowledge, args=(i,)) for i in range(MEMBERS)]
        version = group._version
        threads[0].start()
        assert first_entered.wait(30), "the first acknowledgement never wrote"
        # The first write is under way, outside the group's lock: the other members'
        # acknowledgements apply meanwhile and wait for a write that covers them.
        for t in threads[1:]:
            t.start()
        until(lambda: group._version == version + MEMBERS, "the other acknowledgements to apply")
        assert answers == {} and len(writes) == 1
        let_first_go.set()
        for t in threads:
            t.join(30)
        assert answers == {i: (0, True) for i in range(MEMBERS)}
        # One write for the first acknowledgement, one for the other three together.
        assert len(writes) == 2 < MEMBERS
        assert acknowledged_on_disk(path, topic, 0, MEMBERS * EACH - 1)
    finally:
        for member in members:
            member.close()
        broker.shutdown()
        store.close()
