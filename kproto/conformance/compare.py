"""Field-by-field comparison of two normalised answers (sans-I/O)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List

from kproto.conformance.normalise import Keyed

__all__ = ["Diff", "compare"]


@dataclass(frozen=True)
class Diff:
    """One field whose value differs: ``path`` like ``topics[0].partitions[1].error_code``
    (``topics.#`` for an array's length); ``target``/``reference`` the two values."""

    path: str
    target: Any
    reference: Any


def compare(target: Any, reference: Any, path: str = "") -> List[Diff]:
    """Every leaf where the two trees differ (arrays element by element, then their lengths;
    keyed arrays entry by entry)."""
    if isinstance(target, Keyed) and isinstance(reference, Keyed):
        out: List[Diff] = []
        for k in list(target) + [k for k in reference if k not in target]:
            p = f"{path}[{k}]"
            if k not in target or k not in reference:
                out.append(Diff(p, "<absent>" if k not in target else "<present>",
                                "<absent>" if k not in reference else "<present>"))
            else:
                out.extend(compare(target[k], reference[k], p))
        return out
    if isinstance(target, dict) and isinstance(reference, dict):
        out = []
        for k in list(target) + [k for k in reference if k not in target]:
            p = f"{path}.{k}" if path else k
            if k not in target or k not in reference:
                out.append(Diff(p, target.get(k, "<absent>"), reference.get(k, "<absent>")))
            else:
                out.extend(compare(target[k], reference[k], p))
        return out
    if isinstance(target, list) and isinstance(reference, list):
        out = []
        for i, (a, b) in enumerate(zip(target, reference)):
            out.extend(compare(a, b, f"{path}[{i}]"))
        if len(target) != len(reference):
            out.append(Diff(f"{path}.#", len(target), len(reference)))
        return out
    if target != reference or type(target) is not type(reference):
        return [Diff(path, target, reference)]
    return []
