"""`pylog serve` in a child process, for tests that watch the broker from outside
(its syscalls with strace, its resident memory in /proc)."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time


class ServeProcess:
    """``pylog serve`` on a free port (``listen``: Kafka's listeners, the first one's
    address is :attr:`bootstrap`); ``overrides`` are ``key=value`` broker configs,
    ``nofile`` the child's open-files limit, soft and hard (``ulimit -n``), ``preexec_fn``
    runs in the child before it starts (e.g. resource.setrlimit), ``listen`` the listeners
    (``SASL_PLAINTEXT://127.0.0.1:0`` for a SASL one; :attr:`listeners` has each one's
    address by name)."""

    def __init__(self, log_dirs: str, *overrides: str, nofile: int | None = None,
                 preexec_fn=None, listen: str = "127.0.0.1:0") -> None:
        cmd = [sys.executable, "-c", "import sys; from pylog.cli import main; sys.exit(main())",
               "serve", "--log-dirs", log_dirs, "--listen", listen, "--log-level", "warning"]
        for o in overrides:
            cmd += ["--override", o]
        def prepare() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            if preexec_fn is not None:
                preexec_fn()

        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=prepare if nofile is not None or preexec_fn else None)
        # Drain the broker's log as it comes, from the start: a full pipe would block its
        # logging (a start-up that logs more than 64 KiB would never print its address).
        self._err: list[str] = []
        self._drain = threading.Thread(target=lambda: self._err.extend(self.proc.stderr), daemon=True)
        self._drain.start()
        line = self.proc.stdout.readline()
        found = re.search(r" on (\S+):(\d+)$", line.strip())
        if not found:
            self.proc.kill()
            self.proc.wait()
            self._drain.join(10)
            raise RuntimeError(f"pylog serve did not start: {line!r} {''.join(self._err)}")
        self.bootstrap = f"{found.group(1)}:{found.group(2)}"
        #: Each listener's advertised host:port by name (serve's "listeners:" line).
        self.listeners = dict(re.findall(r"(\w[\w-]*)://\S+ \(\w+, advertised as (\S+?)\)",
                                         self.proc.stdout.readline()))
        self.pid = self.proc.pid

    def status(self, field: str) -> int:
        """A /proc/PID/status field in KiB (VmRSS, VmHWM)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)

    def log_lines(self) -> list[str]:
        """What the broker has logged so far (stderr, drained by a thread)."""
        return "".join(self._err).splitlines()

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """kill -9: no shutdown, no flush (what survives is what was on disk)."""
        self.proc.kill()
        self.proc.wait()

    def stop(self, timeout: float = 20) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._drain.join(10)
        self.stderr = "".join(self._err)
        self.proc.stderr.close()
        return self.proc.returncode

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_until(predicate, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


__all__ = ["ServeProcess", "wait_until", "os"]
