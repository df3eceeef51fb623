"""Spark's own Iceberg reader on pylog's local catalog: the Spark configuration that
opens ``<first log dir>/__tables/catalog.db`` with Iceberg's JdbcCatalog.

pyiceberg's SQL catalog and Iceberg's JdbcCatalog share their tables (iceberg_tables,
iceberg_namespace_properties), keyed by the catalog's name: the Spark catalog must be
named as pylog's (``pylog.table.catalog``, default ``pylog``). Spark needs the jars of
``tools/spark-iceberg/fetch`` (iceberg-spark-runtime and org.xerial:sqlite-jdbc).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["iceberg_catalog_conf"]


def iceberg_catalog_conf(log_dirs: Any, topic_config: Mapping[str, Any] | None = None) -> dict[str, str]:
    """``{spark conf key: value}`` for a SparkSession to read the topics' tables as
    ``<catalog>.<namespace>.<table>`` (default ``pylog.pylog.<topic>``)."""
    from pylog.table.catalog import local_catalog_path, log_dirs_of, warehouse_path
    from pylog.table.config import table_config
    tc = table_config("", dict(topic_config or {}))
    if not tc.local_catalog:
        raise ValueError(f"catalog {tc.catalog!r} is not pylog's local catalog: configure "
                         "Spark's Iceberg catalog for it as its documentation says")
    first = log_dirs_of(log_dirs)[0]
    key = f"spark.sql.catalog.{tc.catalog}"
    return {
        key: "org.apache.iceberg.spark.SparkCatalog",
        f"{key}.type": "jdbc",
        f"{key}.uri": f"jdbc:sqlite:{local_catalog_path(first)}",
        f"{key}.warehouse": f"file://{warehouse_path(first)}",
    }
