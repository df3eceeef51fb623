"""The ``pylog`` command: one entry point, a subcommand per tool, Kafka's option names.

Built on click (a well-kept library: nested commands, ``--help`` everywhere, typed options,
one-line errors). Each verb lives in its own module and imports the layer it needs on
first use, so ``pylog --help`` stays fast:

- ``serve`` (serve.py): the broker;
- ``export-to-kafka`` (export.py): hand a topic to a stopped Kafka broker;
- ``topics``, ``get-offsets`` (topics.py): Kafka's kafka-topics and kafka-get-offsets on
  log dirs;
- ``console-producer``, ``console-consumer`` (console.py): Kafka's console tools;
- ``consumer-groups`` (groups.py): list, describe with lag, reset offsets, delete;
- ``users`` (users.py): SCRAM credentials, as kafka-configs --entity-type users;
- ``log-dirs`` (log_dirs.py): a broker's log dirs (kafka-log-dirs.sh), a partition moved
  between them (KIP-113);
- ``dump-log`` (dump.py): Kafka's kafka-dump-log on pylog's (and Kafka's) files;
- ``verify``, ``recover`` (verify.py): offline checks and recovery, with a report;
- ``perf produce|consume|end-to-end`` (perf.py): Kafka's perf tests (pylog.perf);
- ``tables`` (tables.py): a topic's Iceberg table: describe, rebuild, compact, expire.

Errors print one line to stderr and exit non-zero, with no traceback (``--verbose`` shows
it).
"""

from __future__ import annotations

import sys

import click

from .common import LOG_LEVELS, PylogCommandError, configure_logging
from .console import console_consumer, console_producer
from .dump import dump_log
from .export import export_to_kafka
from .groups import consumer_groups
from .log_dirs import log_dirs
from .perf import perf
from .serve import serve
from .tables import tables
from .topics import get_offsets, topics
from .users import users
from .verify import recover, verify

__all__ = ["main", "cli"]


def _version(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    import pylog
    click.echo(f"pylog {pylog.__version__} (crc32c: {pylog.crc32c_implementation()}; "
               f"io engine: {pylog.io_engine()})")
    ctx.exit(0)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Print the version, the CRC-32C path and the I/O engine, then exit.")
@click.option("--verbose", is_flag=True, help="Show the traceback of an error.")
@click.option("--log-level", type=click.Choice(LOG_LEVELS),
              help="Log pylog's layers to stderr at this level (default: warning; serve: info).")
@click.pass_context
def cli(ctx: click.Context, verbose: bool, log_level: str | None) -> None:
    """pylog: a Kafka-compatible log storage engine for Python with a C core."""
    ctx.obj = {"verbose": verbose, "log_level": log_level}
    configure_logging(log_level or "warning")


for command in (serve, export_to_kafka, topics, get_offsets, console_producer, console_consumer,
                consumer_groups, dump_log, verify, recover, perf, users, log_dirs, tables):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    """Runs the command; returns the exit status (0 on success)."""
    try:
        result = cli.main(args=argv, prog_name="pylog", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("pylog: aborted", err=True)
        return 1
    except PylogCommandError as exc:
        click.echo(f"pylog: {exc}", err=True)
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
