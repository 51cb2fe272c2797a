"""The C decoder against the generated Python decoders: same objects, same failures, on every vector
of both vector sets (Kafka 3.9.1's and 4.3.1's) and on mutations of them (differential fuzzing).
The rest of the suite runs through the C decoder."""
from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kproto
from kproto.codecs.engine import _DECODE_FAULTS
from kproto.codecs import program as _program
from protocol_support import VECTOR_SETS, codec_for, good_vectors, load_vectors

# (vector set, vector): every good and bad vector of every set
GOOD = [(k, v) for k in sorted(VECTOR_SETS) for v in good_vectors(k)]
BAD = [(k, v) for k in sorted(VECTOR_SETS) for v in load_vectors("messages-bad.jsonl.gz", k)]


def _both(codec, version: int, data):
    """(outcome of C, outcome of Python): ("ok", obj, pos) or ("fail",)."""
    compiled = codec._get(version)
    out = []
    for fn in (compiled.decode_c, compiled.decode_py):
        try:
            obj, pos = fn(data, 0)
        except _DECODE_FAULTS:
            out.append(("fail",))
        else:
            out.append(("ok", obj, pos))
    return out


def _same(codec, version: int, a, b) -> bool:
    """Equal messages; a float64 NaN is not equal to itself, so those compare by their bytes."""
    return a == b or codec.encode(a, version) == codec.encode(b, version)


def test_c_decoder_is_built_and_used():
    # CI builds it from pyproject.toml; without it the speed figures of the README do not hold
    assert _program._decoder is not None
    compiled = kproto.message("FetchResponse")._get(12)
    assert compiled.decode_c is not None
    # KPROTO_PURE=1 (kproto.accelerators.PURE) switches decoding to the generated Python decoders
    from kproto import accelerators

    assert accelerators.PURE is False and compiled.decode is compiled.decode_c


def test_every_good_vector_decodes_the_same_in_c_and_python():
    assert {k for k, _ in GOOD} == set(VECTOR_SETS)
    for kafka, vec in GOOD:
        data = bytes.fromhex(vec["hex"])
        codec = codec_for(vec, kafka)
        c, py = _both(codec, vec["version"], data)
        assert c[0] == py[0] == "ok", (kafka, vec["name"], vec["version"], vec.get("case"))
        assert c[1] == py[1] and c[2] == py[2] == len(data), (kafka, vec["name"], vec["version"])
        # records and zeroCopy fields are views of the input; other bytes are copies
        mv_c, _ = _both(codec, vec["version"], memoryview(data))
        assert mv_c[1] == c[1]


def test_every_bad_vector_fails_in_c_and_python():
    assert {k for k, _ in BAD} == set(VECTOR_SETS)
    for kafka, vec in BAD:
        c, py = _both(codec_for(vec, kafka), vec["version"], bytes.fromhex(vec["hex"]))
        if c[0] == "ok" or py[0] == "ok":   # a "bad" vector may be bad only by its trailing bytes
            assert c[0] == py[0] == "ok" and c[1] == py[1] and c[2] == py[2] < len(vec["hex"]) // 2
        else:
            assert c == py


@settings(max_examples=1500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, len(GOOD) - 1), st.integers(0, 2**32 - 1))
def test_mutated_vectors_agree(index, seed):
    kafka, vec = GOOD[index]
    codec = codec_for(vec, kafka)
    rnd = random.Random(seed)
    data = bytearray.fromhex(vec["hex"])
    for _ in range(rnd.randint(1, 4)):
        kind = rnd.randrange(4)
        if kind == 0 and data:
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        elif kind == 1 and data:
            del data[rnd.randrange(len(data)):]
        elif kind == 2:
            data.insert(rnd.randrange(len(data) + 1), rnd.choice((0, 1, 0x7F, 0x80, 0xFF)))
        elif data:
            i = rnd.randrange(len(data))
            data[i:i + 4] = rnd.choice((b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x80\x80\x80\x80"))
    c, py = _both(codec, vec["version"], bytes(data))
    assert c[0] == py[0]
    if c[0] == "ok":
        assert _same(codec, vec["version"], c[1], py[1]) and c[2] == py[2]


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted({(kproto.message(v["name"]).name, v["version"]) for _, v in GOOD})),
       st.binary(max_size=96))
def test_arbitrary_bytes_agree(key, data):
    codec = kproto.message(key[0])
    c, py = _both(codec, key[1], data)
    assert c[0] == py[0]
    if c[0] == "ok":
        assert _same(codec, key[1], c[1], py[1]) and c[2] == py[2]


def test_decode_position_and_buffer_types():
    codec = kproto.message("ProduceRequest")
    vec = next(v for _, v in GOOD if v["name"] == "ProduceRequest" and v["version"] == 9)
    body = bytes.fromhex(vec["hex"])
    framed = b"\xaa\xbb" + body
    for buf in (framed, bytearray(framed), memoryview(framed)):
        obj, end = codec.decode_from(buf, 2, 9)
        assert end == len(framed) and obj == codec.decode(body, 9)
    c = codec._get(9).decode_c
    for pos in (-1, len(framed) + 1):
        try:
            c(framed, pos)
        except ValueError:
            pass
        else:
            raise AssertionError("a position outside the data must fail")
