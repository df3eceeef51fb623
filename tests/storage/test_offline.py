"""Offline log dirs: an I/O error takes its dir offline, its partitions raise
KafkaStorageError (code 56), every other dir keeps serving; the store fails
only when all dirs are offline.

First with an injected error (runs anywhere), then made real on loop-mounted
ext4 filesystems (root only): one filled up (ENOSPC), one forced read-only
(ext4's trigger_fs_error with errors=remount-ro, as a failing disk does)."""

import errno
import os
import shutil
import subprocess
import uuid

import pytest
from log_support import T0

import pylog
from pylog import records
from pylog.errors import KafkaStorageError, UnknownTopicOrPartitionError
from pylog.storage.segment import LogSegment


def batch(n=10, size=100):
    return records.encode_batch([bytes([i % 256]) * size for i in range(n)], timestamps=[T0] * n)


@pytest.fixture
def failing_dir(monkeypatch):
    """``fail(path)``: from now on every segment flush under `path` raises EIO."""
    bad = []
    real_flush = LogSegment.flush

    def flush(self, engine, indexes=True):
        if any(self.directory.startswith(p + os.sep) for p in bad):
            raise OSError(errno.EIO, "Input/output error (injected)", self.log.path)
        return real_flush(self, engine, indexes)
    monkeypatch.setattr(LogSegment, "flush", flush)
    return bad.append


def test_injected_error_takes_only_its_dir_offline(dirs, open_manager, failing_dir):
    manager = open_manager(dirs)
    manager.create_topic("t", 3)                      # t-0 on disk0, t-1 on disk1, t-2 on disk2
    for p in range(3):
        manager.log("t", p).append(batch())
    held = manager.log("t", 1)
    failing_dir(dirs[1])
    with pytest.raises(KafkaStorageError) as err:
        held.flush()
    assert 56 == err.value.code and err.value.retriable
    assert "Input/output error" in str(err.value)
    assert [os.path.abspath(dirs[1])] == list(manager.offline_log_dirs)
    assert "t-1" in manager.offline_log_dirs[os.path.abspath(dirs[1])]
    for call in (lambda: manager.log("t", 1), lambda: held.append(batch()), lambda: held.read(0)):
        with pytest.raises(KafkaStorageError, match="offline") as err:
            call()
        assert 56 == err.value.code
    # The other dirs keep serving, and new partitions avoid the offline dir.
    for p in (0, 2):
        manager.log("t", p).append(batch())
        assert 20 == manager.log("t", p).log_end_offset
    manager.create_topic("u", 4)
    placed = {p.log_dir for p in manager.describe_topic("u").partitions}
    assert os.path.abspath(dirs[1]) not in placed
    assert [False] == [p.online for p in manager.describe_topic("t").partitions if p.partition == 1]
    manager.close()
    assert not os.path.exists(os.path.join(dirs[1], ".kafka_cleanshutdown"))
    assert os.path.exists(os.path.join(dirs[0], ".kafka_cleanshutdown"))


def test_offline_dir_comes_back_after_restart(dirs, open_manager, failing_dir):
    """An offline dir stays offline until the next open (Kafka's rule); then it
    is recovered like any unclean dir."""
    manager = open_manager(dirs[:2])
    manager.create_topic("t", 2)
    manager.log("t", 1).append(batch())
    failing_dir(dirs[1])
    with pytest.raises(KafkaStorageError):
        manager.log("t", 1).flush()
    manager.close()
    failing_dir.__self__.clear()                      # the disk is repaired
    again = open_manager(dirs[:2])
    assert {} == again.offline_log_dirs
    assert not again.dirs[1].had_clean_shutdown
    assert 10 == again.log("t", 1).log_end_offset


def test_failed_dir_releases_its_lock(dirs, open_manager, failing_dir):
    manager = open_manager(dirs[:2])
    manager.create_topic("t", 2)
    manager.log("t", 1).append(batch())
    failing_dir(dirs[1])
    with pytest.raises(KafkaStorageError):
        manager.log("t", 1).flush()
    for thread in manager._failure_threads:
        thread.join()
    assert not manager.dirs[1].locked


