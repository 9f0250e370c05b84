"""What every heuristic baseline shares: the scheduler interface and the walk over the window.

A baseline picks one candidate of an `envs.decision.candidates.CandidateSet`; it never builds
placements or masks of its own. Ordering keys read the decision state (`envs.decision.state.ClusterState`):
what a real scheduler knows, never the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from envs.decision.candidates import CandidateSet
from envs.decision.placement import TOPOLOGY
from envs.decision.state import ClusterState


class Baseline:
    """A scheduler that picks a valid candidate index at each decision point."""

    name: str = ""
    # Whether it may take `preempt-las` (Tiresias' preemption by attained service): the replay
    # loop offers that rule, and asks at the moments where it is the only valid placement, only
    # to a rule that may take it (envs.sim.replay.advance_to_decision).
    preempt_las: bool = False
    # The rule's name in envs.sim.simulator.NATIVE_REPLAY_POLICIES when the native core carries out
    # exactly this `select` (envs.sim.replay.replay then runs a whole replay in one call); None for
    # every other rule, and to be set to None by a subclass that changes the choice.
    native_replay: str | None = None

    def __init__(self, seed: int = 0):
        self.seed = seed  # only randomised baselines use it

    def select(self, state: ClusterState, cset: CandidateSet) -> int:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def fifo_positions(state: ClusterState) -> np.ndarray:
    """Job id -> FIFO rank (smaller first): the order jobs (re)entered the queue."""
    return state.enqueue_seq


def wait_or_any(cset: CandidateSet) -> int:
    """WAIT when it is valid, else the first valid candidate (WAIT is invalid only when nothing
    will ever happen again, so some placement must be taken)."""
    if cset.mask[cset.wait_index]:
        return cset.wait_index
    return int(np.flatnonzero(cset.mask)[0])


def first_valid(cset: CandidateSet, jobs: Iterable[int], rules: tuple[int, ...] = (TOPOLOGY,)) -> int | None:
    """Index of the first valid candidate over `jobs` (window job ids, in the caller's order),
    trying `rules` in order for each job; None when there is none."""
    slot_of = {j: s for s, j in enumerate(cset.window)}
    for j in jobs:
        for rule in rules:
            i = cset.index(slot_of[j], rule)
            if cset.mask[i]:
                return i
    return None


class OrderedBaseline(Baseline):
    """Walk the window's jobs by `order_key` (ties in FIFO order) and take the first valid
    candidate of `rule`; WAIT when no job has one."""

    rule: int = TOPOLOGY

    def order_key(self, state: ClusterState, job_id: int) -> float:
        """Smaller goes first; the FIFO order (all keys equal) by default."""
        return 0.0

    def select(self, state: ClusterState, cset: CandidateSet) -> int:
        window = cset.window
        pos = fifo_positions(state)[window].tolist()  # distinct: the sort never compares further
        if type(self).order_key is OrderedBaseline.order_key:  # FIFO alone
            jobs = [j for _, j in sorted(zip(pos, window))]
        else:
            jobs = [j for _, _, j in sorted(zip([self.order_key(state, j) for j in window], pos, window))]
        i = first_valid(cset, jobs, (self.rule,))
        return wait_or_any(cset) if i is None else i
