"""The broker's authorizer: Kafka's StandardAuthorizer semantics over the store's ACLs.

On when ``authorizer.class.name`` is org.apache.kafka.metadata.authorizer.StandardAuthorizer;
off (None on the broker, every request allowed) otherwise, as Kafka without an authorizer.
Only the network face is checked: an application's own ``pylog.open()``, Producers and
Consumers in the broker's process are the operator's code and bypass it.

A request is allowed when (Kafka's StandardAuthorizerData.authorize):
1. its principal is one of ``super.users``; else
2. among the ACLs whose pattern matches the resource (the literal name, the literal
   ``*`` of the resource type, every prefix of the name as a PREFIXED pattern), those
   that name the principal (or ``User:*``) and the host (or ``*``):
   a DENY of the operation (or ALL) denies: **deny wins**; else an ALLOW of the
   operation, of ALL, or of an operation that implies it (READ, WRITE, DELETE and ALTER
   imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
3. no ACL of any principal matches the resource at all: ``allow.everyone.if.no.acl.found``
   decides (false by default: denied). An ACL that names the resource but not this
   principal leaves it denied.

The ACLs are indexed per resource type (literal names and prefixes in dicts: a check
costs a lookup per prefix length of the name, however many ACLs there are), and every
decision is cached until the ACLs change (the store's acl_epoch moves): the check on a
request's hot path is one dict lookup. bench/RESULTS.md ("Authorizer") has its cost.
"""

from __future__ import annotations

import logging
import threading

from pylog.common.acl import (
    IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from pylog.errors import ConfigError

__all__ = ["STANDARD_AUTHORIZER", "StandardAuthorizer", "authorizer_of", "allowed",
           "authorized_operations", "CLUSTER", "TOPIC", "GROUP", "TRANSACTIONAL_ID"]

log = logging.getLogger(__name__)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (ResourceType.TOPIC, ResourceType.GROUP,
                                           ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID)
#: Cached decisions kept before the cache starts over (each ~200 bytes).
CACHE_ENTRIES = 100_000


def parse_super_users(text: str) -> frozenset[str]:
    """Kafka's ``super.users``: principals separated by semicolons (User:alice;User:bob)."""
    users = [u.strip() for u in (text or "").split(";") if u.strip()]
    for u in users:
        if ":" not in u or not u.partition(":")[0]:
            raise ConfigError(f"super.users = {text!r}: {u!r} is not a principal (Type:name, e.g. "
                              f"User:admin; several are separated by semicolons)")
    return frozenset(users)


def authorizer_of(server_config, store) -> StandardAuthorizer | None:
    name = server_config["authorizer.class.name"]
    if not name:
        return None
    return StandardAuthorizer(store, parse_super_users(server_config["super.users"]),
                              server_config["allow.everyone.if.no.acl.found"])


#: The operations each resource type has (Kafka's AclEntry.supportedOperations), for the
#: "authorized operations" bit fields of Metadata, DescribeGroups and DescribeCluster.
SUPPORTED_OPERATIONS = {
    TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
            Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
              Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
}


def authorized_operations(broker, conn, resource_type: int, name: str) -> int:
    """Kafka's authorized-operations bit field (bit n: operation code n) of the
    operations the principal may do on the resource; every supported one without an
    authorizer, as Kafka's AuthHelper."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if allowed(broker, conn, op, resource_type, name):
            bits |= 1 << op
    return bits


def allowed(broker, conn, operation: int, resource_type: int, name: str) -> bool:
    """Whether `conn`'s principal may do `operation` on the resource (always, with no
    authorizer)."""
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize(conn.principal, conn.host, operation,
                                                      resource_type, name)


class _Index:
    """One resource type's ACLs: literal name -> bindings, prefix -> bindings."""

    __slots__ = ("literal", "prefixed", "max_prefix")

    def __init__(self) -> None:
        self.literal: dict[str, list[AclBinding]] = {}
        self.prefixed: dict[str, list[AclBinding]] = {}
        self.max_prefix = 0

    def matching(self, name: str) -> list[AclBinding]:
        found = list(self.literal.get(name, ()))
        if name != WILDCARD:
            found += self.literal.get(WILDCARD, ())
        prefixed = self.prefixed
        if prefixed:
            for end in range(1, min(len(name), self.max_prefix) + 1):
                hit = prefixed.get(name[:end])
                if hit:
                    found += hit
        return found


