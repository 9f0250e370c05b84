"""Tiresias (Gu et al., NSDI 2019): discretised 2D-LAS with preemption, no runtime knowledge."""

from __future__ import annotations

from envs.decision.candidates import CandidateSet
from envs.decision.las import las_queue
from envs.decision.placement import PREEMPT_LAS, TOPOLOGY
from envs.decision.state import ClusterState

from baselines.base import Baseline, first_valid, wait_or_any


class Tiresias(Baseline):
    """Discretised two-dimensional least attained service (envs.decision.las): jobs in order of their
    LAS queue (attained GPU-service, with the starvation guard's promotion), FIFO inside a queue
    (the order jobs (re)entered the scheduler's queue, as the paper's FIFO within a queue);
    topology placement. A job that does not fit on the free GPUs takes its `preempt-las`
    candidate when it has one: it preempts running jobs of strictly lower LAS queues (more
    attained service) and of no higher priority class, the most attained first, each paying its
    checkpoint and restore. A job that fits neither way is skipped for the next (backfilling).
    A preempted job keeps its attained service and so its queue: it does not preempt back the
    job that displaced it unless the starvation guard promotes it. WAIT when no job can start."""

    name = "tiresias"
    preempt_las = True  # it may take preempt-las, so it is asked where that is the only choice

    def select(self, state: ClusterState, cset: CandidateSet) -> int:
        window = cset.window
        seq = state.enqueue_seq
        queue = las_queue(state, window).tolist()
        jobs = [j for _, _, j in sorted(zip(queue, seq[window].tolist(), window))]
        i = first_valid(cset, jobs, (TOPOLOGY, PREEMPT_LAS))
        return wait_or_any(cset) if i is None else i
