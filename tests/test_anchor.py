"""A learned policy anchored to a heuristic (agents/anchor_rule.py, agents/anchor.py): the rule,
the margin chosen on a tiny run's real validation episodes, and evaluate.py's `anchored=` policies."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from agents.anchor_rule import Anchor, anchored_choice
from tests.helpers import evaluate_in_process, run_copy, run_main
from tests.test_train import REPO


def test_the_model_departs_from_the_heuristic_only_by_more_than_the_margin():
    logits = np.array([0.0, 3.0, 1.0, 9.0, -1.0])
    mask = np.array([True, True, True, False, True])  # the largest logit is not valid
    assert anchored_choice(logits, mask, base_choice=2, margin=0.0) == 1  # the model's choice: 3 > 1 + 0
    assert anchored_choice(logits, mask, base_choice=2, margin=1.9) == 1
    assert anchored_choice(logits, mask, base_choice=2, margin=2.0) == 2  # not more than the margin: the heuristic's
    assert anchored_choice(logits, mask, base_choice=2, margin=math.inf) == 2
    assert anchored_choice(logits, mask, base_choice=1, margin=5.0) == 1  # both agree
    assert anchored_choice(logits, mask, base_choice=3, margin=math.inf) == 1  # an invalid base choice: the model's
    tie = np.array([2.0, 2.0, 0.0])
    assert anchored_choice(tie, np.ones(3, bool), base_choice=2, margin=0.0) == 0  # first of equals, as predict


def _result(objectives, baseline_objective=10.0):
    return [{"name": "s", "objective": float(np.mean(objectives)), "avg_jct_s": 0.0, "baseline": "sect",
             "baseline_objective": baseline_objective, "rel_diff": 0.0, "objectives": objectives}]


def test_a_margin_is_kept_only_for_a_paired_gain_beyond_one_standard_error():
    from agents.anchor import pick_margin

    zero = _result([10.0, 11.0, 12.0, 13.0])
    noisy = _result([9.0, 11.5, 11.0, 13.4])  # better on average (-0.275), but not by one standard error (0.32)
    steady = _result([9.5, 10.6, 11.6, 12.5])  # better by 0.45 on every seed
    better = _result([9.0, 10.0, 11.0, 12.0])  # better by 1 on every seed
    assert pick_margin([0.0, 1.0], [zero, noisy])[0] == 0
    assert pick_margin([0.0, 1.0, 2.0], [zero, noisy, steady])[0] == 2
    assert pick_margin([0.0, 1.0, 2.0], [zero, better, steady])[0] == 1  # the lowest score among those that pass
    assert pick_margin([2.0, 0.0], [steady, zero])[0] == 0  # the reference is the smallest margin, wherever listed
    assert pick_margin([0.0, 3.0], [zero, _result([10.0, 11.0, 12.0, 13.0])])[0] == 0  # a tie keeps the smallest


def test_anchor_fields_are_checked():
    assert Anchor.from_dict({"baseline": "sect", "margin": "inf"}).margin == math.inf
    assert Anchor("sjf", 2).to_dict() == {"baseline": "sjf", "margin": 2.0}
    with pytest.raises(ValueError, match=r"^x: anchor.margin|^x\.margin"):
        Anchor.from_dict({"baseline": "sect", "margin": -1}, "x")
    with pytest.raises(ValueError, match="unknown baseline 'nope'"):
        Anchor.from_dict({"baseline": "nope", "margin": 1})
    with pytest.raises(ValueError, match="must be a mapping with baseline and margin"):
        Anchor.from_dict([1, 2])


def anchor_cli(*args: str) -> subprocess.CompletedProcess:
    """python -m agents.anchor as a real process (the command line end to end)."""
    return subprocess.run([sys.executable, "-m", "agents.anchor", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def anchor_in_process(*args: str):
    """agents.anchor's `main` with this command line, in this process."""
    from agents.anchor import main

    return run_main(main, args)


def evaluate(*args: str):
    """evaluate.py's `main`, in this process (tests/test_evaluate.py runs the real command)."""
    return evaluate_in_process(*args)


