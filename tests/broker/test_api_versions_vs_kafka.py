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


def produce_answered(bootstrap: str, version: int) -> bool:
    """Whether a Produce at ``version`` gets an answer (False: the connection was closed)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    body = request_codec(ApiKey.PRODUCE).cls(acks=1, timeout_ms=1000, topic_data=[])
    header = RequestHeader(request_api_key=ApiKey.PRODUCE, request_api_version=version,
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
    assert produce_answered(apache_kafka.bootstrap, version) == (version >= 3)
    assert produce_answered(kafka_broker.bootstrap, version) == (version >= 3)
