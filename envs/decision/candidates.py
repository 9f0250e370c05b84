"""The candidate set and the one action mask.

At a decision point the candidates are, for each of up to Q jobs of the queue window
(envs.decision.window.candidate_window), one placement per rule of envs.decision.placement, plus WAIT. Candidate index
`slot * len(RULES) + rule`; WAIT is the last index. Every heuristic baseline picks one of these
candidates, so a learned policy can always do what any baseline does.

The candidates and the mask are a pure function of a `ClusterState`: a simulator's state and
the same state rebuilt from plain data give the same ones. This module is the single source of
truth for the mask: the env, the baselines and the scoring service all call `build_candidates`.

WAIT (do nothing until something happens) is valid while something the scheduler knows of will
happen: a running job will end or a checkpoint will finish. On an idle cluster it is not: no
scheduler can know that more jobs are coming, so it must place one of the jobs that fit.

An optional `WaitGuard` (off by default: masks are then exactly as without it) also makes WAIT
invalid while a window job that could start now without preempting (its binpack, spread and
topology candidates are valid) has waited longer than max(overdue_factor x its estimate,
min_wait_s): a starvation bound for a deterministic policy that would otherwise wait forever
with work it could start. It reads only the decision state (waiting times, estimates, which
gangs fit the free GPUs), so the env, evaluation and the scoring service apply the same mask.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np

from envs.cluster.speed import PlacementGeometry, PlacementProfile, job_constants_of, job_profile_of
from envs.core import jit as _jit
from envs.decision.cache import memo_of, per_alloc, per_jobs, per_state
from envs.decision.las import LAS_QUEUE_THRESHOLDS_GPU_S, STARVATION_FACTOR, las_queue
from envs.decision.placement import PREEMPT, PREEMPT_LAS, PREEMPT_RULES, RULES, choose_las_victims, choose_victims, geometry_of, place
from envs.decision.state import ClusterState
from envs.decision.window import DEFAULT_QUEUE_WINDOW, candidate_window, class_fits, job_classes, las_fits, select_window

__all__ = ["Candidate", "CandidateSet", "DEFAULT_QUEUE_WINDOW", "WaitGuard", "apply_candidate", "build_candidates", "candidates_from_arrays",
           "job_constants", "num_candidates", "placed_natively", "wait_guard_of", "wait_valid"]


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
            self._profile = profile_of(self._placer.state, self.job_id, self.geometry)
        return self._profile


@dataclass
class CandidateSet:
    state: ClusterState  # what the candidates were built from
    window: list[int]  # job indices, one per slot
    candidates: Sequence[Candidate]  # K = Q * len(RULES) + 1; the last is WAIT (each made on first access)
    mask: np.ndarray  # (K,) bool
    # The features written for this set where its maker was asked for them (envs.sim.replay's
    # `features`): (candidates, global) float32, clipped to [-1, 1] as the env's observation.
    observed: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def wait_index(self) -> int:
        return len(self.candidates) - 1

    def index(self, slot: int, rule: int) -> int:
        return slot * len(RULES) + rule

    def valid_placements(self, preempting: bool | None = None) -> list[int]:
        """Indices of the valid candidates other than WAIT, in index order: all of them, or only
        those of the preempting rules (True) or of the others (False)."""
        valid = np.flatnonzero(self.mask[:-1]).tolist()
        if preempting is None:
            return valid
        return [i for i in valid if (i % len(RULES) in PREEMPT_RULES) == preempting]

    def remaining_estimates(self) -> list[float]:
        """Per window slot, its job's estimated remaining runtime (ClusterState.remaining_estimate_s)."""
        return self.state.remaining_estimate_s(np.array(self.window, dtype=np.int64)).tolist()


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