@pytest.mark.slow  # over 20 s (make test-fast leaves it out)
def test_the_margin_is_chosen_on_validation_and_evaluate_applies_it(tiny_run_64, tmp_path):
    out = run_copy(tiny_run_64, tmp_path)  # train.py's tiny run, 64 timesteps, validated on seeds 500-501
    summary = json.loads((out / "summary.json").read_text())
    history = json.loads((out / "eval.json").read_text())

    r = anchor_cli(str(out), "--margins", "0,1,inf")  # the real command line, once
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads((out / "anchor.json").read_text())
    assert data["baseline"] == summary["baseline"] and data["model"] == "model.zip" and list(data["seeds"].values()) == [[500, 501]]
    by_margin = {e["margin"]: e for e in data["margins"]}
    assert set(by_margin) == {0.0, 1.0, "inf"}
    # Margin 0 is the model alone: its validation score is train.py's for the model it picked.
    picked = min(history, key=lambda h: h["score"])
    assert by_margin[0.0]["objective"] == pytest.approx(picked["objective"], rel=0, abs=1e-12)
    # An infinite margin is the heuristic alone, through the env: exactly its replay objective.
    assert by_margin["inf"]["objective"] == pytest.approx(summary["baseline_objective"], rel=0, abs=1e-12)
    # The kept margin: 0 unless another's paired gain over it beats one standard error.
    zero = np.array(next(iter(by_margin[0.0]["objectives"].values())))
    passing = []
    for key, e in by_margin.items():
        d = np.array(next(iter(e["objectives"].values()))) - zero
        assert e["gain_vs_smallest"] == pytest.approx(d.mean(), abs=1e-12)
        if key != 0.0:
            assert e["gain_se"] == pytest.approx(d.std(ddof=1) / np.sqrt(len(d)), abs=1e-12)
            if d.mean() < -e["gain_se"]:
                passing.append(key)
    expect = min(passing, key=lambda k: by_margin[k]["score"]) if passing else 0.0
    assert data["margin"] == expect

    # evaluate.py's anchored= takes the run's anchor: at an infinite margin, the baseline's episodes.
    data["margin"] = "inf"
    (out / "anchor.json").write_text(json.dumps(data))
    res = tmp_path / "res"
    r = evaluate("--cluster", "h100-4node", "--num-jobs", "12", "--seeds", "500-501", "--out", str(res),
                 "--policies", f"{summary['baseline']},anchored={out / 'model.zip'}")
    assert r.returncode == 0, r.stderr[-2000:]
    pol = json.loads((res / "results.json").read_text())["policies"]
    anchored = [run["metrics"]["avg_jct_s"] for run in pol[f"anchored={out / 'model.zip'}"]["runs"]]
    assert anchored == [run["metrics"]["avg_jct_s"] for run in pol[summary["baseline"]]["runs"]]

    # Chosen for deploying on another scenario: on its validation seeds (here 500-501), against its
    # best heuristic there, written beside the run's own; anchored= takes the file.
    r = anchor_in_process(str(out), "--scenario", "topology-stress", "--seeds", "500-501", "--margins", "0,inf")
    assert r.returncode == 0, r.stderr[-2000:]
    moved = json.loads((out / "anchor-topology-stress.json").read_text())
    assert moved["scenario"] == "topology-stress" and moved["model"] == "model.zip"
    assert list(moved["seeds"]) == ["topology-stress"] and list(moved["seeds"].values()) == [[500, 501]]
    heuristic = {e["margin"]: e for e in moved["margins"]}["inf"]
    moved["margin"] = "inf"
    (out / "anchor-topology-stress.json").write_text(json.dumps(moved))
    res = tmp_path / "moved"
    r = evaluate("--scenario", "topology-stress", "--seeds", "500-501", "--out", str(res),
                 "--policies", f"{moved['baseline']},anchored={out / 'anchor-topology-stress.json'}")
    assert r.returncode == 0, r.stderr[-2000:]
    pol = json.loads((res / "results.json").read_text())["policies"]
    objectives = [run["metrics"]["objective"] for run in pol[f"anchored={out / 'anchor-topology-stress.json'}"]["runs"]]
    assert objectives == [run["metrics"]["objective"] for run in pol[moved["baseline"]]["runs"]]
    # ... and its heuristic alone there is that scenario's best heuristic's objective on those seeds.
    assert heuristic["objective"] == pytest.approx(np.mean(objectives), rel=0, abs=1e-12)
    assert heuristic["objective"] == pytest.approx(heuristic["baseline_objective"], rel=0, abs=1e-12)

    # The bound on WAIT chosen with the margin: every margin under every bound listed, the first
    # bound with the smallest margin the reference; the file records the bound kept, and
    # anchored= deploys it (here a strict one: WAIT is invalid once a job that fits has waited).
    strict = {"overdue_factor": 0.01, "min_wait_s": 0.0}
    r = anchor_in_process(str(out), "--margins", "0,inf", "--wait-guards", "off;overdue_factor=0.01,min_wait_s=0")
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads((out / "anchor.json").read_text())
    settings = data["margins"]
    assert [(e["wait_guard"], e["margin"]) for e in settings] == [(None, 0.0), (None, "inf"), (strict, 0.0), (strict, "inf")]
    ref = np.array(next(iter(settings[0]["objectives"].values())))
    guarded = np.array(next(iter(settings[2]["objectives"].values())))
    assert not np.array_equal(ref, guarded)  # the bound changes the model's episodes: the choice is not vacuous
    passing = [i for i, e in enumerate(settings) if i and e["gain_vs_smallest"] < -e["gain_se"]]
    kept = min(passing, key=lambda i: (settings[i]["score"], i)) if passing else 0
    assert (data["wait_guard"], data["margin"]) == (settings[kept]["wait_guard"], settings[kept]["margin"])
    data.update(margin=0.0, wait_guard=strict)
    (out / "anchor.json").write_text(json.dumps(data))
    runs = {}
    for name, policy, extra in (("anchored", f"anchored={out / 'model.zip'}", []),
                                ("ppo-strict", f"ppo={out / 'model.zip'}", ["--wait-guard", "overdue_factor=0.01,min_wait_s=0"])):
        r = evaluate("--cluster", "h100-4node", "--num-jobs", "12", "--seeds", "500-501", "--out", str(tmp_path / name),
                     "--policies", policy, *extra)
        assert r.returncode == 0, r.stderr[-2000:]
        runs[name] = [run["metrics"]["avg_jct_s"] for run in json.loads((tmp_path / name / "results.json").read_text())["policies"][policy]["runs"]]
    assert runs["anchored"] == runs["ppo-strict"]

    # Bad input: one line each, exit code 2, nothing run.
    r = anchor_in_process(str(out), "--wait-guards", "off,off")
    assert r.returncode == 2 and "--wait-guards: 'off' is listed twice" in r.stderr and "Traceback" not in r.stderr
    r = anchor_in_process(str(out), "--wait-guards", "off;overdue_factor=-1")
    assert r.returncode == 2 and "--wait-guards.overdue_factor" in r.stderr and "Traceback" not in r.stderr
    stage = out / history[0]["model"]
    r = evaluate("--cluster", "h100-4node", "--seeds", "0", "--out", str(tmp_path / "x"), "--policies", f"anchored={stage}")
    assert r.returncode == 2 and "the margin was chosen for model.zip" in r.stderr and "Traceback" not in r.stderr
    (out / "anchor.json").unlink()
    r = evaluate("--cluster", "h100-4node", "--seeds", "0", "--out", str(tmp_path / "x"), "--policies", f"anchored={out / 'model.zip'}")
    assert r.returncode == 2 and "anchor.json: not found; choose the margin first" in r.stderr
    r = anchor_in_process(str(out), "--margins", "0,-1")
    assert r.returncode == 2 and "--margins: '-1' must be >= 0" in r.stderr
    r = anchor_in_process(str(out), "--baseline", "nope")
    assert r.returncode == 2 and "--baseline" in r.stderr and "unknown baseline 'nope'" in r.stderr
    r = anchor_in_process(str(out), "--scenario", "nope")
    assert r.returncode == 2 and "scenario" in r.stderr and "nope" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = anchor_in_process(str(tmp_path / "nothing"))
    assert r.returncode == 2 and "not a run directory" in r.stderr and "Traceback" not in r.stderr
