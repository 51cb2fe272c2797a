"""pcap/pcapng variants, link layers, IPv4/IPv6 and VLANs carry the same Kafka exchanges."""
from __future__ import annotations

import pytest

from capture_support import CAPTURES, truth
from kproto.capture import CaptureDecoder, iter_exchanges, iter_packets, read_packets
from kproto.capture.layers import parse_tcp
from pcapgen import Conversation, ipv4, ipv6, link, packets_of, simple_exchange, tcp, write_pcap, write_pcapng

SOURCE = "java_tansu.pcapng"


def _ip_packets(name=SOURCE):
    """(ts, IP packet) of an Ethernet capture."""
    return [(p.ts, bytes(p.data[14:])) for p in read_packets(CAPTURES / name)]


def _key(exchanges):
    return sorted((e.client.port, e.correlation_id, e.api_key, e.api_version, e.request_data,
                   e.response_data, tuple(e.problems.reasons())) for e in exchanges)


@pytest.fixture(scope="module")
def reference():
    ports = truth(SOURCE)["kafka_ports"]
    return _key(iter_exchanges(CAPTURES / SOURCE, ports)), ports


@pytest.mark.parametrize("linktype,vlans", [(1, ()), (1, (10,)), (1, (100, 200)), (113, ()),
                                            (276, ()), (0, ()), (108, ()), (101, ())])
@pytest.mark.parametrize("fmt", ["pcap", "pcap-ns-be", "pcapng", "pcapng-be-us"])
def test_link_layers_and_formats(reference, linktype, vlans, fmt):
    want, ports = reference
    frames = [(ts, link(linktype, ip, vlans)) for ts, ip in _ip_packets()]
    data = {"pcap": lambda: write_pcap(frames, linktype),
            "pcap-ns-be": lambda: write_pcap(frames, linktype, nanos=True, big_endian=True),
            "pcapng": lambda: write_pcapng(frames, linktype),
            "pcapng-be-us": lambda: write_pcapng(frames, linktype, tsresol=6, big_endian=True)}[fmt]()
    got = list(iter_exchanges(iter_packets(data), ports))
    assert _key(got) == want
    # timestamps survive every format (to the microsecond)
    ref_ts = sorted(round(e.ts, 6) for e in iter_exchanges(CAPTURES / SOURCE, ports))
    assert sorted(round(e.ts, 6) for e in got) == ref_ts


def _v4_to_v6(ip: bytes) -> bytes:
    ihl = (ip[0] & 15) * 4
    total = int.from_bytes(ip[2:4], "big")
    addr = lambda a: b"\x00" * 10 + b"\xff\xff" + a  # noqa: E731  IPv4-mapped
    return ipv6(addr(ip[12:16]), addr(ip[16:20]), ip[ihl:total], hop_by_hop=True)


def test_ipv6_with_extension_header(reference):
    want, ports = reference
    frames = [(ts, link(1, _v4_to_v6(ip))) for ts, ip in _ip_packets()]
    got = list(iter_exchanges(packets_of(frames), ports))
    assert _key(got) == want
    assert str(got[0].client).startswith("[::ffff:7f00:1]:")


def test_truncated_file_keeps_every_complete_exchange():
    name = "hard_stream_tansu.pcap"
    ports = truth(name)["kafka_ports"]
    data = (CAPTURES / name).read_bytes()
    full = list(iter_exchanges(CAPTURES / name, ports))
    cut = len(data) * 2 // 3 + 7  # inside a packet record
    dec = CaptureDecoder(ports)
    part = dec.feed_all(iter_packets(data[:cut]))
    assert len(dec.problems) == 1 and "truncated" in dec.problems[0].reason
    last_ts = max(p.ts for p in iter_packets(data[:cut]) if hasattr(p, "ts"))
    done = {(e.client.port, e.correlation_id): e for e in full if (e.response_end or 0) <= last_ts}
    got = {(e.client.port, e.correlation_id): e for e in part if e.response_data is not None}
    assert done.keys() == got.keys() and len(done) > 100
    for k, e in done.items():
        assert (got[k].request_data, got[k].response_data) == (e.request_data, e.response_data)
    # what was in flight at the cut is reported, not lost
    assert all(e.problems for e in part if e.response_data is None)


def test_not_a_capture_is_reported():
    assert [(type(p).__name__, p.kind) for p in iter_packets(b"GET / HTTP/1.1\r\n")] == \
        [("Problem", "capture")]
    assert [(type(p).__name__, p.kind) for p in iter_packets(b"")] == [("Problem", "capture")]
    # a pcapng whose second block is cut
    conv = Conversation()
    simple_exchange(conv, 18, 0, 1)
    ng = write_pcapng(conv.frames())
    out = list(iter_packets(ng[:-10]))
    assert type(out[-1]).__name__ == "Problem" and len(out) == len(conv.packets)


def test_non_tcp_and_short_frames_are_skipped():
    conv = Conversation()
    simple_exchange(conv, 18, 3, 7)
    udp = bytearray(ipv4(b"\x7f\0\0\1", b"\x7f\0\0\1", b"\0" * 12))
    udp[9] = 17
    junk = [(1.0, link(1, bytes(udp))), (1.0, b"\x01\x02"), (1.0, link(1, b"\x45" + b"\0" * 10)),
            (1.0, link(1, ipv4(b"\x7f\0\0\1", b"\x7f\0\0\1", tcp(1, 2, 0, 0, 0x10)[:10])))]
    dec = CaptureDecoder([9092])
    got = dec.feed_all(packets_of(junk + conv.frames()))
    assert dec.non_tcp == 4
    assert [(e.api_key, e.correlation_id, e.problems.reasons()) for e in got] == [(18, 7, [])]


def test_tcp_parse_trims_ethernet_padding():
    seg = tcp(1, 9092, 5, 6, 0x18, b"ab")
    p = parse_tcp(1, link(1, ipv4(b"\x7f\0\0\1", b"\x7f\0\0\2", seg)))
    assert bytes(p.payload) == b"ab" and (p.sport, p.dport, p.seq, p.ack) == (1, 9092, 5, 6)
