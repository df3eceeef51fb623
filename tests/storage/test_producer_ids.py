"""Producer ids are never handed out twice, across clean restarts and kill -9
(issue 14: with the allocator never persisting its block, every suite still passed)."""

import os
import signal
import subprocess
import sys
import textwrap

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
