"""The StandardAuthorizer's decisions over a real store's ACLs (Kafka's
StandardAuthorizerData rules, as AuthorizerIntegrationTest and StandardAuthorizerTest
check them): deny wins, implied operations, wildcard principal and host, literal `*`,
prefixes, super.users, allow.everyone.if.no.acl.found, decisions following ACL changes,
authorizeByResourceType; and the configs that turn it on."""

from __future__ import annotations

import pytest

import pylog
from pylog.broker.authorizer import StandardAuthorizer, parse_super_users
from pylog.common.acl import AclBinding, AclFilter
from pylog.common.acl import Operation as Op
from pylog.common.acl import PatternType as Pt
from pylog.common.acl import Permission as Perm
from pylog.common.acl import ResourceType as Rt
from pylog.errors import ConfigError

ALICE, BOB, HOST = "User:alice", "User:bob", "10.0.0.1"


def allow(rt, name, principal, op, pattern=Pt.LITERAL, host="*") -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, Perm.ALLOW)


def deny(rt, name, principal, op, pattern=Pt.LITERAL, host="*") -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, Perm.DENY)


@pytest.fixture
def store(tmp_path):
    with pylog.open(str(tmp_path / "data")) as s:
        yield s


def test_deny_wins_and_implied_operations(store):
    store.create_acls([allow(Rt.TOPIC, "t", ALICE, Op.ALL), deny(Rt.TOPIC, "t", ALICE, Op.WRITE),
                       allow(Rt.TOPIC, "r", ALICE, Op.READ), allow(Rt.TOPIC, "c", ALICE, Op.ALTER_CONFIGS)])
    a = StandardAuthorizer(store, frozenset(), False)
    assert a.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "t")
    assert not a.authorize(ALICE, HOST, Op.WRITE, Rt.TOPIC, "t")         # deny beats ALL
    assert a.authorize(ALICE, HOST, Op.DESCRIBE, Rt.TOPIC, "r")          # READ implies DESCRIBE
    assert not a.authorize(ALICE, HOST, Op.WRITE, Rt.TOPIC, "r")
    assert a.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, Rt.TOPIC, "c")  # ALTER_CONFIGS implies it
    assert not a.authorize(ALICE, HOST, Op.DESCRIBE, Rt.TOPIC, "c")
    assert not a.authorize(BOB, HOST, Op.READ, Rt.TOPIC, "t")            # ACLs exist: bob denied


def test_wildcards_prefixes_and_hosts(store):
    store.create_acls([allow(Rt.TOPIC, "*", "User:*", Op.DESCRIBE),
                       allow(Rt.TOPIC, "logs-", ALICE, Op.READ, Pt.PREFIXED),
                       deny(Rt.TOPIC, "logs-secret", ALICE, Op.READ, Pt.PREFIXED),
                       allow(Rt.GROUP, "g", BOB, Op.READ, host="10.0.0.2")])
    a = StandardAuthorizer(store, frozenset(), False)
    assert a.authorize(BOB, HOST, Op.DESCRIBE, Rt.TOPIC, "anything")
    assert a.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "logs-app")
    assert not a.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "logs-secret-1")   # a longer deny prefix
    assert not a.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "logs")            # not the prefix itself + 1
    assert a.authorize(BOB, "10.0.0.2", Op.READ, Rt.GROUP, "g")
    assert not a.authorize(BOB, HOST, Op.READ, Rt.GROUP, "g")                 # another host


def test_super_users_and_allow_everyone_if_no_acl_found(store):
    store.create_acls([deny(Rt.TOPIC, "t", "User:*", Op.ALL)])
    strict = StandardAuthorizer(store, parse_super_users("User:admin; User:ops"), False)
    open_ = StandardAuthorizer(store, frozenset(), True)
    assert strict.authorize("User:admin", HOST, Op.READ, Rt.TOPIC, "t")        # super user
    assert not strict.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "other")      # no ACL: closed
    assert open_.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "other")           # no ACL: open
    assert not open_.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "t")           # an ACL names it
    with pytest.raises(ConfigError, match="super.users.*'admin' is not a principal"):
        parse_super_users("User:ops;admin")


def test_decisions_follow_acl_changes(store):
    a = StandardAuthorizer(store, frozenset(), False)
    assert not a.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "t")
    store.create_acls([allow(Rt.TOPIC, "t", ALICE, Op.READ)])
    assert a.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "t")
    store.delete_acls([AclFilter(principal=ALICE)])
    assert not a.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "t")


def test_authorize_any_is_kafkas_authorize_by_resource_type(store):
    a = StandardAuthorizer(store, frozenset(), False)
    assert not a.authorize_any(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    store.create_acls([allow(Rt.TOPIC, "p-", ALICE, Op.WRITE, Pt.PREFIXED)])
    assert a.authorize_any(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    store.create_acls([deny(Rt.TOPIC, "p", ALICE, Op.WRITE, Pt.PREFIXED)])     # covers p-
    assert not a.authorize_any(ALICE, HOST, Op.WRITE, Rt.TOPIC)


def test_authorizer_configs(tmp_path):
    with pylog.open(str(tmp_path / "d")) as store:
        with pytest.raises(ConfigError, match="authorizer.class.name"):
            pylog.Broker(store, "127.0.0.1:0", authorizer_class_name="kafka.security.authorizer.AclAuthorizer")
        with pytest.raises(ConfigError, match="super.users"):
            pylog.Broker(store, "127.0.0.1:0", super_users="admin",
                         authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer")
        assert pylog.Broker(store, "127.0.0.1:0").authorizer is None


def test_quota_entity_precedence_is_kip_55s(tmp_path):
    """Per quota key, the most specific entity that sets it (user+client-id first,
    <default> client-id last); the rate's key says who shares the measured rate."""
    with pylog.open(str(tmp_path / "q")) as store:
        broker = pylog.Broker(store, "127.0.0.1:0")
        quotas = broker.quotas
        key = "producer_byte_rate"
        store.alter_client_quotas([([("client-id", None)], [(key, 8.0, False)])])
        assert quotas._quota(key, "alice", "app") == (8.0, (key, "", "app"))     # each client id its own
        store.alter_client_quotas([([("client-id", "app")], [(key, 7.0, False)])])
        assert quotas._quota(key, "alice", "app")[0] == 7.0
        store.alter_client_quotas([([("user", None)], [(key, 6.0, False)])])
        assert quotas._quota(key, "alice", "app") == (6.0, (key, "alice", ""))   # a user's clients share
        store.alter_client_quotas([([("user", None), ("client-id", None)], [(key, 5.0, False)])])
        assert quotas._quota(key, "alice", "app")[0] == 5.0
        store.alter_client_quotas([([("user", None), ("client-id", "app")], [(key, 4.0, False)])])
        assert quotas._quota(key, "alice", "app")[0] == 4.0
        store.alter_client_quotas([([("user", "alice")], [(key, 3.0, False)])])
        assert quotas._quota(key, "alice", "app")[0] == 3.0
        store.alter_client_quotas([([("user", "alice"), ("client-id", None)], [(key, 2.0, False)])])
        assert quotas._quota(key, "alice", "app")[0] == 2.0
        store.alter_client_quotas([([("user", "alice"), ("client-id", "app")], [(key, 1.0, False)])])
        assert quotas._quota(key, "alice", "app") == (1.0, (key, "alice", "app"))
        assert quotas._quota(key, "bob", "app")[0] == 4.0                       # <default> user + app
        assert quotas._quota("consumer_byte_rate", "alice", "app") is None     # per key
