"""The floor every scheduler should beat: a uniform choice among the valid candidates."""

from __future__ import annotations

import numpy as np

from envs.decision.candidates import CandidateSet
from envs.decision.state import ClusterState

from baselines.base import Baseline


class RandomValid(Baseline):
    """Uniform over the valid candidates (WAIT included); seeded, so a run is reproducible."""

    name = "random"
    preempt_las = True  # it may take preempt-las, so it is asked where that is the only choice

    def __init__(self, seed: int = 0):
        super().__init__(seed)
        self.rng = np.random.default_rng(seed)

    def select(self, state: ClusterState, cset: CandidateSet) -> int:
        return int(self.rng.choice(np.flatnonzero(cset.mask)))
