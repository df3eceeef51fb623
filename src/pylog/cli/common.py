"""What every verb shares: one-line errors, --log-dirs, aligned tables or JSON."""

from __future__ import annotations

import json
import sys

import click

from pylog.errors import PylogError

__all__ = ["PylogCommandError", "LOG_LEVELS", "configure_logging", "fail_on", "log_dirs_option",
           "print_table", "print_json"]


LOG_LEVELS = ["debug", "info", "warning", "error"]


def configure_logging(level: str) -> None:
    """pylog's loggers (one per layer: pylog.storage, pylog.broker, pylog.coordinator,
    pylog.client, pylog.spark, pylog.cli) to stderr at `level`, in the shape of Kafka's
    log lines: ``[time] LEVEL message (logger)``."""
    import logging
    logging.basicConfig(level=getattr(logging, level.upper()), force=True,
                        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")


class PylogCommandError(PylogError):
    """A problem to print as one line on stderr (exit status 2)."""


def fail_on(*errors: type[BaseException]):
    """Turns `errors` raised by the verb into PylogCommandError (one line), unless
    --verbose asked for the traceback."""
    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except click.ClickException:
                raise                      # usage errors: click prints them with their hint
            except errors as exc:
                ctx = click.get_current_context(silent=True)
                if ctx is not None and (ctx.find_root().obj or {}).get("verbose"):
                    raise
                raise PylogCommandError(f"{ctx.info_name if ctx else ''}: {exc}") from None
        return run
    return wrap


def log_dirs_option(required: bool = True):
    return click.option("--log-dirs", required=required, metavar="DIR[,DIR...]",
                        help="the store's log dirs (Kafka's log.dirs), comma-separated")


def print_table(headers: list[str], rows: list[list]) -> None:
    """Columns aligned for people."""
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def print_json(value) -> None:
    json.dump(value, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
