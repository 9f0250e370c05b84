"""Lookahead: at each decision, simulate the best few candidates forward under a base heuristic
and take the one whose future scores best on the scenario's objective (a one-step rollout, as
in Bertsekas' rollout algorithms).

Two forms, used to measure headroom, never as features:

* `lookahead` (honest, non-clairvoyant): the futures it simulates are *sampled* from what a
  scheduler knows. Each arrived, unfinished job's true work is drawn from its posterior given
  its estimate (the workload's estimate-noise model; with the kind's runtime prior for
  generated workloads) and given the work it has already done; the arrivals to come are drawn
  from the workload's own generator (a fresh draw, never this episode's) or, for a trace, by
  resampling the jobs seen so far at the arrival rate seen so far. The same sampled futures
  serve every candidate (common random numbers), and the base rule's own choice is kept unless
  another candidate's mean gain over it exceeds one standard error (and `min_gain`). A real
  scheduler could run it, given the time.
* `lookahead-oracle` (a BOUND, not a policy): it forks the simulator itself, so it simulates
  the true durations and the true future arrivals. It measures how much any policy that
  follows the base heuristic after one changed decision could gain at most; with the full
  horizon it is never worse than its base (the rollout improvement property: the base's own
  choice is always among the candidates and every rollout is exact; tests/test_lookahead.py).

Both fork a simulator, so they are not baselines (those act on the decision state only);
they run through `run_lookahead`. Cost: candidates x samples rollouts per decision, each a
simulation of up to `horizon_s` of the future (`benchmarks.leaderboard` prints it per decision).

`StatePlanner` is the honest form on a decision state alone (the scoring service's `--policy
lookahead`): it builds the simulator from the state (`simulator_from_state`) and, knowing no
workload, samples the arrivals to come as for a trace, from the state's live jobs at the rate of
its past arrivals. The same `Lookahead` searches; on a trace, at a moment when every job seen is
still live, it decides as `Lookahead` on the live simulator (tests/test_service_planner.py).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from baselines import make_baseline
from envs.cluster.topology import Cluster
from envs.core import jit as _jit
from envs.decision.candidates import CandidateSet, WaitGuard, apply_candidate, build_candidates
from envs.decision.features import predicted_rate
from envs.decision.placement import PREEMPT_RULES, RULES
from envs.decision.state import ARRIVAL_HISTORY_S, ClusterState
from envs.jobs import Job, JobKind
from envs.scenario import LookaheadConfig
from envs.sim.objective import Objective, objective_total
from envs.sim.replay import advance_to_decision, decide
from envs.sim.simulator import JobSlice, NativeWorld, RolloutOutcome, SchedulingError, SimConfig, Simulator
from envs.workload.generator import WorkloadSpec, generate

LOOKAHEAD_POLICIES = ("lookahead", "lookahead-oracle")
# Rollouts of `sect` run in the native core from their first action (Simulator.rollout_sect, bit
# for bit the Python loop); False: the Python loop throughout (tests and benchmarks compare the two).
NATIVE_ROLLOUTS = True
_FUTURE_SEED_BASE = 2**40  # fresh workload draws for sampled futures: far from every episode seed


def _native_first(cset: CandidateSet, action: int) -> tuple | None:
    """What Simulator.rollout_sect does first for a rollout that starts with candidate `action`:
    (job, GPUs, victims) for a start or a preemption, (-1,) for WAIT; None for an invalid action."""
    if not (0 <= action < len(cset.candidates) and cset.mask[action]):
        return None
    if action == cset.wait_index:
        return (-1,)
    cd = cset.candidates[action]
    return (cd.job_id, cd.gpus.tolist(), list(cd.victims))


def terminal_cost(sim: Simulator | RolloutOutcome, objective: Objective) -> float:
    """At a finite horizon, what the jobs still in the system will cost at least: each one's
    remaining work (the fork's own truth: sampled, or the real one for the oracle) at reference
    speed with no more waiting, in the objective's JCT terms. Without it a short horizon prefers
    finishing small jobs before it to making progress on long ones."""
    if not (objective.avg_jct or objective.weighted_jct):
        return 0.0
    n = sim.num_arrived
    open_ = np.isnan(sim.end[:n])
    left = sim.work_left[:n][open_] + sim.overhead_left[:n][open_]
    w = objective.avg_jct + objective.weighted_jct * np.asarray(objective.priority_weights)[sim.priority[:n][open_]]
    return float((w * left).sum()) / 3600.0


def shortlist(state: ClusterState, cset: CandidateSet, base_choice: int, k: int, preempt_k: int) -> list[int]:
    """The candidates worth simulating: the base rule's choice, the `k` best placements without
    preemption and the `preempt_k` best with it by sect's key (estimated remaining runtime over
    the speed the placement gives), WAIT when valid; one per distinct outcome (rules that pick
    the same GPUs for the same job are one)."""
    pos = state.enqueue_seq
    plain, preempt = [], []
    remaining = cset.remaining_estimates()
    for i in cset.valid_placements():
        cd = cset.candidates[i]
        key = (remaining[i // len(RULES)] / max(predicted_rate(state, cd), 1e-6), int(pos[cd.job_id]), i)
        (preempt if cd.rule in PREEMPT_RULES else plain).append(key)
    plain.sort()
    preempt.sort()
    chosen = [base_choice] + [i for *_, i in plain[:k]] + [i for *_, i in preempt[:preempt_k]]
    if cset.mask[cset.wait_index]:
        chosen.append(cset.wait_index)
    out, seen = [], set()
    for i in chosen:
        cd = cset.candidates[i]
        outcome = ("wait",) if i == cset.wait_index else (cd.job_id, tuple(cd.gpus.tolist()), tuple(cd.victims))
        if outcome not in seen:
            seen.add(outcome)
            out.append(i)
    return out


# ---------------------------------------------------------------- sampled futures


def estimate_noise(spec: WorkloadSpec) -> float:
    """The lognormal sigma of a workload's runtime estimates around the true work (0 when its
    durations are known): what a sampled truth is drawn with."""
    if spec.trace is not None:
        return float(spec.trace.get("estimate_noise", 0.5))
    return 0.0 if spec.durations_known else float(spec.estimate_noise)


class FutureSampler:
    """Draws what a scheduler does not know from what it does: each arrived, unfinished job's
    true work (given its estimate and its work done) and the jobs still to arrive. Reads only
    the decision state and the workload's spec; the simulator's truth never enters a sample.

    Without a spec (`FutureSampler.of_past`) it knows no generator: the arrivals to come are
    always a resample of the past ones (see `future`)."""

    def __init__(self, spec: WorkloadSpec, cluster: Cluster, episode_seed: int, samples: int):
        self.spec, self.cluster = spec, cluster
        self.noise = estimate_noise(spec)
        self.past_arrivals_s: np.ndarray | None = None  # None: the state's own rows' arrivals
        # Per kind: (log median, sigma, min, max) of the generator's runtime prior (None for traces).
        self.prior = None
        if spec.trace is None:
            self.prior = {int(k): (math.log(p.work_median_s), p.work_sigma, p.work_min_s, p.work_max_s) for k, p in spec.kinds.items()}
        # Fresh draws of the generator, one per sample slot, made once per episode (never this
        # episode's own workload: a different seed stream).
        self._fresh: list[list[Job]] | None = None
        if spec.trace is None:
            self._fresh = [generate(spec, cluster, _FUTURE_SEED_BASE + episode_seed * 1024 + s) for s in range(samples)]
        # Per sample, the fresh draw's arrival times (sorted, as a workload is), and the renumbered
        # jobs of one (sample, first id, window of the draw): decisions between two arrivals ask
        # for the same ones, so the jobs are made once and the same list comes back (a fork keeps
        # the arrays it made from it: Simulator.fork).
        self._fresh_times = None if self._fresh is None else [[j.arrival_s for j in jobs] for jobs in self._fresh]
        self._renumbered: dict[tuple, list[Job]] = {}
        self._renumbered_for = -1

    @classmethod
    def of_past(cls, noise: float, past_arrivals_s: np.ndarray) -> FutureSampler:
        """A sampler that knows no workload: true work drawn with lognormal sigma `noise` around
        the estimate (no prior), arrivals resampled at the rate of `past_arrivals_s` (s, oldest
        first, all before now) from the jobs of the state it is asked about."""
        self = cls.__new__(cls)
        self.spec = self.cluster = self.prior = self._fresh = self._fresh_times = None
        self._renumbered, self._renumbered_for = {}, -1
        self.noise = float(noise)
        self.past_arrivals_s = np.asarray(past_arrivals_s, dtype=float)
        return self

    def work(self, state: ClusterState, ids: np.ndarray, rng: np.random.Generator) -> dict[int, float]:
        """A draw of the true work of jobs `ids` (arrived, unfinished)."""
        est = state.estimate_s[ids]
        done = state.work_done_s[ids]
        kinds = state.kind[ids]
        if self.noise == 0.0:
            return {j: max(e, d + 1.0) for j, e, d in zip(ids.tolist(), est.tolist(), done.tolist())}
        return self._drawn_work(ids.tolist(), est.tolist(), done, kinds.tolist(), rng)

    def _posterior(self, e: float, kind: int) -> tuple[float, float, float, float]:
        """A job's log-space posterior of its true work given its estimate `e`: (mu, sqrt(var), lo,
        hi), made once per (estimate, kind)."""
        key = (e, kind)
        memo = self.__dict__.setdefault("_posteriors", {})  # FutureSampler.of_past makes none in __init__
        hit = memo.get(key)
        if hit is None:
            sigma = self.noise
            mu, var, lo, hi = math.log(e), sigma * sigma, 1.0, math.inf
            if self.prior is not None and kind in self.prior:
                m0, s0, lo, hi = self.prior[kind]
                if s0 > 0:  # normal prior x normal likelihood, in log space
                    prec = 1.0 / (s0 * s0) + 1.0 / var
                    mu, var = (m0 / (s0 * s0) + mu / var) / prec, 1.0 / prec
                else:
                    mu, var = m0, 0.0
            hit = memo[key] = (mu, math.sqrt(var), lo, hi)
        return hit

    def _drawn_work(self, ids: list[int], est: list[float], done: np.ndarray, kinds: list[int],
                    rng: np.random.Generator) -> dict[int, float]:
        """Each job's work: min(max(exp(mu + sd * z), lo), hi) for standard normals z drawn in
        turn from `rng`, again (up to 16 draws) while it does not exceed the job's work done `d`;
        d + max(0.05 d, 60) when none does. Every job draws once at least, so the first len(ids)
        normals are drawn as one array (the same numbers as one at a time), the rest one at a time
        as they are needed: `rng` ends where drawing one at a time leaves it."""
        out: dict[int, float] = {}
        z = rng.standard_normal(len(ids)).tolist()
        pos, drawn = 0, len(z)
        exp, normal = math.exp, rng.standard_normal
        memo = self.__dict__.setdefault("_posteriors", {})
        for j, e, d, kind in zip(ids, est, done.tolist(), kinds):
            params = memo.get((e, kind))
            mu, sd, lo, hi = self._posterior(e, kind) if params is None else params
            w = None
            for _ in range(16):  # rejection: the job has already done d, so its work exceeds d
                if pos < drawn:
                    v = z[pos]
                else:
                    v = normal()
                pos += 1
                x = min(max(exp(mu + sd * v), lo), hi)
                if x > d:
                    w = x
                    break
            out[j] = w if w is not None else d + max(0.05 * d, 60.0)
        return out

    def draw(self, state: ClusterState, sample: int, horizon_end: float, rng: np.random.Generator) -> list[Job] | JobSlice:
        """Jobs arriving after now (up to `horizon_end`), in order, their ids not read (what
        Simulator.native_world takes): for a generator, a slice of the sample's fresh draw."""
        if self._fresh is None:
            return self._bootstrap(state, horizon_end, rng)
        times = self._fresh_times[sample]
        return JobSlice(self._fresh[sample], bisect.bisect_right(times, state.now),  # now < arrival <= horizon_end
                        bisect.bisect_right(times, horizon_end))

    def future(self, state: ClusterState, sample: int, horizon_end: float, rng: np.random.Generator) -> list[Job]:
        """`draw`'s jobs with ids from the arrived count on (what Simulator.fork takes)."""
        first_id = len(state.num_gpus)
        drawn = self.draw(state, sample, horizon_end, rng)
        if not isinstance(drawn, JobSlice):
            return [dataclasses.replace(j, job_id=first_id + i) for i, j in enumerate(drawn)]
        lo, hi = drawn.lo, drawn.hi
        if self._renumbered_for != first_id:  # a job arrived: the renumbered lists of the last ones are stale
            self._renumbered.clear()
            self._renumbered_for = first_id
        key = (sample, lo, hi)
        hit = self._renumbered.get(key)
        if hit is None:
            hit = self._renumbered[key] = [dataclasses.replace(j, job_id=first_id + i)
                                           for i, j in enumerate(self._fresh[sample][lo:hi])]
        return hit

    def _bootstrap(self, state: ClusterState, horizon_end: float, rng: np.random.Generator) -> list[Job]:
        """A trace's future: Poisson arrivals at the rate seen so far (the past arrivals given to
        `of_past`, else the arrivals of the state's jobs), each a copy of one of the state's jobs
        (its known fields), its work drawn from its estimate."""
        n, now = len(state.num_gpus), state.now
        times = state.arrival_s if self.past_arrivals_s is None else self.past_arrivals_s
        if n == 0 or len(times) == 0 or now <= 0 or not math.isfinite(horizon_end):
            return []
        rate = len(times) / max(now - float(times[0]), 1.0)
        out, t = [], now
        while True:
            t += rng.exponential(1.0 / rate)
            if t > horizon_end:
                return out
            j = int(rng.integers(n))
            est = float(state.estimate_s[j])
            work = est if self.noise == 0.0 else max(est * math.exp(-self.noise * rng.standard_normal()), 1.0)
            out.append(Job(
                job_id=0, arrival_s=round(t, 3), kind=JobKind(int(state.kind[j])), gpus=int(state.num_gpus[j]),
                tp_degree=int(state.tp_degree[j]), mem_per_gpu_gb=float(state.mem_per_gpu_gb[j]), work_s=round(work, 1),
                estimate_s=est, comm_fraction=float(state.comm_fraction[j]), tp_comm_share=float(state.tp_comm_share[j]),
                priority=int(state.priority[j]), preemptible=bool(state.preemptible[j]),
                checkpoint_s=float(state.checkpoint_s[j]), restore_s=float(state.restore_s[j]),
                segment_gpus=state.segment_of(j),
            ))


