"""kproto's broker advertises exactly Apache Kafka 4.4.0's version ranges for every API it
serves (Kafka 4 removed old versions of several APIs, KIP-896), single broker and cluster, and
refuses Produce v0-2 as Kafka does: listed by ApiVersions, the connection closed on a request."""
from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from kproto.client.connection import Connection
from kproto.codecs import request as request_codec
from kproto.conformance.scenario import build
from kproto.framing import RequestHeader, encode_request
from kproto.schemas.api_keys import ApiKey


def advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)

    async def go() -> Any:
        async with await Connection.open(host, int(port)) as conn:
            return await conn.request(request_codec(ApiKey.API_VERSIONS).cls(
                client_software_name="kproto-test", client_software_version="1"), 3)
    resp = asyncio.run(go())
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def answered(bootstrap: str, api_key: int, version: int) -> bool:
    """Whether a request gets an answer (False: the connection was closed)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    body = build(api_key, version, **({"acks": 1, "timeout_ms": 1000} if api_key == ApiKey.PRODUCE else {}))
    header = RequestHeader(request_api_key=api_key, request_api_version=version,
                           correlation_id=7, client_id="kproto-test")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(header, body))
        return len(sock.recv(4)) == 4


@pytest.mark.parametrize("ours", ["kafka_broker", "kafka_cluster"])
def test_api_versions_are_kafka_4_4s_for_every_api_served(ours: str, request: pytest.FixtureRequest,
                                                          apache_kafka: Any) -> None:
    theirs = advertised(apache_kafka.bootstrap)
    mine = advertised(request.getfixturevalue(ours).bootstrap)
    assert set(mine) <= set(theirs), "an API Kafka 4.4 does not serve"
    assert {k: v for k, v in mine.items() if v != theirs[k]} == {}, \
        {k: (v, theirs[k]) for k, v in mine.items() if v != theirs[k]}
    assert mine[ApiKey.DESCRIBE_CLIENT_QUOTAS] == mine[ApiKey.ALTER_CLIENT_QUOTAS] == (0, 1)


@pytest.mark.parametrize("version", [0, 2, 3])
def test_produce_below_v3_is_listed_but_refused_as_kafka_does(version: int, kafka_broker: Any,
                                                              apache_kafka: Any) -> None:
    assert advertised(kafka_broker.bootstrap)[ApiKey.PRODUCE] == (0, 13)
    assert answered(apache_kafka.bootstrap, ApiKey.PRODUCE, version) == (version >= 3)
    assert answered(kafka_broker.bootstrap, ApiKey.PRODUCE, version) == (version >= 3)


@pytest.mark.parametrize("api_key, version", [(ApiKey.OFFSET_COMMIT, 1), (ApiKey.DESCRIBE_ACLS, 0),
                                              (ApiKey.FETCH, 3), (ApiKey.LEADER_AND_ISR, 0)])
def test_a_version_kafka_4_removed_closes_the_connection_as_kafka_does(api_key: int, version: int,
                                                                       kafka_broker: Any, apache_kafka: Any) -> None:
    assert not answered(apache_kafka.bootstrap, api_key, version)
    assert not answered(kafka_broker.bootstrap, api_key, version)
    assert answered(kafka_broker.bootstrap, api_key, version + 1) != (api_key == ApiKey.LEADER_AND_ISR)
