"""Every message class by its spec name: ``from kproto.messages import FetchRequest``.

Struct classes of a message are attributes of its class (``FetchRequest.FetchTopic``). The classes are
built by the codec engine on first use; ``messages.pyi`` describes them for type checkers.
"""
from __future__ import annotations

from typing import Any, List

from kproto.schemas._index import SCHEMAS


def __getattr__(name: str) -> Any:
    if name in SCHEMAS:
        from kproto.codecs import message

        cls = message(name).cls
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'kproto.messages' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(SCHEMAS)
