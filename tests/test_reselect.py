"""Model selection redone without training (agents/reselect.py) on a tiny run's kept stages."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import yaml

from agents.config import train_config_from_dict
from envs.cluster.config import ConfigError
from tests.helpers import run_copy, run_main
from tests.test_train import REPO


def params(path):
    from agents.policy import load_model

    return load_model(path, device="cpu").policy.state_dict()


def reselect(*args: str) -> subprocess.CompletedProcess:
    """python -m agents.reselect as a real process (the command line end to end)."""
    return subprocess.run([sys.executable, "-m", "agents.reselect", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def reselect_in_process(*args: str):
    """agents.reselect's `main` with this command line, in this process."""
    from agents.reselect import main

    return run_main(main, args)


@pytest.mark.slow  # over 20 s (make test-fast leaves it out)
def test_a_run_keeps_every_evaluated_model_and_reselection_reproduces_its_choice_or_selects_under_a_wait_guard(tiny_run_192, tmp_path):
    out = run_copy(tiny_run_192, tmp_path)  # train.py's tiny run, 192 timesteps
    history = json.loads((out / "eval.json").read_text())
    assert len(history) >= 3
    names = [h["model"] for h in history]
    assert all((out / n).is_file() for n in names) and len(set(names)) == len(names)
    assert sorted(str(p.relative_to(out)) for p in (out / "stages").iterdir()) == sorted(names)
    best = min(history, key=lambda h: h["score"])
    chosen = params(out / "model.zip")
    for k, v in params(out / best["model"]).items():
        torch.testing.assert_close(chosen[k], v, rtol=0, atol=0)
    # The stages differ (PPO changed the weights), so the check above can tell them apart.
    assert any(not torch.equal(a, b) for a, b in zip(params(out / names[0]).values(), params(out / names[-1]).values()))

    r = reselect(str(out))  # the real command line, once
    assert r.returncode == 0, r.stderr[-2000:]
    again = json.loads((out / "reselect.json").read_text())
    assert [e["model"] for e in again["stages"]] == names
    assert [e["score"] for e in again["stages"]] == [h["score"] for h in history]  # the same episodes, the same rule
    assert again["pick"] == best["model"] and f"pick {out / best['model']}" in r.stdout

    r = reselect_in_process(str(out), "--seeds", "501-502", "--workers", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    other = json.loads((out / "reselect.json").read_text())
    assert list(other["seeds"].values()) == [[501, 502]]
    r = reselect_in_process(str(out), "--seeds", "503-504", "--out", "reselect-503-504.json")  # beside, not over, the first
    assert r.returncode == 0, r.stderr[-2000:]
    assert list(json.loads((out / "reselect-503-504.json").read_text())["seeds"].values()) == [[503, 504]]
    assert json.loads((out / "reselect.json").read_text()) == other
    assert other["pick"] == min(other["stages"], key=lambda e: e["score"])["model"]
    assert (out / "model.zip").is_file() and params(out / "model.zip").keys() == chosen.keys()  # model.zip is left alone

    # With a bound on WAIT: every stage scored with that guard in its masks, as a run trained with
    # `env: wait_guard:` would score it, in a file of its own; the unguarded selection stays.
    r = reselect_in_process(str(out), "--wait-guard", "overdue_factor=0.01,min_wait_s=0")
    assert r.returncode == 0, r.stderr[-2000:]
    guarded = json.loads((out / "reselect-wait-guard.json").read_text())
    assert guarded["wait_guard"] == {"overdue_factor": 0.01, "min_wait_s": 0.0}
    assert json.loads((out / "reselect.json").read_text()) == other
    assert [e["model"] for e in guarded["stages"]] == names and guarded["seeds"] == again["seeds"]
    assert [e["score"] for e in guarded["stages"]] != [e["score"] for e in again["stages"]]  # the guard changed episodes
    from agents.policy import load_model
    from agents.selection import setting_result, validations

    data = yaml.safe_load((out / "config.yaml").read_text())
    data.setdefault("env", {})["wait_guard"] = {"overdue_factor": 0.01, "min_wait_s": 0}
    v = validations(train_config_from_dict(data, "<guarded>"))[0]
    assert guarded["stages"][-1]["objective"] == setting_result(load_model(out / names[-1], device="cpu"), v)["objective"]
    assert guarded["pick"] == min(guarded["stages"], key=lambda e: e["score"])["model"]
    r = reselect_in_process(str(out), "--wait-guard", "overdue_factor=-1")
    assert r.returncode == 2 and "--wait-guard.overdue_factor: must be > 0, got -1.0" in r.stderr and "Traceback" not in r.stderr


def test_reselect_refuses_a_scenario_s_test_seeds_and_a_directory_that_is_no_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("scenario: default\n")
    r = reselect_in_process(str(run), "--seeds", "8-12")
    assert r.returncode == 2 and "eval.seeds: shares seeds with scenario default's test seeds: [8, 9]" in r.stderr
    r = reselect_in_process(str(tmp_path / "nothing"))
    assert r.returncode == 2 and "not a run directory (no config.yaml)" in r.stderr
    r = reselect_in_process(str(run), "--out", "eval.json")
    assert r.returncode == 2 and "--out: eval.json is the run's own" in r.stderr
    r = reselect_in_process(str(run), "--out", "../elsewhere.json")
    assert r.returncode == 2 and "--out: must be a file name ending in .json" in r.stderr
    (run / "eval.json").write_text(json.dumps([{"stage": "ppo", "timesteps": 64, "score": 1.0, "model": "stages/00-ppo-64.zip"}]))
    r = reselect_in_process(str(run))
    assert r.returncode == 2 and "eval.json: names models that are not there: stages/00-ppo-64.zip" in r.stderr
    (run / "config.yaml").write_text("scenario: [default\n")
    r = reselect_in_process(str(run))
    assert r.returncode == 2 and "config.yaml: invalid YAML" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("mix", [[], [{}, {"scenario": "hetero"}]])
def test_a_train_config_may_not_select_on_a_scenario_s_test_seeds(mix):
    data = {"scenario": "default", "n_envs": 2, "env_mix": mix, "eval": {"seeds": "9,100"}}
    with pytest.raises(ConfigError, match=r"eval.seeds: shares seeds with scenario default's test seeds: \[9\]"):
        train_config_from_dict(data, "<test>")
    train_config_from_dict({**data, "eval": {"seeds": "100-119"}}, "<test>")
