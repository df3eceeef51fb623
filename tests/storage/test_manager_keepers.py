"""The LogManager's jobs are objects it owns (docs/ARCHITECTURE.md, storage/manager.py):
each keeper sees the store only through the host it is given. Read from the source, so
a path no test runs cannot reach past its host either."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from pylog.storage import LogManager
from pylog.storage.acls import AccessControlLists
from pylog.storage.client_quotas import ClientQuotas
from pylog.storage.dir_tables import TableDirs
from pylog.storage.dynamic_config import DynamicConfigs
from pylog.storage.log_dir_moves import LogDirMoves, MoveHost
from pylog.storage.scram_credentials import UserScramCredentials
from pylog.storage.startup import StartupHost, StoreLoader
from pylog.storage.topic_admin import TopicAdmin, TopicHost

# keeper -> (the attribute holding its host, the host's type)
KEEPERS = {
    TopicAdmin: ("_host", TopicHost),
    LogDirMoves: ("_host", MoveHost),
    DynamicConfigs: ("_dirs", TableDirs),
    UserScramCredentials: ("_dirs", TableDirs),
    AccessControlLists: ("_dirs", TableDirs),
    ClientQuotas: ("_dirs", TableDirs),
    StoreLoader: ("_host", StartupHost),
}


def host_uses(cls: type, attribute: str) -> dict[str, int]:
    """Every X in ``self.<attribute>.X`` in the class's source -> its line."""
    tree = ast.parse(inspect.getsource(inspect.getmodule(cls)))
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == attribute and isinstance(node.value.value, ast.Name) \
                and node.value.value.id in ("self", "host"):
            found.setdefault(node.attr, node.lineno)
    return found


@pytest.mark.parametrize("keeper", KEEPERS, ids=lambda k: k.__name__)
def test_a_keeper_uses_only_its_hosts_fields(keeper):
    attribute, host = KEEPERS[keeper]
    fields = {f.name for f in dataclasses.fields(host)}
    uses = host_uses(keeper, attribute)
    assert uses, f"{keeper.__name__} never uses self.{attribute}"
    unknown = {name: line for name, line in uses.items() if name not in fields}
    assert not unknown, f"{keeper.__name__} reaches past {host.__name__}: {unknown}"


@pytest.mark.parametrize("keeper", KEEPERS, ids=lambda k: k.__name__)
def test_a_keeper_is_owned_not_mixed_in(keeper):
    assert keeper not in LogManager.__mro__
    source = inspect.getsource(inspect.getmodule(keeper))
    assert "LogManager._" not in source and "manager._" not in source


def test_the_store_mixes_nothing_in():
    assert [b for b in LogManager.__bases__ if b.__module__.startswith("pylog.")] == []
