"""The optional C accelerators, chosen in one place: the codec engine's decoder
(``kproto.codecs._decoder``), the records layer's bulk scanner (``kproto.records._speedups``),
the capture decoder's packet loop (``kproto.capture._segments``) and its JSON body writer
(``kproto.capture._jsontext``). All are built at install when a compiler is there; the pure
Python paths are the reference and run wherever one is missing, or everywhere with
``KPROTO_PURE=1``."""
from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType
from typing import Optional

__all__ = ["API", "PURE", "load"]

#: ``KPROTO_PURE=1``: run the pure Python paths even where the C accelerators are built.
PURE = os.environ.get("KPROTO_PURE", "") not in ("", "0")


#: The interface each accelerator's C source declares (its ``KPROTO_API``): a build made from
#: another version of the source (an in-place build left behind by a checkout) is not used, so
#: the Python side never calls a function it lacks or one whose arguments changed.
API = {"kproto.codecs._decoder": 3, "kproto.records._speedups": 2,
       "kproto.capture._segments": 1, "kproto.capture._jsontext": 2}


def load(module: str) -> Optional[ModuleType]:
    """The accelerator ``module``, or None when it is not built, was built from another
    version of its source (with a warning) or ``PURE`` is set."""
    if PURE:
        return None
    try:
        m = importlib.import_module(module)
    except ImportError:
        return None
    built = getattr(m, "API", None)
    if built != API[module]:
        warnings.warn(f"kproto: {module} was built from another version of its source "
                      f"(interface {built}, this kproto needs {API[module]}): the pure Python "
                      "path runs instead; rebuild it with `pip install -e .`",
                      RuntimeWarning, stacklevel=2)
        return None
    return m
