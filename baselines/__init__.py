"""Heuristic schedulers. Each picks one candidate of `envs.decision.candidates.build_candidates`, so it
acts through the same interface (and the same mask) as the learned policy.

    from baselines import make_baseline
    from envs.sim.replay import replay
    replay(sim, make_baseline("easy").select, queue_window=8)
"""

from __future__ import annotations

from baselines.base import Baseline
from baselines.block import SlurmBlock
from baselines.easy import EasyBackfill
from baselines.fifo import BinpackFifo, SpreadFifo, TopologyFifo
from baselines.priority import PriorityPreempt
from baselines.random_valid import RandomValid
from baselines.sect import ShortestExpectedCompletion
from baselines.sjf import ShortestJobFirst
from baselines.tiresias import Tiresias

BASELINES: dict[str, type[Baseline]] = {
    cls.name: cls
    for cls in (
        BinpackFifo,
        SpreadFifo,
        TopologyFifo,
        ShortestJobFirst,
        ShortestExpectedCompletion,
        EasyBackfill,
        SlurmBlock,
        PriorityPreempt,
        Tiresias,
        RandomValid,
    )
}


def make_baseline(name: str, seed: int = 0) -> Baseline:
    """A fresh baseline by name; `seed` drives randomised ones. Raises ValueError listing the
    known names for an unknown one."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline '{name}' (known: {', '.join(BASELINES)})")
    return BASELINES[name](seed=seed)


__all__ = ["BASELINES", "Baseline", "make_baseline"]
