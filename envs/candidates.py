"""The candidate set and the one action mask.

At a decision point the candidates are, for each of up to Q jobs of the queue window
(envs.window.candidate_window), one placement per rule of envs.placement, plus WAIT. Candidate index
`slot * len(RULES) + rule`; WAIT is the last index. Every heuristic baseline picks one of these
candidates, so a learned policy can always do what any baseline does.

The candidates and the mask are a pure function of a `ClusterState`: a simulator's state and
the same state rebuilt from plain data give the same ones. This module is the single source of
truth for the mask: the env, the baselines and the scoring service all call `build_candidates`.

WAIT (do nothing until something happens) is valid while something the scheduler knows of will
happen: a running job will end or a checkpoint will finish. On an idle cluster it is not: no
scheduler can know that more jobs are coming, so it must place one of the jobs that fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.cache import per_alloc, per_jobs, per_state
from envs.las import las_queue
from envs.placement import PREEMPT, PREEMPT_LAS, RULES, choose_las_victims, choose_victims, geometry_of, place
from envs.speed import PlacementGeometry, PlacementProfile, job_constants_of, job_profile_of
from envs.state import ClusterState
from envs.window import DEFAULT_QUEUE_WINDOW, candidate_window, class_fits, job_classes, las_fits, select_window

__all__ = ["Candidate", "CandidateSet", "DEFAULT_QUEUE_WINDOW", "apply_candidate", "build_candidates", "job_constants",
           "num_candidates"]


class Candidate:
    """One action. `valid` is known up front (from GPU counts); the placement itself (`gpus`,
    `victims`, `profile`) is worked out on first access, so a rule that looks at one candidate
    pays for one placement."""

    __slots__ = ("job_id", "rule", "valid", "_placer", "_placement", "_profile")

    def __init__(self, job_id: int, rule: int, valid: bool = False, placer: _Placer | None = None):
        self.job_id = job_id  # the job's index in the state; -1 for WAIT and for empty slots
        self.rule = rule  # index into RULES; -1 for WAIT
        self.valid = valid
        self._placer = placer
        self._placement: tuple | None = None
        self._profile: PlacementProfile | None = None

    def _get(self) -> tuple:
        if self._placement is None:
            if not self.valid or self._placer is None:
                self._placement = (None, (), None)
            else:
                self._placement = self._placer.resolve(self.job_id, self.rule)
                if self._placement[0] is None:
                    raise RuntimeError(f"candidate job {self.job_id} rule {RULES[self.rule]} was valid by count but found no placement")
        return self._placement

    @property
    def gpus(self) -> np.ndarray | None:
        """Global GPU ids, grouped so consecutive runs of tp_degree form the TP groups."""
        return self._get()[0]

    @property
    def victims(self) -> tuple[int, ...]:
        return self._get()[1]

    @property
    def geometry(self) -> PlacementGeometry | None:
        return self._get()[2]

    @property
    def profile(self) -> PlacementProfile | None:
        """The job on this placement (built on first access: features need only the geometry)."""
        if self._profile is None and self.geometry is not None:
            state = self._placer.state
            self._profile = job_profile_of(job_constants(state)[self.job_id], self.geometry)
        return self._profile


@dataclass
class CandidateSet:
    state: ClusterState  # what the candidates were built from
    window: list[int]  # job indices, one per slot
    candidates: list[Candidate]  # K = Q * len(RULES) + 1; the last is WAIT
    mask: np.ndarray  # (K,) bool

    @property
    def wait_index(self) -> int:
        return len(self.candidates) - 1

    def index(self, slot: int, rule: int) -> int:
        return slot * len(RULES) + rule


def num_candidates(queue_window: int) -> int:
    return queue_window * len(RULES) + 1


def job_constants(state: ClusterState) -> list[tuple[float, float, float, float]]:
    """`speed.job_constants` of every job of the state, made once per job."""
    tables = per_jobs(state)
    out = tables.get("job_constants")
    if out is None:
        out = tables["job_constants"] = []
    if len(out) < len(state.num_gpus):
        lo, hi, model, lists = len(out), len(state.num_gpus), state.speed_model, state.job_lists
        out.extend(job_constants_of(g, t, k, c, s, model) for g, t, k, c, s in zip(
            lists.num_gpus[lo:hi], lists.tp_degree[lo:hi], lists.kind[lo:hi], lists.comm_fraction[lo:hi],
            lists.tp_comm_share[lo:hi]))
    return out


class _Placer:
    """Works out a candidate's placement on first access, for all candidates of one decision."""

    __slots__ = ("state", "shapes", "las_shapes", "jobs")

    def __init__(self, state: ClusterState):
        self.state = state
        self.jobs = state.job_lists
        # Placements depend only on the gang's shape and the free GPUs, not on which job it is
        # nor on the queue: share them across jobs and across decisions until an allocation
        # changes. So does `preempt` with the job's priority class added; `preempt-las` also
        # depends on the LAS queues, which change with time: shared inside one state.
        self.shapes: dict[tuple, tuple] = per_alloc(state).setdefault("shapes", {})
        self.las_shapes: dict[tuple, tuple] = per_state(state).setdefault("las_shapes", {})

    def resolve(self, j: int, rule: int) -> tuple:
        state = self.state
        jobs = self.jobs
        gpus_req, tp, mem = jobs.num_gpus[j], jobs.tp_degree[j], jobs.mem_per_gpu_gb[j]
        if rule == PREEMPT or rule == PREEMPT_LAS:
            if rule == PREEMPT:
                memo, key, choose = self.shapes, (rule, gpus_req, tp, mem, jobs.priority[j]), choose_victims
            else:
                memo, key, choose = self.las_shapes, (gpus_req, tp, mem, jobs.priority[j], int(las_queue(state, [j])[0])), choose_las_victims
            hit = memo.get(key)
            if hit is None:
                chosen = choose(state, j)
                hit = memo[key] = (None, (), None) if chosen is None else (chosen[0], chosen[1], geometry_of(state, chosen[0], tp))
            return hit
        key = (rule, gpus_req, tp, mem)
        hit = self.shapes.get(key)
        if hit is None:
            gpus = place(state, gpus_req, tp, mem, rule)
            hit = self.shapes[key] = (gpus, None if gpus is None else geometry_of(state, gpus, tp))
        return hit[0], (), hit[1]


