"""TLS client-certificate principals, as Kafka's ``DefaultKafkaPrincipalBuilder`` makes them.

On an SSL listener the principal is ``User:`` + the client certificate's subject, written as
Java's ``X500Principal.getName()`` writes it (RFC 2253: the last RDN first, ``,=+<>#;"\\``
escaped, attributes other than CN, C, L, ST, O, OU, STREET, DC and UID as ``OID=#<DER hex>``),
then mapped by ``ssl.principal.mapping.rules`` (:class:`SslPrincipalMapper`, Kafka's rules and
their quirks). A connection without a certificate (``ssl.client.auth`` ``requested`` or
``none``) is ``User:ANONYMOUS``.

    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L,DEFAULT")
    mapper.name("CN=Alice,OU=Eng")   # 'alice@eng'
"""
from __future__ import annotations

import re
import ssl as _ssl
from typing import Optional

__all__ = ["SslPrincipalMapper", "NoMatchingRule", "subject_name", "peer_principal",
           "client_auth_mode", "CLIENT_AUTH"]

#: ``ssl.client.auth`` -> what the TLS server asks of the client
CLIENT_AUTH = {"required": _ssl.CERT_REQUIRED, "requested": _ssl.CERT_OPTIONAL,
               "none": _ssl.CERT_NONE}

