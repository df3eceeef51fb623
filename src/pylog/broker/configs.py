"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topic configs, and broker
configs with Kafka's dynamic ones (KIP-226).

A BROKER resource is named by this node's id (its configs: every broker-level key, the
source each value comes from, read-only unless it is dynamic) or ``""`` (the cluster-wide
dynamic defaults only), as Kafka's ConfigHelper describes them. Sources, highest first
(Kafka's ConfigSource): TOPIC_CONFIG (a topic's override), DYNAMIC_BROKER_CONFIG,
DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG (server.properties, ``--override``,
the store's and broker's arguments), DEFAULT_CONFIG; ``include_synonyms`` lists every
layer that sets a key or one of its synonyms (``log.retention.ms``/``minutes``/``hours``).

Altering a BROKER resource changes the dynamic configs of its level in the store
(:meth:`pylog.storage.LogManager.alter_broker_configs`: persisted in the log dirs,
applied without a restart). Errors are Kafka's, per resource: a node id other than this
one, a key that is read-only (not dynamic), or a value that does not validate get
INVALID_REQUEST (42), as Kafka's ConfigAdminManager answers them (KAFKA-13609); a key
pylog does not know gets INVALID_CONFIG (40), where Kafka would store it for plugins
(pylog has none, so it can only be a mistake).

