"""DescribeUserScramCredentials and AlterUserScramCredentials: users' SCRAM credentials
in the store (``kafka-configs --entity-type users``, the admin clients'
``alter/describe_user_scram_credentials``).

The client salts the password (its own random salt, the iterations it chose) and sends
the salted password; the broker keeps only the salt, the iterations, StoredKey and
ServerKey (Kafka's ScramControlManager.finishUpsertion), in every log dir before it
answers. Errors per user, with Kafka's codes and messages (storage/scram_credentials.py);
beyond Kafka, a salted password that is not one digest long, or an empty salt, gets
UNACCEPTABLE_CREDENTIAL (PBKDF2 with HMAC-H gives exactly one digest: anything else was
not salted from a password, and no client could ever log in with it).
"""

from __future__ import annotations

from pylog.common import scram
from pylog.common.acl import CLUSTER_NAME, Operation
from pylog.errors import ErrorCode, UnacceptableCredentialError
from pylog.protocol import messages as m

from .authorizer import CLUSTER, allowed
from .errors import error_code

__all__ = ["describe_user_scram_credentials", "alter_user_scram_credentials"]


def describe_user_scram_credentials(broker, conn, header, req):
    if not allowed(broker, conn, Operation.DESCRIBE, CLUSTER, CLUSTER_NAME):
        return m.DescribeUserScramCredentialsResponse(
            throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message="Cluster authorization failed.", results=[])
    names = None if not req.users else [u.name for u in req.users]
    results = []
    for user, found in broker.store.describe_user_scram_credentials(names).items():
        if isinstance(found, dict):
            results.append(m.DescribeUserScramCredentialsResponseDescribeUserScramCredentialsResult(
                user=user, error_code=0, error_message=None, credential_infos=[
                    m.DescribeUserScramCredentialsResponseCredentialInfo(
                        mechanism=scram.MECHANISMS[name].type, iterations=iterations)
                    for name, iterations in found.items()]))
        else:
            code, message = error_code(found)
            results.append(m.DescribeUserScramCredentialsResponseDescribeUserScramCredentialsResult(
                user=user, error_code=code, error_message=message, credential_infos=[]))
    return m.DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0,
                                                  error_message=None, results=results)


def alter_user_scram_credentials(broker, conn, header, req):
    if not allowed(broker, conn, Operation.ALTER, CLUSTER, CLUSTER_NAME):
        names = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
        return m.AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            m.AlterUserScramCredentialsResponseAlterUserScramCredentialsResult(
                user=n, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                error_message="Cluster authorization failed.") for n in names])
    refused: dict[str, Exception] = {}
    upsertions = []
    for u in req.upsertions:
        mechanism = scram.MECHANISMS_BY_TYPE.get(u.mechanism)
        if mechanism is not None and u.name and (len(u.salted_password) != mechanism.digest_size
                                                 or not u.salt):
            refused.setdefault(u.name, UnacceptableCredentialError(
                f"the salted password must be {mechanism.digest_size} bytes (one {mechanism.name} "
                f"digest), got {len(u.salted_password)}" if u.salt else "the salt must not be empty"))
            continue
        credential = None if mechanism is None else scram.credential_from_salted(
            mechanism, bytes(u.salt), bytes(u.salted_password), u.iterations)
        upsertions.append((u.name, u.mechanism, credential))
    outcome = broker.store.alter_user_scram_credentials(
        [(d.name, d.mechanism) for d in req.deletions if d.name not in refused],
        [(name, mech, c) for name, mech, c in upsertions if name not in refused])
    outcome.update(refused)
    results = []
    for user, exc in outcome.items():
        code, message = (0, None) if exc is None else error_code(exc)
        results.append(m.AlterUserScramCredentialsResponseAlterUserScramCredentialsResult(
            user=user, error_code=code, error_message=message))
    return m.AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)