def profile_of(state: ClusterState, j: int, geometry: PlacementGeometry) -> PlacementProfile:
    """`job_profile_of` job `j` on `geometry`, memoised per cluster: jobs of the same constants
    on the same memoised geometry share one (immutable) profile."""
    constants = job_constants(state)[j]
    memo = memo_of(state, "profiles")
    key = (id(geometry), constants)
    hit = memo.get(key)
    if hit is None or hit[0] is not geometry:  # the geometry held in the entry keeps its id unique
        hit = memo[key] = (geometry, job_profile_of(constants, geometry))
    return hit[1]


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
        segment = 0 if state.segment_gpus is None else state.segment_of(j)
        if rule == PREEMPT or rule == PREEMPT_LAS:
            if rule == PREEMPT:
                memo, key, choose = self.shapes, (rule, gpus_req, tp, mem, jobs.priority[j]), choose_victims
            else:
                memo, key, choose = self.las_shapes, (gpus_req, tp, mem, jobs.priority[j], int(las_queue(state, [j])[0])), choose_las_victims
            if segment:
                key += (segment,)
            hit = memo.get(key)
            if hit is None:
                chosen = choose(state, j)
                hit = memo[key] = (None, (), None) if chosen is None else (chosen[0], chosen[1], geometry_of(state, chosen[0], tp))
            return hit
        key = (rule, gpus_req, tp, mem, segment) if segment else (rule, gpus_req, tp, mem)
        hit = self.shapes.get(key)
        if hit is None:
            gpus = place(state, gpus_req, tp, mem, rule, segment=segment)
            hit = self.shapes[key] = (gpus, None if gpus is None else geometry_of(state, gpus, tp))
        return hit[0], (), hit[1]


# Candidates of empty window slots and WAIT are the same at every decision: shared, never placed.
_EMPTY_SLOTS: list[Candidate] = []  # rule k % len(RULES) at position k
_WAIT, _NO_WAIT = Candidate(-1, -1, True), Candidate(-1, -1, False)


DEFAULT_MIN_WAIT_S = 3600.0
_GUARD_FIELDS = ("overdue_factor", "min_wait_s")


@dataclass(frozen=True)
class WaitGuard:
    """A starvation bound on WAIT: WAIT is invalid while some window job that could start now
    without preempting has waited longer than max(overdue_factor x estimate_s, min_wait_s).

    "Waited" is the job's whole time in the queue (`wait_s` plus the current stay, since
    `queued_since_s`); `estimate_s` is the user's runtime estimate: both are in every decision
    state, so the rule needs no history of earlier decisions and no true duration. "Could start
    without preempting" is the validity of its binpack / spread / topology candidates (the class
    fits the free GPUs). The policy may then start any valid candidate, not necessarily the
    overdue job. Plain-data form (a train config's `env: wait_guard:`, policy.json's
    `wait_guard`): {"overdue_factor": 1.0, "min_wait_s": 3600.0}; see `wait_guard_of`."""

    overdue_factor: float
    min_wait_s: float = DEFAULT_MIN_WAIT_S

    def __post_init__(self):
        for name in _GUARD_FIELDS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
                raise ValueError(f"wait_guard.{name}: must be a finite number, got {v!r}")
        if self.overdue_factor <= 0:
            raise ValueError(f"wait_guard.overdue_factor: must be > 0, got {self.overdue_factor!r}")
        if self.min_wait_s < 0:
            raise ValueError(f"wait_guard.min_wait_s: must be >= 0, got {self.min_wait_s!r}")
        object.__setattr__(self, "overdue_factor", float(self.overdue_factor))
        object.__setattr__(self, "min_wait_s", float(self.min_wait_s))

    def to_dict(self) -> dict:
        return {"overdue_factor": self.overdue_factor, "min_wait_s": self.min_wait_s}

    def __str__(self) -> str:
        return f"overdue_factor={self.overdue_factor:g},min_wait_s={self.min_wait_s:g}"

    def overdue(self, state: ClusterState, j: int) -> bool:
        """Job `j` (queued) has waited longer than the bound."""
        waited = float(state.wait_s[j]) + state.now - float(state.queued_since_s[j])
        return waited > max(self.overdue_factor * float(state.estimate_s[j]), self.min_wait_s)

    def blocks_wait(self, state: ClusterState, window, startable) -> bool:
        """Whether WAIT is invalid: some `window` job whose `startable` flag (a non-preempting
        placement is valid) is set is overdue."""
        return any(ok and self.overdue(state, j) for j, ok in zip(window, startable))


