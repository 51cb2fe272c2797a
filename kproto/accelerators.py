"""The optional C accelerators, chosen in one place: the codec engine's decoder
(``kproto.codecs._decoder``), the records layer's bulk scanner (``kproto.records._speedups``),
the capture decoder's packet loop (``kproto.capture._segments``) and its JSON body writer
(``kproto.capture._jsontext``). All are built at install when a compiler is there; the pure
Python paths are the reference and run wherever one is missing, or everywhere with
``KPROTO_PURE=1``."""
from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Optional

__all__ = ["PURE", "load"]

#: ``KPROTO_PURE=1``: run the pure Python paths even where the C accelerators are built.
PURE = os.environ.get("KPROTO_PURE", "") not in ("", "0")


def load(module: str) -> Optional[ModuleType]:
    """The accelerator ``module``, or None when it is not built or ``PURE`` is set."""
    if PURE:
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
