"""Scenarios and their objective: every shipped scenario loads and says why it looks so, the
objective is what the env rewards and what evaluation reports first, SLO misses are counted
once and as soon as they are certain, and bad files are refused by field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agents.evaluation import run_baseline
from baselines import make_baseline
from envs.cluster.config import CONFIG_ROOT, ConfigError, load_cluster
from envs.gym.env import GpuClusterEnv
from envs.jobs import JobKind
from envs.scenario import load_scenario, scenario_names
from envs.sim.metrics import episode_metrics
from envs.sim.objective import Objective, Slo, objective_from_dict, objective_value, slo_miss_flags
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec
from tests.helpers import job, toy_cluster

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = {"default", "bursty", "slo-preempt", "topology-stress", "hetero", "large", "philly"}


def test_every_required_scenario_ships_loads_and_says_what_it_stresses():
    assert SHIPPED <= set(scenario_names())
    for name in scenario_names():
        sc = load_scenario(name)
        text = (CONFIG_ROOT / "scenarios" / f"{name}.yaml").read_text()
        assert text.startswith("#") and "stresses" in text.split("\nname:")[0], f"{name}: no comment on what it stresses"
        assert len(sc.test_seeds) >= 10 and not set(sc.test_seeds) & set(sc.validation_seeds)
        assert max(sc.test_seeds + sc.validation_seeds) < 1_000_000  # training draws from 1e6 on
        env = GpuClusterEnv(scenario=name)
        assert env.objective == sc.objective and env.cluster.name == load_cluster(sc.cluster).name


def test_default_objective_is_the_average_jct_in_hours():
    cluster, spec = load_cluster("mixed-64gpu"), load_workload_spec("llm-mix")
    sim, _ = run_baseline("sect", cluster, spec, 0, num_jobs=40)
    m = episode_metrics(sim)
    assert m["objective"] == pytest.approx(m["avg_jct_s"] / 3600, rel=1e-9)
    assert list(m)[0] == "objective"


@pytest.mark.parametrize("scenario", ["default", "slo-preempt"])
def test_env_return_is_minus_jobs_times_the_objective(scenario):
    """The reward-to-go is exactly the objective: the sum of rewards from the first decision is
    minus jobs x (objective at the end - objective at the first decision)."""
    env = GpuClusterEnv(scenario=scenario, num_jobs=40)
    rule = make_baseline("priority")
    env.reset(seed=3)
    at_start = objective_value(env.sim, env.objective)
    total, done = 0.0, False
    while not done:
        _, r, term, trunc, info = env.step(rule.select(env.state, env.cset))
        total += r
        done = term or trunc
    assert info["metrics"]["objective"] == pytest.approx(objective_value(env.sim, env.objective))
    assert total == pytest.approx(-40 * (info["metrics"]["objective"] - at_start), rel=1e-9, abs=1e-9)


def test_slo_misses_count_late_starts_and_late_finishes_once_and_as_soon_as_certain():
    """Two 8-GPU serving replicas on one 8-GPU node: the second cannot start before the first
    ends, so it misses a 10-minute start SLO; its miss shows while it still waits."""
    cluster = toy_cluster(nodes=1)
    jobs = [job(0, 0.0, 8, 3600.0, kind=JobKind.INFERENCE, priority=2, preemptible=False),
            job(1, 10.0, 8, 600.0, kind=JobKind.INFERENCE, priority=2, preemptible=False)]
    objective = Objective(slo_misses=1.0, slos=((int(JobKind.INFERENCE), Slo(start_within_s=600.0, finish_slowdown=3.0)),))
    sim = Simulator(cluster, jobs)
    sim.start(0, np.arange(8))
    sim.advance()  # job 1 arrives and waits
    assert slo_miss_flags(sim, objective).tolist() == [False, False]
    sim.advance_until(700.0)  # past its start deadline, still queued: certain now
    assert slo_miss_flags(sim, objective).tolist() == [False, True]
    sim.advance()  # job 0 ends at 3600 s
    sim.start(1, np.arange(8))
    while not sim.done:
        sim.advance()
    flags = slo_miss_flags(sim, objective)
    assert flags.tolist() == [False, True]  # late start and late finish (JCT 4190 s > 3 x 600 s): one miss
    assert episode_metrics(sim, objective)["slo_misses"] == 1.0
    assert episode_metrics(sim)["inference_slo_misses"] == 1.0  # the default SLO: finish within 3x


def test_weighted_jct_uses_the_objectives_priority_weights():
    cluster = toy_cluster(nodes=1)
    jobs = [job(0, 0.0, 8, 3600.0, priority=0), job(1, 0.0, 8, 3600.0, priority=2)]
    sim = Simulator(cluster, jobs)
    sim.start(1, np.arange(8))
    while not sim.done:
        sim.advance()
        if sim.queue_len:
            sim.start(0, np.arange(8))
    objective = Objective(avg_jct=0.0, weighted_jct=1.0, priority_weights=(0.5, 1.0, 2.0))
    # high priority: 1 h x 2; low: 2 h x 0.5 -> (2 + 1) / 2 jobs
    assert episode_metrics(sim, objective)["objective"] == pytest.approx(1.5)


@pytest.mark.parametrize("data, field", [
    ({"avg_jct": -1}, "objective.avg_jct"),
    ({"slos": {"inferense": {"start_within_s": 60}}}, "objective.slos.inferense"),
    ({"slos": {"inference": {"finish_slowdown": 0.5}}}, "objective.slos.inference.finish_slowdown"),
    ({"priority_weights": {"urgent": 3}}, "objective.priority_weights.urgent"),
    ({"avg_jct": 0}, "objective.avg_jct"),
    ({"jct": 1}, "objective.jct"),
])
def test_bad_objective_is_refused_naming_the_field(data, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        objective_from_dict(data, "x.yaml")


def test_bad_scenario_is_refused_naming_the_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ncluster: mixed-64gpu\nworkload: no-such-workload\n")
    with pytest.raises(ConfigError, match="bad.yaml: workload"):
        load_scenario(bad)
    bad.write_text("name: bad\ncluster: mixed-64gpu\nworkload: llm-mix\nseeds: {test: 0-9, validation: 5-12}\n")
    with pytest.raises(ConfigError, match="seeds.validation: shares seeds with test"):
        load_scenario(bad)
    bad.write_text("name: bad\ncluster: mixed-64gpu\nworkload: llm-mix\nseeds: {test: 2000000}\n")
    with pytest.raises(ConfigError, match="seeds.test: seeds must be < 1,000,000"):
        load_scenario(bad)


def _tiny(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(
        "# tiny: stresses nothing, a test fixture\nname: tiny\ncluster: mixed-64gpu\nworkload: slo-preempt\nnum_jobs: 20\n"
        "objective: {avg_jct: 0.0, weighted_jct: 1.0, priority_weights: {low: 0.5, high: 2.0}, slo_misses: 2.0,\n"
        "            preemption_gpu_h: 0.25, slos: {inference: {start_within_s: 600}}}\n"
        "seeds: {test: 0-1, validation: 100}\nlookahead: {k: 2, preempt_k: 1, samples: 2, horizon_s: 7200}\n"
    )
    return p


def test_evaluate_scenario_reports_the_objective_first_and_pairs_on_it(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "evaluate.py", "--scenario", str(_tiny(tmp_path)), "--policies", "topology,priority,lookahead",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["scenario"] == "tiny" and doc["paired_metric"] == "objective" and doc["seeds"] == [0, 1]
    assert doc["objective"]["weighted_jct"] == 1.0 and doc["objective"]["slos"]["inference"]["start_within_s"] == 600.0
    run = doc["policies"]["priority"]["runs"][0]
    assert list(run["metrics"])[0] == "objective"
    assert doc["paired_vs_reference"]["priority"]["metric"] == "objective"
    assert doc["policies"]["lookahead"]["runs"][0]["search"]["decisions"] == doc["policies"]["lookahead"]["runs"][0]["decisions"]
    assert "| objective |" in (out / "results.md").read_text()
    r = subprocess.run([sys.executable, "evaluate.py", "--scenario", "default", "--cluster", "h100-4node", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--cluster conflicts with --scenario" in r.stderr


def test_leaderboard_pairs_every_policy_against_the_best_heuristic(tmp_path):
    out = tmp_path / "lb"
    r = subprocess.run([sys.executable, "-m", "benchmarks.leaderboard", "--scenarios", str(_tiny(tmp_path)), "--workers", "1",
                        "--policies", "topology,sect,priority,lookahead-oracle", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "tiny" / "results.json").read_text())
    means = {p: v["summary"]["objective"]["mean"] for p, v in doc["policies"].items() if p != "lookahead-oracle"}
    assert doc["reference"] == min(means, key=means.get)
    board = (out / "leaderboard.md").read_text()
    assert "lookahead-oracle (bound)" in board and "best heuristic" in board
    summary = json.loads((out / "leaderboard.json").read_text())
    assert summary["scenarios"]["tiny"]["best_heuristic"] == doc["reference"]


def test_evaluate_refuses_a_scenario_whose_lookahead_base_is_unknown(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ncluster: mixed-64gpu\nworkload: llm-mix\nlookahead: {base: sectt}\n")
    r = subprocess.run([sys.executable, "evaluate.py", "--scenario", str(bad), "--out", str(tmp_path / "o")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "bad.yaml: lookahead.base: unknown baseline 'sectt'" in r.stderr, r.stderr
