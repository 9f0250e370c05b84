"""Deployment settings chosen for safety (agents/deploy.py), shipping (agents/ship.py) and the
shipped form evaluated as deployed (evaluate.py `learned=DIR`)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from agents.deploy import choose
from agents.shipped import verify
from tests.helpers import evaluate_in_process, run_copy, run_main
from tests.test_train import REPO


def _runs(objectives: list[float]) -> list[dict]:
    return [{"seed": s, "metrics": {"objective": o}} for s, o in enumerate(objectives)]


def _scenario(sect, sjf, **settings) -> dict:
    return {"sect": _runs(sect), "sjf": _runs(sjf), **{f"anchored=/x/{k}.json": _runs(v) for k, v in settings.items()}}


def test_the_rule_takes_the_best_mean_among_settings_with_no_bad_seed():
    # scenario a: sect is the better heuristic (mean 10 vs 11); b: sjf (20 vs 21).
    a = _scenario([10, 10, 10, 10], [11, 11, 11, 11],
                  risky=[8, 8, 8, 10.8],      # mean -6%, but one seed +8%
                  steady=[9.8, 9.8, 9.8, 9.8],  # -2% everywhere
                  good=[9.5, 9.5, 9.8, 10.3])   # -2.25%, worst +3%
    b = _scenario([21, 21, 21, 21], [20, 20, 20, 20],
                  risky=[18, 18, 18, 18], steady=[19.8, 19.8, 19.8, 19.8], good=[19.6, 19.8, 19.8, 19.8])
    best, table = choose({"a": a, "b": b}, ["risky", "steady", "good"], bound=0.05)
    assert best == "good"
    rows = {t["setting"]: t for t in table}
    assert not rows["risky"]["eligible"] and rows["risky"]["scenario_worst"]["a"] == pytest.approx(0.08)
    assert rows["steady"]["mean"] == pytest.approx(-0.01 * (2 + 1) / 2)
    assert rows["good"]["scenario_means"]["b"] == pytest.approx((-0.02 - 0.01 * 3) / 4)  # against sjf, b's better heuristic
    assert choose({"a": a, "b": b}, ["risky"], bound=0.10)[0] == "risky"  # +8% is within a 10% bound
    worse_on_average = _scenario([10] * 4, [11] * 4, bad=[10.1, 10.1, 10.1, 9.9])
    assert choose({"a": worse_on_average}, ["bad"], bound=0.05)[0] is None  # a mean above 0 is never deployed


def test_a_setting_is_deployed_only_on_the_clusters_where_it_is_safe():
    a = _scenario([10] * 4, [11] * 4, s=[9, 9, 9, 9])           # -10% everywhere: safe
    b = _scenario([10] * 4, [11] * 4, s=[9, 9, 9, 9.5])         # -8.75%: safe
    c = _scenario([10] * 4, [11] * 4, s=[8, 8, 8, 11.5])        # -2.5% on average, one seed +15%: not safe
    best, table = choose({"a": a, "b": b, "c": c}, ["s"], bound=0.10, cluster_of={"a": "x", "b": "y", "c": "y"})
    assert best == "s" and table[0]["clusters"] == ["x"]  # y is judged on b and c together
    assert table[0]["mean"] == pytest.approx((-0.10 + 0 + 0) / 3)  # y keeps its heuristic: 0
    best, table = choose({"a": a, "b": b, "c": c}, ["s"], bound=0.10, cluster_of={"a": "x", "b": "x", "c": "y"})
    assert table[0]["clusters"] == ["x"] and table[0]["mean"] == pytest.approx((-0.10 - 0.0875) / 3)


@pytest.mark.slow  # over 20 s (make test-fast leaves it out)
def test_a_tiny_run_is_deployed_shipped_and_evaluated_as_shipped(tiny_run_64, tmp_path):
    from agents.deploy import main as deploy_main

    out = run_copy(tiny_run_64, tmp_path)  # train.py's tiny run, 64 timesteps
    scenario = tmp_path / "tiny-scenario.yaml"  # the tiny run's setting as a scenario: 12 jobs on 32 GPUs
    scenario.write_text("name: tiny\ncluster: h100-4node\nworkload: llm-mix\nnum_jobs: 12\nobjective: {avg_jct: 1.0}\n"
                        "seeds: {test: 0-1, validation: 100-101}\n")
    deploy = [sys.executable, "-m", "agents.deploy", str(out), "--scenarios", str(scenario), "--margins", "0,1",
              "--wait-guards", "off,2", "--workers", "2"]
    r = run_main(deploy_main, [*deploy[3:], "--seeds", "1"])  # agents.deploy's main, in this process
    assert r.returncode == 2 and "1 is a test seed of scenario" in r.stderr
    r = subprocess.run([*deploy, "--seeds", "100-101"], cwd=REPO, capture_output=True, text=True, timeout=600)  # the real command
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "anchor-deploy.json").read_text())
    assert [t["setting"] for t in doc["settings"]] == ["guard-off-margin-0", "guard-off-margin-1", "guard-2-margin-0", "guard-2-margin-1"]
    runs = json.loads((out / "deploy" / "tiny.json").read_text())
    assert sorted(r["seed"] for r in runs["sect"]) == [100, 101]
    # another margin: only its episodes run; the others' and the heuristics' are kept as they were
    (out / "deploy" / "tiny.json").write_text(json.dumps({**runs, "sect": [dict(r, kept=True) for r in runs["sect"]]}))
    r = run_main(deploy_main, [*deploy[3:7], "0,1,2", *deploy[8:], "--seeds", "100-101"])
    assert r.returncode == 0, r.stderr[-2000:]
    again = json.loads((out / "deploy" / "tiny.json").read_text())
    assert all(r.get("kept") for r in again["sect"]) and again["sjf"] == runs["sjf"]
    assert sorted(Path(p.split("=", 1)[1]).stem for p in again if p.startswith("anchored=")) == sorted(
        [*(Path(p.split("=", 1)[1]).stem for p in runs if p.startswith("anchored=")), "guard-off-margin-2", "guard-2-margin-2"])
    doc = json.loads((out / "anchor-deploy.json").read_text())
    if doc["setting"] is None:  # a 64-step model is rarely safe: then the heuristic alone
        assert doc["margin"] == "inf" and doc["clusters"] == []
    else:
        assert doc["setting"] in {t["setting"] for t in doc["settings"] if t["eligible"]}
        assert doc["clusters"] == ["h100-4node"]

    from agents.ship import ship

    models = tmp_path / "models"
    shipped = ship(out / "model.zip", "tiny", anchor=str(out / "anchor-deploy.json"), models_dir=models)
    assert verify(shipped) == []
    meta = json.loads((shipped / "policy.json").read_text())
    assert meta["anchor"]["baseline"] == "sect"
    assert (meta["anchor"]["margin"] == "inf") == (doc["setting"] is None)
    assert meta["wait_guard"] == doc["wait_guard"] and meta["clusters"] == doc["clusters"]

    res = tmp_path / "eval"
    r = evaluate_in_process("--scenario", str(scenario), "--seeds", "0-1", "--policies",
                            f"sect,learned={shipped},anchored={out / 'anchor-deploy.json'}", "--reference", "sect", "--out", str(res))
    assert r.returncode == 0, r.stderr[-2000:]
    pol = json.loads((res / "results.json").read_text())["policies"]
    shipped_runs = [r["metrics"] for r in pol[f"learned={shipped}"]["runs"]]
    # the shipped folder is the same deployed policy as the run's model with its chosen anchor and guard
    assert shipped_runs == [r["metrics"] for r in pol[f"anchored={out / 'anchor-deploy.json'}"]["runs"]]
    if math.isinf(float(meta["anchor"]["margin"])):
        assert [m["objective"] for m in shipped_runs] == [r["metrics"]["objective"] for r in pol["sect"]["runs"]]
