"""The exception family raised by kproto."""
from __future__ import annotations


class KprotoError(Exception):
    """Base class of every error kproto raises on purpose."""


class DecodeError(KprotoError, ValueError):
    """Bytes that cannot be decoded.

    ``what`` names the thing being decoded (``"FetchResponse v12"``), ``path`` the field
    (``"responses[3].partitions[0].records"``) and ``offset`` the byte position where the
    problem was found, relative to the start of the decoded buffer. Any of them may be None
    when unknown.
    """

    def __init__(self, reason: str, *, what: str | None = None, path: str | None = None,
                 offset: int | None = None) -> None:
        self.reason = reason
        self.what = what
        self.path = path
        self.offset = offset
        super().__init__(self._render())

    def _render(self) -> str:
        parts = []
        if self.what:
            parts.append(self.what)
        if self.path:
            parts.append(f"field {self.path}")
        head = ", ".join(parts)
        msg = f"{head}: {self.reason}" if head else self.reason
        if self.offset is not None:
            msg += f" (at byte {self.offset})"
        return msg


class EncodeError(KprotoError, ValueError):
    """A value that cannot be written at the requested version (Kafka's UnsupportedVersionException
    and its null/size checks)."""


class UnsupportedVersionError(EncodeError):
    """A non-default value for a field, or a whole message, that the target version lacks."""
