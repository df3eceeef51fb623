"""ACLs on `pylog serve` (authorizer.class.name = Kafka's StandardAuthorizer) over a
SASL_PLAINTEXT listener: confluent-kafka's admin client manages ACLs (CreateAcls,
DescribeAcls, DeleteAcls), a principal without ACLs gets Kafka's authorization errors and
never data (confluent-kafka's consumer and producer, and exact codes on the wire), prefixed
ACLs, deny beats allow, super.users, Metadata hides what the principal may not describe,
auto-creation needs CREATE, group checks, the transaction APIs' checks (transactional id,
topics, group, and the implicit adds of transactions v2); ACLs survive kill -9. One
broker for the module.
Kafka's own kafka-acls.sh: tests/kafka_reference/test_acl_tools.py."""

from __future__ import annotations

import uuid

import pytest

import pylog
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient
from pylog.remote.sasl import SaslLogin

from .process import ServeProcess

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31


def serve(data: str, *extra: str) -> ServeProcess:
    return ServeProcess(data, "sasl.enabled.mechanisms=PLAIN",
                        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
                        f"authorizer.class.name={AUTHORIZER}", "super.users=User:admin",
                        "group.initial.rebalance.delay.ms=0", *extra,
                        listen="SASL_PLAINTEXT://127.0.0.1:0")


def conf(broker: ServeProcess, user: str, **extra) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user], **extra}


def wire(broker: ServeProcess, user: str) -> ProtocolClient:
    return ProtocolClient(broker.bootstrap, authenticate=SaslLogin("PLAIN", user, USERS[user]))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = serve(str(tmp_path_factory.mktemp("acls")))
    yield process
    process.stop()


def admin(broker) -> AdminClient:
    return AdminClient(conf(broker, "admin"))


def add_acls(broker, *bindings: AclBinding) -> None:
    client = admin(broker)              # (held: a collected client fails its futures)
    for future in client.create_acls(list(bindings), request_timeout=30).values():
        assert future.result(30) is None


def acl(kind, name, principal, op, permission=AclPermissionType.ALLOW,
        pattern=ResourcePatternType.LITERAL, host="*") -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, permission)


def topic_with_records(broker, count: int = 5) -> str:
    name = "t-" + uuid.uuid4().hex[:8]
    with wire(broker, "admin") as client:
        answer = client.request(19, m.CreateTopicsRequest(timeout_ms=10000, topics=[
            m.CreateTopicsRequestCreatableTopic(name=name, num_partitions=1, replication_factor=1,
                                                assignments=[], configs=[])]), 4)
        assert answer.topics[0].error_code == 0
        batch = pylog.records.encode_batch([b"secret-%d" % i for i in range(count)])
        assert client.produce(name, 0, batch).error_code == 0
    return name


def consume(broker, user: str, topic: str, group: str, want: int, timeout: float = 15.0):
    """(values, errors) a confluent-kafka consumer in `group` gets within `timeout`."""
    consumer = ck.Consumer(conf(broker, user, **{"group.id": group, "auto.offset.reset": "earliest"}))
    values, errors = [], []
    try:
        consumer.subscribe([topic])
        import time
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(values) < want and not errors:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error().code())
            else:
                values.append(msg.value())
    finally:
        consumer.close()
    return values, errors


