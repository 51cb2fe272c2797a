"""Decoding captured Kafka traffic: pcap/pcapng in, request/response :class:`Exchange` objects out.

Layers, each sans-I/O: :mod:`~kproto.capture.pcap` (capture files), :mod:`~kproto.capture.layers`
(link, IP, TCP headers), :mod:`~kproto.capture.tcp` (stream reassembly),
:mod:`~kproto.capture.frames` (Kafka framing, resynchronisation), :mod:`~kproto.capture.decoder`
(connections, pairing, SASL), :mod:`~kproto.capture.api` (bodies via kproto's codec, fetch
sessions, JSON), :mod:`~kproto.capture.summary` (per-API statistics).

In a notebook::

    from kproto.capture import iter_exchanges, Summary
    exchanges = list(iter_exchanges("client.pcapng"))          # or a list of Packet objects
    slow = [e for e in exchanges if (e.latency_ms or 0) > 100]
    print(Summary().update(exchanges).table())
"""
from __future__ import annotations

from kproto.capture.api import BodyDecoder, exchange_to_json, iter_exchanges
from kproto.capture.decoder import CaptureDecoder
from kproto.capture.exchange import Endpoint, Exchange, exchange_to_json_text
from kproto.capture.pcap import Packet, iter_packets, read_packets, stream_packets
from kproto.capture.summary import Summary

__all__ = ["BodyDecoder", "CaptureDecoder", "Endpoint", "Exchange", "Packet", "Summary",
           "exchange_to_json", "exchange_to_json_text", "iter_exchanges", "iter_packets",
           "read_packets", "stream_packets"]
