"""Dynamic broker configs (Kafka's KIP-226): broker settings changed while the store runs.

Two levels, as in Kafka: this node's own (Kafka's resource name = the node id) and the
cluster-wide default (resource name ``""``). Each key's value comes from, highest first:

    topic override > dynamic per-broker > dynamic cluster default
                   > static (the config the store was opened with) > default

Only the keys in :data:`DYNAMIC_BROKER_CONFIGS` change at run time: the first broker
synonym of every topic config a live log applies at once (``log.retention.ms``,
``log.segment.bytes``, ``message.max.bytes``, ``log.cleanup.policy``, ...; the other
synonyms, ``log.retention.hours`` for one, stay read-only as in Kafka) and the log
cleaner's and loader's sizes Kafka makes dynamic. The layers above register keys of
their own (the broker's ``max.connections``) with :meth:`DynamicConfigs.add_reconfigurable`.

A change is written to every online log dir (``pylog-broker-configs.json``, one copy per
dir, the newest epoch wins at open: docs/FORMAT.md, section 11) before it takes effect,
and then applies to every live log whose topic does not override the key, without a
restart (retention at its next ``log.retention.check.interval.ms``, segment sizes at the
next roll). A value in the file that no longer validates is ignored at open with a
warning (Kafka's ``removeInvalidConfigs``): the store always opens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pylog.common.config import ConfigDef, unknown_key
from pylog.errors import ConfigError, CorruptCheckpointError

from . import files
from .dir_tables import TableDirs, install_table, load_table
from .config import _BROKER_SYNONYMS, BROKER_CONFIGS, TOPIC_CONFIGS, BrokerConfig, LogConfig, normalize_key
from .topics import config_to_strings

__all__ = ["DYNAMIC_BROKER_CONFIGS", "PER_BROKER", "CLUSTER_DEFAULT", "DynamicConfigTable",
           "DynamicConfigs", "broker_config_def", "broker_config_synonyms"]

log = logging.getLogger(__name__)

PER_BROKER, CLUSTER_DEFAULT = "broker", "default"

#: Topic configs whose broker default cannot change under live logs: the I/O engine is
#: chosen when a log opens, and the checkpoint interval schedules a task at open.
_STATIC_TOPIC_CONFIGS = {"pylog.io.engine", "pylog.recovery.point.checkpoint.interval.ms"}

#: The store's keys that may change at run time (Kafka's DynamicLogConfig, LogCleaner and
#: DynamicThreadPool reconfigurable configs, as far as pylog has them).
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    [d.broker_synonyms[0] for d in TOPIC_CONFIGS.values() if d.name not in _STATIC_TOPIC_CONFIGS]
    + ["log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
       "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
       "num.recovery.threads.per.data.dir"])


def broker_config_def(key: str) -> ConfigDef | None:
    """The definition of a store key at broker level (``log.retention.hours`` is parsed
    as ``retention.ms``'s type and rule, in hours); None if the store has no such key."""
    if key in BROKER_CONFIGS:
        return BROKER_CONFIGS[key]
    synonym = _BROKER_SYNONYMS.get(key)
    return TOPIC_CONFIGS[synonym[0]] if synonym else None


def broker_config_synonyms(key: str) -> tuple[str, ...]:
    """Kafka's ``brokerConfigSynonyms``: the keys that set the same thing, highest
    priority first, from `key` on (``log.retention.minutes`` -> minutes, hours)."""
    synonym = _BROKER_SYNONYMS.get(key)
    if synonym is None:
        return (key,)
    names = TOPIC_CONFIGS[synonym[0]].broker_synonyms
    return names[names.index(key):]


@dataclass(slots=True)
class DynamicConfigTable:
    """The dynamic configs of both levels, as Kafka's properties strings, and the epoch
    of the last change (a dir_tables table)."""

    FILE = files.BROKER_CONFIGS_FILE
    WHAT = "dynamic broker config"
    MODE = 0o644

    epoch: int = 0
    broker: dict[str, str] = field(default_factory=dict)      # this node's
    default: dict[str, str] = field(default_factory=dict)     # cluster-wide default

    def level(self, which: str) -> dict[str, str]:
        if which not in (PER_BROKER, CLUSTER_DEFAULT):
            raise ValueError(f"config level must be {PER_BROKER!r} or {CLUSTER_DEFAULT!r}, "
                             f"not {which!r}")
        return self.broker if which == PER_BROKER else self.default

    def merged(self) -> dict[str, str]:
        """Both levels, the per-broker value winning."""
        return {**self.default, **self.broker}

    def copy(self) -> DynamicConfigTable:
        return DynamicConfigTable(self.epoch, dict(self.broker), dict(self.default))

    def to_json(self) -> dict:
        return {PER_BROKER: dict(sorted(self.broker.items())),
                CLUSTER_DEFAULT: dict(sorted(self.default.items()))}

    @classmethod
    def from_json(cls, body: dict, path: str) -> DynamicConfigTable:
        levels = []
        for name in (PER_BROKER, CLUSTER_DEFAULT):
            values = body[name]
            if not isinstance(values, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
                raise CorruptCheckpointError(f"{path}: {name!r} must map names to strings")
            levels.append(values)
        return cls(int(body["epoch"]), *levels)


class DynamicConfigs:
    """The store's dynamic broker configs (the LogManager owns this keeper and delegates
    its public methods).

    Its view of the store: ``dirs`` (:class:`~.dir_tables.TableDirs`: the lock, the
    dirs to write), ``topic_overrides()`` (topic name -> its config overrides, to check
    that every topic's config stays valid) and ``apply(config, topic_configs)`` (called
    with the lock held: the store takes the new broker config and each topic's config
    to its live logs)."""

    def __init__(self, dirs: TableDirs, static: Mapping[str, Any],
                 topic_overrides: Callable[[], Mapping[str, Mapping[str, str]]],
                 apply: Callable[[BrokerConfig, dict[str, LogConfig]], None]) -> None:
        self._dirs = dirs
        self._topic_overrides = topic_overrides
        self._apply = apply
        #: The config the store was opened with (Kafka's STATIC_BROKER_CONFIG), as given.
        self.static_config: dict[str, Any] = {normalize_key(k): v for k, v in static.items()}
        self._dynamic = DynamicConfigTable()
        self._reconfigurables: list[tuple[Mapping[str, ConfigDef], Callable[[dict[str, str]], None]]] = []

    # ============================================================== reading

    @property
    def dynamic_broker_configs(self) -> dict[str, dict[str, str]]:
        """``{"broker": {...}, "default": {...}}``: the dynamic configs of this node and
        the cluster-wide default, as strings."""
        return {PER_BROKER: dict(self._dynamic.broker), CLUSTER_DEFAULT: dict(self._dynamic.default)}

    def dynamic_config_keys(self) -> dict[str, ConfigDef]:
        """Every key that may change at run time: the store's and the registered ones."""
        keys = {k: broker_config_def(k) for k in DYNAMIC_BROKER_CONFIGS}
        for defs, _ in self._reconfigurables:
            keys.update(defs)
        return keys

    def store_config(self) -> BrokerConfig:
        """The static config with the dynamic store keys over it (per-broker winning)."""
        return self._store_config(self._dynamic)

    # ============================================================== changing

    def alter_broker_configs(self, level: str, configs: Mapping[str, Any], *,
                             validate_only: bool = False) -> None:
        """Replaces the dynamic configs of `level` (``"broker"``: this node, Kafka's
        resource name = node id; ``"default"``: the cluster-wide default, resource name
        ``""``) with `configs` (Kafka's AlterConfigs; IncrementalAlterConfigs computes
        the full set first). Persisted in every online log dir, then applied to every
        live log without a restart. ConfigError names an unknown key, a key that cannot
        change at run time, or a bad value; nothing changes then. ``validate_only`` runs
        every check and changes nothing."""
        allowed = self.dynamic_config_keys()
        new: dict[str, str] = {}
        for raw_key, value in configs.items():
            key = normalize_key(raw_key)
            definition = allowed.get(key)
            if definition is None:
                if broker_config_def(key) is None:
                    raise unknown_key(key, list(allowed), "dynamic broker")
                first = broker_config_def(key).broker_synonyms
                hint = f"; set {first[0]} instead" if first and first[0] != key else ""
                raise ConfigError(f"cannot update {key} dynamically: it is read-only (set it in "
                                  f"server.properties and restart{hint})")
            new[key] = config_to_strings({key: definition.parse(value, key)})[key]
        with self._dirs.lock:
            self._dirs.check_open()
            table = self._dynamic.copy()
            table.epoch += 1
            target = table.level(level)
            target.clear()
            target.update(new)
            config, topic_configs = self._reconfigured(table)       # checks the whole result
            if validate_only:
                return
            install_table(self._dirs, table)
            self._dynamic = table
            self._apply(config, topic_configs)
            self._notify(table)
        log.info("dynamic %s configs are now %s", "broker" if level == PER_BROKER else
                 "cluster default", new or "empty")

    def add_reconfigurable(self, defs: Mapping[str, ConfigDef],
                           on_change: Callable[[dict[str, str]], None]) -> None:
        """Kafka's ``addReconfigurable``: the keys of `defs` become dynamic keys of this
        store (validated with their definitions), and ``on_change(values)`` gets their
        dynamic values (per-broker winning over the default, as strings) now and after
        every change. Values stored earlier that no longer validate are left out, with
        a warning."""
        with self._dirs.lock:
            self._reconfigurables.append((dict(defs), on_change))
            table = self._dynamic.copy()
            self._drop_invalid(table, defs, defs)
            self._dynamic = table             # a new table: readers copy without the lock
            on_change({k: v for k, v in table.merged().items() if k in defs})

    def remove_reconfigurable(self, on_change: Callable[[dict[str, str]], None]) -> None:
        with self._dirs.lock:
            self._reconfigurables = [r for r in self._reconfigurables if r[1] != on_change]

    # ============================================================== internals

    def load(self) -> BrokerConfig | None:
        """At open, before any topic config is built: the newest copy of the table wins,
        stale copies are rewritten, and the store's keys are applied (a value that no
        longer validates is ignored with a warning). Returns the store's config under
        it, or None when no dir has a copy."""
        table = load_table(self._dirs, DynamicConfigTable)
        if table is None:
            return None
        # Store keys that are not dynamic (hand-edited) are dropped too; keys the store
        # does not know are kept for the layers above (add_reconfigurable checks them).
        self._drop_invalid(table, {k: broker_config_def(k) for k in
                                   (*BROKER_CONFIGS, *_BROKER_SYNONYMS)}, DYNAMIC_BROKER_CONFIGS)
        self._dynamic = table
        if table.merged():
            log.info("dynamic broker configs: %s", table.merged())
        return self._store_config(table)

    @staticmethod
    def _drop_invalid(table: DynamicConfigTable, defs: Mapping[str, ConfigDef],
                      dynamic) -> None:
        """Removes from `table` (in memory; the file follows at the next change) the
        entries of keys `defs` defines that are not `dynamic` or no longer validate,
        with a warning each: they are ignored, as Kafka's removeInvalidConfigs does."""
        for level in (table.broker, table.default):
            for key, value in list(level.items()):
                if key not in defs:
                    continue
                try:
                    if key not in dynamic:
                        raise ConfigError(f"{key} cannot change at run time")
                    defs[key].parse(value, key)
                except ConfigError as exc:
                    log.warning("ignoring a stored dynamic broker config: %s", exc)
                    del level[key]

    def _store_config(self, table: DynamicConfigTable) -> BrokerConfig:
        return BrokerConfig({**self.static_config, **{
            k: v for k, v in table.merged().items() if k in DYNAMIC_BROKER_CONFIGS}})

    def _reconfigured(self, table: DynamicConfigTable) -> tuple[BrokerConfig, dict[str, LogConfig]]:
        """The store's config and every topic's config under `table`; raises ConfigError
        (nothing changed) if any of them is invalid."""
        config = self._store_config(table)
        topic_configs = {name: LogConfig(overrides, defaults=config.log_config)
                         for name, overrides in self._topic_overrides().items()}
        return config, topic_configs

    def _notify(self, table: DynamicConfigTable) -> None:
        merged = table.merged()
        for defs, on_change in self._reconfigurables:
            on_change({k: v for k, v in merged.items() if k in defs})
