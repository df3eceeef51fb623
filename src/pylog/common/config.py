"""Config definitions: typed keys with defaults, validators and Kafka-style errors.

The machinery every config of pylog is built from (Kafka's ``ConfigDef``):
storage's topic and broker configs (:mod:`pylog.storage.config`) and the
clients' configs (:mod:`pylog.client.config`) each declare their keys with
:class:`ConfigDef` and read them through a :class:`ConfigMapping`.

Values may be given as Python values or as the strings a Kafka properties
file would hold. A value that does not parse or breaks its rule raises
:class:`pylog.errors.ConfigError` naming the key, the value and the rule.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pylog.errors import ConfigError

__all__ = ["ConfigDef", "ConfigMapping", "LONG_MAX", "at_least", "between", "config_defs",
           "normalize_key", "one_of", "subset_of", "unknown_key"]

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config key: its type, default, validator and documentation."""

    name: str
    type: str              # "int" (Kafka's LONG), "int32" (INT), "float", "bool", "str", "list",
                           # "password" (a str never shown: DescribeConfigs says sensitive)
    default: Any
    doc: str
    validator: Callable[[Any], str | None] | None = None   # returns the rule broken, or None
    broker_synonyms: tuple[str, ...] = ()      # broker-level keys, highest priority first
    synonym_scale: tuple[int, ...] = ()        # multiplier per synonym (log.retention.hours -> ms)

    def parse(self, value: Any, key: str | None = None) -> Any:
        key = key or self.name
        try:
            parsed = _PARSERS[self.type](value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key} = {value!r}: expected {_TYPE_WORDS[self.type]}") from None
        if self.type in _INT_RANGES:
            lo, hi = _INT_RANGES[self.type]
            if not lo <= parsed <= hi:
                raise ConfigError(f"{key} = {value!r}: must be at most {hi} (Kafka's "
                                  f"{'INT' if self.type == 'int32' else 'LONG'} type)"
                                  if parsed > hi else f"{key} = {value!r}: must be at least {lo}")
        if self.validator is not None:
            problem = self.validator(parsed)
            if problem:
                raise ConfigError(f"{key} = {value!r}: {problem}")
        return parsed


def _parse_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return int(value.strip())
    raise TypeError


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError


def _parse_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, Iterable):
        return tuple(str(v) for v in value)
    raise TypeError


def _parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError
    return float(value)


def _parse_str(value: Any) -> str:
    # Kafka's string configs with numeric values (acks = 1, -1, 0) are written
    # as numbers by kafka-python users and by properties parsers: accept ints.
    # A bool becomes Kafka's spelling (pylog.io.direct = True -> "true").
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise TypeError
    return value


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "int": _parse_int,        # Kafka's LONG (64-bit)
    "int32": _parse_int,      # Kafka's INT
    "float": _parse_float,
    "bool": _parse_bool,
    "str": _parse_str,
    "password": _parse_str,
    "list": _parse_list,
}
_INT_RANGES = {"int": (-(1 << 63), (1 << 63) - 1), "int32": (-(1 << 31), (1 << 31) - 1)}
_TYPE_WORDS = {"int": "an integer", "int32": "an integer", "float": "a number", "bool": "true or false",
               "str": "a string", "password": "a string", "list": "a comma-separated list"}


def at_least(minimum: int | float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= minimum else f"must be at least {minimum}"


def between(lo: int | float, hi: int | float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def subset_of(*choices: str) -> Callable[[Any], str | None]:
    def check(values: tuple[str, ...]) -> str | None:
        bad = [v for v in values if v not in choices]
        if bad or not values:
            return f"must be a non-empty list of {', '.join(choices)}"
        return None
    return check


def config_defs(*defs: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in defs}


def normalize_key(key: str) -> str:
    """``segment_bytes`` -> ``segment.bytes``; Kafka keys pass through."""
    return key.replace("_", ".") if "_" in key and "." not in key else key


def unknown_key(key: str, known: Iterable[str], kind: str) -> ConfigError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"unknown {kind} config {key!r}{hint}")


class ConfigMapping(Mapping[str, Any]):
    """Read access shared by every validated config: a mapping by Kafka key
    (``config["segment.bytes"]``) and attributes with underscores
    (``config.segment_bytes``). Subclasses fill ``_values`` once; immutable."""

    __slots__ = ("_values",)

    _values: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self._values[normalize_key(key)]

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name.replace("_", ".")]
        except KeyError:
            raise AttributeError(name) from None

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)