def test_acl_apis_create_describe_delete_with_filters(broker):
    client = admin(broker)
    prefix = "acl-api-" + uuid.uuid4().hex[:6]
    add_acls(broker, acl(ResourceType.TOPIC, prefix, "User:alice", AclOperation.READ,
                         pattern=ResourcePatternType.PREFIXED),
             acl(ResourceType.TOPIC, prefix + "-x", "User:alice", AclOperation.WRITE),
             acl(ResourceType.GROUP, prefix + "-g", "User:bob", AclOperation.READ,
                 AclPermissionType.DENY))
    # MATCH: every binding that applies to the literal resource (its literal and its prefix).
    found = client.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, prefix + "-x", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
        AclPermissionType.ANY), request_timeout=30).result(30)
    assert {(b.name, b.resource_pattern_type, b.operation) for b in found} == {
        (prefix, ResourcePatternType.PREFIXED, AclOperation.READ),
        (prefix + "-x", ResourcePatternType.LITERAL, AclOperation.WRITE)}
    # ANY with a principal filter.
    found = client.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
        AclPermissionType.DENY), request_timeout=30).result(30)
    assert [(b.restype, b.name, b.permission_type) for b in found] == [
        (ResourceType.GROUP, prefix + "-g", AclPermissionType.DENY)]
    # Delete the literal ones; the prefixed one stays.
    deleted = client.delete_acls([AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
        AclPermissionType.ANY)], request_timeout=30)
    gone = list(deleted.values())[0].result(30)
    assert {b.name for b in gone} >= {prefix + "-x", prefix + "-g"}
    left = client.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY), request_timeout=30).result(30)
    assert prefix in {b.name for b in left} and prefix + "-x" not in {b.name for b in left}


def test_invalid_acl_is_refused_with_invalid_request_naming_the_problem(broker):
    with wire(broker, "admin") as client:
        answer = client.request(30, m.CreateAclsRequest(creations=[m.CreateAclsRequestAclCreation(
            resource_type=2, resource_name="", resource_pattern_type=3, principal="User:x",
            host="*", operation=3, permission_type=3), m.CreateAclsRequestAclCreation(
            resource_type=2, resource_name="t", resource_pattern_type=3, principal="nocolon",
            host="*", operation=3, permission_type=3)]))
    assert [(r.error_code, r.error_message) for r in answer.results] == [
        (42, "Resource name should not be empty"),
        (42, "Could not parse principal from `nocolon` (no colon is present separating the "
             "principal type from name)")]


