"""EASY backfilling as in Slurm's backfill scheduler (Lifka 1995; Mu'alem and Feitelson 2001)."""

from __future__ import annotations

import numpy as np

from envs.decision.candidates import CandidateSet
from envs.decision.placement import TOPOLOGY
from envs.decision.state import ClusterState

from baselines.base import Baseline, fifo_positions, wait_or_any


def estimated_end_s(state: ClusterState, job_id: int, gpus: np.ndarray) -> float:
    """When `job_id` would finish on `gpus` by its estimate: remaining estimated work over the
    slowest GPU's speed for the job's kind (placement and interference effects unknown to the
    scheduler)."""
    speed = state.cluster.gpu_speed_by_kind[gpus, state.job_lists.kind[job_id]]
    return state.now + state.remaining_estimate_s(job_id) / float(speed.min())


def reservation(state: ClusterState, job_id: int) -> tuple[float, int]:
    """(shadow time s, spare GPUs) for a job that does not fit now: the earliest estimated time
    at which enough GPUs with its memory are free, and how many such GPUs are left over then.
    Running jobs release their GPUs at their estimated ends; GPUs of checkpointing or reserved
    jobs count as busy (EASY itself never preempts). (inf, 0) when that never suffices."""
    c = state.cluster
    eligible = c.gpu_memory_gb >= state.mem_per_gpu_gb[job_id]
    need = int(state.num_gpus[job_id])
    have = int((state.free_mask & eligible).sum())
    run = state.running
    ends = np.array([estimated_end_s(state, r, state.placement[r]) + state.restore_left_s[r] for r in run])
    for k in np.argsort(ends, kind="stable"):
        have += int(eligible[state.placement[run[k]]].sum())
        if have >= need:
            return float(ends[k]), have - need
    return float("inf"), 0


class EasyBackfill(Baseline):
    """FIFO head first with a reservation from running jobs' estimated ends; later jobs start
    only if they fit now and end by the shadow time or use only GPUs spare then; topology
    placement; WAIT otherwise."""

    name = "easy"

    def placement(self, state: ClusterState, cset: CandidateSet, slot: int) -> int | None:
        """The candidate index that starts window slot `slot`'s job now, None when none may: the
        topology rule's, when valid."""
        i = cset.index(slot, TOPOLOGY)
        return i if cset.mask[i] else None

    def select(self, state: ClusterState, cset: CandidateSet) -> int:
        slot_of = {j: s for s, j in enumerate(cset.window)}
        head = int(state.queue[0])
        if head in slot_of and (i := self.placement(state, cset, slot_of[head])) is not None:
            return i
        shadow_s, spare = reservation(state, head)
        head_eligible = state.cluster.gpu_memory_gb >= state.mem_per_gpu_gb[head]
        pos = fifo_positions(state)
        for j in sorted(cset.window, key=pos.__getitem__):
            if j == head or (i := self.placement(state, cset, slot_of[j])) is None:
                continue
            gpus = cset.candidates[i].gpus
            if estimated_end_s(state, j, gpus) <= shadow_s or int(head_eligible[gpus].sum()) <= spare:
                return i
        return wait_or_any(cset)
