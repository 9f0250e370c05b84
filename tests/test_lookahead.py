"""The lookahead policies: the oracle never loses to its base with the full horizon, the honest
lookahead decides from what a scheduler knows only, and its sampled futures are sane."""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

import numpy as np
import pytest

from agents.evaluation import run_baseline
from agents.lookahead import FutureSampler, Lookahead, run_lookahead, shortlist, unfinished_ids
from baselines import make_baseline
from envs.cluster.config import load_cluster
from envs.decision.candidates import apply_candidate
from envs.scenario import LookaheadConfig, load_scenario
from envs.sim.metrics import episode_metrics
from envs.sim.objective import Objective, objective_total
from envs.sim.replay import advance_to_decision, replay
from envs.sim.simulator import SimConfig, Simulator
from envs.workload.generator import load_workload_spec, make_workload
from tests.helpers import history, needs_compiled, seen_until

FULL = LookaheadConfig(k=3, preempt_k=2, samples=1, horizon_s=math.inf)


@pytest.mark.parametrize("scenario", ["default", "slo-preempt"])
def test_oracle_with_full_horizon_is_never_worse_than_its_base(scenario):
    """The rollout improvement property: the base's own choice is always simulated, every
    rollout is exact (the oracle forks the true simulator), so the objective never gets worse."""
    sc = load_scenario(scenario)
    cluster, spec = load_cluster(sc.cluster), load_workload_spec(sc.workload)
    gains = []
    for seed in range(3):
        jobs = make_workload(spec, cluster, seed, num_jobs=40)
        base_sim, _ = run_baseline("sect", cluster, spec, seed, num_jobs=40, config=SimConfig(max_checkpoint_s=sc.max_checkpoint_s))
        base = episode_metrics(base_sim, sc.objective)["objective"]
        sim, _, stats = run_lookahead("lookahead-oracle", cluster, spec, jobs, seed, FULL, sc.objective)
        got = episode_metrics(sim, sc.objective)["objective"]
        assert got <= base * (1 + 1e-9), f"seed {seed}: oracle {got} worse than sect {base}"
        assert stats.searched > 0
        gains.append(base - got)
    assert max(gains) > 0, "the oracle never improved on its base: the search is not searching"


def test_oracle_sees_the_truth_and_the_honest_lookahead_does_not():
    """Twin workloads that a scheduler cannot tell apart until a moment (same arrivals and
    estimates; different true work for every job and different later arrivals): the honest
    lookahead takes identical decisions until the first real divergence, while the oracle,
    which forks the true simulator, does not."""
    cluster, spec = load_cluster("mixed-64gpu"), load_workload_spec("llm-mix")
    config = LookaheadConfig(k=2, preempt_k=1, samples=2, horizon_s=3 * 3600.0)
    objective = Objective()
    compared, oracle_differs = 0, 0
    for seed in range(4):
        jobs = make_workload(spec, cluster, seed, num_jobs=40)
        twin = seen_until(jobs, jobs[20].arrival_s, make_workload(spec, cluster, seed + 1000, num_jobs=40), seed)
        for clairvoyant in (False, True):
            sims = [Simulator(cluster, w) for w in (jobs, twin)]
            pols = [Lookahead(s, spec, config, objective, 8, clairvoyant=clairvoyant, seed=seed) for s in sims]
            csets = [advance_to_decision(s, 8) for s in sims]
            while not sims[0].done and history(sims[0]) == history(sims[1]):
                actions = [p.select(c.state, c) for p, c in zip(pols, csets)]
                if clairvoyant:
                    oracle_differs += actions[0] != actions[1]
                else:
                    assert actions[0] == actions[1], f"seed {seed} t={sims[0].now}: the honest lookahead saw the truth"
                    compared += 1
                for s, c in zip(sims, csets):
                    apply_candidate(s, c, actions[0])
                csets = [advance_to_decision(s, 8) for s in sims]
    assert compared >= 20, f"only {compared} decisions compared before the twins diverged"
    assert oracle_differs > 0, "the oracle decided as if blind: this test could not catch a leak"


