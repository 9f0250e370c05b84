"""The Ray backend's command-line checks that need no Ray (split from tests/test_ray.py, which is
skipped without the `ray` extra): a bad sweep file stops before any work naming the field, the
shipped sweep file is valid, misused backend flags are one-line errors, and without Ray
installed `--backend ray` says how to install it."""

from __future__ import annotations

import sys

import pytest
import yaml

import evaluate
import train
from benchmarks import leaderboard

TINY_TRAIN = {  # tests/test_train.py's tiny run
    "cluster": "h100-4node", "workload": "llm-mix", "seed": 0, "device": "cpu", "total_timesteps": 128, "n_envs": 2,
    "checkpoint_every_timesteps": 64, "env": {"num_jobs": 12}, "ppo": {"n_steps": 32, "batch_size": 32, "n_epochs": 1},
    "policy": {"d_model": 16, "n_heads": 2, "n_layers": 1, "encoder_hidden": [16], "head_hidden": [16], "value_hidden": [16]},
    "eval": {"every_timesteps": 64, "seeds": "500", "baselines": ["topology", "sjf"]},
}


@pytest.mark.parametrize(
    "search, message",
    [
        ({"ppo.lr": {"uniform": [0.1, 0.2]}}, "search.ppo.lr: 0.1 is not a valid setting: "),
        ({"ppo.n_steps": {"uniform": [16.0, 64.0]}}, "ppo.n_steps: must be int"),
        ({"ppo.clip_range": {"normal": [0.1, 0.2]}}, "search.ppo.clip_range: must be one distribution of choice, uniform, loguniform, randint"),
        ({"ppo.ent_coef": {"loguniform": [0.0, 0.1]}}, "search.ppo.ent_coef.loguniform: needs low > 0"),
    ],
)
def test_bad_sweep_file_stops_before_any_work_naming_the_field(tmp_path, capsys, search, message):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_TRAIN))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"config": str(config), "num_samples": 2, "search": search}))
    assert train.main(["--backend", "ray", "--sweep", str(sweep), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{sweep}: " in err and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_the_shipped_sweep_file_is_valid():
    from agents.tuning import load_sweep

    sweep = load_sweep("sweep")
    assert sweep.config.endswith("configs/train/research/ppo-quick.yaml") and sweep.num_samples >= 2
    assert {"ppo.learning_rate", "ppo.clip_range", "ppo.ent_coef"} <= set(sweep.search)


@pytest.mark.parametrize(
    "command, argv, message",
    [
        ("evaluate", ["--ray-address", "auto"], "--ray-address needs --backend ray"),
        ("train", ["--seeds", "0-1"], "--seeds needs --backend ray"),
        ("train", ["--backend", "ray", "--seeds", "0-1", "--seed", "3"], "--seed conflicts with --seeds"),
        ("train", ["--backend", "ray", "--seeds", "3-1"], "--seeds: bad seed range '3-1'"),
        ("train", ["--backend", "ray", "--resume", "runs/x"], "--resume is for one plain run"),
        ("train", ["--backend", "ray", "--cpus-per-trial", "0"], "--cpus-per-trial must be > 0"),
        ("leaderboard", ["--ray-address", "auto"], "--ray-address needs --backend ray"),
    ],
)
def test_bad_backend_flags_are_one_line_errors(tmp_path, capsys, command, argv, message):
    out = tmp_path / "out"
    main = {"evaluate": evaluate.main, "train": train.main, "leaderboard": leaderboard.main}[command]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("command", ["evaluate", "train", "leaderboard"])
def test_backend_ray_without_ray_says_how_to_install_it(tmp_path, monkeypatch, capsys, command):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without the extra
    out = tmp_path / "out"
    argv = {"evaluate": ["--policies", "topology", "--seeds", "0"], "train": ["--seeds", "0-1"], "leaderboard": ["--scenarios", "default"]}[command]
    main = {"evaluate": evaluate.main, "train": train.main, "leaderboard": leaderboard.main}[command]
    assert main([*argv, "--backend", "ray", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--backend ray needs Ray, which is not installed here: pip install -e .[ray]" in err
    assert not out.exists()