def unfinished_ids(state: ClusterState) -> np.ndarray:
    """Arrived jobs that have not finished: queued, running, checkpointing or reserved."""
    parts = [np.asarray(state.queue), np.asarray(state.running), np.asarray(state.checkpointing, dtype=np.int64),
             np.asarray(state.reserved, dtype=np.int64)]
    return np.unique(np.concatenate(parts).astype(np.int64))


# ---------------------------------------------------------------- the policy


class SearchTimeout(TimeoutError):
    """A search that ran past `Lookahead.deadline`; no decision was taken."""


@dataclass
class LookaheadStats:
    decisions: int = 0  # decisions taken
    searched: int = 0  # decisions where more than one candidate was simulated
    rollouts: int = 0
    changed: int = 0  # decisions where it left the base rule's choice
    changed_to_preempt: int = 0
    changed_to_wait: int = 0
    confirm_checked: int = 0  # departures put to the confirming samples (LookaheadConfig.confirm_samples)
    confirm_rejected: int = 0  # of those, the ones that did not hold: the base rule's choice was kept
    search_s: float = 0.0


class Lookahead:
    """The lookahead policy on one simulator (`clairvoyant=True`: the oracle bound)."""

    def __init__(self, sim: Simulator, spec: WorkloadSpec | None, config: LookaheadConfig, objective: Objective,
                 queue_window: int, clairvoyant: bool, seed: int, sampler: FutureSampler | None = None):
        self.sim, self.config, self.objective = sim, config, objective
        self.queue_window, self.clairvoyant = queue_window, clairvoyant
        self.base = make_baseline(config.base, seed=seed)
        self.samples = 1 if clairvoyant else config.samples
        self.confirm = 0 if clairvoyant else config.confirm_samples
        if not clairvoyant and sampler is None:
            sampler = FutureSampler(spec, sim.cluster, seed, self.samples + self.confirm)
        self.sampler = None if clairvoyant else sampler
        self.rng = np.random.default_rng([seed, 0x100C])
        self.stats = LookaheadStats()
        # The last decision's search: (candidate indices, mean cost difference to the base rule's
        # choice over the sampled futures), or None where nothing was searched.
        self.last_search: tuple[list[int], np.ndarray] | None = None
        # time.perf_counter() past which a search gives up (SearchTimeout) between rollouts; None: never
        self.deadline: float | None = None

    def _rollout(self, world: Simulator, native: NativeWorld | None, cset: CandidateSet, action: int,
                 horizon_end: float) -> float:
        """The cost of candidate `action` in `world` (a sampled future, or the truth for the
        oracle, left unchanged): the option, then the base rule to the horizon. With `native`
        (the world's copy in the core) the whole rollout is one native call; else the Python loop
        on a fork of the world."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise SearchTimeout("the search ran past its time budget")
        if native is not None:
            first = _native_first(cset, action)
            if first is None:
                raise ValueError(f"action {action} is not a valid candidate")
            return self._cost(native.rollout_sect(self.queue_window, horizon_end, *first), horizon_end)
        return self._python_rollout(world.fork(), cset, action, horizon_end)

    def _costs(self, world: Simulator, native: NativeWorld | None, cset: CandidateSet, actions: list[int],
               horizon_end: float) -> np.ndarray:
        """`_rollout`'s cost of each of `actions` in one world; with `native`, all of them in one
        native call (NativeWorld.costs: the rollouts and their costs in the core, bit for bit
        `_rollout`'s), the time budget checked before it."""
        if native is None:
            return np.array([self._rollout(world, native, cset, action, horizon_end) for action in actions])
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise SearchTimeout("the search ran past its time budget")
        firsts = []
        for action in actions:
            first = _native_first(cset, action)
            if first is None:
                raise ValueError(f"action {action} is not a valid candidate")
            firsts.append(first)
        return native.costs(self.queue_window, horizon_end, firsts, self.objective)

    def _python_rollout(self, fork: Simulator, cset: CandidateSet, action: int, horizon_end: float) -> float:
        """The rollout of `_rollout` in Python on `fork` (changed): the reference of the native one."""
        base, q, las = self.base.select, self.queue_window, self.base.preempt_las
        while True:  # apply, then on to the base rule's next decision until the horizon
            if action != cset.wait_index and not fork.done and fork.now < horizon_end:
                # only WAIT moves time or ends the episode: test first, then apply and advance together
                nxt = decide(fork, cset, action, q, until=horizon_end, preempt_las=las)
            else:
                apply_candidate(fork, cset, action)
                if fork.done or not fork.now < horizon_end:
                    break
                nxt = advance_to_decision(fork, q, until=horizon_end, preempt_las=las)
            if nxt is None or fork.done:
                break
            cset, action = nxt, base(nxt.state, nxt)
        if math.isfinite(horizon_end) and not fork.done and fork.now < horizon_end:
            fork.advance_until(horizon_end)
        return self._cost(fork, horizon_end)

    def _cost(self, sim: Simulator | RolloutOutcome, horizon_end: float) -> float:
        """A rollout's cost from where it stopped: the objective so far and, short of the
        workload's end at a finite horizon, the terminal cost."""
        if math.isfinite(horizon_end) and not sim.done:
            return objective_total(sim, self.objective) + terminal_cost(sim, self.objective)
        return objective_total(sim, self.objective)

    def _world(self, state: ClusterState, sample: int, horizon_end: float) -> tuple[Simulator | None, NativeWorld | None]:
        """Future `sample`'s world: the truth for the oracle, else this simulator with sampled
        work for the unfinished jobs and sampled arrivals; as a Simulator (a fork, or the live
        one for the oracle) and, where the rollouts are native, as the core's copy (for a sample,
        made directly: then no Simulator, None). Every option's rollout starts from it (a plain
        fork, or a copy of its arrays in the core, continues bit for bit as it would), so the
        sample is made once per sample, not once per option."""
        native = NATIVE_ROLLOUTS and _jit.ENABLED and self.base.name == "sect" and not self.base.preempt_las
        if self.clairvoyant:
            return self.sim, self.sim.native_world() if native else None
        work = self.sampler.work(state, unfinished_ids(state), self.rng)
        if native:  # the sample's world made in the core directly, no Simulator for it
            return None, self.sim.native_world(work=work, future_jobs=self.sampler.draw(state, sample, horizon_end, self.rng))
        future = self.sampler.future(state, sample, horizon_end, self.rng)
        return self.sim.fork(work=work, future_jobs=future), None

    def _departs(self, diff: np.ndarray, scale: float) -> bool:
        """The honest lookahead's test for leaving the base rule's choice, on the paired cost
        differences `diff` of one option over the sampled futures: a mean gain beyond one
        standard error and above `min_gain` of the base choice's cost-to-go `scale`."""
        m = float(diff.mean())
        se = float(diff.std(ddof=1)) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
        return m + se < 0 and -m > self.config.min_gain * scale

    def _confirmed(self, state: ClusterState, cset: CandidateSet, options: list[int], best: int, diff: np.ndarray,
                   scale: float, horizon_end: float) -> int:
        """The departure `options[best]` put to `confirm_samples` more futures (the slots after the
        search's): it stands only if the test holds over all samples, else the base's choice.
        The departure's mean in `last_search` becomes its mean over all samples."""
        extra = np.empty((2, self.confirm))
        for s in range(self.confirm):
            world, native = self._world(state, self.samples + s, horizon_end)
            extra[:, s] = self._costs(world, native, cset, [options[0], options[best]], horizon_end)
        self.stats.rollouts += extra.size
        self.stats.confirm_checked += 1
        both = np.concatenate([diff, extra[1] - extra[0]])
        self.last_search[1][best] = both.mean()
        if self._departs(both, scale):
            return options[best]
        self.stats.confirm_rejected += 1
        return options[0]

    def select(self, state: ClusterState, cset: CandidateSet) -> int:
        cfg, sim = self.config, self.sim
        b = self.base.select(state, cset)
        self.stats.decisions += 1
        options = shortlist(state, cset, b, cfg.k, cfg.preempt_k)
        self.last_search = None
        if len(options) == 1:
            return b
        t0 = time.perf_counter()
        horizon_end = sim.now + cfg.horizon_s
        costs = np.empty((len(options), self.samples))
        for s in range(self.samples):
            world, native = self._world(state, s, horizon_end)
            costs[:, s] = self._costs(world, native, cset, options, horizon_end)
        self.stats.searched += 1
        self.stats.rollouts += costs.size
        diff = costs - costs[0]  # against the base rule's choice (options[0]), paired per sample
        mean = diff.mean(axis=1)
        self.last_search = (options, mean)
        best = int(np.argmin(mean))
        choice = b
        if mean[best] < 0:
            if self.clairvoyant:
                choice = options[best]
            else:
                scale = abs(costs[0].mean() - objective_total(sim, self.objective))
                if self._departs(diff[best], scale):
                    choice = options[best]
                    if self.confirm:
                        choice = self._confirmed(state, cset, options, best, diff[best], scale, horizon_end)
        if choice != b:
            self.stats.changed += 1
            if choice == cset.wait_index:
                self.stats.changed_to_wait += 1
            elif cset.candidates[choice].rule in PREEMPT_RULES:
                self.stats.changed_to_preempt += 1
        self.stats.search_s += time.perf_counter() - t0
        return choice


def run_lookahead(name: str, cluster: Cluster, spec: WorkloadSpec, jobs: list[Job], seed: int, config: LookaheadConfig,
                  objective: Objective, queue_window: int = 8, max_checkpoint_s: float = 60.0,
                  wait_guard: WaitGuard | None = None) -> tuple[Simulator, int, LookaheadStats]:
    """`lookahead` or `lookahead-oracle` on one workload: the finished simulator, the number of
    decisions and the search statistics. `wait_guard` bounds WAIT at its own decisions (the
    candidates it searches), not inside the base rule's rollouts."""
    if name not in LOOKAHEAD_POLICIES:
        raise ValueError(f"unknown lookahead policy '{name}' (known: {', '.join(LOOKAHEAD_POLICIES)})")
    sim = Simulator(cluster, jobs, SimConfig(max_checkpoint_s=max_checkpoint_s))
    policy = Lookahead(sim, spec, config, objective, queue_window, clairvoyant=name == "lookahead-oracle", seed=seed)
    # Decisions where its base rule has them (sect: not at moments where preempt-las is the only
    # choice), over every candidate rule, preempt-las included.
    steps, las = 0, policy.base.preempt_las

    def decision() -> CandidateSet | None:
        cset = advance_to_decision(sim, queue_window, preempt_las=las, wait_guard=wait_guard)
        return cset if las or sim.done else build_candidates(sim.decision_state(), queue_window, wait_guard=wait_guard)

    cset = decision()
    while not sim.done:
        apply_candidate(sim, cset, policy.select(cset.state, cset))
        steps += 1
        cset = decision()
    return sim, steps, policy.stats


# ---------------------------------------------------------------- the planner on a decision state


def _arrival_order(state: ClusterState, ids: np.ndarray) -> list[int]:
    """Job indices `ids` by arrival, ties by the job's external id: the same order whichever way
    the state was made (a simulator's view, whose indices are arrival order, or plain data)."""
    def key(j: int):
        name = state.name_of(j)
        return (float(state.arrival_s[j]), isinstance(name, str), name)
    return sorted(ids.tolist(), key=key)


def time_origin(state: ClusterState) -> float:
    """Where the planner's simulator starts its clock for `state`: whole days before the state's
    oldest time (its live jobs' arrivals, its past arrivals, now), less one day; 0 for a state
    within its first two days. A state whose clock is in Unix seconds (a Kubernetes watch's: about
    1.8e9 s, where one float step is 2.4e-7 s) would give a simulator whose events cannot resolve
    a job's last tenth of a microsecond (the finish test's slack is 1e-7 s: an event loop that never
    advances) and whose integrals from time 0 drown the changes a lookahead compares. A whole
    number of days subtracted from a time at most twice as large (a clock in Unix seconds) is
    exact."""
    live = unfinished_ids(state)
    first = min([float(state.now), *np.asarray(state.arrival_s)[live].tolist(), *np.asarray(state.arrival_times_s)[:1].tolist()])
    days = math.floor(first / 86400.0) - 1
    return days * 86400.0 if days > 0 else 0.0


def simulator_from_state(state: ClusterState, max_checkpoint_s: float = 60.0, origin: float = 0.0) -> tuple[Simulator, list[int]]:
    """A simulator standing where `state` stands, for the lookahead to fork: its jobs are the
    state's live ones (queued, running, checkpointing, reserved), ids in order of arrival (ties
    by external id), and `order[id]` is the job's index in `state`. Everything a scheduler knows
    is carried over: placements, FIFO queue order, work done, restore owed, checkpoint ends,
    waits, attained service and preemptions; rates follow from the placements under the state's
    speed model. A job's true work is unknown, so it is max(estimate, work done + 1 s) here; the
    lookahead's forks replace it by sampled work. The integrals (JCT so far, energy,
    preemption cost) count from the jobs' arrivals with the cluster idle before now, so only
    their changes from now on mean anything.

    `origin` (`time_origin`): the state's time the simulator's clock starts from (every time of
    the state less it).

    A reserved job waits for the checkpointing jobs whose GPUs it holds (they are its victims);
    one that overlaps none starts at once (a simulator starts a reservation as soon as its GPUs
    are free). Raises ValueError (naming the job) for a state no simulator can stand in: a
    checkpointing job that is no reserved job's victim, or a victim the reserved job may not
    preempt."""
    order = _arrival_order(state, unfinished_ids(state))
    now = float(state.now) - origin
    jobs = []
    for k, j in enumerate(order):
        est, done = float(state.estimate_s[j]), float(state.work_done_s[j])
        jobs.append(Job(job_id=k, arrival_s=float(state.arrival_s[j]) - origin, kind=JobKind(int(state.kind[j])),
                        gpus=int(state.num_gpus[j]), tp_degree=int(state.tp_degree[j]),
                        mem_per_gpu_gb=float(state.mem_per_gpu_gb[j]), work_s=max(est, done + 1.0), estimate_s=est,
                        comm_fraction=float(state.comm_fraction[j]), tp_comm_share=float(state.tp_comm_share[j]),
                        priority=int(state.priority[j]), preemptible=bool(state.preemptible[j]),
                        checkpoint_s=float(state.checkpoint_s[j]), restore_s=float(state.restore_s[j]),
                        segment_gpus=state.segment_of(j)))
    sim = Simulator(state.cluster, jobs, SimConfig(speed_model=state.speed_model, max_checkpoint_s=max_checkpoint_s))
    while sim.now < now or sim.num_arrived < len(jobs):  # every job arrives, queued, by now
        sim.advance_until(now)
    sim_id = {j: k for k, j in enumerate(order)}
    name = state.name_of
    for k, j in enumerate(order):  # what each job has done, before the queue orders by it
        sim.work_done[k] = state.work_done_s[j]
        sim.work_left[k] = sim.work_total[k] - sim.work_done[k]
        sim.needs_restore[k] = state.needs_restore[j]
        if state.preemptions[j] > 0 or state.attained_gpu_s[j] > 0:  # it has started before
            sim.first_start[k] = min(float(state.arrival_s[j] + state.wait_s[j]) - origin, now)
    checkpointing = [int(j) for j in state.checkpointing]
    for j in checkpointing + [int(j) for j in state.running]:  # the victims run until the reservations preempt them
        sim.start(sim_id[j], state.placement[j])
    victims_of = {}
    for r in state.reserved:
        held = set(state.placement[r].tolist())
        victims_of[int(r)] = [v for v in checkpointing if held & set(state.placement[v].tolist())]
    unclaimed = set(checkpointing) - {v for vs in victims_of.values() for v in vs}
    if unclaimed:
        raise ValueError(f"checkpointing job {name(min(unclaimed))!r} holds no GPU of a reserved job: "
                         "a preempted job checkpoints for the reservation that preempted it")
    for r, victims in victims_of.items():
        try:
            if victims:
                sim.preempt_and_start(sim_id[r], state.placement[r], [sim_id[v] for v in victims])
            else:
                sim.start(sim_id[r], state.placement[r])
        except SchedulingError as e:
            raise ValueError(f"reserved job {name(r)!r}: {e}") from None
    q = sim.job_queue
    for j in state.queue.tolist():  # the state's FIFO order, remaining estimates from the work done
        q.remove(sim_id[j])
        q.push(sim_id[j], float(sim.remaining_estimate_s(sim_id[j])))
    for k, j in enumerate(order):
        sim.wait_s[k] = state.wait_s[j]
        sim.attained_gpu_s[k] = state.attained_gpu_s[j]
        sim.preemptions[k] = state.preemptions[j]
        if not math.isnan(state.queued_since_s[j]):
            sim.queued_since[k] = state.queued_since_s[j] - origin
        if math.isfinite(state.checkpoint_end_s[j]):
            sim.checkpoint_end[k] = state.checkpoint_end_s[j] - origin
        if state.restore_left_s[j] > 0:
            sim.overhead_left[k] = state.restore_left_s[j]
            sim._restoring.add(k)
    sim._num_needs_restore = int(sim.needs_restore.sum())
    sim.version += 1
    return sim, order


class StatePlanner:
    """The honest lookahead on a decision state alone, as a service runs it: no simulator, no
    workload spec. Each decision builds a simulator from the state (`simulator_from_state`),
    samples every live job's true work from its estimate and its work done (lognormal sigma
    `estimate_noise`) and the arrivals to come by resampling what the state saw: its live jobs'
    shapes, at the rate of its past arrivals of the last `ARRIVAL_HISTORY_S` (what
    `ClusterState.to_dict` sends). Nothing after now is read. The same state, seed and settings
    give the same decision, whether the state is a simulator's view or came as plain data."""

    def __init__(self, config: LookaheadConfig, objective: Objective, seed: int = 0, estimate_noise: float = 0.5,
                 max_checkpoint_s: float = 60.0, wait_guard: WaitGuard | None = None, budget_s: float = math.inf,
                 scenario: str | None = None):
        self.config, self.objective, self.seed = config, objective, seed
        self.estimate_noise, self.max_checkpoint_s = estimate_noise, max_checkpoint_s
        self.wait_guard, self.budget_s = wait_guard, budget_s
        self.scenario = scenario  # the scenario its settings came from, if any (reported by `describe`)
        self.stats = LookaheadStats()  # summed over decisions
        # The last decision's search as `Lookahead.last_search` has it, its options as indices into
        # the caller's candidate set; None where nothing was searched.
        self.last_search: tuple[list[int], np.ndarray] | None = None

    def describe(self) -> dict:
        """Its settings and its search statistics so far, as plain data (the service's /v1/info)."""
        search = dataclasses.asdict(self.config)
        search["horizon_s"] = search["horizon_s"] if math.isfinite(search["horizon_s"]) else None  # None: no horizon
        return {"scenario": self.scenario, "search": search, "objective": self.objective.to_dict(),
                "seed": self.seed, "estimate_noise": self.estimate_noise, "max_checkpoint_s": self.max_checkpoint_s,
                "budget_s": self.budget_s if math.isfinite(self.budget_s) else None, "stats": dataclasses.asdict(self.stats)}

    def sampler(self, state: ClusterState, origin: float = 0.0) -> FutureSampler:
        """The sampler of a decision on `state`: its past arrivals of the last ARRIVAL_HISTORY_S,
        on the clock of the simulator that starts at `origin` (`time_origin`)."""
        times = np.asarray(state.arrival_times_s, dtype=float)
        lo = bisect.bisect_right(times.tolist(), state.now - ARRIVAL_HISTORY_S)
        return FutureSampler.of_past(self.estimate_noise, times[lo:] - origin)

    def choose(self, state: ClusterState, cset: CandidateSet, restrict: np.ndarray | None = None) -> int:
        """The planner's choice among `cset`'s valid candidates (within `restrict` when given):
        an index into `cset`. Raises SearchTimeout past `budget_s`, ValueError for a state no
        simulator can stand in for."""
        t0 = time.perf_counter()
        origin = time_origin(state)
        sim, order = simulator_from_state(state, self.max_checkpoint_s, origin)
        queue_window = (len(cset.candidates) - 1) // len(RULES)
        own = build_candidates(sim.decision_state(), queue_window, wait_guard=self.wait_guard)
        index = {_outcome(lambda k: state.name_of(order[k]), cd): i for i, cd in enumerate(own.candidates) if own.mask[i]}
        valid = cset.mask if restrict is None else cset.mask & restrict
        mine = {}
        for i in np.flatnonzero(cset.mask).tolist():
            key = _outcome(state.name_of, cset.candidates[i])
            if key not in index:
                raise ValueError(f"candidate {i} ({key}) is not offered on the state rebuilt as a simulator")
            mine[index[key]] = i
        if len(mine) != len(index):
            raise ValueError("the state rebuilt as a simulator offers candidates the state does not")
        mask = np.zeros(len(own.candidates), dtype=bool)
        mask[[k for k, i in mine.items() if valid[i]]] = True
        view = CandidateSet(own.state, own.window, own.candidates, mask)
        policy = Lookahead(sim, None, self.config, self.objective, queue_window, clairvoyant=False, seed=self.seed,
                           sampler=self.sampler(state, origin))
        policy.deadline = t0 + self.budget_s
        choice = mine[policy.select(view.state, view)]
        searched = policy.last_search
        self.last_search = None if searched is None else ([mine[o] for o in searched[0]], searched[1])
        for f in dataclasses.fields(LookaheadStats):
            setattr(self.stats, f.name, getattr(self.stats, f.name) + getattr(policy.stats, f.name))
        return choice


def _outcome(name, cd) -> tuple:
    """What a candidate does, with `name(job index)` the job's external id: its rule, job, GPUs
    and victims (WAIT: ())."""
    if cd.rule == -1:
        return ()
    return (cd.rule, name(cd.job_id), tuple(cd.gpus.tolist()), tuple(sorted(str(name(v)) for v in cd.victims)))