def test_sampled_work_respects_the_work_done_and_the_estimate():
    """Each arrived, unfinished job's sampled work exceeds its work done, and for a generated
    workload it is the posterior of docs/scenarios.md: the kind's lognormal runtime prior (log
    median m0, sigma s0) times the estimate's lognormal likelihood (log e, sigma = the workload's
    estimate noise), clipped to the kind's [min, max] and truncated above the work done d. The
    median of the draws is checked against that posterior's median worked out here, job by job,
    tightly enough that the prior alone (the estimate ignored) or the estimate alone would fail."""
    cluster, spec = load_cluster("mixed-64gpu"), load_workload_spec("llm-mix")
    sim = Simulator(cluster, make_workload(spec, cluster, 0, num_jobs=60))
    replay(sim, make_baseline("sect").select, 8, max_steps=40)
    state = sim.decision_state()
    ids = unfinished_ids(state)
    assert len(ids) and set(ids.tolist()) >= set(state.running.tolist())
    sampler = FutureSampler(spec, cluster, 0, 2)
    rng = np.random.default_rng(0)
    n = 1000
    draws = [sampler.work(state, ids, rng) for _ in range(n)]
    for j in ids.tolist():
        w = np.array([d[j] for d in draws])
        assert (w > state.work_done_s[j]).all(), f"job {j}: a sampled work below the work already done"
    # The posterior by hand. llm-mix's estimates are off by a lognormal factor of sigma 0.5.
    assert spec.estimate_noise == 0.5 and not spec.durations_known
    sigma = 0.5

    def median_above(mu: float, sd: float, d: float, lo: float, hi: float) -> float | None:
        """The median of exp(N(mu, sd^2)) clipped to [lo, hi], given that it exceeds d: the
        quantile (1 + F(log d)) / 2 (a d below lo rules nothing out). None when F(log d) > 0.75:
        mostly ruled out, where the sampler's bounded rejection falls back to d plus a margin."""
        f = NormalDist(mu, sd).cdf(math.log(d)) if d >= lo else 0.0
        if f > 0.75:
            return None
        return min(max(math.exp(NormalDist(mu, sd).inv_cdf((1 + f) / 2)), lo), hi)

    checked = separated = 0
    for j in ids.tolist():
        e, d = float(state.estimate_s[j]), float(state.work_done_s[j])
        kind = spec.kinds[sim.jobs[j].kind]
        m0, s0, lo, hi = math.log(kind.work_median_s), kind.work_sigma, kind.work_min_s, kind.work_max_s
        # normal prior N(m0, s0^2) x normal likelihood N(log e, sigma^2) in log space
        prec = 1 / s0**2 + 1 / sigma**2
        mu, sd = (m0 / s0**2 + math.log(e) / sigma**2) / prec, math.sqrt(1 / prec)
        expected = median_above(mu, sd, d, lo, hi)
        if expected is None:
            continue
        med = float(np.median([dr[j] for dr in draws]))
        # a sample median of n draws: standard error about 1.2533 sd / sqrt(n) in log space; 4 of them
        tol = 4 * 1.2533 * sd / math.sqrt(n)
        assert abs(math.log(med / expected)) <= tol, (j, med, expected, e, kind.work_median_s)
        checked += 1
        # The prior alone (the estimate ignored) and the estimate alone would put it elsewhere.
        others = [median_above(m0, s0, d, lo, hi), median_above(math.log(e), sigma, d, lo, hi)]
        separated += all(o is None or abs(math.log(o / expected)) > 2 * tol for o in others)
    assert checked >= len(ids) - 3 and separated >= 5, (len(ids), checked, separated)
    # Futures: the fresh draw arrives after now, ids continue the arrived ones.
    future = sampler.future(state, 0, state.now + 6 * 3600.0, rng)
    assert all(f.arrival_s > state.now for f in future)
    assert [f.job_id for f in future] == list(range(len(state.num_gpus), len(state.num_gpus) + len(future)))