def wait_guard_of(value: Any, name: str = "wait_guard") -> WaitGuard | None:
    """A `WaitGuard` from any of its forms, or None (no guard): None, False or "off"; a
    WaitGuard; a mapping {overdue_factor, min_wait_s?}; a number (the overdue factor, min_wait_s
    at its default); or text: "off", "K" or "overdue_factor=K,min_wait_s=S" (command lines).
    Raises ValueError whose message starts with the field, `name` standing for "wait_guard"
    (`env.wait_guard.min_wait_s: must be >= 0, got -1.0`)."""
    if value is None or value is False:
        return None
    if isinstance(value, WaitGuard):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("off", "none"):
            return None
        if "=" not in text:
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"{name}: {text!r} is not 'off', a number (the overdue factor) or "
                                 "overdue_factor=K,min_wait_s=S") from None
        else:
            fields: dict[str, Any] = {}
            for part in text.split(","):
                key, _, v = (x.strip() for x in part.partition("="))
                if key not in _GUARD_FIELDS:
                    raise ValueError(f"{name}: {part.strip()!r} is not KEY=VALUE with KEY one of {', '.join(_GUARD_FIELDS)}")
                try:
                    fields[key] = float(v)
                except ValueError:
                    raise ValueError(f"{name}.{key}: must be a number, got {v!r}") from None
            value = fields
    if isinstance(value, dict):
        unknown = sorted(map(str, set(value) - set(_GUARD_FIELDS)))
        if unknown:
            raise ValueError(f"{name}: unknown key '{unknown[0]}' (known: {', '.join(_GUARD_FIELDS)})")
        if "overdue_factor" not in value:
            raise ValueError(f"{name}.overdue_factor: required")
        args = value
    elif isinstance(value, Real) and not isinstance(value, bool):
        args = {"overdue_factor": value}
    else:
        raise ValueError(f"{name}: must be null, 'off', a number or a mapping with overdue_factor and min_wait_s, "
                         f"got {type(value).__name__}")
    try:
        return WaitGuard(**args)
    except ValueError as e:
        raise ValueError(f"{name}{str(e)[len('wait_guard'):]}") from None


def wait_valid(state: ClusterState, wait_guard: WaitGuard | None = None, window=(), startable=()) -> bool:
    """WAIT needs something the scheduler knows will happen: a running job or a checkpoint; with
    a `wait_guard`, also that no `window` job that could start without preempting (`startable`,
    per window job) is overdue."""
    if not (len(state.running) or state.checkpointing):
        return False
    return wait_guard is None or not wait_guard.blocks_wait(state, window, startable)


def build_candidates(state: ClusterState, queue_window: int = DEFAULT_QUEUE_WINDOW, preempt_las: bool = True,
                     wait_guard: WaitGuard | None = None) -> CandidateSet:
    """The candidate list and its mask for a decision state. `preempt_las=False` leaves the
    `preempt-las` rule out (its candidates invalid, its validity never worked out, the window as
    the other rules have it), for a scheduler that never takes it: its choices are the same,
    for a fraction of the cost. `wait_guard` (a `WaitGuard`, default None: no guard) makes WAIT
    invalid while a window job that could start without preempting is overdue."""
    window = candidate_window(state, queue_window) if preempt_las else select_window(state, queue_window)
    fits_aligned, fits_preempt, _, _ = class_fits(state)
    cls = job_classes(state)[window]
    R = len(RULES)
    nw = len(window)
    mask = np.zeros(queue_window * R + 1, dtype=bool)
    # Binpack, spread and topology all pack whole TP groups: valid exactly when the class fits.
    aligned = fits_aligned[cls]
    by_rule = mask[: nw * R].reshape(nw, R)
    by_rule[:, :PREEMPT] = aligned[:, None]
    by_rule[:, PREEMPT] = fits_preempt[cls]
    if preempt_las:
        by_rule[:, PREEMPT_LAS] = las_fits(state, window)
    aligned = aligned.tolist()
    mask[-1] = wait_valid(state, wait_guard, window, aligned)
    while len(_EMPTY_SLOTS) < queue_window * R:
        _EMPTY_SLOTS.append(Candidate(-1, len(_EMPTY_SLOTS) % R))
    return CandidateSet(state, window, _Candidates(window, mask, _Placer(state)), mask)


