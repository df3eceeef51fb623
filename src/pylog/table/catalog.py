"""Where a topic's table lives: the pyiceberg catalog, and the table in it.

The default needs nothing running: pyiceberg's SQL catalog on SQLite in the store's
first log dir (``<dir>/__tables/catalog.db``), the table's files under
``<dir>/__tables/warehouse/<namespace>/<table>`` of the log dir that holds the topic's
partition 0. Any other pyiceberg catalog (rest, sql, hive, glue) is named by
``pylog.table.catalog`` and configured by ``pylog.table.catalog.<property>`` (passed to
``pyiceberg.catalog.load_catalog``) or by pyiceberg's own configuration.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from pylog.storage import TABLES_DIR, LogManager

from .columns import iceberg_schema, partition_spec
from .config import TableConfig, TableConfigError, table_config

__all__ = ["open_catalog", "local_catalog_path", "load_or_create_table", "log_dirs_of"]

CATALOG_FILE = "catalog.db"
WAREHOUSE_DIR = "warehouse"


def log_dirs_of(store_or_log_dirs: Any) -> list[str]:
    """The log dirs of a store, or the dirs given (a path, a comma-separated list, a list)."""
    if isinstance(store_or_log_dirs, LogManager):
        return list(store_or_log_dirs.log_dirs)
    if isinstance(store_or_log_dirs, (str, os.PathLike)):
        return [p.strip() for p in os.fspath(store_or_log_dirs).split(",") if p.strip()]
    if isinstance(store_or_log_dirs, Iterable):
        return [os.fspath(p) for p in store_or_log_dirs]
    raise TypeError(f"expected a store or log dirs, got {type(store_or_log_dirs).__name__}")


def local_catalog_path(log_dir: str) -> str:
    return os.path.join(os.path.abspath(log_dir), TABLES_DIR, CATALOG_FILE)


def warehouse_path(log_dir: str) -> str:
    return os.path.join(os.path.abspath(log_dir), TABLES_DIR, WAREHOUSE_DIR)


def _require_pyiceberg() -> None:
    try:
        import pyiceberg  # noqa: F401
    except ImportError:
        raise TableConfigError("pylog.table needs pyiceberg: pip install 'pylog-kafka[table]'") from None


def open_catalog(store_or_log_dirs: Any, topic_config: Mapping[str, Any] | TableConfig):
    """The pyiceberg Catalog a topic's table is in (docs/TABLES.md "Configuration")."""
    _require_pyiceberg()
    tc = topic_config if isinstance(topic_config, TableConfig) else table_config("", topic_config)
    if tc.local_catalog:
        from pyiceberg.catalog.sql import SqlCatalog
        first = log_dirs_of(store_or_log_dirs)[0]
        os.makedirs(os.path.join(os.path.abspath(first), TABLES_DIR), exist_ok=True)
        return SqlCatalog(tc.catalog, uri=f"sqlite:///{local_catalog_path(first)}",
                          warehouse=f"file://{warehouse_path(first)}")
    from pyiceberg.catalog import load_catalog
    return load_catalog(tc.catalog, **tc.catalog_properties)


#: pyiceberg retries a commit that lost a race by appending the same files again on top
#: of the winner's snapshot: for the converter that would put a range in the table twice.
#: Its tables say "no retries": a lost race fails, and the converter reads the new
#: watermark and converts from there (converter.py).
NO_COMMIT_RETRIES = {"commit.retry.num-retries": "0"}


#: Column statistics, in the manifests (Iceberg's file pruning) and in the Parquet footers
#: (a reader's row-group skipping), for the columns a query filters on: the Kafka ones
#: (offset ranges: the union reader; partition, time, topic) and a typed topic's value
#: columns (Iceberg's own default mode, truncate(16)); none for key, value and headers,
#: whose min/max of opaque bytes prune nothing and cost the writer.
METRICS = {"write.metadata.metrics.default": "truncate(16)",
           **{f"write.metadata.metrics.column.{c}": "full"
              for c in ("topic", "partition", "offset", "timestamp", "timestampType")},
           **{f"write.metadata.metrics.column.{c}": "none"
              for c in ("key", "value", "headers.element.key", "headers.element.value")}}


def load_or_create_table(catalog, tc: TableConfig, location_dir: str | None):
    """The table, created (with its namespace) on first use. `location_dir`: the log dir
    whose warehouse holds the files (local catalog), or None for the catalog's default."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
    identifier = (tc.namespace, tc.name)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    else:
        if any(table.properties.get(k) != v for k, v in NO_COMMIT_RETRIES.items()):
            with table.transaction() as txn:      # changed since (or made by another tool)
                txn.set_properties(NO_COMMIT_RETRIES)
        return table
    try:
        catalog.create_namespace(tc.namespace)
    except NamespaceAlreadyExistsError:
        pass
    location = None
    if location_dir is not None and tc.local_catalog:
        location = f"file://{os.path.join(warehouse_path(location_dir), tc.namespace, tc.name)}"
    try:
        return catalog.create_table(identifier, iceberg_schema(), location=location,
                                    partition_spec=partition_spec(tc.partition_by),
                                    properties={"pylog.table.version": "1", **METRICS,
                                                **NO_COMMIT_RETRIES})
    except TableAlreadyExistsError:      # created by another process meanwhile
        return catalog.load_table(identifier)
