"""Shortest expected completion time: the job and placement that would finish first."""

from __future__ import annotations

from envs import core as _core
from envs import jit as _jit
from envs.candidates import CandidateSet
from envs.features import predicted_rate
from envs.placement import RULES
from envs.state import ClusterState

from baselines.base import Baseline, fifo_positions, wait_or_any


class ShortestExpectedCompletion(Baseline):
    """Over every valid (job, placement) candidate without preemption: the smallest estimated
    remaining runtime divided by the speed the placement would give now (GPU type, topology,
    congestion, interference); FIFO on ties. SJF that also chooses where."""

    name = native_replay = "sect"

    def select(self, state: ClusterState, cset: CandidateSet) -> int:
        if _jit.ENABLED:  # the native core (envs.core), bit for bit the loop below
            best = _core.choose_sect(state, cset.window, cset.mask, len(RULES))
            return wait_or_any(cset) if best < 0 else best
        pos = fifo_positions(state)
        best: tuple[tuple[float, int], int] | None = None  # (key, candidate index)
        remaining = cset.remaining_estimates()
        for i in cset.valid_placements(preempting=False):
            cd = cset.candidates[i]
            key = (remaining[i // len(RULES)] / max(predicted_rate(state, cd), 1e-6), pos[cd.job_id])
            if best is None or key < best[0]:
                best = (key, i)
        return wait_or_any(cset) if best is None else best[1]