# Kafka's SslPrincipalMapper patterns (Java regex syntax that Python's re reads alike)
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule of ``ssl.principal.mapping.rules`` applies to a name (Kafka then fails the
    connection's authentication)."""


def client_auth_mode(value: str) -> _ssl.VerifyMode:
    """The :class:`ssl.VerifyMode` of an ``ssl.client.auth`` value."""
    try:
        return CLIENT_AUTH[value]
    except KeyError:
        raise ValueError(f"ssl.client.auth must be one of {sorted(CLIENT_AUTH)}, not {value!r}") from None


def _java_replacement(replacement: str, m: re.Match[str]) -> str:
    """``Matcher.appendReplacement``'s reading of a replacement: ``$n`` (as many digits as
    still name a group), ``${name}``, ``\\x`` for a literal x."""
    out, i, groups = [], 0, m.re.groups
    while i < len(replacement):
        c = replacement[i]
        if c == "\\":
            if i + 1 >= len(replacement):
                raise ValueError("character to be escaped is missing")
            out.append(replacement[i + 1])
            i += 2
        elif c == "$":
            i += 1
            if i >= len(replacement):
                raise ValueError("Illegal group reference: group index is missing")
            if replacement[i] == "{":
                end = replacement.find("}", i)
                if end < 0:
                    raise ValueError("named capturing group is missing trailing '}'")
                try:
                    value = m.group(replacement[i + 1:end])
                except IndexError:
                    raise ValueError(f"No group with name {{{replacement[i + 1:end]}}}") from None
                i = end + 1
            else:
                if not replacement[i].isdigit() or not replacement[i].isascii():
                    raise ValueError("Illegal group reference")
                ref = int(replacement[i])
                if ref > groups:
                    raise ValueError(f"No group {ref}")
                i += 1
                while i < len(replacement) and "0" <= replacement[i] <= "9":
                    longer = ref * 10 + int(replacement[i])
                    if longer > groups:
                        break
                    ref, i = longer, i + 1
                value = m.group(ref)
            if value is not None:
                out.append(value)
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _Rule:
    def __init__(self, pattern: Optional[str] = None, replacement: str = "",
                 lower: bool = False, upper: bool = False) -> None:
        self.default = pattern is None
        self.pattern = None if pattern is None else re.compile(pattern)
        self.replacement, self.lower, self.upper = replacement, lower, upper

    def _escape_literal_back_references(self, groups: int) -> str:
        # a $n naming no group (after dropping trailing digits, as Java reads $123 when
        # only 12 groups exist) is made literal; the splice positions are those of the
        # original string, as Kafka's loop over a matcher of the unmodified replacement
        if groups == 0:
            return self.replacement
        value = self.replacement
        for m in _BACK_REFERENCE.finditer(self.replacement):
            digits = m.group(1)
            if digits.startswith("0"):
                continue
            index = int(digits)
            while index > groups and index >= 10:
                index //= 10
            if index > groups:
                start = m.start(1)
                value = value[:start - 1] + "\\" + value[start - 1:]
        return value

    def apply(self, name: str) -> Optional[str]:
        if self.default:
            return name
        assert self.pattern is not None
        if self.pattern.fullmatch(name) is None:
            return None
        replacement = self._escape_literal_back_references(self.pattern.groups)
        # String.replaceAll: every match, empty ones after a match too (as re.sub since 3.7)
        result = self.pattern.sub(lambda m: _java_replacement(replacement, m), name)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __repr__(self) -> str:
        if self.default:
            return "DEFAULT"
        assert self.pattern is not None
        return (f"RULE:{self.pattern.pattern}/{self.replacement}"
                + ("/L" if self.lower else "/U" if self.upper else ""))


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: a comma-separated list of ``DEFAULT`` (the name as
    it is) and ``RULE:pattern/replacement/[LU]`` (when ``pattern`` matches the whole name:
    every match replaced by ``replacement``, Java's ``$n`` syntax, then lower/upper-cased);
    the first rule that applies names the principal. Bad rules raise :class:`ValueError`
    with Kafka's message."""

    def __init__(self, rules: Optional[str] = "DEFAULT") -> None:
        self.rules = self._parse(self._split(rules if rules is not None else "DEFAULT"))

    @staticmethod
    def _split(rules: str) -> list[str]:
        return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip())]

    @staticmethod
    def _parse(rules: list[str]) -> list[_Rule]:
        out = []
        for rule in rules:
            m = _RULE_PARSER.match(rule)
            if m is None:
                raise ValueError(f"Invalid rule: {rule}")
            if m.end() != len(rule):
                raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end():]}`")
            if m.group(1) is not None:
                out.append(_Rule())
            elif m.group(2) is not None:
                out.append(_Rule(m.group(2), m.group(4), m.group(6) == "L", m.group(6) == "U"))
            # an empty rule is ignored
        return out

    def name(self, distinguished_name: str) -> str:
        """The principal name of a certificate subject (RFC 2253 form)."""
        for rule in self.rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self.rules}")

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = {self.rules})"


# ------------------------------------------------------------------ X500Principal.getName()

#: the attribute keywords Java's RFC 2253 form writes by name
_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
             "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
             "0.9.2342.19200300.100.1.1": "UID"}
_ESCAPED = set(',=+<>#;"\\')


def _escape(value: str) -> str:
    out = ["\\" + c if c in _ESCAPED else c for c in value]
    if out and value[0] == " ":
        out[0] = "\\ "
    if len(out) > 1 and value[-1] == " ":
        out[-1] = "\\ "
    return "".join(out)


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _der_value(attr: object) -> bytes:
    """The DER of an attribute value (tag, length, content), as the certificate holds it."""
    tag = attr._type.value  # type: ignore[attr-defined]  # the ASN.1 string type (its tag)
    value: str = attr.value  # type: ignore[attr-defined]
    codec = {30: "utf-16-be", 28: "utf-32-be", 20: "latin-1"}.get(tag, "utf-8")
    content = value.encode(codec)
    return bytes([tag]) + _der_length(len(content)) + content


def subject_name(certificate_der: bytes) -> str:
    """A DER certificate's subject as Java's ``X500Principal.getName()`` (RFC 2253) writes it."""
    from cryptography import x509  # optional: only TLS listeners with client certificates need it

    cert = x509.load_der_x509_certificate(certificate_der)
    rdns = []
    for rdn in reversed(list(cert.subject.rdns)):
        avas = []
        for attr in rdn:
            oid = attr.oid.dotted_string
            keyword = _KEYWORDS.get(oid)
            if keyword is not None and isinstance(attr.value, str):
                avas.append(f"{keyword}={_escape(attr.value)}")
            else:
                avas.append(f"{oid}=#{_der_value(attr).hex()}")
        rdns.append("+".join(avas))
    return ",".join(rdns)


def peer_principal(ssl_object: Optional[_ssl.SSLObject],
                   mapper: SslPrincipalMapper) -> Optional[str]:
    """``User:<mapped subject>`` of a TLS connection's client certificate, None without one
    (the connection is then ANONYMOUS). Raises :class:`NoMatchingRule`."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return None
    return "User:" + mapper.name(subject_name(der))

