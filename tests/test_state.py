"""The decision state: a simulator's state and the same state rebuilt from plain data decide
alike; what a scheduler cannot know never reaches a decision; bad plain data is refused with the
field named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baselines import BASELINES, make_baseline
from envs.cluster.config import load_cluster
from envs.decision.candidates import apply_candidate, build_candidates
from envs.decision.features import candidate_features
from envs.decision.state import ClusterState, StateError
from envs.gym.env import GpuClusterEnv
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload
from tests.helpers import history, seen_until


def _decision(state: ClusterState, queue_window: int = 8):
    """Everything a decision is made from, with jobs named by their external ids."""
    cset = build_candidates(state, queue_window)
    feats, glob = candidate_features(cset)
    names = [state.name_of(j) for j in cset.window]
    cands = [(state.name_of(cd.job_id) if cd.job_id >= 0 else None, cd.rule,
              None if cd.gpus is None else cd.gpus.tolist(), [state.name_of(v) for v in cd.victims])
             for cd, ok in zip(cset.candidates, cset.mask) if ok]
    choices = {name: make_baseline(name, seed=7).select(state, cset) for name in BASELINES}
    return names, cset.mask.tolist(), cands, feats, glob, choices


def _assert_same_decision(a, b, where: str) -> None:
    names_a, mask_a, cands_a, feats_a, glob_a, choice_a = a
    names_b, mask_b, cands_b, feats_b, glob_b, choice_b = b
    assert names_a == names_b, where
    assert mask_a == mask_b, where
    assert cands_a == cands_b, where
    np.testing.assert_array_equal(feats_a, feats_b, err_msg=where)
    np.testing.assert_array_equal(glob_a, glob_b, err_msg=where)
    assert choice_a == choice_b, where


@pytest.mark.parametrize("cluster_name, workload, num_jobs", [
    ("mixed-64gpu", "llm-mix-bursty", 120),
    ("h100-4node", "llm-mix", 80),
    ("h100-1024gpu", "llm-mix-large", 150),
])
def test_state_from_plain_data_decides_as_the_simulator(cluster_name, workload, num_jobs):
    """At many moments of several episodes (random legal actions, preemptions included), the
    simulator's state and its plain-data form passed through JSON give identical windows,
    masks, candidates (GPUs and victims), features and every baseline's choice."""
    cluster = load_cluster(cluster_name)
    compared = preempting = 0
    for seed in range(2):
        sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, seed, num_jobs=num_jobs))
        rng = np.random.default_rng(seed)
        cset = advance_to_decision(sim, 8)
        while not sim.done and compared < 150 * (seed + 1):
            state = sim.decision_state()
            rebuilt = ClusterState.from_dict(json.loads(json.dumps(state.to_dict())), cluster)
            _assert_same_decision(_decision(state), _decision(rebuilt), f"{cluster_name} seed {seed} t={sim.now}")
            compared += 1
            preempting += bool(state.checkpointing or state.reserved)
            valid = np.flatnonzero(cset.mask)
            apply_candidate(sim, cset, int(valid[rng.integers(len(valid))]))
            cset = advance_to_decision(sim, 8)
    assert compared >= 150
    if cluster_name == "mixed-64gpu":
        assert preempting > 0, "no state with a preemption in flight was compared"


def test_observation_mask_and_baselines_see_no_true_work_and_no_future_arrivals():
    """Two workloads identical in everything a scheduler can see up to time t (arrivals so far,
    estimates) but with different true work and different future arrivals give identical
    observations, masks and baseline choices until the first moment they really differ (an
    arrival or a completion that happens in one and not the other)."""
    cluster = load_cluster("mixed-64gpu")
    spec = load_workload_spec("llm-mix")
    compared = 0
    for seed in range(6):
        jobs = make_workload(spec, cluster, seed, num_jobs=100)
        for k in (4, 12):  # the moment after which the twin's arrivals differ
            twin = seen_until(jobs, jobs[k].arrival_s, make_workload(spec, cluster, seed + 1000, num_jobs=100), seed)
            envs_ = [GpuClusterEnv(cluster=cluster, workload=w) for w in (jobs, twin)]
            obs = [e.reset(seed=0)[0] for e in envs_]
            sect = make_baseline("sect")
            while history(envs_[0].sim) == history(envs_[1].sim):
                where = f"seed {seed}, cut after job {k}, t={envs_[0].sim.now}"
                for key in obs[0]:
                    np.testing.assert_array_equal(obs[0][key], obs[1][key], err_msg=f"{where}: {key}")
                states = [e.state for e in envs_]
                for name in BASELINES:
                    assert make_baseline(name, seed=3).select(states[0], envs_[0].cset) == \
                        make_baseline(name, seed=3).select(states[1], envs_[1].cset), (where, name)
                compared += 1
                action = sect.select(states[0], envs_[0].cset)
                obs = [e.step(action)[0] for e in envs_]
    assert compared >= 30, f"only {compared} decisions compared before the workloads diverged"