def test_all_dirs_offline_stops_the_store(dirs, open_manager, failing_dir):
    manager = open_manager(dirs[:2])
    manager.create_topic("t", 2)
    for p in range(2):
        manager.log("t", p).append(batch())
        failing_dir(dirs[p])
        with pytest.raises(KafkaStorageError):
            manager.log("t", p).flush()
    with pytest.raises(KafkaStorageError, match="every log dir is offline"):
        manager.create_topic("u", 1)
    with pytest.raises(KafkaStorageError):
        manager.log("t", 0)


def test_unwritable_dir_at_startup_is_offline(tmp_path, open_manager):
    """A log dir that cannot be created (a file is in the way) starts offline."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    manager = open_manager([str(tmp_path / "ok"), str(blocker)])
    assert [str(blocker)] == list(manager.offline_log_dirs)
    manager.create_topic("t", 2)
    assert {str(tmp_path / "ok")} == {p.log_dir for p in manager.describe_topic("t").partitions}
    assert 1 == manager.startup.log_dirs - len(manager.startup.offline_dirs)


@pytest.mark.parametrize("garbage", [
    b"garbage here\nversion=zz\n",                  # not key=value
    b"version=1\ncluster.id=x\nnode.id=zero\n",      # a node.id that is no number
    b"\x00\xff\xfe\x80 binary\n",                    # not text at all
])
def test_a_garbage_meta_properties_takes_only_its_dir_offline(dirs, garbage, caplog):
    """Issue "A broker that survives its clients", item 8: the open raised
    AttributeError ('CorruptCheckpointError' object has no attribute 'errno'), or
    ConfigError for bytes that are not UTF-8, and nothing was served."""
    with pylog.open(dirs[:2]) as store:
        store.create_topic("t", 2)                        # t-0 on disk0, t-1 on disk1
        for p in range(2):
            store.log("t", p).append(batch())
    meta = os.path.join(dirs[0], "meta.properties")
    with open(meta, "rb") as f:
        good = f.read()
    with open(meta, "wb") as f:
        f.write(garbage)
    with pylog.open(dirs[:2]) as store:
        assert list(store.offline_log_dirs) == [dirs[0]]
        reason = store.offline_log_dirs[dirs[0]]
        assert reason.startswith(f"cannot read meta.properties: {meta}")
        assert f"log dir {dirs[0]} is offline: {reason}" in caplog.text
        store.log("t", 1).append(batch())                 # the other dir serves
        assert 20 == store.log("t", 1).log_end_offset
        with pytest.raises(KafkaStorageError, match="offline") as err:
            store.log("t", 0)
        assert 56 == err.value.code
    with open(meta, "wb") as f:
        f.write(good)                                     # repaired: back at the next open
    with pylog.open(dirs[:2]) as store:
        assert {} == store.offline_log_dirs
        assert [10, 20] == [store.log("t", p).log_end_offset for p in range(2)]


def _log_is_a_directory(path):
    os.remove(os.path.join(path, "00000000000000000000.log"))
    os.mkdir(os.path.join(path, "00000000000000000000.log"))


def _log_is_a_dangling_symlink(path):
    os.remove(os.path.join(path, "00000000000000000000.log"))
    os.symlink("/nonexistent/pylog-segment", os.path.join(path, "00000000000000000000.log"))


def _index_is_a_directory(path):
    os.remove(os.path.join(path, "00000000000000000000.index"))
    os.mkdir(os.path.join(path, "00000000000000000000.index"))


@pytest.mark.parametrize("damage, why", [
    (_log_is_a_directory, "Is a directory"),
    (_log_is_a_dangling_symlink, "No such file or directory"),
    (_index_is_a_directory, "Is a directory"),
])
def test_a_partition_that_cannot_be_opened_stays_offline_and_the_store_opens(tmp_path, damage, why):
    """Damage confined to one partition's files took its whole dir offline at open, so a
    one-dir store refused to open ("every log dir is offline")."""
    path = str(tmp_path / "store")
    with pylog.open(path) as store:
        store.create_topic("t", 2)
        for p in range(2):
            store.log("t", p).append(batch())
    damage(os.path.join(path, "t-0"))
    with pylog.open(path) as store:
        assert {} == store.offline_log_dirs
        with pytest.raises(KafkaStorageError, match=f"partition t-0 is offline: it could not be "
                           f"loaded: .*{why}") as err:
            store.log("t", 0)
        assert 56 == err.value.code
        store.log("t", 1).append(batch())
        assert 20 == store.log("t", 1).log_end_offset
        store.create_topic("u", 1)
    with pylog.open(path) as store:                       # its offsets are kept meanwhile
        assert 20 == store.log("t", 1).log_end_offset
        with pytest.raises(KafkaStorageError, match="partition t-0 is offline"):
            store.log("t", 0)


# ----------------------------------------------------------- loop-mounted filesystems

class LoopFilesystems:
    def __init__(self, root):
        self.root = root
        self.mounts = []

    def make(self, size_mb=32, fstype="ext4"):
        image = self.root / f"disk{len(self.mounts)}.img"
        mnt = self.root / f"mnt{len(self.mounts)}"
        mnt.mkdir()
        with open(image, "wb") as f:
            f.truncate(size_mb << 20)
        if fstype == "xfs":
            if shutil.which("mkfs.xfs") is None or shutil.which("xfs_io") is None:
                pytest.skip("xfsprogs (mkfs.xfs, xfs_io) is not installed")
            mkfs, options = ["mkfs.xfs", "-q", "-f"], "loop"
        else:
            mkfs, options = ["mkfs.ext4", "-q", "-F", "-m", "0"], "loop,errors=remount-ro"
        subprocess.run(mkfs + [str(image)], check=True, capture_output=True)
        self.images = getattr(self, "images", {})
        self.images[mnt] = (image, options)
        done = subprocess.run(["mount", "-o", options, str(image), str(mnt)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a loop device here: {done.stderr.strip()}")
        self.mounts.append(mnt)
        return mnt

    def remount(self, mnt):
        """Unmounts and mounts again (XFS replays its log: a shut-down fs comes back)."""
        image, options = self.images[mnt]
        subprocess.run(["umount", str(mnt)], check=True, capture_output=True)
        subprocess.run(["mount", "-o", options, str(image), str(mnt)], check=True, capture_output=True)

    def unmount_all(self):
        for mnt in self.mounts:
            if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture
def loop_fs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount loop filesystems (mount -o loop)")
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    fs = LoopFilesystems(tmp_path)
    yield fs
    fs.unmount_all()


def test_full_disk_takes_its_dir_offline(loop_fs, tmp_path, engine_kind):
    disk = loop_fs.make(32)
    dirs = [str(disk / "pylog"), str(tmp_path / "healthy")]
    config = {"pylog.io.engine": engine_kind, "log.segment.bytes": 1 << 20,
              "log.index.size.max.bytes": 64 * 1024}
    store = pylog.open(dirs, **config)
    try:
        store.create_topic("t", 2)                        # t-0 on the small disk, t-1 healthy
        with open(disk / f"filler-{uuid.uuid4().hex}", "wb") as f:
            os.posix_fallocate(f.fileno(), 0, shutil.disk_usage(disk).free - (2 << 20))
        full = store.log("t", 0)
        acked = 0
        with pytest.raises(KafkaStorageError) as err:
            for _ in range(10_000):
                full.append(batch(10, 1000))
                acked += 10
        assert 56 == err.value.code and errno.ENOSPC == err.value.errno
        assert acked > 0
        assert [dirs[0]] == list(store.offline_log_dirs)
        assert "ENOSPC" in store.offline_log_dirs[dirs[0]]
        with pytest.raises(KafkaStorageError):
            store.log("t", 0)
        healthy = store.log("t", 1)
        for _ in range(50):
            healthy.append(batch(10, 1000))
        assert 500 == healthy.log_end_offset
        assert 10 == len(healthy.read_records(490))
    finally:
        store.close()
    for name in os.listdir(disk):
        if name.startswith("filler-"):
            os.remove(disk / name)
    with pylog.open(dirs, **config) as again:              # space freed: back online
        assert {} == again.offline_log_dirs
        # Every acknowledged append is there, and the one that failed is not.
        assert again.log("t", 0).log_end_offset == acked
        assert 500 == again.log("t", 1).log_end_offset


def test_read_only_remount_takes_its_dir_offline(loop_fs, tmp_path):
    disk = loop_fs.make(32)
    dirs = [str(tmp_path / "healthy"), str(disk / "pylog")]
    store = pylog.open(dirs)
    try:
        store.create_topic("t", 2)                        # t-1 on the loop disk
        failing = store.log("t", 1)
        failing.append(batch())
        dev = os.path.basename(os.path.realpath(subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE", str(disk)], capture_output=True, text=True,
            check=True).stdout.strip()))
        trigger = f"/sys/fs/ext4/{dev}/trigger_fs_error"
        if not os.path.exists(trigger):
            pytest.skip(f"{trigger} is missing: this kernel cannot force ext4 read-only")
        with open(trigger, "w") as f:
            f.write("1")
        with pytest.raises(KafkaStorageError) as err:
            failing.append(batch())
            failing.flush()
        assert errno.EROFS == err.value.errno
        assert [dirs[1]] == list(store.offline_log_dirs)
        store.log("t", 0).append(batch())
        assert 10 == store.log("t", 0).log_end_offset
        with pytest.raises(UnknownTopicOrPartitionError):
            store.log("t", 2)
    finally:
        store.close()


def test_running_out_of_file_descriptors_does_not_take_the_dir_offline(dirs, open_manager, monkeypatch):
    """EMFILE is a limit of the process, not a disk failure (a divergence from Kafka)."""
    manager = open_manager(dirs[:1])
    manager.create_topic("t", 1)
    log = manager.log("t", 0)
    log.append(batch())
    real_flush = LogSegment.flush

    def flush(self, engine, indexes=True):
        raise OSError(errno.EMFILE, "Too many open files")
    monkeypatch.setattr(LogSegment, "flush", flush)
    with pytest.raises(KafkaStorageError, match="Too many open files"):
        log.flush()
    assert {} == manager.offline_log_dirs
    monkeypatch.setattr(LogSegment, "flush", real_flush)
    log.flush()
    assert 10 == log.recovery_point


def test_failing_disk_on_the_read_path_takes_its_dir_offline(loop_fs, tmp_path, engine_kind):
    """A real EIO: XFS's forced shutdown (xfs_io -x -c shutdown, what XFS does itself
    on a metadata I/O error) makes every read of the fs fail. A read, or a slice
    taken before and read after, raises KafkaStorageError (code 56) and takes the
    dir offline; the other dir keeps serving; after a remount every flushed
    record is back."""
    disk = loop_fs.make(320, "xfs")
    dirs = [str(disk / "pylog"), str(tmp_path / "healthy")]
    config = {"pylog.io.engine": engine_kind}
    store = pylog.open(dirs, **config)
    try:
        store.create_topic("t", 2)                        # t-0 on the xfs disk, t-1 healthy
        for p in range(2):
            for _ in range(20):
                store.log("t", p).append(batch(10, 1000))
            store.log("t", p).flush()
        failing = store.log("t", 0)
        assert failing.path.startswith(str(disk))
        held = failing.read(100)
        subprocess.run(["xfs_io", "-x", "-c", "shutdown", str(disk)], check=True)
        with pytest.raises(KafkaStorageError) as err:
            held.read()                                   # the slice's own read fails
        assert 56 == err.value.code and errno.EIO == err.value.errno
        assert [dirs[0]] == list(store.offline_log_dirs)
        assert "EIO" in store.offline_log_dirs[dirs[0]]
        with pytest.raises(KafkaStorageError):
            failing.read(0)
        with pytest.raises(KafkaStorageError):
            store.log("t", 0)
        healthy = store.log("t", 1)
        healthy.append(batch(10, 1000))
        assert 210 == healthy.log_end_offset and 10 == len(healthy.read_records(200))
    finally:
        store.close()
    loop_fs.remount(disk)
    with pylog.open(dirs, **config) as again:
        assert {} == again.offline_log_dirs
        assert 200 == again.log("t", 0).log_end_offset
        assert 200 == len([r for o in range(0, 200, 10) for r in again.log("t", 0).read_records(o, 1)])
