"""A topic's table settings: the ``pylog.table.*`` topic configs, interpreted.

The keys are declared and validated with every other topic config
(:data:`pylog.storage.TOPIC_CONFIGS`, so CreateTopics, kafka-configs and the CLI
accept and check them); this module reads them for the converter: which catalog,
which table, how often, partitioned how. docs/TABLES.md "Configuration".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pylog.errors import ConfigError

__all__ = ["TableConfig", "TableConfigError", "table_config", "table_identifier",
           "DEFAULT_CATALOG", "CATALOG_PREFIX", "SCHEMA_PREFIX"]

#: The catalog name that means the local SQL catalog when no property is given.
DEFAULT_CATALOG = "pylog"
CATALOG_PREFIX = "pylog.table.catalog."
SCHEMA_PREFIX = "pylog.table.schema."

# Iceberg (and Spark SQL) read '.' as the namespace separator; Kafka topic names may hold
# it. Kafka's other characters ([a-zA-Z0-9_-]) are valid in an Iceberg identifier.
_NOT_IN_TABLE_NAME = re.compile(r"[^A-Za-z0-9_-]")


class TableConfigError(ConfigError):
    """A topic's settings that cannot make a table (a compacted topic, a missing extra)."""


@dataclass(frozen=True, slots=True)
class TableConfig:
    enable: bool
    catalog: str                       # pyiceberg catalog name
    catalog_properties: dict[str, str]  # pylog.table.catalog.<property>, prefix removed
    namespace: str
    name: str                          # the table's name (the topic's, made valid)
    commit_interval_ms: int
    partition_by: str                  # none | partition | hour(timestamp) | day(timestamp)
    retention: str                     # keep
    schema_properties: dict[str, str] = field(default_factory=dict)  # pylog.table.schema.*
    # Maintenance (pylog.table.maintenance): a schedule (<= 0: off) and its settings.
    maintenance_interval_ms: int = 3_600_000
    compact_target_file_bytes: int = 128 << 20
    compact_min_files: int = 5
    snapshot_max_age_ms: int = 86_400_000       # -1: never expire
    snapshot_retain_last: int = 1
    orphan_min_age_ms: int = 86_400_000         # -1: never remove

    @property
    def local_catalog(self) -> bool:
        """The default: pyiceberg's SQL catalog on SQLite in the store's first log dir."""
        return self.catalog == DEFAULT_CATALOG and not self.catalog_properties


def _get(config: Mapping[str, Any], key: str, default: Any) -> Any:
    try:
        return config[key]
    except KeyError:
        return default


def table_config(topic: str, config: Mapping[str, Any]) -> TableConfig:
    """The table settings of `topic` from its configs (a LogConfig or a mapping of
    the keys in effect)."""
    name = str(_get(config, "pylog.table.name", "") or "") or _NOT_IN_TABLE_NAME.sub("_", topic)
    return TableConfig(
        enable=bool(_get(config, "pylog.table.enable", False)),
        catalog=str(_get(config, "pylog.table.catalog", DEFAULT_CATALOG)),
        catalog_properties={k[len(CATALOG_PREFIX):]: str(v) for k, v in config.items()
                            if k.startswith(CATALOG_PREFIX)},
        namespace=str(_get(config, "pylog.table.namespace", "pylog")),
        name=name,
        commit_interval_ms=int(_get(config, "pylog.table.commit.interval.ms", 60_000)),
        partition_by=str(_get(config, "pylog.table.partition.by", "none")),
        retention=str(_get(config, "pylog.table.retention", "keep")),
        schema_properties={k[len(SCHEMA_PREFIX):]: str(v) for k, v in config.items()
                           if k.startswith(SCHEMA_PREFIX)},
        maintenance_interval_ms=int(_get(config, "pylog.table.maintenance.interval.ms", 3_600_000)),
        compact_target_file_bytes=int(_get(config, "pylog.table.compact.target.file.bytes",
                                           128 << 20)),
        compact_min_files=int(_get(config, "pylog.table.compact.min.files", 5)),
        snapshot_max_age_ms=int(_get(config, "pylog.table.snapshot.max.age.ms", 86_400_000)),
        snapshot_retain_last=int(_get(config, "pylog.table.snapshot.retain.last", 1)),
        orphan_min_age_ms=int(_get(config, "pylog.table.orphan.min.age.ms", 86_400_000)),
    )


def table_identifier(topic: str, topic_config: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, table name) of the topic's table: ``pylog.table.name``, else the topic's
    name with each character Iceberg cannot take ('.') replaced by '_'."""
    tc = table_config(topic, topic_config)
    return tc.namespace, tc.name


def check_convertible(topic: str, topic_config: Mapping[str, Any]) -> None:
    """Raises TableConfigError when the topic cannot become an exact table."""
    policy = tuple(_get(topic_config, "cleanup.policy", ("delete",)))
    if "compact" in policy:
        raise TableConfigError(
            f"topic {topic!r}: pylog.table.enable=true with cleanup.policy="
            f"{','.join(policy)} is refused: the log cleaner removes records the table may "
            "already hold, so the table could not equal the log (upsert tables are not "
            "built); use cleanup.policy=delete")
