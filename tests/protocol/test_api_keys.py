"""ApiKey (built from the generated codec) against kafka-python's request classes: the
same number under the same name, for every API both know."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import kafka.protocol

from pylog.protocol import API_NAMES, SUPPORTED, ApiKey
from pylog.protocol import messages as m
from pylog.protocol.api_keys import kafka_name


def kafka_python_api_keys() -> dict[str, int]:
    found = {}
    for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and name.endswith("Request") and isinstance(getattr(cls, "API_KEY", None), int):
                found[name] = cls.API_KEY
    return found


def test_api_keys_match_kafka_python():
    theirs = kafka_python_api_keys()
    both = {name: key for name, key in theirs.items() if key in m.REQUESTS}
    assert len(both) > 35
    for name, key in both.items():
        assert ApiKey[kafka_name(name)] == key, name


def test_one_key_per_generated_api_and_every_supported_one():
    assert {int(k) for k in ApiKey} == set(m.REQUESTS)
    assert set(SUPPORTED) <= set(ApiKey)
    for key in ApiKey:
        assert kafka_name(API_NAMES[key]) == key.name
    assert (ApiKey.PRODUCE, ApiKey.API_VERSIONS, ApiKey.OFFSET_FOR_LEADER_EPOCH) == (0, 18, 23)
    assert kafka_name("DescribeUserScramCredentialsRequest") == "DESCRIBE_USER_SCRAM_CREDENTIALS"