# ---------------------------------------------------------------------- plain data refused


def _state_dict() -> dict:
    cluster = load_cluster("mixed-64gpu")
    sim = Simulator(cluster, make_workload(load_workload_spec("llm-mix"), cluster, 0, num_jobs=60))
    cset = advance_to_decision(sim, 8)
    for _ in range(12):
        apply_candidate(sim, cset, int(np.flatnonzero(cset.mask)[0]))
        cset = advance_to_decision(sim, 8)
    d = sim.decision_state().to_dict()
    assert len(d["running"]) >= 4 and d["queued"]
    return d


def _refused(d: dict) -> str:
    with pytest.raises(StateError) as e:
        ClusterState.from_dict(d, load_cluster("mixed-64gpu"))
    return str(e.value)


def test_bad_plain_data_is_refused_with_the_field_named():
    base = _state_dict()

    def edit(f):
        d = json.loads(json.dumps(base))
        f(d)
        return _refused(d)

    assert edit(lambda d: d["running"][3].__setitem__("gpus", [70] + d["running"][3]["gpus"][1:])) == \
        "running[3].gpus: GPU 70 does not exist on a 64-GPU cluster"
    assert edit(lambda d: d["running"][1].__setitem__("gpus", d["running"][0]["gpus"][:1] + d["running"][1]["gpus"][1:])) \
        .startswith("running[1].gpus: GPU ")
    assert "already held by job" in edit(lambda d: d["running"][1].__setitem__("gpus", d["running"][0]["gpus"][:1] + d["running"][1]["gpus"][1:]))
    assert edit(lambda d: d["queued"][0].pop("estimate_s")) == "queued[0].estimate_s: required"
    assert edit(lambda d: d["queued"][0].__setitem__("kind", "training")).startswith("queued[0].kind: must be one of pretrain")
    assert edit(lambda d: d["queued"][0].__setitem__("colour", "red")) == "queued[0].colour: unknown field"
    assert edit(lambda d: d["queued"][0].__setitem__("gpus", [1, 2])) == "queued[0].gpus: does not apply to a queued job"
    assert edit(lambda d: d["running"][1].__setitem__("id", d["running"][0]["id"])).startswith("running[1].id: ")
    assert edit(lambda d: d["queued"][0].__setitem__("arrival_s", d["time_s"] + 5)).startswith("queued[0].arrival_s: ")
    assert edit(lambda d: d["queued"][0].__setitem__("num_gpus", "eight")) == "queued[0].num_gpus: must be an integer, got 'eight'"
    assert edit(lambda d: d["queued"][0].__setitem__("tp_degree", 3)).startswith("queued[0].tp_degree: 3 must divide num_gpus")
    assert edit(lambda d: d.__setitem__("time_s", "now")) == "state.time_s: must be a number, got 'now'"
    assert edit(lambda d: d.__setitem__("pending", [])).startswith("pending: unknown field")
    assert edit(lambda d: d["recent_arrivals"].append({"time_s": d["time_s"] + 60, "requested_gpu_s": 1.0})) \
        .startswith(f"recent_arrivals[{len(base['recent_arrivals'])}].time_s: ")
    tp8 = next(i for i, j in enumerate(base["running"]) if j["tp_degree"] == 8 and j["num_gpus"] == 8)

    def split_tp_group(d):  # half of its TP group moves to free GPUs of another H100 or A100 node
        own = d["running"][tp8]["gpus"]
        free = [g for g in range(48) if g // 8 != own[0] // 8 and all(g not in j["gpus"] for j in d["running"])]
        assert len(free) >= 4
        d["running"][tp8]["gpus"] = own[:4] + free[:4]
    message = edit(split_tp_group)
    assert message.startswith(f"running[{tp8}].gpus:"), message
    assert _refused([]) == "state: must be a mapping, got list"
    # The valid original still builds, and nothing of the refused edits leaked into it.
    assert ClusterState.from_dict(base, load_cluster("mixed-64gpu")).to_dict() == base


def test_the_docs_show_the_feature_schema_as_declared():
    from pathlib import Path

    from envs.decision.features import schema_table

    assert schema_table() in (Path(__file__).parent.parent / "docs" / "state.md").read_text()


# ---------------------------------------------------------------------- what preempting and waiting give up


def _decisions(workload: str, num_jobs: int, seed: int = 0):
    """(state, candidate set, features) of every decision of an episode scheduled by `priority`
    (which preempts), on mixed-64gpu."""
    cluster = load_cluster("mixed-64gpu")
    sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, seed, num_jobs=num_jobs))
    policy = make_baseline("priority")
    cset = advance_to_decision(sim, 8)
    while not sim.done:
        state = sim.decision_state()
        yield state, cset, candidate_features(cset)[0]
        apply_candidate(sim, cset, policy.select(state, cset))
        cset = advance_to_decision(sim, 8)


