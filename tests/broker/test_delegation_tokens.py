"""Delegation tokens on kproto's single broker (what the comparison with Apache Kafka cannot
show in one shared node): the feature off without a secret key, tokens kept in the metadata
log across a restart, expired tokens swept, the token records in a snapshot, and the client's
SCRAM ``tokenauth`` extension."""
from __future__ import annotations

import asyncio
import time

import pytest

from kproto.broker.security.tokens import TOKEN_VERSIONS, token_hmac
from kproto.client.connection import Connection
from kproto.client.protocol import SaslConfig
from kproto.client.sasl import SaslAuthenticationError
from kproto.codecs import request
from kproto.error_codes import ErrorCode
from kproto.storage.metadata_image import MetadataImage, RecordType, record_type_of
from kproto.testing import BrokerThread

Create, Renew, Expire, Describe = (request(k).cls for k in (38, 39, 40, 41))
ApiVersions = request(18).cls
USERS = {"alice": "alice-secret"}
SECRET = "the-secret"


def _broker(path, **config) -> BrokerThread:
    return BrokerThread(path, sasl_enabled_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                        sasl_users=USERS, **config).start()


def _addr(b: BrokerThread) -> tuple[str, int]:
    host, port = b.bootstrap.rsplit(":", 1)
    return host, int(port)


async def _alice(b: BrokerThread) -> Connection:
    return await Connection.open(*_addr(b), sasl=SaslConfig("SCRAM-SHA-256", "alice", USERS["alice"]))


def test_without_a_secret_key_tokens_are_off(tmp_path):
    async def run(b):
        conn = await _alice(b)
        versions = await conn.request(ApiVersions(client_software_name="t", client_software_version="1"), 3)
        out = [{k.api_key: (k.min_version, k.max_version) for k in versions.api_keys
                if k.api_key in TOKEN_VERSIONS},
               await conn.request(Create(renewers=[], max_lifetime_ms=-1), 3),
               await conn.request(Renew(hmac=b"x", renew_period_ms=1), 2),
               await conn.request(Expire(hmac=b"x", expiry_time_period_ms=1), 2),
               await conn.request(Describe(owners=None), 3)]
        await conn.close()
        return out
    with _broker(tmp_path) as b:
        versions, created, renewed, expired, described = asyncio.run(run(b))
    assert versions == dict(TOKEN_VERSIONS) == {38: (1, 3), 39: (1, 2), 40: (1, 2), 41: (1, 3)}
    assert (created.error_code, created.principal_name, created.token_requester_principal_name,
            created.token_id, created.issue_timestamp_ms) == (ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED,
                                                              "alice", "alice", "", -1)
    assert renewed.error_code == expired.error_code == described.error_code == \
        ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


def test_tokens_live_in_the_metadata_log_across_a_restart(tmp_path):
    async def create(b):
        conn = await _alice(b)
        resp = await conn.request(Create(renewers=[], max_lifetime_ms=-1), 3)
        await conn.close()
        return resp

    async def use(b, token):
        conn = await Connection.open(*_addr(b), sasl=SaslConfig.delegation_token(
            token.token_id, bytes(token.hmac), "SCRAM-SHA-256"))
        desc = await (await _alice(b)).request(Describe(owners=None), 3)
        await conn.close()
        return desc

    with _broker(tmp_path, delegation_token_secret_key=SECRET) as b:
        token = asyncio.run(create(b))
        assert bytes(token.hmac) == token_hmac(token.token_id, SECRET)
        b.restart()
        desc = asyncio.run(use(b, token))  # the restarted broker read it back from its log
        image = b.broker.core.metadata.image
        assert list(image.tokens) == [token.token_id]
    assert [t.token_id for t in desc.tokens] == [token.token_id]
    assert (desc.tokens[0].expiry_timestamp, desc.tokens[0].max_timestamp) == \
        (token.expiry_timestamp_ms, token.max_timestamp_ms)


def test_the_image_keeps_tokens_and_writes_them_in_a_snapshot():
    from kproto.codecs import metadata_record
    image = MetadataImage()
    rec = metadata_record(RecordType.DELEGATION_TOKEN)(
        owner="User:alice", requester="User:bob", renewers=["User:carol"], issue_timestamp=1,
        max_timestamp=30, expiration_timestamp=20, token_id="tok")
    image.replay(RecordType.DELEGATION_TOKEN, 0, rec, 0)
    assert image.take_changes().tokens == ["tok"]
    t = image.tokens["tok"]
    assert (t.owner, t.requester, t.renewers, t.expiry_ms) == ("User:alice", "User:bob", ("User:carol",), 20)
    assert t.owner_or_renewer("User:bob") and t.owner_or_renewer("User:carol") and not t.owner_or_renewer("User:eve")
    again = MetadataImage()
    for r, v in image.records():
        again.replay(record_type_of(r), v, r, 1)
    assert again.tokens == image.tokens
    image.replay(RecordType.REMOVE_DELEGATION_TOKEN, 0,
                 metadata_record(RecordType.REMOVE_DELEGATION_TOKEN)(token_id="tok"), 1)
    assert image.tokens == {} and image.take_changes().tokens == ["tok"]