A GROUP resource (32, Kafka's group configs) holds a share group's ``share.*`` configs
(pylog.coordinator.share_group.GROUP_CONFIGS): its own values (GROUP_CONFIG), else the
broker's ``group.share.*`` (DEFAULT_CONFIG); an unknown key or a bad value is
INVALID_CONFIG; GROUP_AUTHORIZATION_FAILED without DESCRIBE_CONFIGS / ALTER_CONFIGS on the
group.
"""

from __future__ import annotations

from typing import Any

from pylog.common.config import ConfigDef, unknown_key
from pylog.errors import ConfigError, ErrorCode
from pylog.protocol import messages as m
from pylog.storage import (
    BROKER_CONFIGS,
    CLUSTER_DEFAULT,
    PER_BROKER,
    TOPIC_CONFIGS,
    topic_config_def,
    broker_config_def,
    broker_config_synonyms,
)

from .config import SERVER_CONFIGS
from pylog.common.acl import CLUSTER_NAME, Operation

from pylog.coordinator.share_group import GROUP_CONFIGS

from . import authorizer
from .errors import RequestError, error_code

__all__ = ["describe_configs", "alter_configs", "incremental_alter_configs", "text"]

TOPIC, BROKER, GROUP = 2, 4, 32        # ConfigResource.Type
# ConfigSource (DescribeConfigsResponse)
TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
GROUP_CONFIG = 8
# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = range(4)

_CONFIG_TYPES = {"bool": 1, "str": 2, "int32": 3, "int": 5, "float": 6, "list": 7, "password": 9}


def text(value: Any) -> str | None:
    """A config value as Kafka prints it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


# ============================================================ where values come from


class _Sources:
    """The layers of a broker's configs, highest first: dynamic per-broker, dynamic
    default, static; then each key's default."""

    def __init__(self, broker) -> None:
        store = broker.store
        dynamic = store.dynamic_broker_configs
        static = {**store.static_config, **broker.static_server_config}
        self.layers = ((dynamic[PER_BROKER], DYNAMIC_BROKER_CONFIG),
                       (dynamic[CLUSTER_DEFAULT], DYNAMIC_DEFAULT_BROKER_CONFIG),
                       (static, STATIC_BROKER_CONFIG))
        self.dynamic_keys = store.dynamic_config_keys()

    def synonyms(self, names: tuple[str, ...], default: tuple[str, Any] | None
                 ) -> list[tuple[str, str | None, int]]:
        """(name, value, source) of every layer that sets one of `names`, in precedence
        order (Kafka's configSynonyms), then the default."""
        out = [(n, text(layer[n]), source) for layer, source in self.layers
               for n in names if n in layer]
        if default is not None:
            out.append((default[0], text(default[1]), DEFAULT_CONFIG))
        return out

    def own_value(self, name: str) -> Any:
        return next((layer[name] for layer, _ in self.layers if name in layer), None)


def _entry(name: str, value: Any, synonyms: list, definition: ConfigDef | None, read_only: bool,
           include_synonyms: bool, documentation: bool):
    source = synonyms[0][2] if synonyms else DEFAULT_CONFIG
    sensitive = definition is not None and definition.type == "password"
    if sensitive:           # Kafka's PASSWORD configs: never shown, in no layer
        value, synonyms = None, [(n, None, s) for n, _, s in synonyms]
    return m.DescribeConfigsResponseDescribeConfigsResourceResult(
        name=name, value=text(value), read_only=read_only, is_default=source == DEFAULT_CONFIG,
        config_source=source, is_sensitive=sensitive,
        synonyms=[m.DescribeConfigsResponseDescribeConfigsSynonym(name=n, value=v, source=s)
                  for n, v, s in synonyms] if include_synonyms else [],
        config_type=_CONFIG_TYPES.get(definition.type, 0) if definition else 0,
        documentation=definition.doc if definition and documentation else None)


def _topic_entries(broker, name: str, include_synonyms: bool, documentation: bool) -> list:
    d = broker.store.describe_topic(name)
    sources = _Sources(broker)
    out = []
    for key, value in d.config.items():
        definition = topic_config_def(key)
        chain = definition.broker_synonyms
        synonyms = sources.synonyms(chain, (chain[0], definition.default)) if chain else []
        if key in d.overrides:
            synonyms.insert(0, (key, d.overrides[key], TOPIC_CONFIG))
        out.append(_entry(key, value, synonyms, definition, False, include_synonyms, documentation))
    return out


def _broker_entries(broker, include_synonyms: bool, documentation: bool) -> list:
    """Every broker-level key of this node, with its value in effect and its source."""
    store = broker.store
    sources = _Sources(broker)
    out = []

    def add(key, value, definition, default):
        synonyms = sources.synonyms(broker_config_synonyms(key), default)
        out.append(_entry(key, value, synonyms, definition, key not in sources.dynamic_keys,
                          include_synonyms, documentation))
    for key, definition in SERVER_CONFIGS.items():
        add(key, broker.server_config[key], definition, (key, definition.default))
    for key, definition in BROKER_CONFIGS.items():
        if key == "log.dirs":        # given as the store's argument: static either way
            value = ",".join(store.log_dirs)
            out.append(_entry(key, value, [(key, value, STATIC_BROKER_CONFIG)], definition, True,
                              include_synonyms, documentation))
            continue
        add(key, store.config[key], definition, (key, definition.default))
    for definition in TOPIC_CONFIGS.values():
        first, *others = definition.broker_synonyms
        # The first synonym shows the value in effect (in its unit: ms, bytes); the others
        # (log.retention.hours, ...) only what is set for them.
        add(first, store.defaults[definition.name], definition, (first, definition.default))
        for key in others:
            add(key, sources.own_value(key), definition, None)
    return out


def _default_entries(broker, include_synonyms: bool, documentation: bool) -> list:
    """Kafka's answer for the broker resource "": the cluster-wide dynamic defaults only."""
    defaults = broker.store.dynamic_broker_configs[CLUSTER_DEFAULT]
    out = []
    for key, value in sorted(defaults.items()):
        synonyms = [(n, text(defaults[n]), DYNAMIC_DEFAULT_BROKER_CONFIG)
                    for n in broker_config_synonyms(key) if n in defaults]
        out.append(_entry(key, value, synonyms, _definition(key), False, include_synonyms,
                          documentation))
    return out


def _definition(key: str) -> ConfigDef | None:
    return SERVER_CONFIGS.get(key) or broker_config_def(key)


def _node_level(broker, name: str, describing: bool = False) -> str:
    """The dynamic config level a BROKER resource name means ("" or this node's id)."""
    if name == "":
        return CLUSTER_DEFAULT
    try:
        node = int(name)
    except ValueError:
        raise RequestError(ErrorCode.INVALID_REQUEST,
                           f"Broker id must be an integer, but it is: {name}") from None
    if node != broker.node_id:
        expected = f"{broker.node_id} or empty string" if describing else str(broker.node_id)
        raise RequestError(ErrorCode.INVALID_REQUEST,
                           f"Unexpected broker id, expected {expected}, but received {name}")
    return PER_BROKER


def describe_configs(broker, conn, header, req):
    v = header.api_version
    synonyms = v >= 1 and req.include_synonyms
    documentation = v >= 3 and req.include_documentation
    results = []
    for res in req.resources:
        out = m.DescribeConfigsResponseDescribeConfigsResult(
            resource_type=res.resource_type, resource_name=res.resource_name, error_message=None)
        try:
            _authorize(broker, conn, Operation.DESCRIBE_CONFIGS, res)
            if res.resource_type == TOPIC:
                entries = _topic_entries(broker, res.resource_name, synonyms, documentation)
            elif res.resource_type == GROUP:
                entries = _group_entries(broker, res.resource_name, synonyms, documentation)
            elif res.resource_type == BROKER:
                if _node_level(broker, res.resource_name, describing=True) == CLUSTER_DEFAULT:
                    entries = _default_entries(broker, synonyms, documentation)
                else:
                    entries = _broker_entries(broker, synonyms, documentation)
            else:
                raise _unsupported_resource(res.resource_type)
            keys = set(res.configuration_keys) if res.configuration_keys else None
            out.configs = sorted((e for e in entries if keys is None or e.name in keys),
                                 key=lambda e: e.name)
        except Exception as exc:                # noqa: BLE001 - answered per resource
            out.error_code, out.error_message = error_code(exc)
        results.append(out)
    return m.DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _authorize(broker, conn, operation: int, res) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or, for
    a broker, the cluster (CLUSTER_AUTHORIZATION_FAILED), as Kafka's ConfigHelper."""
    if res.resource_type == TOPIC:
        if not authorizer.allowed(broker, conn, operation, authorizer.TOPIC, res.resource_name):
            raise RequestError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    elif res.resource_type == GROUP:
        if not authorizer.allowed(broker, conn, operation, authorizer.GROUP, res.resource_name):
            raise RequestError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    elif not authorizer.allowed(broker, conn, operation, authorizer.CLUSTER, CLUSTER_NAME):
        raise RequestError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


def _unsupported_resource(resource_type: int) -> RequestError:
    return RequestError(ErrorCode.INVALID_REQUEST,
                        f"config resource type {resource_type} is not supported: pylog has "
                        f"topic (2), broker (4) and share group (32) configs")


# ================================================================= altering


def _check_request(resources, null_ok) -> dict[int, RequestError]:
    """Kafka's ConfigAdminManager.preprocess: each resource at most once, each key at most
    once per resource, no null value (``null_ok(config)``: IncrementalAlterConfigs'
    DELETE). Returns the refused resources by index."""
    refused: dict[int, RequestError] = {}
    seen: dict[tuple[int, str], int] = {}
    for i, res in enumerate(resources):
        key = (res.resource_type, res.resource_name)
        if key in seen:
            for j in (seen[key], i):
                refused[j] = RequestError(ErrorCode.INVALID_REQUEST,
                                          "Each resource must appear at most once.")
        seen.setdefault(key, i)
    for i, res in enumerate(resources):
        if i in refused:
            continue
        names = [c.name for c in res.configs]
        if len(set(names)) != len(names):
            refused[i] = RequestError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
            continue
        nulls = [c.name for c in res.configs if c.value is None and not null_ok(c)]
        if nulls:
            refused[i] = RequestError(ErrorCode.INVALID_REQUEST,
                                      f"Null value not supported for : {', '.join(nulls)}")
    return refused


def _check_broker_keys(broker, keys) -> None:
    """Unknown keys: INVALID_CONFIG; keys that cannot change at run time: INVALID_REQUEST."""
    dynamic = broker.store.dynamic_config_keys()
    known = set(SERVER_CONFIGS) | set(dynamic)
    unknown = [k for k in keys if k not in known and broker_config_def(k) is None]
    if unknown:
        every = known | set(BROKER_CONFIGS) | {
            s for d in TOPIC_CONFIGS.values() for s in d.broker_synonyms}
        raise RequestError(ErrorCode.INVALID_CONFIG, str(unknown_key(unknown[0], sorted(every),
                                                                 "broker")))
    read_only = sorted(k for k in keys if k not in dynamic)
    if read_only:
        hints = [f"{k}: set {_first_synonym(k)} instead"
                 for k in read_only if _first_synonym(k) != k]
        raise RequestError(ErrorCode.INVALID_REQUEST,
                           f"Cannot update these configs dynamically: {', '.join(read_only)} "
                           f"(read-only: set them in server.properties and restart"
                           + "".join(f"; {h}" for h in hints) + ")")


def _first_synonym(key: str) -> str:
    definition = broker_config_def(key)
    if definition is None or key in BROKER_CONFIGS:
        return key
    return definition.broker_synonyms[0]


def _alter(broker, res, compute, validate_only: bool) -> None:
    """Alters one resource: `compute(current, definition_of)` returns its new configs
    from its current ones (a topic's overrides, or a broker level's dynamic configs)."""
    store = broker.store
    if res.resource_type == TOPIC:
        current = dict(store.describe_topic(res.resource_name).overrides)
        new = compute(current, topic_config_def)
        store.alter_topic_config(res.resource_name, new, replace=True, validate_only=validate_only)
    elif res.resource_type == BROKER:
        level = _node_level(broker, res.resource_name)
        _check_broker_keys(broker, [c.name for c in res.configs
                                    if getattr(c, "config_operation", SET) != DELETE])
        current = store.dynamic_broker_configs[level]
        new = compute(current, _definition)
        try:
            store.alter_broker_configs(level, new, validate_only=validate_only)
        except ConfigError as exc:
            # Kafka answers a broker config that fails validation with INVALID_REQUEST.
            raise RequestError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    elif res.resource_type == GROUP:
        from .share_groups import shares_of     # (share_groups imports admin, which imports us)
        group = shares_of(broker).group(res.resource_name)
        new = compute(dict(group.configs), GROUP_CONFIGS.get)
        try:
            group.replace_configs(new, validate_only=validate_only)
        except ConfigError as exc:
            raise RequestError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    else:
        raise _unsupported_resource(res.resource_type)


def _group_entries(broker, group_id: str, include_synonyms: bool, documentation: bool) -> list:
    """A share group's configs (Kafka's GroupConfig): its own values (GROUP_CONFIG), else
    the broker's ``group.<name>`` (DEFAULT_CONFIG). A group that does not exist has the
    defaults, as Kafka answers."""
    from .share_groups import shares_of     # (share_groups imports admin, which imports us)
    shares = shares_of(broker)
    group = shares.group(group_id, create=False)
    own = group.configs if group is not None else {}
    out = []
    for name, definition in sorted(GROUP_CONFIGS.items()):
        default = shares.defaults[name]
        synonyms = [(name, own[name], GROUP_CONFIG)] if name in own else []
        synonyms.append((name, text(default), DEFAULT_CONFIG))
        out.append(_entry(name, own.get(name, default), synonyms, definition, False,
                          include_synonyms, documentation))
    return out


def alter_configs(broker, conn, header, req):
    """AlterConfigs: each resource's configs become exactly those given."""
    refused = _check_request(req.resources, lambda c: False)
    responses = []
    for i, res in enumerate(req.resources):
        out = m.AlterConfigsResponseAlterConfigsResourceResponse(
            resource_type=res.resource_type, resource_name=res.resource_name, error_message=None)
        try:
            _authorize(broker, conn, Operation.ALTER_CONFIGS, res)
            if i in refused:
                raise refused[i]
            configs = {c.name: c.value for c in res.configs}
            _alter(broker, res, lambda current, definition: configs, req.validate_only)
        except Exception as exc:                # noqa: BLE001 - answered per resource
            out.error_code, out.error_message = error_code(exc)
        responses.append(out)
    return m.AlterConfigsResponse(throttle_time_ms=0, responses=responses)


def _apply_ops(current: dict, ops, definition_of) -> dict:
    """IncrementalAlterConfigs' SET, DELETE, APPEND and SUBTRACT (list configs; from the
    key's default when it is not set), in order."""
    new = dict(current)
    for op in ops:
        if op.config_operation == SET:
            new[op.name] = op.value
        elif op.config_operation == DELETE:
            new.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT):
            d = definition_of(op.name)
            if d is None or d.type != "list":
                raise ConfigError(f"{op.name} is not a list config: APPEND/SUBTRACT do not apply")
            items = [x for x in text(new.get(op.name, d.default)).split(",") if x]
            change = [x for x in (op.value or "").split(",") if x]
            items = items + [x for x in change if x not in items] \
                if op.config_operation == APPEND else [x for x in items if x not in change]
            new[op.name] = ",".join(items)
        else:
            raise RequestError(ErrorCode.INVALID_REQUEST,
                               f"Unknown operations type {op.config_operation}")
    return new


def incremental_alter_configs(broker, conn, header, req):
    refused = _check_request(req.resources, lambda c: c.config_operation == DELETE)
    responses = []
    for i, res in enumerate(req.resources):
        out = m.IncrementalAlterConfigsResponseAlterConfigsResourceResponse(
            resource_type=res.resource_type, resource_name=res.resource_name, error_message=None)
        try:
            _authorize(broker, conn, Operation.ALTER_CONFIGS, res)
            if i in refused:
                raise refused[i]
            _alter(broker, res, lambda current, definition_of, ops=res.configs:
                   _apply_ops(current, ops, definition_of), req.validate_only)
        except Exception as exc:                # noqa: BLE001 - answered per resource
            out.error_code, out.error_message = error_code(exc)
        responses.append(out)
    return m.IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)
