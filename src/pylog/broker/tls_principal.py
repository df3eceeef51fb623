"""mTLS principals as Kafka makes them: a client certificate's subject as an RFC 2253
distinguished name (Java's ``X500Principal.getName()``), mapped by
``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper) to ``User:<name>``.

Kafka's DefaultKafkaPrincipalBuilder names an SSL connection ``User:`` + the mapped
subject, or ``User:ANONYMOUS`` when the client sent no certificate. The DN is written
from the certificate's DER bytes as Java writes it, so rules written for Kafka match the
same text: the RDNs last first, ``+`` within a multi-valued RDN, the keywords RFC 2253
defines (CN, C, L, ST, O, OU, STREET, DC, UID) and the dotted OID with ``#``+hex of the
DER value for every other attribute, ``,=+<>#;"\\`` escaped with a backslash, leading
and trailing spaces too. tests/broker/test_tls.py checks it against Java's own.
"""

from __future__ import annotations

import re

from pylog.errors import ConfigError, PylogError

__all__ = ["ANONYMOUS", "NoMatchingRule", "PrincipalMapper", "subject_name"]

#: The principal of a connection that has not authenticated (Kafka's KafkaPrincipal.ANONYMOUS).
ANONYMOUS = "User:ANONYMOUS"

# ============================================================ DER -> RFC 2253

_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
             "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
             "0.9.2342.19200300.100.1.1": "UID"}
# DER string types Java writes as text (AVA.isDerString): tag -> codec.
_STRING_TAGS = {0x13: "latin-1", 0x14: "latin-1", 0x16: "latin-1", 0x1B: "latin-1",
                0x1E: "utf-16-be", 0x0C: "utf-8"}
_ESCAPED = set(',=+<>#;"\\')


class _Der:
    """A bounds-checked reader of DER TLVs over bytes."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data, self.pos, self.end = data, pos, len(data) if end is None else end

    def read(self) -> tuple[int, int, int, int]:
        """(tag, start of the TLV, start of the value, end of the value)."""
        data, start = self.data, self.pos
        if start + 2 > self.end:
            raise ValueError("truncated DER")
        tag, length = data[start], data[start + 1]
        pos = start + 2
        if length & 0x80:
            count = length & 0x7F
            if not 0 < count <= 4 or pos + count > self.end:
                raise ValueError("bad DER length")
            length = int.from_bytes(data[pos:pos + count], "big")
            pos += count
        if pos + length > self.end:
            raise ValueError("DER value past its container")
        self.pos = pos + length
        return tag, start, pos, pos + length

    def inside(self, value_start: int, value_end: int) -> _Der:
        return _Der(self.data, value_start, value_end)


def _oid(data: bytes) -> str:
    parts, value = [], 0
    for byte in data:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    first = min(parts[0] // 40, 2)
    return ".".join(map(str, [first, parts[0] - 40 * first, *parts[1:]]))


def _escape(text: str) -> str:
    """A value as Java's AVA.toRFC2253String writes it."""
    body = "".join("\\00" if c == "\0" else "\\" + c if c in _ESCAPED else c for c in text)
    lead = len(body) - len(body.lstrip(" \r"))
    trail = len(body.rstrip(" \r"))            # index of the first trailing space
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(body))


