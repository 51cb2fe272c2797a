"""The listener security options ``kproto broker`` and ``kproto cluster`` share: the
security protocol, TLS files and client authentication, SASL mechanisms and users,
OAUTHBEARER validation, delegation tokens, ACLs (and, for a cluster, the inter-broker listener)."""
from __future__ import annotations

import argparse
import ssl
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def add_arguments(p: argparse.ArgumentParser, cluster: bool) -> None:
    """Add the options to a server command's parser."""
    g = p.add_argument_group("security")
    g.add_argument("--security-protocol", choices=PROTOCOLS, default="PLAINTEXT",
                   help="the listener's (and, for a cluster, the inter-node links') protocol "
                        "(default PLAINTEXT)")
    g.add_argument("--ssl-cert", metavar="PEM", help="SSL/SASL_SSL: the server certificate (chain)")
    g.add_argument("--ssl-key", metavar="PEM", help="SSL/SASL_SSL: its private key")
    g.add_argument("--ssl-ca", metavar="PEM",
                   help="CA certificates trusted for client certificates"
                        + (" and by the nodes for each other" if cluster else ""))
    g.add_argument("--ssl-client-auth", choices=("required", "requested", "none"), default="none",
                   help="ssl.client.auth: ask for client certificates (default none)")
    g.add_argument("--ssl-principal-mapping-rules", default="DEFAULT", metavar="RULES",
                   help="ssl.principal.mapping.rules for certificate subjects (default DEFAULT)")
    g.add_argument("--sasl-mechanisms", default="SCRAM-SHA-512", metavar="LIST",
                   help="SASL_*: sasl.enabled.mechanisms, comma-separated, of PLAIN, "
                        "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (default SCRAM-SHA-512)")
    g.add_argument("--sasl-user", action="append", default=[], metavar="NAME=PASSWORD",
                   help="a PLAIN and SCRAM user (repeat)"
                        + ("; written to the metadata log as SCRAM credentials at the first "
                           "start, as kafka-storage format --add-scram" if cluster else ""))
    if cluster:
        g.add_argument("--inter-broker-user", metavar="NAME",
                       help="SASL_*: the --sasl-user brokers authenticate to each other as "
                            "(default: the first)")
        g.add_argument("--inter-broker-mechanism", metavar="MECHANISM",
                       help="sasl.mechanism.inter.broker.protocol (default: the first PLAIN or "
                            "SCRAM mechanism of --sasl-mechanisms)")
        g.add_argument("--inter-broker-protocol", choices=PROTOCOLS,
                       help="security.inter.broker.protocol: the brokers talk to each other on a "
                            "listener of their own (named INTERNAL) of this protocol (default: "
                            "they share the clients' listener)")
    g.add_argument("--oauthbearer-jwks", metavar="FILE",
                   help="OAUTHBEARER: validate signed tokens with the keys of this JWKS file "
                        "(default: Kafka's unsecured validator)")
    g.add_argument("--oauthbearer-audience", default="", metavar="LIST",
                   help="OAUTHBEARER with a JWKS: sasl.oauthbearer.expected.audience, comma-separated")
    g.add_argument("--oauthbearer-issuer", metavar="ISSUER",
                   help="OAUTHBEARER with a JWKS: sasl.oauthbearer.expected.issuer")
    g.add_argument("--oauthbearer-allow-unverified", action="store_true",
                   help="OAUTHBEARER with a JWKS: accept any audience and issuer when not given "
                        "(sasl.oauthbearer.allow.unverified.audience/issuer)")
    g.add_argument("--oauthbearer-required-scope", default="", metavar="LIST",
                   help="OAUTHBEARER unsecured: the scope a token must have, comma-separated")
    g.add_argument("--delegation-token-secret-key", metavar="SECRET",
                   help="delegation.token.secret.key: turns delegation tokens on")
    g.add_argument("--authorizer", action="store_true", help="enforce ACLs (StandardAuthorizer)")
    g.add_argument("--super-users", default="", metavar="LIST",
                   help="super.users, semicolon-separated (User:admin;User:broker)")


def _users(args: argparse.Namespace) -> dict[str, str]:
    users = {}
    for item in args.sasl_user:
        name, sep, password = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--sasl-user {item!r}: expected NAME=PASSWORD")
        users[name] = password
    return users


def settings(args: argparse.Namespace, cluster: bool) -> dict[str, Any]:
    """The broker (or :class:`~kproto.broker.cluster.Cluster`) keywords the options give.
    Raises ValueError on inconsistent options."""
    protocol = args.security_protocol
    out: dict[str, Any] = {}
    tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol.startswith("SASL_")
    if tls:
        if not (args.ssl_cert and args.ssl_key):
            raise ValueError(f"--security-protocol {protocol} needs --ssl-cert and --ssl-key")
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=args.ssl_ca)
        server.load_cert_chain(args.ssl_cert, args.ssl_key)
        out["ssl_context"] = server
        out["ssl_client_auth"] = args.ssl_client_auth
        out["ssl_principal_mapping_rules"] = args.ssl_principal_mapping_rules
        if cluster:
            # the nodes verify each other against --ssl-ca and present the node certificate
            client = ssl.create_default_context(cafile=args.ssl_ca)
            client.load_cert_chain(args.ssl_cert, args.ssl_key)
            out["inter_broker_ssl"] = client
    elif args.ssl_client_auth != "none" or args.ssl_cert:
        raise ValueError(f"--ssl-* options need --security-protocol SSL or SASL_SSL, not {protocol}")
    users = _users(args)
    if sasl:
        mechanisms = tuple(m.strip() for m in args.sasl_mechanisms.split(",") if m.strip())
        out["sasl_enabled_mechanisms"] = mechanisms
        out["sasl_users"] = users
        if args.oauthbearer_jwks:
            out["oauthbearer_jwks_file"] = args.oauthbearer_jwks
            out["oauthbearer_expected_audience"] = tuple(
                a for a in args.oauthbearer_audience.split(",") if a)
            out["oauthbearer_expected_issuer"] = args.oauthbearer_issuer
            out["oauthbearer_allow_unverified_audience"] = args.oauthbearer_allow_unverified
            out["oauthbearer_allow_unverified_issuer"] = args.oauthbearer_allow_unverified
        out["oauthbearer_required_scope"] = tuple(
            s for s in args.oauthbearer_required_scope.split(",") if s)
        if cluster:
            from kproto.client.protocol import SaslConfig
            mechanism = args.inter_broker_mechanism or next(
                (m for m in mechanisms if m != "OAUTHBEARER"), None)
            if mechanism is None or mechanism not in mechanisms:
                raise ValueError("the brokers need a PLAIN or SCRAM mechanism to authenticate to "
                                 "each other (--sasl-mechanisms, --inter-broker-mechanism)")
            name = args.inter_broker_user or next(iter(users), None)
            if name is None or name not in users:
                raise ValueError("SASL: the brokers' user must be one of --sasl-user "
                                 "(--inter-broker-user)")
            out["inter_broker_sasl"] = SaslConfig(mechanism, name, users[name])
            out["scram_users"] = users
    elif users:
        raise ValueError(f"--sasl-user needs --security-protocol SASL_PLAINTEXT or SASL_SSL, not {protocol}")
    if cluster and args.inter_broker_protocol:
        out["inter_broker_protocol"] = args.inter_broker_protocol
    if args.delegation_token_secret_key:
        out["delegation_token_secret_key"] = args.delegation_token_secret_key
    if args.authorizer:
        out["authorizer"] = True
    if args.super_users:
        out["super_users"] = tuple(u.strip() for u in args.super_users.split(";") if u.strip())
    return out
