"""Kafka's ACL model: resource types, pattern types, operations, permissions, bindings
and binding filters, with Kafka's wire codes (org.apache.kafka.common.acl/resource).

An ACL binding says: `principal` from `host` is ALLOWed or DENYed `operation` on the
resources a (resource type, name, pattern type) names. A LITERAL pattern names one
resource, or every resource of its type when the name is ``*``; a PREFIXED pattern
names every resource whose name starts with it. A filter (DescribeAcls, DeleteAcls)
may leave any field open (ANY, or None for names), and its pattern type MATCH selects
every binding that would apply to the literal resource it names (that resource's
literal binding, the ``*`` one, and the prefixed ones that prefix it), as Kafka's
ResourcePatternFilter does.
"""

from __future__ import annotations

from dataclasses import dataclass

from pylog.errors import InvalidRequestError

__all__ = ["ResourceType", "PatternType", "Operation", "Permission", "AclBinding", "AclFilter",
           "WILDCARD", "WILDCARD_PRINCIPAL", "CLUSTER_NAME", "IMPLIES_DESCRIBE",
           "IMPLIES_DESCRIBE_CONFIGS", "validate_binding"]

WILDCARD = "*"                       # a literal name or host that matches every one
WILDCARD_PRINCIPAL = "User:*"        # the principal that matches every user
CLUSTER_NAME = "kafka-cluster"       # the cluster resource's only name


class ResourceType:  # noqa: D101 - Kafka's ResourceType codes
    UNKNOWN, ANY, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = range(8)
    NAMES = {2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID", 6: "DELEGATION_TOKEN",
             7: "USER"}


class PatternType:  # noqa: D101 - Kafka's PatternType codes
    UNKNOWN, ANY, MATCH, LITERAL, PREFIXED = range(5)
    NAMES = {3: "LITERAL", 4: "PREFIXED"}


class Operation:  # noqa: D101 - Kafka's AclOperation codes
    (UNKNOWN, ANY, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION,
     DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS) = range(15)
    NAMES = {2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER", 8: "DESCRIBE",
             9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS",
             12: "IDEMPOTENT_WRITE", 13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS"}


class Permission:  # noqa: D101 - Kafka's AclPermissionType codes
    UNKNOWN, ANY, DENY, ALLOW = range(4)
    NAMES = {2: "DENY", 3: "ALLOW"}


#: An ALLOW of any of these allows DESCRIBE too (Kafka's StandardAuthorizerData).
IMPLIES_DESCRIBE = frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                              Operation.DELETE, Operation.ALTER})
#: An ALLOW of any of these allows DESCRIBE_CONFIGS too.
IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def to_json(self) -> list:
        return [self.resource_type, self.resource_name, self.pattern_type, self.principal,
                self.host, self.operation, self.permission]

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={Operation.NAMES.get(self.operation, self.operation)}, "
                f"permissionType={Permission.NAMES.get(self.permission, self.permission)}) on "
                f"{ResourceType.NAMES.get(self.resource_type, self.resource_type)}:"
                f"{PatternType.NAMES.get(self.pattern_type, self.pattern_type)}:{self.resource_name}")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter: ANY codes and None strings match anything."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = Operation.ANY
    permission: int = Permission.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if not self._pattern_matches(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != Operation.ANY and self.operation != b.operation:
            return False
        return self.permission == Permission.ANY or self.permission == b.permission

    def _pattern_matches(self, b: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        pt, name = self.pattern_type, self.resource_name
        if pt == PatternType.MATCH:
            if name is None:
                return True
            if b.pattern_type == PatternType.LITERAL:
                return b.resource_name == name or b.resource_name == WILDCARD
            return b.pattern_type == PatternType.PREFIXED and name.startswith(b.resource_name)
        if pt != PatternType.ANY and pt != b.pattern_type:
            return False
        return name is None or name == b.resource_name

    def check(self) -> None:
        """InvalidRequestError for a filter with an UNKNOWN field (Kafka's
        AclBindingFilter.findIndefiniteField)."""
        for what, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                            ("operation", self.operation), ("permission type", self.permission)):
            if value == 0 or value < 0:
                raise InvalidRequestError(f"Filter has unknown {what}: {value}")
        if self.resource_type > ResourceType.USER or self.pattern_type > PatternType.PREFIXED \
                or self.operation > Operation.DESCRIBE_TOKENS or self.permission > Permission.ALLOW:
            raise InvalidRequestError("Filter has an unknown element")


def validate_binding(b: AclBinding) -> None:
    """InvalidRequestError naming what is wrong with a binding to create (Kafka's
    AclControlManager.validateNewAcl and CreateAclsRequest's checks)."""
    if b.resource_type not in ResourceType.NAMES:
        raise InvalidRequestError(f"Invalid resourceType {b.resource_type}")
    if b.pattern_type not in PatternType.NAMES:
        raise InvalidRequestError(f"Invalid patternType {b.pattern_type}: a new ACL's pattern "
                                  f"type is LITERAL (3) or PREFIXED (4)")
    if b.operation not in Operation.NAMES:
        raise InvalidRequestError(f"Invalid operation {b.operation}")
    if b.permission not in Permission.NAMES:
        raise InvalidRequestError(f"Invalid permissionType {b.permission}")
    if not b.resource_name:
        raise InvalidRequestError("Resource name should not be empty")
    if b.resource_type == ResourceType.CLUSTER and (
            b.resource_name != CLUSTER_NAME or b.pattern_type != PatternType.LITERAL):
        raise InvalidRequestError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    kind, sep, name = b.principal.partition(":")
    if not sep or not kind:
        raise InvalidRequestError(f"Could not parse principal from `{b.principal}` (no colon is "
                                  f"present separating the principal type from name)")
    if not b.host:
        raise InvalidRequestError("Invalid host: empty (use * for every host)")