def test_shortlist_keeps_the_base_choice_and_one_candidate_per_outcome():
    cluster, spec = load_cluster("mixed-64gpu"), load_workload_spec("llm-mix")
    sim = Simulator(cluster, make_workload(spec, cluster, 1, num_jobs=60))
    cset = advance_to_decision(sim, 8)
    sect = make_baseline("sect")
    for _ in range(25):
        state = sim.decision_state()
        b = make_baseline("topology").select(state, cset)
        options = shortlist(state, cset, b, 2, 1)
        assert options[0] == b and all(cset.mask[i] for i in options)
        outcomes = [("wait",) if i == cset.wait_index else (cset.candidates[i].job_id, tuple(cset.candidates[i].gpus.tolist()))
                    for i in options]
        assert len(set(outcomes)) == len(outcomes)
        apply_candidate(sim, cset, sect.select(state, cset))
        cset = advance_to_decision(sim, 8)


@needs_compiled()
def test_rollout_cost_is_the_objective_of_the_forked_future():
    """A rollout of the base's own choice to the end scores exactly the base's episode."""
    sc = load_scenario("slo-preempt")
    cluster, spec = load_cluster(sc.cluster), load_workload_spec(sc.workload)
    jobs = make_workload(spec, cluster, 2, num_jobs=30)
    sim = Simulator(cluster, jobs, SimConfig(max_checkpoint_s=sc.max_checkpoint_s))
    pol = Lookahead(sim, spec, dataclasses.replace(FULL, k=1), sc.objective, 8, clairvoyant=True, seed=2)
    cset = advance_to_decision(sim, 8)
    b = pol.base.select(cset.state, cset)
    base_sim, _ = run_baseline("sect", cluster, spec, 2, num_jobs=30, config=SimConfig(max_checkpoint_s=sc.max_checkpoint_s))
    for native in (None, sim.native_world()):  # the Python loop on a fork; the core's copy of the world
        cost = pol._rollout(sim, native, cset, b, math.inf)
        assert cost == pytest.approx(objective_total(base_sim, sc.objective), rel=1e-12)
        assert cost / 30 == pytest.approx(episode_metrics(base_sim, sc.objective)["objective"], rel=1e-12)
    assert not sim._spent and sim.num_done == 0  # the world is left as it was


def test_confirming_samples_withdraw_the_departures_that_do_not_hold_over_more_futures():
    """With `confirm_samples`, each departure from the base rule is put to more sampled futures:
    every decision is the base's choice, or a departure that was checked and whose mean gain
    over all the samples is positive; with two search samples some departures are withdrawn."""
    sc = load_scenario("slo-preempt")
    cluster, spec = load_cluster(sc.cluster), load_workload_spec(sc.workload)
    config = dataclasses.replace(sc.lookahead, samples=2, confirm_samples=6)
    confirmed = withdrawn = 0
    for seed in range(2):
        sim = Simulator(cluster, make_workload(spec, cluster, seed, num_jobs=60), SimConfig(max_checkpoint_s=sc.max_checkpoint_s))
        pol = Lookahead(sim, spec, config, sc.objective, sc.queue_window, clairvoyant=False, seed=seed)
        base = make_baseline(config.base, seed=seed)
        cset = advance_to_decision(sim, sc.queue_window, preempt_las=True)
        while not sim.done:
            checked, rejected = pol.stats.confirm_checked, pol.stats.confirm_rejected
            a, b = pol.select(cset.state, cset), base.select(cset.state, cset)
            if pol.stats.confirm_rejected > rejected:
                assert a == b
                withdrawn += 1
            elif pol.stats.confirm_checked > checked:
                options, mean = pol.last_search
                assert a != b and mean[options.index(a)] < 0
                confirmed += 1
            else:
                assert a == b, f"seed {seed} t={sim.now}: a departure that was never confirmed"
            apply_candidate(sim, cset, a)
            cset = advance_to_decision(sim, sc.queue_window, preempt_las=True)
        assert pol.stats.changed == pol.stats.confirm_checked - pol.stats.confirm_rejected
    assert confirmed > 0 and withdrawn > 0, (confirmed, withdrawn)


