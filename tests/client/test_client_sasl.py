"""SCRAM exchanges against Kafka's ScramFormatter vectors, and the PLAIN/SCRAM state machines."""
from __future__ import annotations

import base64

import pytest

from kproto.client import sasl
from kproto.client.sasl import PlainClient, SaslAuthenticationError, ScramClient, sasl_client
from kproto.errors import DecodeError

from _client_vectors import load_jsonl

SCRAM = load_jsonl("scram.jsonl.gz")
HASHES = {"SHA-256": "sha256", "SHA-512": "sha512"}


def test_vector_file_is_complete():
    assert len(SCRAM) == 34
    assert sum(1 for v in SCRAM if "error" in v) == 4


def _client(v):
    return ScramClient(v["mechanism"], v["username"], v["password"], nonce=v["client_nonce"],
                       extensions=v["extensions"], min_iterations=1)


@pytest.mark.parametrize("v", SCRAM, ids=lambda v: f"{v['mechanism']}-{v['username']!r}")
def test_scram_vector(v):
    h = HASHES[v["hash"]]
    assert sasl.SCRAM_MECHANISMS[v["mechanism"]][0] == h
    assert v["password"].encode("utf-8").hex() == v["password_utf8_hex"]
    assert sasl.sasl_name(v["username"]) == v["sasl_name"]
    assert sasl.username_from_sasl_name(v["sasl_name"]) == v["username"]
    salt = bytes.fromhex(v["salt_hex"])
    assert base64.b64encode(salt).decode() == v["salt_b64"]
    c = _client(v)
    assert c.initial().decode() == v["client_first"]
    assert c.client_first_bare == v.get("client_first_bare", v["client_first"][3:])
    server_first = v["server_first"].encode()
    if "error" in v:
        assert "Empty key" in v["error"]
        with pytest.raises(ValueError, match="Empty key"):
            sasl.salted_password(h, v["password"], salt, v["iterations"])
        with pytest.raises(ValueError, match="Empty key"):
            c.step(server_first)
        return
    salted = sasl.salted_password(h, v["password"], salt, v["iterations"])
    assert salted.hex() == v["salted_password_hex"]
    ck = sasl.client_key(h, salted)
    assert ck.hex() == v["client_key_hex"]
    sk = sasl.stored_key(h, ck)
    assert sk.hex() == v["stored_key_hex"]
    srvk = sasl.server_key(h, salted)
    assert srvk.hex() == v["server_key_hex"]
    auth = sasl.auth_message(v["client_first_bare"], v["server_first"], v["client_final_without_proof"])
    assert auth.decode() == v["auth_message"]
    assert sasl.client_signature(h, sk, auth).hex() == v["client_signature_hex"]
    assert sasl.client_proof(h, salted, auth).hex() == v["client_proof_hex"]
    assert sasl.server_signature(h, srvk, auth).hex() == v["server_signature_hex"]
    # the state machine produces the same client-final and accepts the server's signature
    assert c.step(server_first).decode() == v["client_final"]
    assert c.client_final_without_proof == v["client_final_without_proof"]
    assert c.step(v["server_final"].encode()) is None
    assert c.complete
    # ... but not an error or someone else's signature
    c2 = _client(v)
    c2.initial()
    c2.step(server_first)
    with pytest.raises(SaslAuthenticationError, match="invalid-proof"):
        c2.step(v["server_final_error_example"].encode())
    c3 = _client(v)
    c3.initial()
    c3.step(server_first)
    forged = "v=" + base64.b64encode(bytes(len(bytes.fromhex(v["server_signature_hex"])))).decode()
    with pytest.raises(SaslAuthenticationError, match="signature"):
        c3.step(forged.encode())
    assert not c3.complete


def _first(mech="SCRAM-SHA-256", **kw):
    c = ScramClient(mech, "user", "pencil", nonce="abc", **kw)
    c.initial()
    return c


def test_rejects_foreign_nonce():
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        _first().step(b"r=xyzdef,s=QSXCR+Q6sek8bf92,i=4096")