# Candidates of empty window slots and WAIT are the same at every decision: shared, never placed.
_EMPTY_SLOTS: list[Candidate] = []  # rule k % len(RULES) at position k
_WAIT, _NO_WAIT = Candidate(-1, -1, True), Candidate(-1, -1, False)


def wait_valid(state: ClusterState) -> bool:
    """WAIT needs something the scheduler knows will happen: a running job or a checkpoint."""
    return bool(len(state.running) or state.checkpointing)


def build_candidates(state: ClusterState, queue_window: int = DEFAULT_QUEUE_WINDOW, preempt_las: bool = True) -> CandidateSet:
    """The candidate list and its mask for a decision state. `preempt_las=False` leaves the
    `preempt-las` rule out (its candidates invalid, its validity never worked out, the window as
    the other rules have it), for a scheduler that never takes it: its choices are the same,
    for a fraction of the cost."""
    window = candidate_window(state, queue_window) if preempt_las else select_window(state, queue_window)
    fits_aligned, fits_preempt, _, _ = class_fits(state)
    cls = job_classes(state)[window]
    R = len(RULES)
    placer = _Placer(state)
    cands = []
    # Binpack, spread and topology all pack whole TP groups: valid exactly when the class fits.
    las_valid = las_fits(state, window).tolist() if preempt_las else [False] * len(window)
    for j, aligned_fit, preempt, las in zip(window, fits_aligned[cls].tolist(), fits_preempt[cls].tolist(), las_valid):
        cands += [Candidate(j, r, aligned_fit, placer if aligned_fit else None) for r in range(PREEMPT)]
        cands.append(Candidate(j, PREEMPT, preempt, placer if preempt else None))
        cands.append(Candidate(j, PREEMPT_LAS, las, placer if las else None))
    while len(_EMPTY_SLOTS) < queue_window * R:
        _EMPTY_SLOTS.append(Candidate(-1, len(_EMPTY_SLOTS) % R))
    cands += _EMPTY_SLOTS[: (queue_window - len(window)) * R]
    cands.append(_WAIT if wait_valid(state) else _NO_WAIT)
    mask = np.array([cd.valid for cd in cands])
    return CandidateSet(state, window, cands, mask)


def apply_candidate(sim, cset: CandidateSet, action: int) -> None:
    """Carry out candidate `action` on a simulator (WAIT advances it to the next event). The
    candidate set must come from `sim.decision_state()` as it is now."""
    if not 0 <= action < len(cset.candidates) or not cset.mask[action]:
        raise ValueError(f"action {action} is not a valid candidate (mask: {np.flatnonzero(cset.mask).tolist()})")
    cd = cset.candidates[action]
    if cd.rule == -1:
        sim.advance()
    elif cd.victims:
        sim.preempt_and_start(cd.job_id, cd.gpus, list(cd.victims))
    else:
        sim.start(cd.job_id, cd.gpus, cd.profile)
