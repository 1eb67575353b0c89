"""The paper's claims, one module each, and the registry that finds them.

A claim module ``cNN_<topic>.py`` in this package is the claim's whole story and defines:

    ID: int                 the claim's number (its place in the report; unique)
    CLAIM: str              the claim in one sentence, as the paper makes it
    arms(preset) -> dict[str, Arm | AnchorArm] | None
                            the model settings it needs for a preset, by role ({"baseline": Arm, ...});
                            None when the preset cannot run it (e.g. claim 10 without an MoE size)
    judge(...) -> Verdict   its verdict rule: measured numbers in, effects and a verdict out (built from the
                            shared machinery in :mod:`~smallinit.experiments.claims.rules`; tested on constructed
                            data where the claim is false)
    analyse(ctx) -> dict    its analysis: reads its runs through ``ctx`` (a
                            :class:`~smallinit.experiments.claims.context.ClaimContext`: ``ctx.roles`` = what
                            ``arms`` returned, ``ctx.runs/losses/probes/compare/loss_hw/anchor_results``), calls
                            ``judge``, draws its figures into ``ctx.out`` and returns ``ctx.result(...)``

:func:`registry` imports every such module (sorted by ID) when it is called, never at import time (``CLAIMS``, the
claims' sentences, is computed on first access); adding a claim is adding one file. Claim modules share code through
the modules beside them (:mod:`~smallinit.experiments.claims.rules`, ``context``, ``plots``, ``loss_claims``), never
by importing each other. The reproduction runs a claim when its ID is in the preset's ``claims`` and ``arms`` returns
a mapping.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

from smallinit.experiments.claims.rules import (
    INCONCLUSIVE,
    NOT_RUN,
    NOT_SUPPORTED,
    RULE,
    SUPPORTED,
    VERDICTS,
    Effect,
    Verdict,
)

_MODULE = re.compile(r"^c\d+_\w+$")
REQUIRED = ("ID", "CLAIM", "arms", "judge", "analyse")


def registry() -> dict[int, ModuleType]:
    """{claim ID: its module}, sorted by ID, from every ``cNN_*.py`` of this package (checked for
    :data:`REQUIRED` names and unique IDs)."""
    mods: dict[int, ModuleType] = {}
    for info in pkgutil.iter_modules(__path__):
        if not _MODULE.match(info.name):
            continue
        m = importlib.import_module(f"{__name__}.{info.name}")
        missing = [n for n in REQUIRED if not hasattr(m, n)]
        if missing:
            raise TypeError(f"claim module {m.__name__} lacks {', '.join(missing)}")
        if m.ID in mods:
            raise TypeError(f"claim modules {mods[m.ID].__name__} and {m.__name__} share ID {m.ID}")
        mods[m.ID] = m
    return dict(sorted(mods.items()))


def __getattr__(name: str) -> dict[int, str]:
    """``CLAIMS`` = {claim ID: the claim in one sentence}, built from :func:`registry` when first asked for (PEP 562):
    importing this package, or a module of it, imports no claim module."""
    if name == "CLAIMS":
        claims = globals()["CLAIMS"] = {cid: m.CLAIM for cid, m in registry().items()}
        return claims
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CLAIMS",
    "Effect",
    "INCONCLUSIVE",
    "NOT_RUN",
    "NOT_SUPPORTED",
    "REQUIRED",
    "RULE",
    "SUPPORTED",
    "VERDICTS",
    "Verdict",
    "registry",
]