class _Candidates(Sequence):
    """The candidate list of one decision, each `Candidate` made on first access (a rule that
    looks at a few candidates pays for those): window slot k's rule r at k * len(RULES) + r,
    then the empty slots, then WAIT; validity from the decision's mask."""

    __slots__ = ("_window", "_mask", "_placer", "_items", "_complete")

    def __init__(self, window: list[int], mask: np.ndarray, placer: _Placer):
        self._window, self._mask, self._placer = window, mask, placer
        self._items: list[Candidate | None] = [None] * len(mask)
        self._complete = False  # every item made

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):
        items = self._items
        if isinstance(i, slice):
            return self._all()[i]
        cd = items[i]
        if cd is None:
            k = i + len(items) if i < 0 else i
            cd = items[k] = self._make(k)
        return cd

    def __iter__(self):
        return iter(self._all())

    def _make(self, k: int) -> Candidate:
        items, R, nw = self._items, len(RULES), len(self._window)
        if k == len(items) - 1:
            return _WAIT if self._mask[k] else _NO_WAIT
        if k >= nw * R:
            return _EMPTY_SLOTS[k - nw * R]
        valid = bool(self._mask[k])
        return Candidate(self._window[k // R], k % R, valid, self._placer if valid else None)

    def _all(self) -> list[Candidate]:
        """Every candidate, made now where not yet (for slices and iteration)."""
        items = self._items
        if not self._complete:
            self._complete = True
            for k, cd in enumerate(items):
                if cd is None:
                    items[k] = self._make(k)
        return items


class _Placed:
    """A placer over placements worked out already (the native core's, `candidates_from_arrays`):
    per valid candidate index (ascending) its GPUs and victims, looked up when a candidate is
    first resolved; the geometry made then, as `_Placer` makes it."""

    __slots__ = ("state", "window", "index", "gpus", "victims")

    def __init__(self, state: ClusterState, window: list[int], index: list[int], gpus: list, victims: list):
        self.state, self.window, self.index, self.gpus, self.victims = state, window, index, gpus, victims

    def resolve(self, j: int, rule: int) -> tuple:
        k = bisect.bisect_left(self.index, self.window.index(j) * len(RULES) + rule)
        gpus = self.gpus[k]
        if not len(gpus):
            return None, (), None
        gpus = np.array(gpus, dtype=np.int64)
        return gpus, tuple(self.victims[k]), geometry_of(self.state, gpus, int(self.state.tp_degree[j]))


def candidates_from_arrays(state: ClusterState, window: list[int], mask: np.ndarray, index: list[int], gpus: list,
                           victims: list, observed: tuple[np.ndarray, np.ndarray] | None = None) -> CandidateSet:
    """A `CandidateSet` from a candidate set worked out elsewhere (envs.core's
    `SimView.candidates`): the window, the (K,) bool mask, and per valid candidate other than
    WAIT (`index`, ascending) its GPUs (empty where no placement was found) and victims. It
    behaves as `build_candidates`' does for the same state: candidates made on first access, the
    same `RuntimeError` for a candidate valid by count without a placement. `observed`: its
    features, where they were written with it."""
    while len(_EMPTY_SLOTS) < len(mask) - 1:
        _EMPTY_SLOTS.append(Candidate(-1, len(_EMPTY_SLOTS) % len(RULES)))
    return CandidateSet(state, window, _Candidates(window, mask, _Placed(state, window, index, gpus, victims)), mask,
                        observed)


_LAS_THRESHOLDS = list(LAS_QUEUE_THRESHOLDS_GPU_S)  # envs.core's las_thresholds


def placed_natively(cset: CandidateSet) -> CandidateSet:
    """`cset` (`build_candidates`' for a decision state) with every valid candidate's placement
    (GPUs and victims) worked out by the native core in one call (envs.core.state_placements),
    where `_Placer` works each out in Python on first access: the same window and mask, the same
    placements bit for bit. For a caller that reads every valid candidate (the scoring service's
    answer lists them all). Needs the compiled path (ValueError)."""
    if not _jit.ENABLED:
        raise ValueError("placed_natively needs the compiled path")
    from envs import core as _core

    window = list(cset.window)
    index, gpus, victims = _core.state_placements(cset.state, window, cset.mask, _LAS_THRESHOLDS, STARVATION_FACTOR)
    return candidates_from_arrays(cset.state, window, cset.mask, index, gpus, victims)


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
