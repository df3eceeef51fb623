"""Run as a separate process: opens a LogManager on the dirs given on the command
line, prints READY, and holds it open until stdin closes."""

import sys

from pylog.storage import LogManager

if __name__ == "__main__":
    manager = LogManager(sys.argv[1:])
    print("READY", flush=True)
    sys.stdin.read()
    manager.close()