class StandardAuthorizer:
    def __init__(self, store, super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        self.store = store
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._lock = threading.Lock()
        self._epoch = -1
        self._indexes: dict[int, _Index] = {}
        self._cache: dict[tuple, bool] = {}

    def _refresh(self) -> None:
        """Re-indexes the store's ACLs when they changed (any thread; one does it)."""
        with self._lock:
            epoch = self.store.acl_epoch
            if epoch == self._epoch:
                return
            indexes: dict[int, _Index] = {}
            for b in self.store.acls:
                index = indexes.setdefault(b.resource_type, _Index())
                if b.pattern_type == PatternType.PREFIXED:
                    index.prefixed.setdefault(b.resource_name, []).append(b)
                    index.max_prefix = max(index.max_prefix, len(b.resource_name))
                else:
                    index.literal.setdefault(b.resource_name, []).append(b)
            self._indexes = indexes
            self._cache = {}
            self._epoch = epoch

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:
        if self.store.acl_epoch != self._epoch:
            self._refresh()
        key = (principal, host, operation, resource_type, name)
        cache = self._cache
        found = cache.get(key)
        if found is None:
            found = self._decide(principal, host, operation, resource_type, name)
            if len(cache) >= CACHE_ENTRIES:
                cache.clear()
            cache[key] = found
        return found

    def _decide(self, principal: str, host: str, operation: int, resource_type: int,
                name: str) -> bool:
        if principal in self.super_users:
            return True
        index = self._indexes.get(resource_type)
        acls = index.matching(name) if index is not None else []
        if not acls:
            return self.allow_if_no_acl
        allow = False
        for b in acls:
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.host != host and b.host != WILDCARD:
                continue
            if b.permission == Permission.DENY:
                if b.operation == Operation.ALL or b.operation == operation:
                    return False                    # deny wins
            elif (b.operation == Operation.ALL or b.operation == operation
                  or (operation == Operation.DESCRIBE and b.operation in IMPLIES_DESCRIBE)
                  or (operation == Operation.DESCRIBE_CONFIGS and b.operation in IMPLIES_DESCRIBE_CONFIGS)):
                allow = True
        return allow

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether the principal may do `operation` on at least one resource of the type
        (Kafka's Authorizer.authorizeByResourceType): an ALLOW of it (or ALL) on some
        literal or prefixed pattern that no DENY of the principal covers (a DENY of the
        literal ``*`` covers every one). Used where Kafka uses it: InitProducerId of an
        idempotent producer without IDEMPOTENT_WRITE on the cluster."""
        if principal in self.super_users:
            return True
        if self.store.acl_epoch != self._epoch:
            self._refresh()
        index = self._indexes.get(resource_type)
        if index is None:
            return self.allow_if_no_acl

        def applies(b: AclBinding) -> bool:
            return ((b.principal == principal or b.principal == WILDCARD_PRINCIPAL)
                    and (b.host == host or b.host == WILDCARD)
                    and (b.operation == operation or b.operation == Operation.ALL))
        deny_literal, deny_prefix, allow_literal, allow_prefix = set(), set(), set(), set()
        for table, literal in ((index.literal, True), (index.prefixed, False)):
            for pattern, bindings in table.items():
                for b in bindings:
                    if applies(b):
                        if b.permission == Permission.DENY:
                            (deny_literal if literal else deny_prefix).add(pattern)
                        else:
                            (allow_literal if literal else allow_prefix).add(pattern)
        if WILDCARD in deny_literal:
            return False

        def denied_by_prefix(name: str) -> bool:
            return any(name.startswith(p) for p in deny_prefix)
        if any(n not in deny_literal and not denied_by_prefix(n) for n in allow_literal):
            return True
        return any(not denied_by_prefix(p) for p in allow_prefix)
