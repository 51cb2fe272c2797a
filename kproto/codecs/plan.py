"""Which fields a message has at one version, and how each is written there: the one per-version
walk over a schema that the Python code generator, the C decoder's program builder and the JSON
converter all follow."""
from __future__ import annotations

from typing import List, Sequence, Tuple

from kproto.schemas.model import Field, Message

__all__ = ["VersionPlan"]


class VersionPlan:
    """The fields of ``message`` at ``version``: present or not, regular or tagged, nullable,
    flexible (compact) or not."""

    def __init__(self, message: Message, version: int) -> None:
        self.message = message
        self.version = version
        self.flexible = version in message.flexible_range
        self.structs = message.structs()

    def is_present(self, f: Field) -> bool:
        """The field exists at this version."""
        return self.version in f.version_range

    def is_tagged(self, f: Field) -> bool:
        """The field is a tagged field at this version (only flexible versions have them)."""
        return self.flexible and self.version in f.tagged_range

    def present(self, fields: Sequence[Field]) -> Tuple[List[Field], List[Field], List[Field]]:
        """A struct's fields at this version as (regular in wire order, tagged in tag order,
        absent)."""
        regular, tagged, absent = [], [], []
        for f in fields:
            if not self.is_present(f):
                absent.append(f)
            elif self.is_tagged(f):
                tagged.append(f)
            else:
                regular.append(f)
        tagged.sort(key=lambda f: -1 if f.tag is None else f.tag)  # tagged fields have tags
        return regular, tagged, absent

    def in_order(self, fields: Sequence[Field]) -> List[Tuple[Field, bool]]:
        """The fields present at this version in declaration order, each with whether it is
        tagged (the order of Kafka's JSON converter)."""
        return [(f, self.is_tagged(f)) for f in fields if self.is_present(f)]

    def field_flexible(self, f: Field) -> bool:
        """Compact (varint-prefixed) encoding for this field at this version."""
        if f.flexible_range is not None:
            return self.version in f.flexible_range
        return self.flexible

    def nullable(self, f: Field) -> bool:
        return self.version in f.nullable_range

    def struct_fields(self, f: Field) -> Sequence[Field]:
        """The fields of a struct-typed field's struct."""
        return self.structs[f.element_type].fields
