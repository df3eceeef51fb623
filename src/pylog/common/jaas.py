"""Kafka's JAAS configuration syntax: where a broker's SASL/PLAIN users come from, and a
client's SASL login (``sasl.jaas.config = ...ScramLoginModule required username=...
password=...;``).

Two forms, as Kafka reads them (org.apache.kafka.common.security.JaasConfig, and the
JVM's JAAS file):

- a config value, ``listener.name.<listener>.plain.sasl.jaas.config``: one login module,
  ``<LoginModuleClass> <flag> (<option>=<value>)*;``
- a JAAS file (``pylog.sasl.jaas.file``, Kafka's ``-Djava.security.auth.login.config``):
  sections ``<Name> { <module entries> };``, of which a broker reads
  ``<listener>.KafkaServer`` or else ``KafkaServer``.

PLAIN's users are PlainLoginModule's options ``user_<name>="<password>"``
(PlainServerCallbackHandler). Tokens as Java's StreamTokenizer gives them: words of
letters, digits, ``. _ - $``; strings in double or single quotes with backslash
escapes; ``//`` and ``/* */`` comments.
"""

from __future__ import annotations

import re
from pathlib import Path

from pylog.errors import ConfigError

__all__ = ["PLAIN_LOGIN_MODULE", "SCRAM_LOGIN_MODULE", "parse_jaas_config", "parse_jaas_file",
           "plain_users"]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")

_TOKEN = re.compile(r"""
    \s+ | //[^\n]* | /\*.*?\*/                       # skipped
  | (?P<word>[A-Za-z0-9._$\-\u0080-\U0010ffff]+)
  | (?P<quoted>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<punct>[=;{}])
""", re.VERBOSE | re.DOTALL)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}

#: (login module class, {option: value}) for each entry
Entry = tuple[str, dict[str, str]]


def _tokens(text: str, where: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        found = _TOKEN.match(text, pos)
        if found is None:
            raise ConfigError(f"{where}: unexpected {text[pos]!r} at character {pos} of the JAAS config")
        pos = found.end()
        if found.lastgroup == "quoted":
            raw = found.group("quoted")[1:-1]
            out.append(("word", _ESCAPE.sub(lambda e: _ESCAPES.get(e.group(1), e.group(1)), raw)))
        elif found.lastgroup is not None:
            out.append((found.lastgroup if found.lastgroup == "word" else found.group(), found.group()))
    return out


def _entries(tokens: list[tuple[str, str]], pos: int, where: str, end: str | None) -> tuple[list[Entry], int]:
    """Login module entries from tokens[pos] up to `end` ("}" in a file section, None:
    the end); returns them and the position after."""
    entries: list[Entry] = []
    while pos < len(tokens) and tokens[pos][0] != end:
        kind, module = tokens[pos]
        if kind != "word":
            raise ConfigError(f"{where}: expected a login module class, got {module!r}")
        if pos + 1 >= len(tokens) or tokens[pos + 1][0] != "word":
            raise ConfigError(f"{where}: login module control flag not specified for {module}")
        flag = tokens[pos + 1][1]
        if flag.lower() not in _FLAGS:
            raise ConfigError(f"{where}: invalid login module control flag {flag!r} "
                              f"(expected one of {', '.join(_FLAGS)})")
        pos += 2
        options: dict[str, str] = {}
        while pos < len(tokens) and tokens[pos][0] == "word":
            key = tokens[pos][1]
            value = tokens[pos + 2] if pos + 2 < len(tokens) else None
            if tokens[pos + 1:pos + 2] != [("=", "=")] or value is None or value[0] != "word":
                raise ConfigError(f"{where}: value not specified for key {key!r}")
            options[key] = value[1]
            pos += 3
        if pos >= len(tokens) or tokens[pos][0] != ";":
            raise ConfigError(f"{where}: JAAS config entry for {module} not terminated by a semicolon")
        pos += 1
        entries.append((module, options))
    return entries, pos


def parse_jaas_config(text: str, where: str) -> Entry:
    """The one login module of a ``sasl.jaas.config`` value (`where` names the key)."""
    entries, _ = _entries(_tokens(text, where), 0, where, None)
    if len(entries) != 1:
        raise ConfigError(f"{where}: the JAAS config holds {len(entries)} login modules, "
                          f"should be 1 module")
    return entries[0]


def parse_jaas_file(path: str) -> dict[str, list[Entry]]:
    """A JAAS file's sections: name -> login module entries."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"pylog.sasl.jaas.file = {path!r}: {exc.strerror or exc}") from None
    where = f"JAAS file {path}"
    tokens = _tokens(text, where)
    sections: dict[str, list[Entry]] = {}
    pos = 0
    while pos < len(tokens):
        name = tokens[pos][1]
        if tokens[pos][0] != "word" or tokens[pos + 1:pos + 2] != [("{", "{")]:
            raise ConfigError(f"{where}: expected '<Section> {{', got {name!r}")
        entries, pos = _entries(tokens, pos + 2, f"{where}, section {name}", "}")
        if pos >= len(tokens):
            raise ConfigError(f"{where}: section {name} has no closing '}}'")
        pos += 1
        if pos < len(tokens) and tokens[pos][0] == ";":
            pos += 1
        sections[name] = entries
    return sections


def plain_users(entries: list[Entry]) -> dict[str, str]:
    """user -> password from PlainLoginModule's ``user_<name>`` options."""
    users: dict[str, str] = {}
    for module, options in entries:
        if module == PLAIN_LOGIN_MODULE:
            users.update({k[len("user_"):]: v for k, v in options.items()
                          if k.startswith("user_") and len(k) > len("user_")})
    return users
