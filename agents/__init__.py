"""The learned scheduler: policy network, device selection, PPO set-up; and
`agents.evaluation`, the library behind evaluate.py.

The names below load on first use (PEP 562), so importing a submodule that needs no torch
(`agents.evaluation`, `agents.config`) does not import torch through this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.device import resolve_device
    from agents.policy import CandidateScorer, CandidateScoringPolicy

_LAZY = {"CandidateScorer": "agents.policy", "CandidateScoringPolicy": "agents.policy", "resolve_device": "agents.device"}

__all__ = ["CandidateScorer", "CandidateScoringPolicy", "resolve_device"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value
