"""Strict priority classes with preemption of lower classes."""

from __future__ import annotations

from envs.decision.candidates import CandidateSet
from envs.decision.placement import PREEMPT, TOPOLOGY
from envs.decision.state import ClusterState

from baselines.base import Baseline, fifo_positions, first_valid, wait_or_any


class PriorityPreempt(Baseline):
    """Highest priority class first, FIFO inside a class; topology placement, else preempt
    lower-priority preemptible jobs when that is the only way the job fits."""

    name = "priority"

    def select(self, state: ClusterState, cset: CandidateSet) -> int:
        pos = fifo_positions(state)
        jobs = sorted(cset.window, key=lambda j: (-int(state.priority[j]), pos[j]))
        # The preempt candidate is only ever valid when the job does not fit on free GPUs.
        i = first_valid(cset, jobs, (TOPOLOGY, PREEMPT))
        return wait_or_any(cset) if i is None else i
