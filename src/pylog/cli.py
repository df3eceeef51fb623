"""The ``pylog`` command. For now only ``--version`` and ``--help``: the
operations tools (topics, console producer/consumer, dump-log, serve, perf)
arrive with their own issue and will register here."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    import pylog

    parser = argparse.ArgumentParser(
        prog="pylog", description="pylog: a Kafka-compatible log storage engine for Python with a C core.",
        epilog="The library API is documented in the README; command-line tools are not built yet.")
    parser.add_argument("--version", action="version",
                        version=f"pylog {pylog.__version__} (crc32c: {pylog.crc32c_implementation()}; "
                                f"io engine: {pylog.io_engine()})")
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
