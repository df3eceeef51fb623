"""The machine side of the rig: loop-backed filesystems, kernel write-back knobs,
and a description of the machine for every result row. Every change goes
through the :class:`~tuning.journal.Journal` first.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass

from .journal import Journal, mounts_under

__all__ = ["FsProfile", "Mounted", "make_filesystems", "unmount_all", "set_sysctls",
           "restore_sysctls", "describe_machine", "describe_mount", "can_loop_mount"]


@dataclass(frozen=True)
class FsProfile:
    """A filesystem to build: mkfs command (the device is appended) and mount options."""

    name: str
    fs_type: str
    mkfs: tuple[str, ...]
    mount_options: str = ""


@dataclass
class Mounted:
    profile: FsProfile
    targets: list[str]               # one mount point per device
    devices: list[str]


def _run(cmd: list[str], what: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise RuntimeError(f"{what} failed: {' '.join(cmd)}: {detail[0] if detail else done.returncode}")
    return done.stdout


def can_loop_mount() -> str | None:
    """None if this process can build loop filesystems, else the reason it cannot."""
    if os.geteuid() != 0:
        return "building loop filesystems needs root (or give --mounts of real filesystems)"
    for tool in ("losetup", "mount", "umount", "mkfs.ext4", "mkfs.xfs"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install util-linux e2fsprogs xfsprogs)"
    if not os.path.exists("/dev/loop-control"):
        return "no /dev/loop-control: this kernel or container has no loop devices"
    return None


def make_filesystems(journal: Journal, profile: FsProfile, devices: int, size_mib: int
                     ) -> Mounted:
    """`devices` loop devices of `size_mib` each, formatted and mounted under the
    journal's base (``mnt/<profile>-<i>``)."""
    images = os.path.join(journal.base, "images")
    os.makedirs(images, exist_ok=True)
    out = Mounted(profile, [], [])
    for i in range(devices):
        image = os.path.join(images, f"{profile.name}-{i}.img")
        journal.record(kind="file", path=image)
        with open(image, "wb") as f:
            f.truncate(size_mib << 20)                  # sparse
        dev = _run(["losetup", "--find", "--show", "--direct-io=on", image], "losetup").strip()
        journal.record(kind="loop", device=dev, file=image)
        _run([*profile.mkfs, dev], f"mkfs for {profile.name}")
        target = os.path.join(journal.base, "mnt", f"{profile.name}-{i}")
        os.makedirs(target, exist_ok=True)
        journal.record(kind="mount", target=target)
        cmd = ["mount", "-t", profile.fs_type]
        if profile.mount_options:
            cmd += ["-o", profile.mount_options]
        _run([*cmd, dev, target], f"mounting {profile.name}")
        out.targets.append(target)
        out.devices.append(dev)
    return out


def unmount_all(journal: Journal, mounted: Mounted) -> None:
    """Unmounts, detaches and removes one profile's devices (the journal keeps the
    entries: replaying them later finds nothing left to do)."""
    for target in mounted.targets:
        if target in mounts_under(journal.base):
            if subprocess.run(["umount", target], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", target], capture_output=True)   # busy: lazily
    for dev in mounted.devices:
        subprocess.run(["losetup", "-d", dev], capture_output=True)
    for i in range(len(mounted.devices)):
        image = os.path.join(journal.base, "images", f"{mounted.profile.name}-{i}.img")
        if os.path.exists(image):
            os.unlink(image)


def _sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def read_sysctl(key: str) -> str:
    with open(_sysctl_path(key)) as f:
        return f.read().strip()


def set_sysctls(journal: Journal, values: dict[str, object]) -> dict[str, str]:
    """Sets kernel knobs (journalled with their current value first); returns the
    values they had."""
    before = {}
    for key, value in values.items():
        before[key] = read_sysctl(key)
        journal.record(kind="sysctl", key=key, original=before[key])
        with open(_sysctl_path(key), "w") as f:
            f.write(str(value))
    return before


def restore_sysctls(before: dict[str, str]) -> None:
    for key, value in before.items():
        with open(_sysctl_path(key), "w") as f:
            f.write(value)


def describe_machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        with open("/proc/meminfo") as f:
            mem_gib = int(f.readline().split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    knobs = {}
    for key in ("vm.dirty_background_ratio", "vm.dirty_ratio", "vm.dirty_expire_centisecs",
                "vm.dirty_writeback_centisecs"):
        try:
            knobs[key] = read_sysctl(key)
        except OSError:
            pass
    return {"host": platform.node(), "cpu": cpu, "cpus": os.cpu_count(),
            "memory_gib": round(mem_gib, 1), "kernel": platform.release(),
            "python": platform.python_version(), "writeback_defaults": knobs}


def describe_mount(path: str) -> dict:
    """Filesystem type, device and mount options of the mount holding `path`."""
    path = os.path.realpath(path)
    best = ("", "", "", "")
    with open("/proc/mounts") as f:
        for line in f:
            dev, target, fs, opts = line.split()[:4]
            target = target.replace("\\040", " ")
            if (path == target or path.startswith(target.rstrip("/") + "/")) and \
                    len(target) > len(best[1]):
                best = (dev, target, fs, opts)
    dev, target, fs, opts = best
    backing = None
    if dev.startswith("/dev/loop"):
        done = subprocess.run(["losetup", "--noheadings", "--output", "BACK-FILE", dev],
                              capture_output=True, text=True)
        backing = done.stdout.strip() or None
        if backing:
            backing_mount = describe_mount(os.path.dirname(backing))
            backing = {"file": backing, "on": backing_mount["device"],
                       "fs_type": backing_mount["fs_type"]}
    return {"device": dev, "mount_point": target, "fs_type": fs, "mount_options": opts,
            "loop_backing": backing}
