"""The walks generated from the schemas (kproto.capture.walk) collect what the generic walks
over every field collect: error codes and unnamed topic ids of random message objects of every
message version (as built, and as the decoder returns them), and of the real captures."""
from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture_support import ALL, decoded
from kproto import codecs
from kproto.capture import bodies, topics

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "protocol"))
from protocol_support import all_message_versions, objects  # noqa: E402

_VERSIONS = list(all_message_versions())


def _generic(obj) -> tuple[list, list]:
    codes: list[int] = []
    bodies._walk_error_codes(obj, codes)
    ids: dict[str, None] = {}
    topics._walk(obj, ids)
    return codes, list(ids)


def _compiled(obj) -> tuple[list, list]:
    return bodies.response_error_codes(obj), topics.topic_ids(obj)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_messages(data):
    name, version = data.draw(st.sampled_from(_VERSIONS))
    codec = codecs.message(name)
    obj = data.draw(objects(codec, version, max_list=2))
    if data.draw(st.booleans()):
        obj = codec.decode(codec.encode(obj, version), version)
    assert _compiled(obj) == _generic(obj)


def test_real_captures():
    seen = [0, 0]
    for name in ALL:
        for ex in decoded(name)[0]:
            for body in (ex.request, ex.response):
                if body is not None:
                    got = _compiled(body)
                    assert got == _generic(body)
                    seen[0] += bool(got[0])
                    seen[1] += bool(got[1])
    assert seen[0] >= 3 and seen[1] >= 3  # error codes and topic ids were found


def test_objects_outside_the_schemas_are_walked_whole():
    class Thing:
        _fields = ("error_code", "inner")

        def __init__(self, code, inner=None):
            self.error_code, self.inner = code, inner

    assert bodies.response_error_codes(Thing(3, Thing(5))) == [3, 5]


def test_camel_case_records_name_their_topic_ids():
    # coordinator records spell fields camelCase (topicId): their ids are walked too
    from kproto.codecs import Uuid

    codec = codecs.message("OffsetCommitValue")
    obj = codec.cls(offset=1, commit_timestamp=2, topic_id=Uuid(bytes(15) + b"\x01"))
    assert _compiled(obj) == _generic(obj) == ([], ["AAAAAAAAAAAAAAAAAAAAAQ"])
