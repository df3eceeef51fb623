"""Partition bounds and all-or-nothing creation in the store (issue "A broker that
survives its clients", item 4).

A creation (CreateTopics, CreatePartitions) is checked against
``pylog.max.partitions.per.request`` (Kafka's controller bound, 10,000),
``pylog.max.partitions`` and the process's open files and maps before anything is
written, with POLICY_VIOLATION naming the bound. A creation that fails half-way
anyway (here a real ENOMEM: the address space runs out while index files are
mapped) leaves no partition dir and no topic-table change behind, in any log dir.
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from pylog import records
from pylog.errors import PolicyViolationError
from pylog.storage import LogManager


def test_partitions_per_request_are_bounded(dirs, open_manager):
    m = open_manager(dirs[:2])
    with pytest.raises(PolicyViolationError, match=r"Excessively large number of partitions per "
                       r"request: 10001 partitions; at most 10000 \(pylog.max.partitions.per."
                       r"request\)") as err:
        m.create_topic("t", 10_001, validate_only=True)
    assert err.value.code == 44
    m = open_manager(dirs[2:], {"pylog.max.partitions.per.request": 4})
    with pytest.raises(PolicyViolationError, match="5 partitions; at most 4"):
        m.create_topic("t", 5)
    m.create_topic("t", 4)
    with pytest.raises(PolicyViolationError, match="5 partitions; at most 4"):
        m.create_partitions("t", 9)
    m.create_partitions("t", 8)
    assert m.partition_count("t") == 8


def test_partitions_in_all_are_bounded(dirs, open_manager):
    m = open_manager(dirs[:1], {"pylog.max.partitions": 10})
    m.create_topic("a", 6)
    with pytest.raises(PolicyViolationError, match=r"5 more partitions would make 11 in this "
                       r"broker; at most 10 \(pylog.max.partitions\)"):
        m.create_topic("b", 5)
    with pytest.raises(PolicyViolationError, match="would make 11"):
        m.create_partitions("a", 11)
    with pytest.raises(PolicyViolationError, match="would make 11"):
        m.create_topic("b", 5, validate_only=True)
    m.create_topic("b", 4)
    assert sorted(e for e in os.listdir(dirs[0]) if e.startswith(("a-", "b-"))) == sorted(
        [f"a-{p}" for p in range(6)] + [f"b-{p}" for p in range(4)])


HALF_WAY = """
    import os, resource, sys
    from pylog import records
    from pylog.storage import LogManager
    dirs = sys.argv[1:]
    m = LogManager(dirs, background=False)
    m.create_topic("old", 2)
    def address_space():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
    # Room for about four partitions' index mappings (2 x 64 MiB each), then ENOMEM.
    resource.setrlimit(resource.RLIMIT_AS, (address_space() + (600 << 20), resource.RLIM_INFINITY))
    index = {"segment.index.bytes": 64 << 20}
    for name, call in (("create", lambda: m.create_topic("big", 12, index)),
                       ("grow", lambda: (m.alter_topic_config("old", index),
                                         m.create_partitions("old", 14)))):
        try:
            call()
            print(name, "created")
        except Exception as exc:
            print(name, type(exc).__name__, exc)
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print("left", sorted(e for d in dirs for e in os.listdir(d) if e.startswith(("big", "old"))))
    print("topics", m.list_topics(), m.partition_count("old"), m.offline_log_dirs)
    for p in range(2):
        m.log("old", p).append(records.encode_batch([b"after"]))
    m.close()
"""


def test_a_creation_that_fails_half_way_leaves_nothing(dirs):
    """Before: the topic stayed in the table with the partitions made so far, and the
    rest were created empty at the next open."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(HALF_WAY), *dirs[:2]],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert got["create"].startswith("KafkaStorageError") and "Cannot allocate memory" in got["create"]
    assert int(re.search(r"creating big-(\d+) failed", got["create"]).group(1)) > 0   # half-way
    assert int(re.search(r"creating old-(\d+) failed", got["grow"]).group(1)) > 2, got["grow"]
    assert got["left"] == "['old-0', 'old-1']"
    assert got["topics"] == "['old'] 2 {}"
    with LogManager(dirs[:2], background=False) as m:
        assert m.list_topics() == ["old"] and m.partition_count("old") == 2
        assert [m.log("old", p).log_end_offset for p in range(2)] == [1, 1]
        m.create_topic("big", 12)                 # the names are free again
        m.log("big", 11).append(records.encode_batch([b"new"]))
