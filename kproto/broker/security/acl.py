"""ACLs and the authorizer, as Kafka's ``StandardAuthorizer`` decides.

An :class:`AclBinding` says that a principal (``User:alice``, ``User:*``) from a host (``*`` or
an address) is allowed or denied an operation on resources: a topic, group, transactional id or
the cluster (``kafka-cluster``), named literally (``*`` is every name) or by a prefix.
:meth:`Authorizer.authorize` follows ``StandardAuthorizerData``: super users may do anything;
otherwise the ACLs of every pattern that covers the resource are looked at, a DENY of the
operation (or ALL) wins, an ALLOW of it (or ALL, or one that implies it: READ, WRITE, DELETE
and ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows, and a resource no
ACL covers at all is allowed only with ``allow.everyone.if.no.acl.found``.

The ACLs are records of ``__cluster_metadata``, as KRaft keeps them: the single broker's own
(see :mod:`kproto.broker.cluster.combined`), a cluster's controllers' (:func:`acl_creations`
and :func:`acl_deletions` are the checks its controller shares). :class:`SecurityFile` reads
``kproto-security.json``, where older kproto versions kept them, for the one-time migration.
CreateAcls/DescribeAcls/DeleteAcls v0-3 are answered here; without an authorizer they answer
SECURITY_DISABLED, as Kafka does.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Container, Iterable, Optional

from kproto.broker.security.auth import ScramCredential
from kproto.codecs import response as response_codec
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey

__all__ = ["AclBinding", "AclFilter", "Authorizer", "SecurityFile", "AclHandlers", "ACL_VERSIONS",
           "acl_creations", "acl_deletions", "acl_error_response",
           "SECURITY_FILE", "CLUSTER_NAME", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID",
           "LITERAL", "PREFIXED", "ALLOW", "DENY", "ALL", "READ", "WRITE", "CREATE", "DELETE",
           "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
           "IDEMPOTENT_WRITE"]

SECURITY_FILE = "kproto-security.json"
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# ResourceType
ANY, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 1, 2, 3, 4, 5, 6, 7
# PatternType (ANY = 1 as above)
MATCH, LITERAL, PREFIXED = 2, 3, 4
# AclOperation (ANY = 1)
(ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
 ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS) = range(2, 15)
# AclPermissionType (ANY = 1)
DENY, ALLOW = 2, 3

#: what the handlers here implement
ACL_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}

#: an ALLOW of any of these allows the key (Kafka's implied operations)
_IMPLIED = {DESCRIBE: {DESCRIBE, READ, WRITE, DELETE, ALTER},
            DESCRIBE_CONFIGS: {DESCRIBE_CONFIGS, ALTER_CONFIGS}}

Respond = Callable[[Any], None]


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL (Kafka's ``AclBinding``: a resource pattern and an access control entry)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def covers(self, resource_type: int, name: str) -> bool:
        """Whether this binding's pattern applies to the resource."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == LITERAL:
            return self.resource_name in (name, WILDCARD)
        return self.pattern_type == PREFIXED and name.startswith(self.resource_name)

    def invalid(self) -> Optional[str]:
        """Why CreateAcls refuses it (INVALID_REQUEST), as Kafka's controller words it."""
        if self.resource_type not in (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER):
            return f"Invalid resourceType {self.resource_type}"
        if self.pattern_type not in (LITERAL, PREFIXED):
            return f"Invalid patternType {self.pattern_type}"
        if not ALL <= self.operation <= DESCRIBE_TOKENS:
            return f"Invalid operation {self.operation}"
        if self.permission not in (ALLOW, DENY):
            return f"Invalid permissionType {self.permission}"
        if ":" not in self.principal:
            return (f"Could not parse principal from `{self.principal}` (no colon is present "
                    "separating the principal type from the principal name)")
        if not self.resource_name:
            return "Invalid empty resource name specified"
        if self.resource_type == CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        return None


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls/DeleteAcls filter (Kafka's ``AclBindingFilter``): ANY (1) and None
    match everything; pattern MATCH finds the literal, wildcard and prefixed bindings that
    apply to the name."""

    resource_type: int = ANY
    resource_name: Optional[str] = None
    pattern_type: int = ANY
    principal: Optional[str] = None
    host: Optional[str] = None
    operation: int = ANY
    permission: int = ANY

    @classmethod
    def from_request(cls, f: Any) -> AclFilter:
        return cls(f.resource_type_filter, f.resource_name_filter, getattr(f, "pattern_type_filter", LITERAL),
                   f.principal_filter, f.host_filter, f.operation, f.permission_type)

    def invalid(self) -> Optional[str]:
        if not ANY <= self.resource_type <= USER:
            return f"Invalid resourceType {self.resource_type}"
        if not ANY <= self.pattern_type <= PREFIXED:
            return f"Invalid patternType {self.pattern_type}"
        if not ANY <= self.operation <= DESCRIBE_TOKENS:
            return f"Invalid operation {self.operation}"
        if self.permission not in (ANY, DENY, ALLOW):
            return f"Invalid permissionType {self.permission}"
        return None

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type not in (ANY, b.resource_type):
            return False
        if self.pattern_type == MATCH:
            if self.resource_name is not None and not (
                    (b.pattern_type == LITERAL and b.resource_name in (self.resource_name, WILDCARD))
                    or (b.pattern_type == PREFIXED and self.resource_name.startswith(b.resource_name))):
                return False
        else:
            if self.pattern_type not in (ANY, b.pattern_type):
                return False
            if self.resource_name is not None and self.resource_name != b.resource_name:
                return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and self.operation in (ANY, b.operation)
                and self.permission in (ANY, b.permission))


class Authorizer:
    """The ACLs and the decisions made from them."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 acls: Iterable[AclBinding] = ()) -> None:
        self.super_users = set(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self.acls: set[AclBinding] = set(acls)

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource."""
        if principal in self.super_users:
            return True
        found = allowed = False
        implied = _IMPLIED.get(operation, {operation})
        for acl in self.acls:
            if not acl.covers(resource_type, name):
                continue
            found = True
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD):
                continue
            if acl.permission == DENY:
                if acl.operation in (ALL, operation):
                    return False
            elif acl.operation == ALL or acl.operation in implied:
                allowed = True
        return allowed or (not found and self.allow_if_no_acl)

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether ``principal`` may do ``operation`` on some resource of the type (Kafka's
        ``authorizeByResourceType``, used by InitProducerId without IDEMPOTENT_WRITE): an
        ALLOW that no DENY of the same principal covers."""
        if principal in self.super_users:
            return True
        mine = [a for a in self.acls if a.resource_type == resource_type and a.operation in (ALL, operation)
                and a.principal in (principal, WILDCARD_PRINCIPAL) and a.host in (host, WILDCARD)]
        denies = [a for a in mine if a.permission == DENY]
        if any(a.pattern_type == LITERAL and a.resource_name == WILDCARD for a in denies):
            return False
        for a in mine:
            if a.permission != ALLOW:
                continue
            if a.pattern_type == LITERAL and any(d.pattern_type == LITERAL and d.resource_name == a.resource_name
                                                 for d in denies):
                continue
            if any(d.pattern_type == PREFIXED and a.resource_name.startswith(d.resource_name) for d in denies):
                continue
            return True
        if self.allow_if_no_acl:
            return not any(a.resource_type == resource_type for a in self.acls)
        return False


class SecurityFile:
    """``kproto-security.json`` of an older kproto: the ACLs and the SCRAM credentials changed
    through the API (read once, to migrate them into the metadata log)."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, SECURITY_FILE)
        self.load_problems: list[str] = []

    def load(self) -> tuple[list[AclBinding], dict[tuple[str, str], Optional[ScramCredential]]]:
        try:
            with open(self.path, "rb") as f:
                doc = json.loads(f.read())
            acls = [AclBinding(**a) for a in doc.get("acls", [])]
            scram: dict[tuple[str, str], Optional[ScramCredential]] = {}
            for e in doc.get("scram", []):
                scram[(e["mechanism"], e["user"])] = (ScramCredential.from_json(e["credential"])
                                                      if e.get("credential") else None)
            return acls, scram
        except FileNotFoundError:
            return [], {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            self.load_problems.append(f"{self.path}: {exc!r}")
            return [], {}


class AclHandlers:
    """CreateAcls, DescribeAcls and DeleteAcls over an :class:`Authorizer` (None: no
    authorizer is configured)."""

    def __init__(self, authorizer: Optional[Authorizer], save: Callable[[], None]) -> None:
        self.authorizer = authorizer
        self.save = save

    def create_acls(self, body: Any, version: int, respond: Respond) -> None:
        if self.authorizer is None:
            respond(acl_error_response(ApiKey.CREATE_ACLS, body))
            return
        response, new = acl_creations(body, self.authorizer.acls)
        if new:
            self.authorizer.acls.update(new)
            self.save()
        respond(response)

    def describe_acls(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DESCRIBE_ACLS).cls
        if self.authorizer is None:
            respond(cls(error_code=ErrorCode.SECURITY_DISABLED, error_message="No Authorizer is configured.",
                        resources=[]))
            return
        flt = AclFilter(body.resource_type_filter, body.resource_name_filter,
                        getattr(body, "pattern_type_filter", LITERAL), body.principal_filter,
                        body.host_filter, body.operation, body.permission_type)
        why = flt.invalid()
        if why is not None:
            respond(cls(error_code=ErrorCode.INVALID_REQUEST, error_message=why, resources=[]))
            return
        by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
        for b in sorted(self.authorizer.acls):
            if flt.matches(b):
                by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
        respond(cls(error_code=0, error_message=None, resources=[
            cls.DescribeAclsResource(resource_type=rt, resource_name=rn, pattern_type=pt, acls=[
                cls.AclDescription(principal=b.principal, host=b.host, operation=b.operation,
                                   permission_type=b.permission) for b in acls])
            for (rt, rn, pt), acls in by_resource.items()]))

    def delete_acls(self, body: Any, version: int, respond: Respond) -> None:
        if self.authorizer is None:
            respond(acl_error_response(ApiKey.DELETE_ACLS, body))
            return
        response, gone = acl_deletions(body, self.authorizer.acls)
        if gone:
            self.authorizer.acls.difference_update(gone)
            self.save()
        respond(response)


def acl_error_response(api_key: int, body: Any, code: int = ErrorCode.SECURITY_DISABLED,
                       message: Optional[str] = "No Authorizer is configured.") -> Any:
    """A CreateAcls/DeleteAcls response with ``code`` for every item (SECURITY_DISABLED:
    no authorizer)."""
    cls = response_codec(api_key).cls
    if api_key == ApiKey.CREATE_ACLS:
        return cls(results=[cls.AclCreationResult(error_code=code, error_message=message)
                            for _ in body.creations])
    return cls(filter_results=[cls.DeleteAclsFilterResult(
        error_code=code, error_message=message, matching_acls=[]) for _ in body.filters])


def acl_creations(body: Any, acls: Container[AclBinding]) -> tuple[Any, list[AclBinding]]:
    """A CreateAcls request checked against ``acls``: its response and the bindings to add
    (valid ones not there yet; an ACL that exists already is not an error, as in Kafka)."""
    cls = response_codec(ApiKey.CREATE_ACLS).cls
    results, new = [], []
    for c in body.creations:
        res = cls.AclCreationResult(error_code=0, error_message=None)
        results.append(res)
        b = AclBinding(c.resource_type, c.resource_name, getattr(c, "resource_pattern_type", LITERAL),
                       c.principal, c.host, c.operation, c.permission_type)
        why = b.invalid()
        if why is not None:
            res.error_code, res.error_message = ErrorCode.INVALID_REQUEST, why
        elif b not in acls and b not in new:
            new.append(b)
    return cls(results=results), new


def acl_deletions(body: Any, acls: Iterable[AclBinding]) -> tuple[Any, set[AclBinding]]:
    """A DeleteAcls request over ``acls``: its response and the bindings it removes."""
    cls = response_codec(ApiKey.DELETE_ACLS).cls
    results = []
    gone: set[AclBinding] = set()
    remaining = sorted(acls)
    for f in body.filters:
        res = cls.DeleteAclsFilterResult(error_code=0, error_message=None, matching_acls=[])
        results.append(res)
        flt = AclFilter.from_request(f)
        why = flt.invalid()
        if why is not None:
            res.error_code, res.error_message = ErrorCode.INVALID_REQUEST, why
            continue
        for b in remaining:
            if b in gone or not flt.matches(b):
                continue
            gone.add(b)
            res.matching_acls.append(cls.DeleteAclsMatchingAcl(
                error_code=0, error_message=None, resource_type=b.resource_type,
                resource_name=b.resource_name, pattern_type=b.pattern_type, principal=b.principal,
                host=b.host, operation=b.operation, permission_type=b.permission))
    return cls(filter_results=results), gone