def subject_name(der_certificate: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` (RFC 2253)."""
    cert = _Der(der_certificate)
    _, _, start, end = cert.read()                 # Certificate
    tbs = cert.inside(start, end)
    _, _, start, end = tbs.read()                  # TBSCertificate
    fields = tbs.inside(start, end)
    tag, *_ = fields.read()
    if tag == 0xA0:                                # [0] version, then the serial number
        fields.read()
    fields.read()                                  # signature algorithm
    fields.read()                                  # issuer
    fields.read()                                  # validity
    tag, _, start, end = fields.read()             # subject
    if tag != 0x30:
        raise ValueError("certificate subject is not a SEQUENCE")
    rdns = []
    names = fields.inside(start, end)
    while names.pos < names.end:
        _, _, start, end = names.read()            # RelativeDistinguishedName (SET)
        avas = names.inside(start, end)
        parts = []
        while avas.pos < avas.end:
            _, _, start, end = avas.read()         # AttributeTypeAndValue
            ava = avas.inside(start, end)
            _, _, oid_start, oid_end = ava.read()
            tag, tlv_start, value_start, value_end = ava.read()
            oid = _oid(der_certificate[oid_start:oid_end])
            keyword = _KEYWORDS.get(oid)
            if keyword is None or tag not in _STRING_TAGS:
                parts.append(f"{keyword or oid}=#{der_certificate[tlv_start:value_end].hex()}")
            else:
                value = der_certificate[value_start:value_end].decode(_STRING_TAGS[tag], "replace")
                parts.append(f"{keyword}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(reversed(rdns))


# ============================================================ mapping rules

# Kafka's SslPrincipalMapper, pattern for pattern.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


class NoMatchingRule(PylogError):
    """No rule of ssl.principal.mapping.rules matched a certificate's name."""


class _Rule:
    __slots__ = ("pattern", "replacement", "case", "text")

    def __init__(self, pattern: re.Pattern | None, replacement: str, case: str, text: str) -> None:
        self.pattern, self.replacement, self.case, self.text = pattern, replacement, case, text

    def apply(self, name: str) -> str | None:
        if self.pattern is None:                   # DEFAULT
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(lambda m: _java_expand(m, self.replacement), name)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _java_expand(match: re.Match, replacement: str) -> str:
    """Java's Matcher replacement syntax: ``$n`` / ``${name}`` are groups (a number
    beyond the groups is taken as fewer digits, then as the literal, as Kafka's
    escapeLiteralBackReferences arranges), ``\\x`` is x."""
    out, i, groups = [], 0, match.re.groups
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(replacement) and replacement[i + 1] == "{":
            close = replacement.index("}", i)
            out.append(match.group(replacement[i + 2:close]) or "")
            i = close + 1
        elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                j += 1
            digits = replacement[i + 1:j]
            while len(digits) > 1 and int(digits) > groups:
                digits = digits[:-1]
            if int(digits) > groups or digits.startswith("0") and int(digits) != 0:
                out.append(replacement[i:j])           # no such group: literal
            else:
                out.append(match.group(int(digits)) or "")
                out.append(replacement[i + 1 + len(digits):j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class PrincipalMapper:
    """``ssl.principal.mapping.rules``: ``RULE:pattern/replacement/[LU]`` and ``DEFAULT``
    (the name as it is), comma-separated, tried in order; the first that matches the
    whole name gives the principal's name. Patterns are Java regular expressions in
    Kafka; the ones rules use (groups, classes, quantifiers, anchors) mean the same in
    Python's ``re``."""

    def __init__(self, rules: str) -> None:
        self.text = rules
        self.rules: list[_Rule] = []
        for found in _SPLITTER.finditer(rules.strip()):
            rule = found.group(1)
            parsed = _PARSER.match(rule)
            if parsed is None or parsed.end() != len(rule):
                unmatched = rule[parsed.end():] if parsed else rule
                raise ConfigError(f"ssl.principal.mapping.rules = {rules!r}: invalid rule "
                                  f"`{rule}`, unmatched substring: `{unmatched}`")
            if parsed.group(1) is not None:
                self.rules.append(_Rule(None, "", "", "DEFAULT"))
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as exc:
                    raise ConfigError(f"ssl.principal.mapping.rules = {rules!r}: the pattern "
                                      f"{parsed.group(2)!r} of `{rule}` is not a regular "
                                      f"expression: {exc}") from None
                self.rules.append(_Rule(pattern, parsed.group(4), parsed.group(6), rule))
            # an empty rule is ignored, as Kafka ignores it

    def name(self, distinguished_name: str) -> str:
        """The principal's name (without ``User:``); NoMatchingRule when no rule applies."""
        for rule in self.rules:
            found = rule.apply(distinguished_name)
            if found is not None:
                return found
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules "
                             f"[{', '.join(r.text for r in self.rules)}]")