def test_rejects_low_iterations_by_default():
    with pytest.raises(SaslAuthenticationError, match="minimum"):
        _first().step(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=4095")


@pytest.mark.parametrize("msg", [
    b"", b"r=abcdef", b"r=abcdef,s=QSXCR+Q6sek8bf92", b"r=abcdef,s=!!,i=4096",
    b"r=abcdef,s=QSXCR+Q6sek8bf92,i=0", b"r=abcdef,s=QSXCR+Q6sek8bf92,i=x", b"\xff\xfe",
    b"r=abcdef,s=QSXCR+Q6sek8bf9,i=4096", b"r=abcdef,s=QSXCR+Q6sek8bf92,i=99999999999",
])
def test_malformed_server_first(msg):
    with pytest.raises(DecodeError):
        _first().step(msg)


@pytest.mark.parametrize("msg", [b"", b"x=1", b"v=!!!", b"\xc3", b"v=abc"])
def test_malformed_server_final(msg):
    c = _first()
    c.step(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=4096")
    with pytest.raises(DecodeError):
        c.step(msg)


def test_state_machine_order():
    c = ScramClient("SCRAM-SHA-512", "u", "p", nonce="n")
    with pytest.raises(RuntimeError):
        c.step(b"r=n1,s=AAAA,i=4096")
    c.initial()
    with pytest.raises(RuntimeError):
        c.initial()
    with pytest.raises(ValueError):
        ScramClient("SCRAM-SHA-1", "u", "p")
    with pytest.raises(ValueError):
        ScramClient("SCRAM-SHA-256", "u", "p", nonce="a,b")
    with pytest.raises(ValueError):
        ScramClient("SCRAM-SHA-256", "u", "p", extensions={"bad key": "v"})


def test_authzid_goes_into_gs2_header_and_channel_binding():
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abc", authzid="ad,min")
    assert c.initial() == b"n,a=ad=2Cmin,n=user,r=abc"
    final = c.step(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=4096").decode()
    assert final.startswith("c=" + base64.b64encode(b"n,a=ad=2Cmin,").decode() + ",r=abcdef,p=")


def test_default_nonce_is_random_and_valid():
    a, b = ScramClient("SCRAM-SHA-256", "u", "p"), ScramClient("SCRAM-SHA-256", "u", "p")
    assert a.nonce != b.nonce and "," not in a.nonce and len(a.nonce) >= 24


def test_plain():
    c = sasl_client("PLAIN", "alice", "s3cr\u00e9t", authzid="admin")
    assert isinstance(c, PlainClient)
    assert c.initial() == b"admin\0alice\0s3cr\xc3\xa9t"
    assert not c.complete
    assert c.step(b"") is None and c.complete
    with pytest.raises(ValueError):
        PlainClient("a\0b", "p")
    with pytest.raises(RuntimeError):
        PlainClient("a", "p").step(b"")


def test_rejects_excessive_iterations():
    with pytest.raises(SaslAuthenticationError, match="more than"):
        _first(max_iterations=10000).step(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=10001")


# An independent implementation (kafka-python's) must agree on every message we produce.
_SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_agrees_with_kafka_python_scram():
    from hypothesis import given, settings, strategies as st
    from kafka.net.sasl.scram import ScramClient as KafkaPythonScram

    @settings(max_examples=40, deadline=None)
    @given(mech=st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
           user=st.text(_SAFE, min_size=1, max_size=12), password=st.text(min_size=1, max_size=20),
           nonce=st.text(_SAFE, min_size=1, max_size=30), server_nonce=st.text(_SAFE, min_size=1, max_size=30),
           salt=st.binary(min_size=1, max_size=32), iterations=st.integers(4096, 4200))
    def check(mech, user, password, nonce, server_nonce, salt, iterations):
        theirs = KafkaPythonScram(user, password, mech)
        theirs.nonce = nonce.encode()
        ours = ScramClient(mech, user, password, nonce=nonce)
        assert ours.initial() == theirs.first_message()
        server_first = f"r={nonce}{server_nonce},s={base64.b64encode(salt).decode()},i={iterations}".encode()
        theirs.process_server_first_message(server_first)
        assert ours.step(server_first) == theirs.final_message()
        assert ours.step(b"v=" + base64.b64encode(theirs.server_signature)) is None and ours.complete

    check()


def test_oauthbearer_initial_response_is_kafkas_format():
    # OAuthBearerClientInitialResponse.toBytes: "n," [a=authzid] "," ^A "auth=Bearer " token
    # [^A k=v ...] ^A ^A
    assert sasl.OAuthBearerClient("abc.def-ghi").initial() == b"n,,\x01auth=Bearer abc.def-ghi\x01\x01"
    m = sasl_client("OAUTHBEARER", token="t0k3n", extensions={"b": "2", "a": "x y"}, authzid="alice")
    assert m.initial() == b"n,a=alice,\x01auth=Bearer t0k3n\x01a=x y\x01b=2\x01\x01"  # "a" hashes below "b"
    assert m.step(b"") is None and m.complete


def test_oauthbearer_server_error_gets_the_kvsep_answer():
    m = sasl.OAuthBearerClient("t")
    m.initial()
    assert m.step(b'{"status":"invalid_token"}') == b"\x01"
    assert not m.complete and m.server_error == '{"status":"invalid_token"}'
    with pytest.raises(SaslAuthenticationError, match="invalid_token"):
        m.step(b"")


@pytest.mark.parametrize("kw", [dict(token="has space"), dict(token=""),
                                dict(token="t", extensions={"auth": "x"}),
                                dict(token="t", extensions={"k1": "v"}),
                                dict(token="t", extensions={"k": "\x01"}),
                                dict(token="t", authzid="a,b")])
def test_oauthbearer_refuses_what_kafka_refuses(kw):
    with pytest.raises(ValueError):
        sasl.OAuthBearerClient(**kw)


# What Kafka does with extensions before writing them: the login callback handler fills a
# HashMap, SaslExtensions keeps ``new HashMap<>(that)``, toBytes joins its entries in iteration
# order. Run by the JVM the Spark tests use, on key sets of every size up to past a resize.
_JAVA_EXTENSION_ORDER = """
import java.io.*;
import java.util.*;
public class ExtensionOrder {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            Map<String, String> filled = new HashMap<>();
            for (String k : line.split(" ")) filled.put(k, "v" + k);
            Map<String, String> kept = Collections.unmodifiableMap(new HashMap<>(filled));
            StringBuilder sb = new StringBuilder();
            for (Map.Entry<String, String> e : kept.entrySet())
                sb.append("\\u0001").append(e.getKey()).append("=").append(e.getValue());
            System.out.println(sb.toString().replace("\\u0001", "^A"));
        }
    }
}
"""


def test_oauthbearer_extensions_in_kafkas_map_order_checked_with_java(tmp_path):
    import random
    import shutil
    import subprocess

    java = shutil.which("java")
    assert java, "the JVM (needed for Spark) is missing"
    src = tmp_path / "ExtensionOrder.java"
    src.write_text(_JAVA_EXTENSION_ORDER)
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    cases = [["traceId", "logicalCluster", "identityPoolId"], ["b", "a"], ["Aa", "BB"]]  # Aa/BB: equal hashCodes
    for n in list(range(1, 15)) * 12 + [24, 25, 40]:
        cases.append(list(dict.fromkeys("".join(rng.choice(letters) for _ in range(rng.randint(1, 6)))
                                        for _ in range(n))))
    proc = subprocess.run([java, str(src)], input="\n".join(" ".join(c) for c in cases) + "\n",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    want = proc.stdout.splitlines()
    assert len(want) == len(cases)
    for keys, line in zip(cases, want):
        initial = sasl.OAuthBearerClient("tok", extensions={k: "v" + k for k in keys}).initial()
        ext = initial[len(b"n,,\x01auth=Bearer tok"):-2].decode().replace("\x01", "^A")
        assert ext == line, keys
