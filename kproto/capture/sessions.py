"""KIP-227 fetch sessions reconstructed from observed traffic (sans-I/O).

One :class:`FetchSessionView` per connection follows the Fetch requests and responses on it, in
order, and says for each exchange which session it belongs to, what kind of fetch it is and the
full set of partitions the session holds (an incremental request lists only changes, an
incremental response only partitions with news). Session errors are explained.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Optional

from kproto.error_codes import ErrorCode
from kproto.fetch_session.model import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    next_epoch,
)
from kproto.problems import Problems

__all__ = ["FetchSessionView", "SessionState"]

_EXPLAIN: dict[int, str] = {
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
        "the broker does not know session {sid} (evicted, or the broker "
        "restarted): the client must send a full fetch (epoch 0) to start again",
    ErrorCode.INVALID_FETCH_SESSION_EPOCH:
        "epoch {epoch} is not the one the broker expects for session {sid} "
        "(a request was lost or resent): the client must start a new session",
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR:
        "the topic ids of session {sid} changed (topic recreated?): the "
        "client must start a new session",
}


@dataclass
class SessionState:
    """What is known of one fetch session: partitions -> last request/response data seen."""

    session_id: int
    epoch: int                                   # epoch of the last request seen
    partitions: dict = field(default_factory=dict)  # (topic or topic id, partition) -> fetch offset
    high_watermarks: dict = field(default_factory=dict)


def _topic_key(topic: Any, names: Mapping[str, str]) -> str:
    name = getattr(topic, "topic", None)
    if name:
        return name
    tid = str(getattr(topic, "topic_id", None))
    return names.get(tid, tid)


class FetchSessionView:
    """Fetch-session state of one connection, fed with decoded Fetch requests and responses."""

    def __init__(self, topic_names: Optional[Mapping[str, str]] = None) -> None:
        self.sessions: dict[int, SessionState] = {}
        # topic id (text) -> name, learnt from Metadata responses (shared across connections;
        # BodyDecoder gives a view of its kproto.capture.topics.TopicNames for the broker)
        self.topic_names: Mapping[str, str] = {} if topic_names is None else topic_names
        self._last_request: Optional[dict] = None

    def request(self, req: Any, version: int) -> dict:
        """Interpret a Fetch request; returns the description stored on the exchange."""
        names = self.topic_names
        sid = getattr(req, "session_id", INVALID_SESSION_ID) if version >= 7 else INVALID_SESSION_ID
        epoch = getattr(req, "session_epoch", FINAL_EPOCH) if version >= 7 else FINAL_EPOCH
        listed = {(_topic_key(t, names), p.partition): p.fetch_offset
                  for t in req.topics for p in t.partitions}
        forgotten = [(_topic_key(t, names), p) for t in getattr(req, "forgotten_topics_data", None) or []
                     for p in t.partitions]
        info: dict = {"session_id": sid, "epoch": epoch}
        problems = Problems()  # reported with the response
        if epoch == FINAL_EPOCH:
            info["kind"] = "sessionless" if sid == INVALID_SESSION_ID else "close"
            self.sessions.pop(sid, None)
            full = dict(listed)
        elif epoch == INITIAL_EPOCH:
            info["kind"] = "full"  # asks for a new session (closing sid if it is not 0)
            self.sessions.pop(sid, None)
            full = dict(listed)
        else:
            info["kind"] = "incremental"
            state = self.sessions.get(sid)
            if state is None:
                problems.report("session", f"incremental fetch on session {sid} whose creation was "
                                "not captured: partition set incomplete")
                state = self.sessions[sid] = SessionState(sid, epoch)
            elif epoch != next_epoch(state.epoch):
                problems.report("session", f"epoch {epoch} follows {state.epoch} on session {sid}: "
                                f"expected {next_epoch(state.epoch)}")
            state.epoch = epoch
            for tp in forgotten:
                state.partitions.pop(tp, None)
            state.partitions.update(listed)
            full = dict(state.partitions)
            info["added_or_changed"] = _fmt(listed)
            info["forgotten"] = _fmt(dict.fromkeys(forgotten))
        info["partitions"] = _fmt(full)
        self._last_request = {"sid": sid, "epoch": epoch, "full": full, "problems": problems}
        return info

    def response(self, resp: Any, info: dict, problems: Problems) -> None:
        """Complete ``info`` (from :meth:`request`) with the response; what does not add up in
        the request and its response is reported in ``problems`` (kind ``session``)."""
        last = self._last_request or {"sid": 0, "epoch": FINAL_EPOCH, "full": {},
                                      "problems": Problems()}
        self._last_request = None
        problems.extend(last["problems"])
        sid, epoch = last["sid"], last["epoch"]
        err = getattr(resp, "error_code", 0)
        if err in _EXPLAIN:
            info["error"] = _EXPLAIN[err].format(sid=sid, epoch=epoch)
            self.sessions.pop(sid, None)
            return
        new_sid = getattr(resp, "session_id", INVALID_SESSION_ID)
        if epoch == INITIAL_EPOCH:
            if new_sid != INVALID_SESSION_ID:
                self.sessions[new_sid] = SessionState(new_sid, INITIAL_EPOCH, dict(last["full"]))
                info["created_session_id"] = new_sid
            else:
                info["note"] = "the broker did not create a session (full fetch without session)"
        state = self.sessions.get(new_sid if epoch == INITIAL_EPOCH else sid)
        if state is not None:
            for t in getattr(resp, "responses", None) or []:
                key = _topic_key(t, self.topic_names)
                for p in t.partitions:
                    state.high_watermarks[(key, p.partition_index)] = p.high_watermark
            if info.get("kind") == "incremental":
                info["response_partitions"] = sum(len(t.partitions) for t in resp.responses)
                info["high_watermarks"] = {f"{k[0]}-{k[1]}": v for k, v in state.high_watermarks.items()
                                           if k in state.partitions}

    def learn_topics(self, metadata_response: Any) -> None:
        """Remember topic id -> name from a Metadata response (for readable partition names);
        only for a view made with its own dict (BodyDecoder's names are learnt there)."""
        names = self.topic_names
        if not isinstance(names, dict):
            return
        for t in getattr(metadata_response, "topics", None) or []:
            tid, name = getattr(t, "topic_id", None), getattr(t, "name", None)
            if tid is not None and name:
                names[str(tid)] = name


def _fmt(parts: dict) -> list[str]:
    return [f"{t}-{p}" for t, p in parts]
