"""The tuning rig (tuning/): its matrix file's errors, and on real loop-backed ext4
and XFS filesystems (root) a tiny matrix end to end, after which no mount, loop
device or changed sysctl is left; also when the rig is stopped with SIGTERM, and
when it is killed -9 (then ``python -m tuning cleanup`` removes the rest)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tuning.journal import leftovers, users_under
from tuning.machine import can_loop_mount
from tuning.matrix import load

# The rig changes vm.dirty_background_ratio (machine-wide) while it measures: these tests
# read it before and after, and the page-cache tests must not run meanwhile. One worker.
pytestmark = pytest.mark.xdist_group("writeback")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TINY = """
[run]
volume_mib = {volume}
repeats = {repeats}
device_mib = 512

[filesystems.ext4]
type = "ext4"
mkfs = ["mkfs.ext4", "-q", "-F"]
mount_options = "noatime,data=writeback"

[filesystems.xfs]
type = "xfs"
mkfs = ["mkfs.xfs", "-q", "-f"]

[writeback.eager]
"vm.dirty_background_ratio" = {ratio}

[matrix]
filesystem = ["ext4", "xfs"]
devices = [{devices}]
record_size = [1024]
flush = ["batch"]
io = ["buffered", "direct"]
writeback = ["eager"]
"""


def rig(*args: str, base: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tuning", "--base", base, *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def sysctl(key: str) -> str:
    with open("/proc/sys/" + key.replace(".", "/")) as f:
        return f.read().strip()


def write_config(tmp_path, volume=16, repeats=1, devices="1", ratio=None) -> str:
    ratio = ratio or (int(sysctl("vm.dirty_background_ratio")) % 50) + 3   # differs from now
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(volume=volume, repeats=repeats, devices=devices, ratio=ratio))
    return str(path)


@pytest.mark.parametrize("edit, message", [
    (("[run]", "[run]\nvolumes = 3"), "unknown key(s) volumes"),
    (('filesystem = ["ext4", "xfs"]', 'filesystem = ["ext4", "btrfs"]'),
     "filesystem 'btrfs' has no [filesystems.btrfs]"),
    (('flush = ["batch"]', 'flush = ["sometimes"]'), "flush 'sometimes'"),
    (('writeback = ["eager"]', 'writeback = ["never"]'), "writeback 'never' has no"),
    (('"vm.dirty_background_ratio"', '"kernel.panic"'), "only vm.dirty_* knobs"),
    (("record_size = [1024]", "record_size = ['big']"), "record_size: 'big' is not a int"),
])
def test_matrix_errors_name_the_problem(tmp_path, edit, message):
    path = tmp_path / "m.toml"
    path.write_text(TINY.format(volume=1, repeats=1, devices=1, ratio=5).replace(*edit))
    with pytest.raises(ValueError) as err:
        load(str(path))
    assert message in str(err.value)


def test_the_default_matrix_is_the_one_the_issue_asks_for():
    """ext4 and XFS, buffered and O_DIRECT, two record sizes, two flush policies,
    one and two devices."""
    m = load(os.path.join(REPO, "tuning", "matrix.toml"))
    dims = {d: {getattr(r, d) for r in m.rows} for d in ("filesystem", "io", "record_size",
                                                          "flush", "devices")}
    assert dims == {"filesystem": {"ext4", "xfs"}, "io": {"buffered", "direct"},
                    "record_size": {100, 1024}, "flush": {"none", "16MiB"}, "devices": {1, 2}}
    assert len(m.rows) == 32
    assert len(load(os.path.join(REPO, "tuning", "full.toml")).rows) > 1000


needs_loops = pytest.mark.skipif(can_loop_mount() is not None,
                                 reason=f"the rig's loop filesystems: {can_loop_mount()}")


@pytest.mark.root
@needs_loops
def test_tiny_matrix_end_to_end_leaves_nothing(tmp_path):
    base = str(tmp_path / "base")
    out = str(tmp_path / "out")
    before = sysctl("vm.dirty_background_ratio")
    proc = rig("run", "--config", write_config(tmp_path, devices="1, 2"), "--out", out, base=base)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    with open(os.path.join(out, "results.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == 8                      # 2 filesystems x 2 device counts x 2 I/O modes
    for r in rows:
        assert r["machine"]["kernel"] and r["machine"]["cpus"]
        assert r["pylog"]["records"] == (16 << 20) // 1024
        assert r["pylog"]["records_in_log"] == r["pylog"]["records"]
        assert r["pylog"]["mb_per_sec"] > 0 and r["fio"]["mb_per_sec"] > 0
        assert r["pylog"]["flushes"] > 0        # flush.messages: every batch
        assert len(r["mounts"]) == r["devices"]
        for m in r["mounts"]:
            assert m["fs_type"] == r["filesystem"] and m["device"].startswith("/dev/loop")
            assert m["loop_backing"]["file"].startswith(base)
        if r["filesystem"] == "ext4":
            assert "data=writeback" in r["mounts"][0]["mount_options"]
        assert r["writeback_values"]["vm.dirty_background_ratio"] != int(before)
    assert {(r["filesystem"], r["devices"], r["io"]) for r in rows} == {
        (f, d, i) for f in ("ext4", "xfs") for d in (1, 2) for i in ("buffered", "direct")}
    # The same rows are in the results topic, for the report.
    import pylog
    with pylog.open(os.path.join(out, "store")) as store:
        assert store.log("tuning-results", 0).log_end_offset == 8
    assert leftovers(base) == {"mounts": [], "loops": [], "journal_entries": 0}
    assert sysctl("vm.dirty_background_ratio") == before


def _wait_for_mount(proc: subprocess.Popen, base: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not leftovers(base)["mounts"]:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the rig never mounted anything"
        time.sleep(0.1)


@pytest.mark.root
@needs_loops
def test_sigterm_mid_run_cleans_up(tmp_path):
    base = str(tmp_path / "base")
    before = sysctl("vm.dirty_background_ratio")
    proc = rig("run", "--config", write_config(tmp_path, volume=256, repeats=50), "--out",
               str(tmp_path / "out"), base=base)
    _wait_for_mount(proc, base)
    time.sleep(1.0)                           # inside a measurement
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "cleaning up" in stderr
    assert leftovers(base) == {"mounts": [], "loops": [], "journal_entries": 0}
    assert sysctl("vm.dirty_background_ratio") == before


@pytest.mark.root
@needs_loops
def test_kill9_leftovers_are_removed_by_cleanup(tmp_path):
    base = str(tmp_path / "base")
    before = sysctl("vm.dirty_background_ratio")
    proc = rig("run", "--config", write_config(tmp_path, volume=256, repeats=50), "--out",
               str(tmp_path / "out"), base=base, start_new_session=True)
    _wait_for_mount(proc, base)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGKILL)       # the rig and its pylog/fio children
    proc.communicate(timeout=60)
    time.sleep(0.5)
    left = leftovers(base)
    assert left["mounts"] and left["loops"] and left["journal_entries"]
    assert sysctl("vm.dirty_background_ratio") != before
    done = rig("cleanup", base=base)
    _, stderr = done.communicate(timeout=120)
    assert done.returncode == 0, stderr
    assert "nothing of the rig is left" in stderr
    assert leftovers(base) == {"mounts": [], "loops": [], "journal_entries": 0}
    assert users_under(base) == []            # the measurement died with the rig
    assert sysctl("vm.dirty_background_ratio") == before
    assert os.listdir(os.path.join(base, "images")) == []