def test_expired_tokens_are_swept(tmp_path):
    async def run(b):
        conn = await _alice(b)
        short = await conn.request(Create(renewers=[], max_lifetime_ms=300), 3)
        long = await conn.request(Create(renewers=[], max_lifetime_ms=-1), 3)
        before = [t.token_id for t in (await conn.request(Describe(owners=None), 3)).tokens]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            after = [t.token_id for t in (await conn.request(Describe(owners=None), 3)).tokens]
            if len(after) < 2:
                break
            await asyncio.sleep(0.1)
        with pytest.raises(SaslAuthenticationError):
            await Connection.open(*_addr(b), sasl=SaslConfig.delegation_token(short.token_id, bytes(short.hmac)))
        await conn.close()
        return short.token_id, long.token_id, before, after
    with _broker(tmp_path, delegation_token_secret_key=SECRET,
                 delegation_token_expiry_check_interval_ms=200) as b:
        short, long, before, after = asyncio.run(run(b))
    assert sorted(before) == sorted([short, long])
    assert after == [long]


def test_a_token_session_ends_with_the_token(tmp_path):
    SaslHandshake, SaslAuthenticate = request(17).cls, request(36).cls

    async def run(b):
        conn = await _alice(b)
        token = await conn.request(Create(renewers=[], max_lifetime_ms=20_000), 3)
        await conn.close()
        raw = await Connection.open(*_addr(b))
        await raw.request(SaslHandshake(mechanism="SCRAM-SHA-512"), 1)
        client = SaslConfig.delegation_token(token.token_id, bytes(token.hmac)).client()
        first = client.initial()
        assert first.endswith(b",tokenauth=true")
        answer = await raw.request(SaslAuthenticate(auth_bytes=first), 2)
        last = await raw.request(SaslAuthenticate(auth_bytes=client.step(bytes(answer.auth_bytes))), 2)
        now = int(time.time() * 1000)
        # a token-authenticated connection may not ask for tokens
        refused = await raw.request(Describe(owners=None), 3)
        await raw.close()
        return last.session_lifetime_ms, token.expiry_timestamp_ms - now, refused.error_code
    with _broker(tmp_path, delegation_token_secret_key=SECRET) as b:
        lifetime, left, refused = asyncio.run(run(b))
    assert abs(lifetime - left) < 1000
    assert refused == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


def test_client_token_auth_needs_scram():
    with pytest.raises(ValueError, match="SCRAM"):
        SaslConfig("PLAIN", "id", "pw", token_auth=True)
    cfg = SaslConfig.delegation_token("abc", b"\x01\x02")
    assert (cfg.mechanism, cfg.username, cfg.password, cfg.token_auth) == ("SCRAM-SHA-512", "abc", "AQI=", True)
    assert b",tokenauth=true" in cfg.client().initial()


def test_admin_token_calls(tmp_path):
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster
    from kproto.client.protocol import BrokerError

    async def run(b):
        async with Cluster(b.bootstrap, sasl=SaslConfig("SCRAM-SHA-512", "alice", USERS["alice"])) as client:
            admin = Admin(client)
            token = await admin.create_delegation_token(renewers=["User:bob"], max_lifetime_ms=600_000)
            listed = await admin.describe_delegation_tokens(["User:alice"])
            none = await admin.describe_delegation_tokens([])
            expiry = await admin.renew_delegation_token(token.hmac, 30_000)
            with pytest.raises(BrokerError) as unknown:
                await admin.renew_delegation_token(b"nope")
            await admin.expire_delegation_token(token.hmac)
            after = await admin.describe_delegation_tokens()
        with pytest.raises(SaslAuthenticationError):  # the expired token is gone
            async with Cluster(b.bootstrap, sasl=token.sasl("SCRAM-SHA-256")) as worker:
                await worker.refresh_metadata([])
        return token, listed, none, expiry, unknown.value.code, after
    with _broker(tmp_path, delegation_token_secret_key=SECRET) as b:
        token, listed, none, expiry, unknown, after = asyncio.run(run(b))
    assert (token.owner, token.requester, token.renewers) == ("User:alice", "User:alice", ("User:bob",))
    assert token.max_ms - token.issue_ms == 600_000 and token.hmac == token_hmac(token.token_id, SECRET)
    assert listed == [token] and none == []
    assert 0 < expiry - int(time.time() * 1000) <= 30_000
    assert unknown == ErrorCode.DELEGATION_TOKEN_NOT_FOUND and after == []
