"""Client quotas (KIP-13, KIP-55, KIP-257), kept by the store: Kafka keeps them in its
metadata log (ClientQuotaRecords) and changes them with AlterClientQuotas
(``kafka-configs.sh --alter --add-config producer_byte_rate=1024 --entity-type clients
--entity-name x``).

An entity is a set of (type, name) components: ``user``, ``client-id`` or both, a name
of None meaning the type's default (``<default>`` in kafka-configs). pylog keeps them in
``pylog-client-quotas.json``, one copy per online log dir (dir_tables.py), written before
a change is answered. Readers (the broker's quota manager) take no lock: a change
installs a new table and moves :attr:`client_quota_epoch`.

:class:`ClientQuotas` is the keeper the LogManager owns (it delegates its public
methods); it sees the store only through :class:`~.dir_tables.TableDirs`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from pylog.errors import CorruptCheckpointError, InvalidRequestError, PylogError

from . import files
from .dir_tables import TableDirs, install_table, load_table

__all__ = ["QUOTA_KEYS", "USER", "CLIENT_ID", "Entity", "ClientQuotaTable", "ClientQuotas"]

log = logging.getLogger(__name__)

USER, CLIENT_ID = "user", "client-id"
#: The keys pylog enforces (Kafka's QuotaConfig): bytes/s and % of one thread's time.
QUOTA_KEYS = {"producer_byte_rate": "long", "consumer_byte_rate": "long",
              "request_percentage": "double"}

#: An entity: its components sorted by type, ((type, name or None for the default), ...).
Entity = tuple[tuple[str, str | None], ...]


def check_entity(components: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of `components`; InvalidRequestError naming what cannot be one (Kafka's
    ClientQuotaControlManager.validateEntity)."""
    entity: dict[str, str | None] = {}
    for kind, name in components:
        if kind in entity:
            raise InvalidRequestError(f"Invalid quota entity: entity type {kind} named twice")
        if kind == "ip":
            raise InvalidRequestError("ip quotas (connection_creation_rate) are not enforced by "
                                      "pylog: quota entities are user and client-id")
        if kind not in (USER, CLIENT_ID):
            raise InvalidRequestError(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name and kind == USER:
            raise InvalidRequestError("Invalid empty user name (use <default>: --entity-default)")
        entity[kind] = name
    if not entity:
        raise InvalidRequestError("Invalid empty client quota entity")
    return tuple(sorted(entity.items()))


def check_value(key: str, value: float) -> float:
    kind = QUOTA_KEYS.get(key)
    if kind is None:
        raise InvalidRequestError(f"Unknown or unsupported client quota key {key}: pylog enforces "
                                  f"{', '.join(QUOTA_KEYS)}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequestError(f"Invalid value {value} for client quota {key}: it must be "
                                  f"a positive number")
    if kind == "long" and value != math.floor(value):
        raise InvalidRequestError(f"Invalid value {value} for client quota {key}: it must be a "
                                  f"whole number (bytes per second)")
    return float(value)


@dataclass(frozen=True)
class ClientQuotaTable:
    FILE = files.CLIENT_QUOTAS_FILE
    WHAT = "client quotas"
    MODE = 0o644

    epoch: int = 0
    quotas: dict[Entity, dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"quotas": [{"entity": [list(c) for c in entity], "values": values}
                           for entity, values in sorted(self.quotas.items(), key=lambda e: repr(e[0]))]}

    @classmethod
    def from_json(cls, body: dict, path: str) -> ClientQuotaTable:
        quotas = {}
        for row in body["quotas"]:
            try:
                entity = check_entity((str(k), None if n is None else str(n)) for k, n in row["entity"])
                quotas[entity] = {str(k): check_value(str(k), float(v)) for k, v in row["values"].items()}
            except PylogError as exc:
                raise CorruptCheckpointError(f"{path}: quota {row!r}: {exc}") from None
        return cls(int(body["epoch"]), quotas)


class ClientQuotas:
    """The store's client quotas: read without a lock, changed under ``dirs.lock``."""

    def __init__(self, dirs: TableDirs) -> None:
        self._dirs = dirs
        self._client_quotas = ClientQuotaTable()

    def load(self) -> None:
        """At open: the newest copy in the log dirs."""
        table = load_table(self._dirs, ClientQuotaTable)
        if table is not None:
            self._client_quotas = table

    @property
    def client_quotas(self) -> dict[Entity, dict[str, float]]:
        """entity -> {key: value} (a snapshot: do not change it)."""
        return self._client_quotas.quotas

    @property
    def client_quota_epoch(self) -> int:
        return self._client_quotas.epoch

    def describe_client_quotas(self, components: list[tuple[str, int, str | None]],
                               strict: bool) -> dict[Entity, dict[str, float]]:
        """Kafka's DescribeClientQuotas: `components` are (entity type, match type, name):
        match type 0 the exact name, 1 the default, 2 any specified name (not the
        default); `strict`: only entities with exactly the filtered types."""
        wanted: dict[str, tuple[int, str | None]] = {}
        for kind, match, name in components:
            if kind in wanted:
                raise InvalidRequestError(f"Duplicate filter component entity type {kind}")
            if kind not in (USER, CLIENT_ID, "ip") or not kind:
                raise InvalidRequestError(f"Unhandled client quota entity type: {kind}")
            if match not in (0, 1, 2):
                raise InvalidRequestError(f"Unknown match type {match}")
            if match == 0 and name is None:
                raise InvalidRequestError("A filter on an exact name needs the name")
            wanted[kind] = (match, name)
        out = {}
        for entity, values in self._client_quotas.quotas.items():
            names = dict(entity)
            if strict and set(names) != set(wanted):
                continue
            if all(kind in names and (
                    (match == 0 and names[kind] == name) or (match == 1 and names[kind] is None)
                    or (match == 2 and names[kind] is not None))
                   for kind, (match, name) in wanted.items()):
                out[entity] = dict(values)
        return out

    def alter_client_quotas(self, entries: Iterable[tuple[Iterable[tuple[str, str | None]],
                                                          Iterable[tuple[str, float, bool]]]],
                            validate_only: bool = False) -> list[PylogError | None]:
        """Kafka's AlterClientQuotas: entries of (entity components, ops of (key, value,
        remove)); each entry is checked on its own (InvalidRequestError naming the
        problem), the valid ones change together in one write, before this returns."""
        results: list[PylogError | None] = []
        changes: list[tuple[Entity, list[tuple[str, float, bool]]]] = []
        for components, ops in entries:
            try:
                entity = check_entity(components)
                checked = []
                seen = set()
                for key, value, remove in ops:
                    if key in seen:
                        raise InvalidRequestError(f"Duplicate quota key {key} for one entity")
                    seen.add(key)
                    if remove:
                        if key not in QUOTA_KEYS:
                            raise InvalidRequestError(f"Unknown or unsupported client quota key {key}")
                    else:
                        value = check_value(key, value)
                    checked.append((key, value, remove))
                changes.append((entity, checked))
                results.append(None)
            except PylogError as exc:
                results.append(exc)
        if changes and not validate_only:
            with self._dirs.lock:
                self._dirs.check_open()
                quotas = {e: dict(v) for e, v in self._client_quotas.quotas.items()}
                for entity, ops in changes:
                    values = quotas.setdefault(entity, {})
                    for key, value, remove in ops:
                        if remove:
                            values.pop(key, None)
                        else:
                            values[key] = value
                    if not values:
                        del quotas[entity]
                table = ClientQuotaTable(self._client_quotas.epoch + 1, quotas)
                install_table(self._dirs, table)
                self._client_quotas = table
                log.info("client quotas changed: %s", "; ".join(
                    f"{dict(e)}: {ops}" for e, ops in changes))
        return results
