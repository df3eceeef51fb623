"""A partition creation that fails half-way leaves nothing behind, and an empty
copy of a partition in a second log dir does not stop the store (issue 12,
item 10: ENOSPC while creating t-0 left an empty t-0 on the full disk, the
partition went to the other dir, and the next open failed with "partition
t-0 is in two log dirs" without saying which copy was empty)."""

import errno
import logging
import os

import pytest

from pylog import records
from pylog.errors import KafkaStorageError
from pylog.storage import LogManager
from pylog.storage.segment import LogSegment


def test_a_failed_creation_removes_its_partition_dir(dirs, monkeypatch):
    real = LogSegment.create

    def full_disk(directory, *args, **kw):
        if directory.startswith(dirs[0]):
            raise OSError(errno.ENOSPC, "No space left on device", directory)
        return real(directory, *args, **kw)
    monkeypatch.setattr(LogSegment, "create", staticmethod(full_disk))
    manager = LogManager(dirs[:2], background=False)
    try:
        manager.create_topic("t", 1)
        assert list(manager.offline_log_dirs) == [dirs[0]]
        assert not os.path.exists(os.path.join(dirs[0], "t-0"))
        assert manager.describe_topic("t").partitions[0].log_dir == dirs[1]
        manager.log("t", 0).append(records.encode_batch([b"kept"]))
    finally:
        manager.close()
    monkeypatch.undo()
    with LogManager(dirs[:2], background=False) as again:
        assert again.offline_log_dirs == {}
        assert again.log("t", 0).read(0).records()[0].value == b"kept"


def test_an_empty_copy_in_another_dir_is_set_aside(dirs, caplog):
    with LogManager(dirs[:2], background=False) as manager:
        manager.create_topic("t", 2)
        where = {p.partition: p.log_dir for p in manager.describe_topic("t").partitions}
        manager.log("t", 0).append(records.encode_batch([b"data"]))
    other = dirs[1] if where[0] == dirs[0] else dirs[0]
    empty = os.path.join(other, "t-0")
    os.makedirs(empty)
    open(os.path.join(empty, "00000000000000000000.log"), "wb").close()
    with caplog.at_level(logging.WARNING):
        with LogManager(dirs[:2], background=False) as manager:
            assert manager.log("t", 0).read(0).records()[0].value == b"data"
    assert f"{empty} holds no records and was set aside" in caplog.text
    assert not os.path.exists(empty)


def test_two_copies_with_data_keep_that_partition_offline_naming_both(dirs):
    """Kafka refuses to start ("Duplicate log directories"); pylog starts, serves every
    other partition and keeps this one offline until an operator keeps one copy."""
    with LogManager(dirs[:2], background=False) as manager:
        manager.create_topic("t", 2)
        where = {p.partition: p.log_dir for p in manager.describe_topic("t").partitions}
        manager.log("t", 0).append(records.encode_batch([b"data"]))
    other = dirs[1] if where[0] == dirs[0] else dirs[0]
    copy = os.path.join(other, "t-0")
    os.makedirs(copy)
    with open(os.path.join(copy, "00000000000000000000.log"), "wb") as f:
        f.write(records.encode_batch([b"other"]))
    with LogManager(dirs[:2], background=False) as manager:
        with pytest.raises(KafkaStorageError, match="partition t-0 is offline: it is in two log dirs, "
                           "both with data: .* bytes\\) and .* bytes\\); keep one of them") as err:
            manager.log("t", 0)
        assert err.value.code == 56
        manager.log("t", 1).append(records.encode_batch([b"served"]))
        assert [p.online for p in manager.describe_topic("t").partitions] == [False, True]
    os.rename(copy, copy + ".moved-away")
    with LogManager(dirs[:2], background=False) as manager:
        assert manager.log("t", 0).read(0).records()[0].value == b"data"