def test_principal_without_acls_is_denied_with_kafkas_errors_and_never_data(broker):
    topic = topic_with_records(broker)
    # The wire: each API's per-resource code, no record bytes.
    with wire(broker, "bob") as bob:
        part = bob.fetch(topic, 0, 0)
        assert part.error_code == TOPIC_AUTHORIZATION_FAILED and not part.records
        produced = bob.produce(topic, 0, pylog.records.encode_batch([b"intruder"]))
        assert produced.error_code == TOPIC_AUTHORIZATION_FAILED
        meta = bob.metadata([topic])
        assert meta.topics[0].error_code == TOPIC_AUTHORIZATION_FAILED and not meta.topics[0].partitions
        assert topic not in {t.name for t in bob.metadata(None).topics}        # hidden
        acls = bob.request(29, m.DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1))
        assert acls.error_code == CLUSTER_AUTHORIZATION_FAILED and not acls.resources
        coordinator = bob.request(10, m.FindCoordinatorRequest(key="g-bob", key_type=0), 2)
        assert coordinator.error_code == GROUP_AUTHORIZATION_FAILED
        deleted = bob.request(20, m.DeleteTopicsRequest(topic_names=[topic], timeout_ms=5000), 3)
        assert deleted.responses[0].error_code == TOPIC_AUTHORIZATION_FAILED
        scram_users = bob.request(50, m.DescribeUserScramCredentialsRequest(users=None))
        assert scram_users.error_code == CLUSTER_AUTHORIZATION_FAILED
    # A real consumer and producer: Kafka's errors, no records.
    values, errors = consume(broker, "bob", topic, "g-bob-" + topic, want=1, timeout=10)
    assert values == [] and errors and errors[0] in (
        ck.KafkaError.GROUP_AUTHORIZATION_FAILED, ck.KafkaError.TOPIC_AUTHORIZATION_FAILED)
    producer = ck.Producer(conf(broker, "bob", **{"message.timeout.ms": 10000}))
    failures = []
    producer.produce(topic, b"intruder", on_delivery=lambda err, msg: failures.append(err))
    producer.flush(20)
    assert failures and failures[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    with wire(broker, "admin") as client:                         # nothing was written
        assert client.list_offset(topic, 0, -1) == 5


def test_prefixed_acls_allow_reading_and_metadata_shows_only_described_topics(broker):
    prefix = "pre-" + uuid.uuid4().hex[:6] + "-"
    mine, other = topic_with_records(broker), None
    # rename via creating topics under the prefix
    with wire(broker, "admin") as client:
        for name in (prefix + "a", prefix + "b"):
            client.request(19, m.CreateTopicsRequest(timeout_ms=10000, topics=[
                m.CreateTopicsRequestCreatableTopic(name=name, num_partitions=1, replication_factor=1,
                                                    assignments=[], configs=[])]), 4)
            assert client.produce(name, 0, pylog.records.encode_batch([b"v-" + name.encode()])).error_code == 0
    other = mine
    group = prefix + "group"
    add_acls(broker, acl(ResourceType.TOPIC, prefix, "User:alice", AclOperation.READ,
                         pattern=ResourcePatternType.PREFIXED),
             acl(ResourceType.GROUP, prefix, "User:alice", AclOperation.READ,
                 pattern=ResourcePatternType.PREFIXED))
    values, errors = consume(broker, "alice", prefix + "a", group, want=1)
    assert errors == [] and values == [b"v-" + (prefix + "a").encode()]
    with wire(broker, "alice") as alice:
        listed = {t.name for t in alice.metadata(None).topics}
        assert {prefix + "a", prefix + "b"} <= listed and other not in listed   # READ implies DESCRIBE
        assert alice.fetch(other, 0, 0).error_code == TOPIC_AUTHORIZATION_FAILED
        # READ does not give WRITE.
        assert alice.produce(prefix + "a", 0, pylog.records.encode_batch([b"x"])).error_code == \
            TOPIC_AUTHORIZATION_FAILED
    # Kafka's authorized operations (Metadata v8+): READ, and the DESCRIBE it implies.
    client = ck.admin.AdminClient(conf(broker, "alice"))
    described = client.describe_topics(ck.TopicCollection([prefix + "a"]),
                                       include_authorized_operations=True, request_timeout=30)
    ops = described[prefix + "a"].result(30).authorized_operations
    assert set(ops) == {AclOperation.READ, AclOperation.DESCRIBE}


def test_deny_beats_allow_and_super_users_pass_everything(broker):
    topic = topic_with_records(broker, 3)
    add_acls(broker, acl(ResourceType.TOPIC, topic, "User:*", AclOperation.ALL),
             acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ, AclPermissionType.DENY),
             acl(ResourceType.TOPIC, topic, "User:admin", AclOperation.ALL, AclPermissionType.DENY))
    with wire(broker, "alice") as alice, wire(broker, "bob") as bob, wire(broker, "admin") as adm:
        assert alice.fetch(topic, 0, 0).error_code == TOPIC_AUTHORIZATION_FAILED       # denied
        assert alice.produce(topic, 0, pylog.records.encode_batch([b"w"])).error_code == 0  # WRITE allowed
        assert bob.fetch(topic, 0, 0).error_code == 0                                  # User:* allows
        part = adm.fetch(topic, 0, 0)                      # a super user: even a DENY does not apply
        assert part.error_code == 0 and part.records


def test_auto_creation_needs_create_and_groups_need_read(broker):
    name = "auto-" + uuid.uuid4().hex[:8]
    add_acls(broker, acl(ResourceType.TOPIC, name, "User:alice", AclOperation.DESCRIBE))
    with wire(broker, "alice") as alice:                  # DESCRIBE without CREATE: not created
        got = alice.metadata([name], allow_auto_create=True)
        assert got.topics[0].error_code == TOPIC_AUTHORIZATION_FAILED
    with wire(broker, "admin") as client:
        assert client.metadata([name]).topics[0].error_code == 3      # UNKNOWN_TOPIC_OR_PARTITION
    add_acls(broker, acl(ResourceType.TOPIC, name, "User:alice", AclOperation.CREATE))
    with wire(broker, "alice") as alice:
        got = alice.metadata([name], allow_auto_create=True)
        assert got.topics[0].error_code in (0, 5) and got.topics[0].partitions is not None
        join = alice.request(11, m.JoinGroupRequest(
            group_id="g-" + name, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=[m.JoinGroupRequestJoinGroupRequestProtocol(
                name="range", metadata=b"")]), 5)
        assert join.error_code == GROUP_AUTHORIZATION_FAILED


