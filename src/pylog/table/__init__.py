"""Topics as tables: a topic's records as an Apache Iceberg table on the same disks,
kept exact by a background converter (docs/TABLES.md).

Sits above storage and record (it reads segment files with the C Arrow decoder) and below
the store, the CLI, the broker and Spark. pyiceberg is the ``[table]`` extra, imported
when a table is first opened; the names below load their module on first use (a store
opens pylog.table.service without paying for pyarrow until a topic has a table).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["TableConfig", "TableConfigError", "TableConverter", "TableService", "CommitResult",
           "convert", "open_catalog", "rebuild", "table_config", "table_identifier", "watermarks"]

_HOME = {
    "TableConfig": "config", "TableConfigError": "config", "table_config": "config",
    "table_identifier": "config", "open_catalog": "catalog", "TableService": "service",
    "TableConverter": "converter", "CommitResult": "converter", "convert": "converter",
    "rebuild": "converter", "watermarks": "converter",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'pylog.table' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