def test_preemption_rows_show_the_victims_remaining_work_service_and_class():
    """On a row with victims: the shortest estimated remaining runtime among them, their attained
    GPU-s per GPU and their highest class, each as the schema scales it; 0 on rows without."""
    from envs.decision.features import CANDIDATE_COLUMNS as C, log_scale

    seen = 0
    for state, cset, feats in _decisions("slo-preempt", 120):
        for i in cset.valid_placements():
            victims = list(cset.candidates[i].victims)
            row = feats[i]
            if not victims:
                assert row[C["victims_remaining_log"]] == row[C["victims_attained_log"]] == row[C["victims_priority"]] == 0.0
                continue
            seen += 1
            remaining = [max(state.estimate_s[v] - state.work_done_s[v], 0.0) for v in victims]  # running: no restore owed
            per_gpu = sum(state.attained_gpu_s[v] for v in victims) / sum(state.num_gpus[v] for v in victims)
            assert row[C["victims_remaining_log"]] == pytest.approx(log_scale(min(remaining)), abs=1e-6)
            assert row[C["victims_attained_log"]] == pytest.approx(log_scale(per_gpu), abs=1e-6)
            assert row[C["victims_priority"]] == max(state.priority[v] for v in victims) / 2.0
        if seen >= 40:
            break
    assert seen >= 40, f"only {seen} rows with victims"


def test_the_wait_row_shows_when_the_first_window_job_s_gpus_are_free():
    """head_fit_est_log: 0 when the first window job's GPU count is free now; otherwise the
    estimated end, among running and checkpointing jobs, after which enough GPUs are free."""
    from envs.decision.features import CANDIDATE_COLUMNS as C, log_scale

    waiting = fitting = 0
    for state, cset, feats in _decisions("llm-mix-bursty", 150):
        value = feats[cset.wait_index, C["head_fit_est_log"]]
        need = state.num_gpus[cset.window[0]]
        if state.num_free >= need:
            assert value == 0.0
            fitting += 1
            continue
        ends = sorted([(state.restore_left_s[j] + max(state.estimate_s[j] - state.work_done_s[j], 0.0) / state.rate[j],
                        state.num_gpus[j]) for j in state.running]
                      + [(state.checkpoint_end_s[j] - state.now, state.num_gpus[j]) for j in state.checkpointing])
        free, expected = state.num_free, 1.0
        for after, gpus in ends:
            free += gpus
            if free >= need:
                expected = log_scale(after)
                break
        assert value == pytest.approx(expected, abs=1e-6)
        waiting += 1
    assert waiting >= 20 and fitting >= 20, (waiting, fitting)