def test_acls_survive_kill_9(tmp_path):
    data = str(tmp_path / "data")
    broker = serve(data)
    try:
        add_acls(broker, acl(ResourceType.TOPIC, "kept", "User:alice", AclOperation.READ),
                 acl(ResourceType.TOPIC, "kept-", "User:bob", AclOperation.WRITE,
                     AclPermissionType.DENY, ResourcePatternType.PREFIXED))
        broker.kill()
    finally:
        broker.stop()
    broker = serve(data)
    try:
        client = admin(broker)
        found = client.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY), request_timeout=30).result(30)
        assert {(b.name, b.principal, b.resource_pattern_type, b.permission_type) for b in found} == {
            ("kept", "User:alice", ResourcePatternType.LITERAL, AclPermissionType.ALLOW),
            ("kept-", "User:bob", ResourcePatternType.PREFIXED, AclPermissionType.DENY)}
    finally:
        broker.stop()


def test_acl_apis_without_an_authorizer_answer_security_disabled(served):
    with ProtocolClient(served.bootstrap) as client:
        answer = client.request(30, m.CreateAclsRequest(creations=[m.CreateAclsRequestAclCreation(
            resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:x",
            host="*", operation=3, permission_type=3)]))
    assert (answer.results[0].error_code, answer.results[0].error_message) == (
        54, "No Authorizer is configured.")


