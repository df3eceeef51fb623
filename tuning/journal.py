"""Everything the rig changes on the machine, written down before it is done, so
that it is always undone: at the end of a run, on Ctrl-C or SIGTERM, and after a
crash or a kill -9 (the next run, or ``python -m tuning cleanup``, replays the
journal and then looks for leftovers the journal may have missed).

Changes, each one JSON line in ``<base>/journal.jsonl``:

- ``{"kind": "file", "path": ...}``: a backing image (removed at cleanup);
- ``{"kind": "loop", "device": ..., "file": ...}``: a loop device (detached);
- ``{"kind": "mount", "target": ...}``: a mount (unmounted; lazily if busy);
- ``{"kind": "sysctl", "key": ..., "original": ...}``: a kernel knob (restored).

Undo runs in reverse order, and a sysctl is restored to the value journalled
first for it (the machine's own). The base directory is the rig's alone: every
mount point and image lives under it, which is how leftovers are recognised.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

__all__ = ["Journal", "cleanup", "leftovers", "DEFAULT_BASE"]

DEFAULT_BASE = os.environ.get("PYLOG_TUNING_BASE", "/var/tmp/pylog-tuning")


def _say(msg: str) -> None:
    print(f"tuning: {msg}", file=sys.stderr, flush=True)


class Journal:
    """Append-only record of changes under `base` (one rig at a time: flock)."""

    def __init__(self, base: str = DEFAULT_BASE) -> None:
        self.base = os.path.abspath(base)
        os.makedirs(self.base, exist_ok=True)
        self.path = os.path.join(self.base, "journal.jsonl")
        self._lock = open(os.path.join(self.base, ".lock"), "w")  # noqa: SIM115 - held for the rig's life
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another tuning rig is running on {self.base}") from None

    def record(self, **change) -> None:
        """Writes a change down (fsynced) before the caller makes it."""
        with open(self.path, "a") as f:
            f.write(json.dumps(change) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def entries(self) -> list[dict]:
        try:
            with open(self.path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
        except json.JSONDecodeError:           # a torn last line after a crash
            with open(self.path) as f:
                out = []
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        break
                return out

    def close(self) -> None:
        self._lock.close()


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True)


def mounts_under(base: str) -> list[str]:
    """Mount points under `base`, deepest first."""
    out = []
    with open("/proc/mounts") as f:
        for line in f:
            target = line.split()[1].replace("\\040", " ")
            if target == base or target.startswith(base.rstrip("/") + "/"):
                out.append(target)
    return sorted(out, key=len, reverse=True)


def loops_under(base: str) -> list[tuple[str, str]]:
    """(loop device, backing file) of loop devices whose file is under `base`."""
    done = _run("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE")
    out = []
    for line in done.stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            back = parts[1].strip().removesuffix(" (deleted)")
            if back.startswith(base.rstrip("/") + "/"):
                out.append((parts[0], back))
    return out


def leftovers(base: str = DEFAULT_BASE) -> dict:
    """What of the rig is still on the machine: mounts, loop devices, journal entries."""
    base = os.path.abspath(base)
    journal = os.path.join(base, "journal.jsonl")
    pending = 0
    if os.path.exists(journal):
        with open(journal) as f:
            pending = sum(1 for line in f if line.strip())
    return {"mounts": mounts_under(base), "loops": loops_under(base), "journal_entries": pending}


def users_under(base: str) -> list[int]:
    """Processes (not this one) with a file, their cwd or their executable under `base`:
    a measurement left running by a killed rig."""
    prefix = base.rstrip("/") + "/"
    me = os.getpid()
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        links = [f"/proc/{pid}/cwd"]
        try:
            links += [f"/proc/{pid}/fd/{fd}" for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        for link in links:
            try:
                if os.readlink(link).startswith(prefix):
                    out.append(int(pid))
                    break
            except OSError:
                pass
    return out


def _kill_users(base: str) -> list[int]:
    killed = users_under(base)
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while killed and time.monotonic() < deadline and users_under(base):
        time.sleep(0.05)
    return killed


def _unmount(target: str) -> bool:
    if _run("umount", target).returncode == 0:
        return True
    return _run("umount", "-l", target).returncode == 0     # busy: detach lazily


def cleanup(base: str = DEFAULT_BASE, journal: Journal | None = None, quiet: bool = False) -> dict:
    """Undoes every journalled change (newest first), then anything left under
    `base`; returns what was undone. Safe to run any number of times."""
    base = os.path.abspath(base)
    own = journal is None
    if own:
        if not os.path.isdir(base):
            return {"mounts": [], "loops": [], "sysctls": [], "files": []}
        journal = Journal(base)
    done: dict[str, list] = {"mounts": [], "loops": [], "sysctls": [], "files": []}
    try:
        entries = journal.entries()
        # Processes of a killed run (a measurement, fio's workers) still writing to
        # the mounts would keep them busy: they go first.
        killed = _kill_users(base)
        if killed:
            done["processes"] = [str(pid) for pid in killed]
        originals: dict[str, str] = {}
        for e in entries:                           # the first value seen is the machine's
            if e["kind"] == "sysctl":
                originals.setdefault(e["key"], e["original"])
        for e in reversed(entries):
            if e["kind"] == "mount" and e["target"] in mounts_under(base):
                if _unmount(e["target"]):
                    done["mounts"].append(e["target"])
            elif e["kind"] == "loop":
                if any(dev == e["device"] for dev, _ in loops_under(base)):
                    _run("losetup", "-d", e["device"])
                    done["loops"].append(e["device"])
            elif e["kind"] == "file" and os.path.exists(e["path"]):
                os.unlink(e["path"])
                done["files"].append(e["path"])
        for key, value in originals.items():
            path = "/proc/sys/" + key.replace(".", "/")
            try:
                with open(path) as f:
                    current = f.read().strip()
                if current != value:
                    with open(path, "w") as f:
                        f.write(value)
                    done["sysctls"].append(f"{key}={value}")
            except OSError as exc:
                _say(f"could not restore {key}={value}: {exc}")
        # Leftovers the journal missed (it is written before each change, so only
        # changes made by hand or by an older rig could be missing).
        for target in mounts_under(base):
            if _unmount(target):
                done["mounts"].append(target)
        for dev, back in loops_under(base):
            _run("losetup", "-d", dev)
            done["loops"].append(dev)
        # A detached loop device whose filesystem was busy goes when it is released.
        deadline = time.monotonic() + 10
        while loops_under(base) and time.monotonic() < deadline:
            time.sleep(0.05)
            for dev, _ in loops_under(base):
                _run("losetup", "-d", dev)
        images = os.path.join(base, "images")
        if os.path.isdir(images):
            for name in os.listdir(images):
                os.unlink(os.path.join(images, name))
                done["files"].append(os.path.join(images, name))
        try:
            os.unlink(journal.path)
        except FileNotFoundError:
            pass
    finally:
        if own:
            journal.close()
    if not quiet and any(done.values()):
        _say("cleaned up: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in done.items() if v))
    return done
