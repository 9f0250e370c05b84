"""One model from a run's kept models by averaging their weights (agents/average.py), on a tiny
run's real stages."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import torch

from tests.helpers import run_copy, run_main
from tests.test_train import REPO


def average(*args: str) -> subprocess.CompletedProcess:
    """python -m agents.average as a real process (the command line end to end)."""
    return subprocess.run([sys.executable, "-m", "agents.average", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def average_in_process(*args: str):
    """agents.average's `main` with this command line, in this process."""
    from agents.average import main

    return run_main(main, args)


def test_the_average_is_the_mean_of_the_kept_models_weights_and_a_model_that_acts(tiny_run_192, tmp_path):
    from agents.policy import load_model
    from envs.gym.env import GpuClusterEnv

    out = run_copy(tiny_run_192, tmp_path)  # train.py's tiny run, 192 timesteps
    history = json.loads((out / "eval.json").read_text())
    names = [h["model"] for h in history]
    assert len(names) >= 3

    r = average(str(out))  # the real command line, once
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"{out / 'average-all.zip'}: the mean of {len(names)} models" in r.stdout
    states = [load_model(out / n, device="cpu").policy.state_dict() for n in names]
    mean = load_model(out / "average-all.zip", device="cpu")
    for key, value in mean.policy.state_dict().items():
        if value.is_floating_point():
            expected = sum((s[key] for s in states[1:]), states[0][key]) / len(states)
            torch.testing.assert_close(value, expected, rtol=0, atol=0)
    assert any(not torch.equal(mean.policy.state_dict()[k], states[0][k]) for k in states[0])  # not a copy of one stage
    env = GpuClusterEnv(cluster="h100-4node", workload="llm-mix", num_jobs=6)
    obs, _ = env.reset(seed=0)
    action = int(mean.predict(obs, action_masks=env.action_masks(), deterministic=True)[0])
    assert env.action_masks()[action]

    # `ahead`: only the models ahead of the validation baseline; none ahead: the pick alone.
    for h, rel in zip(history, np.linspace(-0.1, 0.1, len(history))):
        h["rel_diff"] = float(rel)
    (out / "eval.json").write_text(json.dumps(history))
    r = average_in_process(str(out), "--models", "ahead", "--out", "ahead.zip")
    ahead = [h["model"] for h in history if h["rel_diff"] < 0]
    assert r.returncode == 0 and f"the mean of {len(ahead)} models ({', '.join(ahead)})" in r.stdout
    for h in history:
        h["rel_diff"] = 0.5
    (out / "eval.json").write_text(json.dumps(history))
    r = average_in_process(str(out), "--models", "ahead", "--out", "none-ahead.zip")
    pick = min(history, key=lambda h: h["score"])["model"]
    assert r.returncode == 0 and f"the mean of 1 models ({pick})" in r.stdout

    (out / names[0]).unlink()
    r = average_in_process(str(out))
    assert r.returncode == 2 and f"eval.json: names models that are not there: {names[0]}" in r.stderr
    r = average_in_process(str(out), "--out", "../x.zip")
    assert r.returncode == 2 and "--out: must be a file name ending in .zip" in r.stderr
    r = average_in_process(str(out), "--out", "model.zip")
    assert r.returncode == 2 and "--out: model.zip is the run's own" in r.stderr
    r = average_in_process(str(tmp_path / "nothing"))
    assert r.returncode == 2 and "no evaluated models" in r.stderr and "Traceback" not in r.stderr