def test_transaction_apis_check_the_transactional_id_topics_and_group(broker):
    """Kafka's checks of the transaction APIs: WRITE on the transactional id (else
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED); AddPartitionsToTxn WRITE on each topic
    (TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED, none added);
    AddOffsetsToTxn and TxnOffsetCommit READ on the group (GROUP_AUTHORIZATION_FAILED);
    TxnOffsetCommit READ on each topic; the implicit adds of transactions v2 (Produce
    v12, TxnOffsetCommit v5) the same, adding nothing when denied."""
    from txn_support import txn_batch
    TXN_DENIED, NOT_ATTEMPTED = 53, 55
    writable, other = topic_with_records(broker, 1), topic_with_records(broker, 1)
    tid, group = "tx-" + writable, "g-" + writable
    add_acls(broker, acl(ResourceType.TRANSACTIONAL_ID, tid, "User:alice", AclOperation.WRITE),
             acl(ResourceType.TOPIC, writable, "User:alice", AclOperation.WRITE))

    def add_partitions(client, pid, epoch, *topics):
        resp = client.request(24, m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                m.AddPartitionsToTxnRequestAddPartitionsToTxnTopic(name=t, partitions=[0])
                for t in topics]), 3)
        return {t.name: t.results_by_partition[0].partition_error_code
                for t in resp.results_by_topic_v3_and_below}

    def offset_commit(client, pid, epoch, version, topic=writable):
        resp = client.request(28, m.TxnOffsetCommitRequest(
            transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
            topics=[m.TxnOffsetCommitRequestTxnOffsetCommitRequestTopic(
                name=topic, partitions=[m.TxnOffsetCommitRequestTxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1)])]), version)
        return resp.topics[0].partitions[0].error_code

    def partitions_in_transaction(admin_client):
        resp = admin_client.request(65, m.DescribeTransactionsRequest(transactional_ids=[tid]))
        (state,) = resp.transaction_states
        return {(t.topic, p) for t in state.topics for p in t.partitions}

    with wire(broker, "bob") as bob:                   # no ACL on the transactional id
        init = bob.request(22, m.InitProducerIdRequest(transactional_id=tid,
                                                       transaction_timeout_ms=60000))
        assert init.error_code == TXN_DENIED
        assert add_partitions(bob, 0, 0, writable) == {writable: TXN_DENIED}
        assert offset_commit(bob, 0, 0, 3) == TXN_DENIED
        assert bob.request(26, m.EndTxnRequest(transactional_id=tid, producer_id=0,
                                               producer_epoch=0, committed=True)).error_code == TXN_DENIED
    with wire(broker, "alice") as alice, wire(broker, "admin") as adm:
        init = alice.request(22, m.InitProducerIdRequest(transactional_id=tid,
                                                         transaction_timeout_ms=60000))
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        assert add_partitions(alice, pid, epoch, writable, other) == \
            {writable: NOT_ATTEMPTED, other: TOPIC_AUTHORIZATION_FAILED}
        assert partitions_in_transaction(adm) == set()
        assert add_partitions(alice, pid, epoch, writable) == {writable: 0}
        offsets = alice.request(25, m.AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid,
                                                             producer_epoch=epoch, group_id=group))
        assert offsets.error_code == GROUP_AUTHORIZATION_FAILED
        assert offset_commit(alice, pid, epoch, 3) == GROUP_AUTHORIZATION_FAILED
        assert offset_commit(alice, pid, epoch, 5) == GROUP_AUTHORIZATION_FAILED
        # Transactions v2: a Produce to a topic alice may not write adds nothing.
        produced = alice.request(0, m.ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=30000,
                                                     topic_data=[m.ProduceRequestTopicProduceData(
            name=other, partition_data=[m.ProduceRequestPartitionProduceData(
                index=0, records=txn_batch(pid, epoch, 0, [b"denied"]))])]), 12)
        assert produced.responses[0].partition_responses[0].error_code == TOPIC_AUTHORIZATION_FAILED
        assert partitions_in_transaction(adm) == {(writable, 0)}
        # READ on the group: then READ on each topic decides per partition.
        add_acls(broker, acl(ResourceType.GROUP, group, "User:alice", AclOperation.READ))
        assert offset_commit(alice, pid, epoch, 5) == TOPIC_AUTHORIZATION_FAILED    # WRITE only
        add_acls(broker, acl(ResourceType.TOPIC, writable, "User:alice", AclOperation.READ))
        assert offset_commit(alice, pid, epoch, 5) == 0
        assert len(partitions_in_transaction(adm)) == 2            # + the group's offsets partition
        # v4+ is a broker's form: CLUSTER_ACTION on the cluster, which alice lacks.
        batched = alice.request(24, m.AddPartitionsToTxnRequest(transactions=[
            m.AddPartitionsToTxnRequestAddPartitionsToTxnTransaction(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=True,
                topics=[m.AddPartitionsToTxnRequestAddPartitionsToTxnTopic(name=writable,
                                                                           partitions=[0])])]), 4)
        assert batched.error_code == CLUSTER_AUTHORIZATION_FAILED and not batched.results_by_transaction
        verified = adm.request(24, m.AddPartitionsToTxnRequest(transactions=[
            m.AddPartitionsToTxnRequestAddPartitionsToTxnTransaction(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=True,
                topics=[m.AddPartitionsToTxnRequestAddPartitionsToTxnTopic(name=writable,
                                                                           partitions=[0])])]), 4)
        assert verified.error_code == 0
        assert verified.results_by_transaction[0].topic_results[0].results_by_partition[0] \
            .partition_error_code == 0
    with wire(broker, "admin") as client:
        assert client.list_offset(other, 0, -1) == 1               # nothing of alice's written


