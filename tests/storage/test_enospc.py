"""A full disk, made real: a tiny ext4 filesystem on a loop device.

The append that hits ENOSPC fails with KafkaStorageError naming the cause;
the log stays readable and consistent (no partial batch, indexes intact);
appends resume once space is freed, and a reopen finds everything."""

import errno
import os
import shutil
import subprocess
import uuid

import pytest
from log_support import ManualScheduler

from pylog import records
from pylog.errors import KafkaStorageError
from pylog.storage.log import Log

# Every test runs with buffered and with O_DIRECT appends (pylog.io.direct).
pytestmark = pytest.mark.usefixtures("io_mode")


def _loop_fs_or_skip(tmp_path, size_mb=48):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a loop filesystem")
    for tool in ("mkfs.ext4", "mount", "umount", "losetup"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    image = tmp_path / "disk.img"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True, capture_output=True)
    done = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a loop device here: {done.stderr.strip()}")
    return image, mnt


@pytest.fixture
def full_disk(tmp_path):
    image, mnt = _loop_fs_or_skip(tmp_path)
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_enospc_fails_cleanly_and_appends_resume(full_disk, engine_kind):
    log_dir = str(full_disk / "full-0")
    config = {"pylog.io.engine": engine_kind, "segment.bytes": 4 << 20,
              "segment.index.bytes": 64 * 1024, "index.interval.bytes": 4096}
    log = Log(log_dir, config, scheduler=ManualScheduler())
    # Leave about 3 MiB free.
    filler = full_disk / f"filler-{uuid.uuid4().hex}"
    free = shutil.disk_usage(full_disk).free
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, free - (3 << 20))
    value = os.urandom(1000)
    acked = []
    with pytest.raises(KafkaStorageError) as failure:
        for i in range(100_000):
            info = log.append(records.encode_batch([value] * 64, keys=[b"%d" % i] * 64))
            acked.append(info.last_offset)
    assert failure.value.errno == errno.ENOSPC
    assert "No space left on device" in str(failure.value) and "ENOSPC" in str(failure.value)
    assert failure.value.code == 56                          # Kafka's KAFKA_STORAGE_ERROR
    end = acked[-1] + 1
    assert log.log_end_offset == end
    # The files end on a batch boundary; every record reads back intact.
    assert sum(s.size for s in log.segments) == sum(os.path.getsize(s.log.path) for s in log.segments)
    n = 0
    offset = 0
    while offset < end:
        got = list(log.read(offset, 1 << 20).records())
        assert all(r.value == value for r in got)
        n += len(got)
        offset = got[-1].offset + 1
    assert n == end
    # Free space: appends continue where they stopped.
    os.remove(filler)
    info = log.append(records.encode_batch([value] * 64))
    assert info.first_offset == end
    log.close()
    with Log(log_dir, config, scheduler=ManualScheduler()) as again:
        assert again.recovery.clean_shutdown and again.log_end_offset == end + 64
