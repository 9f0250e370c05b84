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

Both need the simulator, so they are not baselines (those act on the decision state only);
they run through `run_lookahead`. Cost: candidates x samples rollouts per decision, each a
simulation of up to `horizon_s` of the future (`benchmarks.leaderboard` prints it per decision).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from baselines import make_baseline
from envs.candidates import CandidateSet, WaitGuard, apply_candidate, build_candidates
from envs.features import predicted_rate
from envs.jobs import Job, JobKind
from envs.objective import Objective, objective_total
from envs.placement import PREEMPT_RULES, RULES
from envs.replay import advance_to_decision, decide
from envs.scenario import LookaheadConfig
from envs.simulator import SimConfig, Simulator
from envs.state import ClusterState
from envs.topology import Cluster
from envs.workload import WorkloadSpec, generate

LOOKAHEAD_POLICIES = ("lookahead", "lookahead-oracle")
_FUTURE_SEED_BASE = 2**40  # fresh workload draws for sampled futures: far from every episode seed


def terminal_cost(sim: Simulator, objective: Objective) -> float:
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


class FutureSampler:
    """Draws what a scheduler does not know from what it does: each arrived, unfinished job's
    true work (given its estimate and its work done) and the jobs still to arrive. Reads only
    the decision state and the workload's spec; the simulator's truth never enters a sample."""

    def __init__(self, spec: WorkloadSpec, cluster: Cluster, episode_seed: int, samples: int):
        self.spec, self.cluster = spec, cluster
        self.noise = float(spec.trace.get("estimate_noise", 0.5)) if spec.trace is not None else float(spec.estimate_noise)
        if spec.trace is None and spec.durations_known:
            self.noise = 0.0
        # Per kind: (log median, sigma, min, max) of the generator's runtime prior (None for traces).
        self.prior = None
        if spec.trace is None:
            self.prior = {int(k): (math.log(p.work_median_s), p.work_sigma, p.work_min_s, p.work_max_s) for k, p in spec.kinds.items()}
        # Fresh draws of the generator, one per sample slot, made once per episode (never this
        # episode's own workload: a different seed stream).
        self._fresh: list[list[Job]] | None = None
        if spec.trace is None:
            self._fresh = [generate(spec, cluster, _FUTURE_SEED_BASE + episode_seed * 1024 + s) for s in range(samples)]

    def work(self, state: ClusterState, ids: np.ndarray, rng: np.random.Generator) -> dict[int, float]:
        """A draw of the true work of jobs `ids` (arrived, unfinished)."""
        out = {}
        est = state.estimate_s[ids]
        done = state.work_done_s[ids]
        kinds = state.kind[ids]
        sigma = self.noise
        for j, e, d, kind in zip(ids.tolist(), est.tolist(), done.tolist(), kinds.tolist()):
            if sigma == 0.0:
                out[j] = max(e, d + 1.0)
                continue
            mu, var, lo, hi = math.log(e), sigma * sigma, 1.0, math.inf
            if self.prior is not None and kind in self.prior:
                m0, s0, lo, hi = self.prior[kind]
                if s0 > 0:  # normal prior x normal likelihood, in log space
                    prec = 1.0 / (s0 * s0) + 1.0 / var
                    mu, var = (m0 / (s0 * s0) + mu / var) / prec, 1.0 / prec
                else:
                    mu, var = m0, 0.0
            w = None
            for _ in range(16):  # rejection: the job has already done d, so its work exceeds d
                x = min(max(math.exp(mu + math.sqrt(var) * rng.standard_normal()), lo), hi)
                if x > d:
                    w = x
                    break
            out[j] = w if w is not None else d + max(0.05 * d, 60.0)
        return out

    def future(self, state: ClusterState, sample: int, horizon_end: float, rng: np.random.Generator) -> list[Job]:
        """Jobs arriving after now (up to `horizon_end`), ids from the arrived count on."""
        now, first_id = state.now, len(state.num_gpus)
        if self._fresh is not None:
            drawn = [j for j in self._fresh[sample] if now < j.arrival_s <= horizon_end]
        else:
            drawn = self._bootstrap(state, horizon_end, rng)
        return [dataclasses.replace(j, job_id=first_id + i) for i, j in enumerate(drawn)]

    def _bootstrap(self, state: ClusterState, horizon_end: float, rng: np.random.Generator) -> list[Job]:
        """A trace's future: Poisson arrivals at the rate seen so far, each a copy of a job seen
        so far (its known fields), its work drawn from its estimate."""
        n, now = len(state.num_gpus), state.now
        if n == 0 or now <= 0 or not math.isfinite(horizon_end):
            return []
        rate = n / max(now - float(state.arrival_s[0]), 1.0)
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
            ))


def unfinished_ids(state: ClusterState) -> np.ndarray:
    """Arrived jobs that have not finished: queued, running, checkpointing or reserved."""
    parts = [np.asarray(state.queue), np.asarray(state.running), np.asarray(state.checkpointing, dtype=np.int64),
             np.asarray(state.reserved, dtype=np.int64)]
    return np.unique(np.concatenate(parts).astype(np.int64))


# ---------------------------------------------------------------- the policy


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

    def __init__(self, sim: Simulator, spec: WorkloadSpec, config: LookaheadConfig, objective: Objective,
                 queue_window: int, clairvoyant: bool, seed: int):
        self.sim, self.config, self.objective = sim, config, objective
        self.queue_window, self.clairvoyant = queue_window, clairvoyant
        self.base = make_baseline(config.base, seed=seed)
        self.samples = 1 if clairvoyant else config.samples
        self.confirm = 0 if clairvoyant else config.confirm_samples
        self.sampler = None if clairvoyant else FutureSampler(spec, sim.cluster, seed, self.samples + self.confirm)
        self.rng = np.random.default_rng([seed, 0x100C])
        self.stats = LookaheadStats()
        # The last decision's search: (candidate indices, mean cost difference to the base rule's
        # choice over the sampled futures), or None where nothing was searched.
        self.last_search: tuple[list[int], np.ndarray] | None = None

    def _rollout(self, fork: Simulator, cset: CandidateSet, action: int, horizon_end: float) -> float:
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
        if math.isfinite(horizon_end) and not fork.done:
            if fork.now < horizon_end:
                fork.advance_until(horizon_end)
            return objective_total(fork, self.objective) + terminal_cost(fork, self.objective)
        return objective_total(fork, self.objective)

    def _futures(self, state: ClusterState, sample: int, horizon_end: float):
        """A maker of forks of the simulator for future `sample`: the truth for the oracle, else
        sampled work for the unfinished jobs and sampled arrivals."""
        if self.clairvoyant:
            return self.sim.fork
        work = self.sampler.work(state, unfinished_ids(state), self.rng)
        future = self.sampler.future(state, sample, horizon_end, self.rng)
        return lambda: self.sim.fork(work=work, future_jobs=future)

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
            make = self._futures(state, self.samples + s, horizon_end)
            for o, action in enumerate((options[0], options[best])):
                extra[o, s] = self._rollout(make(), cset, action, horizon_end)
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
            make = self._futures(state, s, horizon_end)
            for o, action in enumerate(options):
                costs[o, s] = self._rollout(make(), cset, action, horizon_end)
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