def test_a_generated_future_is_the_fresh_draws_after_now_renumbered_once_between_arrivals():
    """For a generated workload, sample s's future up to a horizon is the fresh draw's jobs that
    arrive after now and by the horizon, numbered on from the jobs arrived; asked again before a
    job arrives, the same list comes back (a fork reuses the arrays it made from it); once a job
    arrives the list is made anew with the next ids. Forks made twice from the same list run the
    same."""
    cluster, spec = load_cluster("mixed-64gpu"), load_workload_spec("llm-mix")
    sim = Simulator(cluster, make_workload(spec, cluster, 0, num_jobs=60))
    sect = make_baseline("sect")
    replay(sim, sect.select, 8, max_steps=30)
    state = sim.decision_state()
    sampler = FutureSampler(spec, cluster, 0, 2)
    rng = np.random.default_rng(0)
    horizon = state.now + 6 * 3600.0
    future = sampler.future(state, 1, horizon, rng)
    fresh = [j for j in sampler._fresh[1] if state.now < j.arrival_s <= horizon]  # the filter, by hand
    arrived = len(state.num_gpus)
    assert future and [f.job_id for f in future] == list(range(arrived, arrived + len(fresh)))
    assert [dataclasses.replace(f, job_id=0) for f in future] == [dataclasses.replace(j, job_id=0) for j in fresh]
    assert sampler.future(state, 1, horizon, rng) is future
    assert sampler.future(state, 0, horizon, rng) is not future
    a, b = sim.fork(future_jobs=future), sim.fork(future_jobs=future)
    for f in (a, b):
        replay(f, sect.select, 8)
    assert np.array_equal(a.end, b.end) and a.num_jobs == b.num_jobs == arrived + len(future)
    while sim.num_arrived == arrived:  # on to the next arrival
        sim.advance()
    later = sampler.future(sim.decision_state(), 1, horizon, rng)
    assert later and later is not future and later[0].job_id == sim.num_arrived


def test_a_traces_sampled_future_resamples_the_jobs_seen_so_far():
    """For a trace there is no generator: arrivals come at the rate seen so far, each a copy of
    a job seen so far (its known fields only), none before now."""
    cluster, spec = load_cluster("mixed-64gpu"), load_workload_spec("philly-busy-vc")
    sim = Simulator(cluster, make_workload(spec, cluster, 0, num_jobs=120))
    sect = make_baseline("sect")
    replay(sim, sect.select, 8, max_steps=60)
    state = sim.decision_state()
    sampler = FutureSampler(spec, cluster, 0, 2)
    rng = np.random.default_rng(1)
    future = sampler.future(state, 0, state.now + 48 * 3600.0, rng)
    assert future and all(state.now < f.arrival_s <= state.now + 48 * 3600.0 for f in future)
    seen = {(int(g), float(e)) for g, e in zip(state.num_gpus, state.estimate_s)}
    assert all((f.gpus, f.estimate_s) in seen for f in future)
    rate_seen = len(state.num_gpus) / (state.now - float(state.arrival_s[0]))
    assert 0.5 * rate_seen < len(future) / (48 * 3600.0) < 2.0 * rate_seen
    assert sampler.future(state, 0, math.inf, rng) == []  # no horizon: no invented arrivals
    fork = sim.fork(work=sampler.work(state, unfinished_ids(state), rng), future_jobs=future)
    replay(fork, sect.select, 8)  # the sampled world runs to its end
