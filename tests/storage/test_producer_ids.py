"""Producer ids are never handed out twice, across clean restarts and kill -9
(issue 14: with the allocator never persisting its block, every suite still passed)."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from pylog.errors import CorruptCheckpointError
from pylog.storage import LogManager

CHILD = textwrap.dedent("""
    import os, sys, time
    from pylog.storage import LogManager
    manager = LogManager(sys.argv[1].split(","), background=False)
    print(" ".join(str(manager.init_producer_id()[0]) for _ in range(int(sys.argv[2]))), flush=True)
    time.sleep(60)            # killed here: nothing closed
""")


def allocate_then_kill(dirs, count):
    child = subprocess.Popen([sys.executable, "-c", CHILD, ",".join(dirs), str(count)],
                             stdout=subprocess.PIPE, text=True)
    ids = [int(x) for x in child.stdout.readline().split()]
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)
    child.stdout.close()
    return ids


def test_ids_never_repeat_across_kill_9_and_clean_restarts(dirs):
    seen = []
    seen += allocate_then_kill(dirs[:2], 5)
    seen += allocate_then_kill(dirs[:2], 1500)               # crosses a block boundary
    with LogManager(dirs[:2], background=False) as manager:
        seen += [manager.init_producer_id()[0] for _ in range(3)]
    seen += allocate_then_kill(dirs[:2], 2)
    with LogManager(dirs[:2], background=False) as manager:
        seen.append(manager.init_producer_id()[0])
    assert len(seen) == len(set(seen)) == 1511
    assert seen == sorted(seen)


def test_the_largest_block_in_any_dir_wins(dirs):
    with LogManager(dirs[:2], background=False) as manager:
        first = manager.init_producer_id()[0]
    with LogManager(dirs[1:2], background=False) as manager:   # one dir alone
        second = manager.init_producer_id()[0]
    with LogManager(dirs[:2], background=False) as manager:
        third = manager.init_producer_id()[0]
    assert first < second < third


@pytest.mark.parametrize("content", [b"next-block", b"next-block 5 6\n", b"next-blocks 5\n",
                                     b"garbage 5\n", b"next-block -5\n", b"\0\0\0\0"])
def test_a_damaged_ids_file_is_an_error_not_a_restart_from_zero(dirs, content):
    with LogManager(dirs[:1], background=False) as manager:
        manager.init_producer_id()
    with open(os.path.join(dirs[0], "pylog-producer-ids"), "wb") as f:
        f.write(content)
    with pytest.raises(CorruptCheckpointError, match="pylog-producer-ids is damaged"):
        LogManager(dirs[:1], background=False)


def test_a_damaged_copy_is_replaced_from_a_good_one(dirs, caplog):
    with LogManager(dirs[:2], background=False) as manager:
        first = manager.init_producer_id()[0]
    with open(os.path.join(dirs[1], "pylog-producer-ids"), "wb") as f:
        f.write(b"garbage")
    with caplog.at_level("WARNING", logger="pylog.storage"):
        with LogManager(dirs[:2], background=False) as manager:
            assert manager.init_producer_id()[0] > first
    assert any("pylog-producer-ids is damaged" in r.getMessage() for r in caplog.records)
    for d in dirs[:2]:
        with open(os.path.join(d, "pylog-producer-ids"), "rb") as f:
            assert f.read() == b"next-block 2000\n"


def test_ids_start_above_every_producer_id_in_the_loaded_logs(dirs):
    """Logs written elsewhere (Kafka's controller allocated their ids; or ids above
    the recorded block) carry producer ids the allocator never handed out: a new
    producer gets an id above all of them, never one a log already holds."""
    from pylog import records
    with LogManager(dirs[:1], background=False) as manager:
        assert manager.init_producer_id()[0] == 0           # records next-block 1000
        manager.create_topic("kafka-written", 2)
        manager.log("kafka-written", 1).append(records.encode_batch(
            [b"v"], producer_id=4242, producer_epoch=3, base_sequence=0))
    with LogManager(dirs[:1], background=False) as manager:
        assert manager.producer_id_handed_out(4242)
        fresh = [manager.init_producer_id()[0] for _ in range(3)]
        assert fresh == [4243, 4244, 4245]
    with LogManager(dirs[:1], background=False) as manager:   # persisted as a block
        assert manager.init_producer_id()[0] > 4245
