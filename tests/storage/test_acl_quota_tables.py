"""ACLs and client quotas kept by the store: a copy in every log dir, written before a
change returns; the newest epoch wins at open and stale or corrupt copies are rewritten;
a corrupt copy alone leaves the store with the other dir's; bad inputs are refused with
the problem named and change nothing."""

from __future__ import annotations

import json
import os

import pytest

import pylog
from pylog.common.acl import AclBinding, AclFilter
from pylog.errors import InvalidRequestError

READ_T = AclBinding(2, "t", 3, "User:alice", "*", 3, 3)
WRITE_P = AclBinding(2, "p-", 4, "User:bob", "*", 4, 2)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def dirs(tmp_path) -> list[str]:
    return [str(tmp_path / "d1"), str(tmp_path / "d2")]


def test_every_dir_holds_a_copy_and_the_newest_wins(tmp_path):
    with pylog.open(dirs(tmp_path)) as store:
        assert store.create_acls([READ_T, WRITE_P]) == [None, None]
        assert store.alter_client_quotas([([("client-id", "c")], [("producer_byte_rate", 100.0, False)])]) == [None]
        old = {d: read(os.path.join(d, "pylog-acls.json")) for d in dirs(tmp_path)}
        store.delete_acls([AclFilter(principal="User:bob")])
    d1, d2 = dirs(tmp_path)
    for d in (d1, d2):
        assert json.loads(read(os.path.join(d, "pylog-acls.json")))["epoch"] == 2
        assert json.loads(read(os.path.join(d, "pylog-client-quotas.json")))["epoch"] == 1
    # d2 goes back to the older copy (a disk that missed a write): the newest wins at open
    # and d2 is rewritten; a corrupt quota copy in d1 is ignored for d2's.
    write(os.path.join(d2, "pylog-acls.json"), old[d2])
    write(os.path.join(d1, "pylog-client-quotas.json"), "{not json")
    with pylog.open(dirs(tmp_path)) as store:
        assert store.acls == (READ_T,)
        assert store.client_quotas == {(("client-id", "c"),): {"producer_byte_rate": 100.0}}
    assert json.loads(read(os.path.join(d2, "pylog-acls.json")))["epoch"] == 2
    assert json.loads(read(os.path.join(d1, "pylog-client-quotas.json")))["epoch"] == 1


def test_bad_inputs_are_refused_naming_the_problem_and_change_nothing(tmp_path):
    with pylog.open(dirs(tmp_path)) as store:
        results = store.create_acls([AclBinding(2, "t", 1, "User:a", "*", 3, 3),
                                     AclBinding(4, "my-cluster", 3, "User:a", "*", 7, 3),
                                     AclBinding(2, "t", 3, "User:a", "*", 1, 3)])
        assert [str(r) for r in results] == [
            "Invalid patternType 1: a new ACL's pattern type is LITERAL (3) or PREFIXED (4)",
            "The only valid name for the CLUSTER resource is kafka-cluster",
            "Invalid operation 1"]
        assert store.acls == () and store.acl_epoch == 0
        out = store.alter_client_quotas([([("client-id", "c")], [("producer_byte_rate", -5.0, False)]),
                                         ([], [("producer_byte_rate", 5.0, False)])])
        assert [type(r) for r in out] == [InvalidRequestError, InvalidRequestError]
        assert "must be a positive number" in str(out[0]) and "empty client quota entity" in str(out[1])
        assert store.client_quotas == {} and store.client_quota_epoch == 0
        with pytest.raises(InvalidRequestError, match="Unknown match type 7"):
            store.describe_client_quotas([("user", 7, None)], strict=False)