def test_consumer_protocol_needs_read_on_the_group_and_describe_on_its_topics(broker):
    """ConsumerGroupHeartbeat (KIP-848): READ on the group (GROUP_AUTHORIZATION_FAILED),
    DESCRIBE on every subscribed topic name (TOPIC_AUTHORIZATION_FAILED), as Kafka's
    KafkaApis; ConsumerGroupDescribe: DESCRIBE on the group."""
    topic = topic_with_records(broker)
    group = "kip848-" + uuid.uuid4().hex[:8]

    def heartbeat(client):
        return client.request(68, m.ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=uuid.uuid4().hex[:22], member_epoch=0,
            rebalance_timeout_ms=10000, subscribed_topic_names=[topic], topic_partitions=[]), 1)

    def describe(client):
        return client.request(69, m.ConsumerGroupDescribeRequest(group_ids=[group]), 1).groups[0]

    with wire(broker, "bob") as bob:
        assert heartbeat(bob).error_code == GROUP_AUTHORIZATION_FAILED
        assert describe(bob).error_code == GROUP_AUTHORIZATION_FAILED
        add_acls(broker, acl(ResourceType.GROUP, group, "User:bob", AclOperation.READ))
        assert heartbeat(bob).error_code == TOPIC_AUTHORIZATION_FAILED
        add_acls(broker, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.READ))
        answer = heartbeat(bob)
        assert answer.error_code == 0 and answer.member_epoch == 1
        assert [tp.partitions for tp in answer.assignment.topic_partitions] == [[0]]
        described = describe(bob)                 # READ implies DESCRIBE
        assert described.error_code == 0 and described.group_state == "Stable"


def test_share_group_offset_apis_check_the_group_and_topics(broker):
    """DescribeShareGroupOffsets DESCRIBE group and topic, AlterShareGroupOffsets READ group
    and topic, DeleteShareGroupOffsets DELETE group and READ topic (Kafka's KafkaApis);
    ListGroups lists a share group only to a principal that may describe it."""
    topic = topic_with_records(broker)
    group = "share-" + uuid.uuid4().hex[:8]

    def alter(client):
        return client.request(91, m.AlterShareGroupOffsetsRequest(group_id=group, topics=[
            m.AlterShareGroupOffsetsRequestAlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
                m.AlterShareGroupOffsetsRequestAlterShareGroupOffsetsRequestPartition(
                    partition_index=0, start_offset=2)])]), 0)

    def describe(client):
        (g,) = client.request(90, m.DescribeShareGroupOffsetsRequest(groups=[
            m.DescribeShareGroupOffsetsRequestDescribeShareGroupOffsetsRequestGroup(
                group_id=group, topics=None)]), 0).groups
        return g.error_code, [(t.topic_name, p.start_offset, p.error_code) for t in g.topics for p in t.partitions]

    def delete(client):
        return client.request(92, m.DeleteShareGroupOffsetsRequest(group_id=group, topics=[
            m.DeleteShareGroupOffsetsRequestDeleteShareGroupOffsetsRequestTopic(topic_name=topic)]), 0)

    def listed(client):
        return [g.group_id for g in client.request(16, m.ListGroupsRequest(types_filter=["share"]), 5).groups]

    with wire(broker, "admin") as admin_client, wire(broker, "bob") as bob:
        assert alter(admin_client).error_code == 0
        assert alter(bob).error_code == GROUP_AUTHORIZATION_FAILED
        assert describe(bob)[0] == GROUP_AUTHORIZATION_FAILED
        assert delete(bob).error_code == GROUP_AUTHORIZATION_FAILED
        assert group in listed(admin_client) and group not in listed(bob)
        add_acls(broker, acl(ResourceType.GROUP, group, "User:bob", AclOperation.READ))
        answer = alter(bob)                       # READ on the group, none on the topic
        assert answer.error_code == 0
        assert answer.responses[0].partitions[0].error_code == TOPIC_AUTHORIZATION_FAILED
        assert describe(bob) == (0, [])           # (topics it may not describe left out)
        assert group in listed(bob)               # READ implies DESCRIBE
        assert delete(bob).error_code == GROUP_AUTHORIZATION_FAILED
        add_acls(broker, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.READ),
                 acl(ResourceType.GROUP, group, "User:bob", AclOperation.DELETE))
        assert alter(bob).responses[0].partitions[0].error_code == 0
        assert describe(bob) == (0, [(topic, 2, 0)])
        answer = delete(bob)
        assert answer.error_code == 0 and answer.responses[0].error_code == 0
        assert describe(bob) == (0, [])
