"""CreateAcls, DescribeAcls, DeleteAcls: the ACL APIs ``kafka-acls.sh`` speaks.

As Kafka's: without an authorizer each answers SECURITY_DISABLED ("No Authorizer is
configured"); with one, CreateAcls and DeleteAcls need ALTER on the cluster and
DescribeAcls DESCRIBE on it (else CLUSTER_AUTHORIZATION_FAILED). The ACLs are the
store's (pylog.storage.acls: persisted in every log dir before the answer).
"""

from __future__ import annotations

from pylog.common.acl import CLUSTER_NAME, AclBinding, AclFilter, Operation
from pylog.errors import ErrorCode, PylogError
from pylog.protocol import messages as m

from .authorizer import CLUSTER, allowed
from .errors import NONE, error_code

__all__ = ["create_acls", "describe_acls", "delete_acls"]

_NO_AUTHORIZER = (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")


def _refusal(broker, conn, operation: int) -> tuple[int, str] | None:
    if broker.authorizer is None:
        return _NO_AUTHORIZER
    if not allowed(broker, conn, operation, CLUSTER, CLUSTER_NAME):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    return None


def _error(exc: PylogError) -> tuple[int, str]:
    return error_code(exc)


def create_acls(broker, conn, header, req):
    refused = _refusal(broker, conn, Operation.ALTER)
    if refused is not None:
        return m.CreateAclsResponse(throttle_time_ms=0, results=[
            m.CreateAclsResponseAclCreationResult(error_code=refused[0], error_message=refused[1])
            for _ in req.creations])
    bindings = [AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                           c.host, c.operation, c.permission_type) for c in req.creations]
    results = []
    for outcome in broker.store.create_acls(bindings):
        code, message = (NONE, None) if outcome is None else _error(outcome)
        results.append(m.CreateAclsResponseAclCreationResult(error_code=code, error_message=message))
    return m.CreateAclsResponse(throttle_time_ms=0, results=results)


def _filter(f) -> AclFilter:
    return AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                     f.principal_filter, f.host_filter, f.operation, f.permission_type)


def describe_acls(broker, conn, header, req):
    response = m.DescribeAclsResponse(throttle_time_ms=0, error_code=NONE, resources=[])
    refused = _refusal(broker, conn, Operation.DESCRIBE)
    if refused is not None:
        response.error_code, response.error_message = refused
        return response
    acl_filter = _filter(req)
    try:
        acl_filter.check()
    except PylogError as exc:
        response.error_code, response.error_message = _error(exc)
        return response
    grouped: dict[tuple[int, str, int], list] = {}
    for b in broker.store.describe_acls(acl_filter):
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            m.DescribeAclsResponseAclDescription(principal=b.principal, host=b.host,
                                                 operation=b.operation, permission_type=b.permission))
    response.resources = [m.DescribeAclsResponseDescribeAclsResource(
        resource_type=t, resource_name=n, pattern_type=p, acls=acls)
        for (t, n, p), acls in grouped.items()]
    return response


def delete_acls(broker, conn, header, req):
    refused = _refusal(broker, conn, Operation.ALTER)
    if refused is not None:
        return m.DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            m.DeleteAclsResponseDeleteAclsFilterResult(error_code=refused[0], error_message=refused[1],
                                                       matching_acls=[]) for _ in req.filters])
    results = []
    for outcome in broker.store.delete_acls([_filter(f) for f in req.filters]):
        if isinstance(outcome, PylogError):
            code, message = _error(outcome)
            results.append(m.DeleteAclsResponseDeleteAclsFilterResult(
                error_code=code, error_message=message, matching_acls=[]))
            continue
        results.append(m.DeleteAclsResponseDeleteAclsFilterResult(error_code=NONE, matching_acls=[
            m.DeleteAclsResponseDeleteAclsMatchingAcl(
                error_code=NONE, resource_type=b.resource_type, resource_name=b.resource_name,
                pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                operation=b.operation, permission_type=b.permission) for b in outcome]))
    return m.DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
