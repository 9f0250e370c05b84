"""train.py end to end with tiny budgets: what a run writes, resuming, and bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parent.parent

TINY = {
    "cluster": "h100-4node",
    "workload": "llm-mix",
    "seed": 0,
    "device": "cpu",
    "total_timesteps": 128,
    "n_envs": 2,
    "checkpoint_every_timesteps": 64,
    "env": {"num_jobs": 12},
    "ppo": {"n_steps": 32, "batch_size": 32, "n_epochs": 1},
    "policy": {"d_model": 16, "n_heads": 2, "n_layers": 1, "encoder_hidden": [16], "head_hidden": [16], "value_hidden": [16]},
    "eval": {"every_timesteps": 64, "seeds": "500", "baselines": ["topology", "sjf"]},
}


def write_config(tmp_path: Path, **overrides) -> Path:
    cfg = json.loads(json.dumps(TINY))
    cfg.update(overrides)
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def run_train(*args: str) -> subprocess.CompletedProcess:
    """train.py as a real process (the command line end to end)."""
    return subprocess.run([sys.executable, "train.py", "--no-progress", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def train_in_process(*args: str):
    """train.py's `main` with this command line, in this process (no interpreter and torch
    start per case): its exit code, stdout and stderr, as `run_train` gives them."""
    import train

    from tests.helpers import run_main

    return run_main(train.main, ["--no-progress", *args])


def tb_scalar_tags(run: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for f in run.glob("tb/**/events.out.tfevents*"):
        ea = EventAccumulator(str(f))
        ea.Reload()
        tags |= set(ea.Tags()["scalars"]) | {f"text:{t}" for t in ea.Tags().get("tensors", [])}
    return tags


@pytest.mark.slow  # over 20 s (make test-fast leaves it out)
def test_smoke_run_writes_model_config_and_tensorboard_then_resumes(tmp_path):
    cfg = write_config(tmp_path)
    out = tmp_path / "run"
    r = run_train("--config", str(cfg), "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    for name in ("model.zip", "last_model.zip", "config.yaml", "version.json", "eval.json", "summary.json", "checkpoints/latest.zip"):
        assert (out / name).exists(), name
    assert yaml.safe_load((out / "config.yaml").read_text())["cluster"] == "h100-4node"
    assert json.loads((out / "version.json").read_text())["commit"]
    tags = tb_scalar_tags(out)
    assert {"time/fps", "train/value_loss", "eval/avg_jct_h", "episode/avg_jct_h"} <= tags
    assert any(t.startswith("text:config") for t in tags)
    assert str(out / "model.zip") in r.stdout  # prints where everything was written
    assert str(out / "export") in r.stdout  # the serving export of model.zip (tests/test_export.py)
    meta = json.loads((out / "export" / "policy.json").read_text())
    assert (out / "export" / "policy.onnx").is_file() and meta["source_model"] == str(out / "model.zip")
    commit = json.loads((out / "version.json").read_text())["commit"]
    assert meta["train_config"]["cluster"] == "h100-4node" and meta["git_commit"] == (None if commit == "unknown" else commit)
    first = json.loads((out / "summary.json").read_text())["timesteps"]
    assert first >= 128
    # Each evaluated model with the seconds since the run started, and the run's whole time.
    walls = [h["run_wall_s"] for h in json.loads((out / "eval.json").read_text())]
    total = json.loads((out / "summary.json").read_text())["run_wall_s"]
    assert walls == sorted(walls) and 0 < walls[0] and walls[-1] <= total
    # A run made before run_wall_s: the curve takes the times from TensorBoard and the files.
    from benchmarks.training_curve import curve

    legacy = tmp_path / "legacy"
    shutil.copytree(out, legacy)  # copy2: the files' times are kept
    history = json.loads((legacy / "eval.json").read_text())
    (legacy / "eval.json").write_text(json.dumps([{k: v for k, v in h.items() if k != "run_wall_s"} for h in history]))
    os.utime(legacy / "eval.json", (os.stat(out / "eval.json").st_atime, os.stat(out / "eval.json").st_mtime))
    derived = [r["minutes"] * 60 for r in curve(legacy)[0]]
    assert len(derived) == len(walls) and all(abs(d - w) < 5.0 for d, w in zip(derived, walls)), (derived, walls)

    # --resume continues the timestep count from the checkpoint, with the run's own config.
    r = run_train("--resume", str(out), "--total-timesteps", "256")
    assert r.returncode == 0, r.stderr[-2000:]
    resumed = json.loads((out / "summary.json").read_text())["timesteps"]
    assert resumed >= 256 and resumed > first
    assert json.loads((out / "checkpoints/state.json").read_text())["timesteps"] == resumed
    after = [h["run_wall_s"] for h in json.loads((out / "eval.json").read_text())]
    assert after[: len(walls)] == walls and after[-1] > walls[-1]  # a resumed run counts on
    # The objective-against-wall-time curve reads them (benchmarks/training_curve.py).
    rows, run_min = curve(out)
    assert [r["minutes"] for r in rows] == [w / 60 for w in after] and run_min >= after[-1] / 60


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"n_env": 2}, "n_env: unknown key"),
        ({"ppo": {"n_steps": "many"}}, "ppo.n_steps: must be int"),
        ({"policy": {"d_model": 16, "width": 3}}, "policy.width: unknown key"),
        ({"env": {"queue_windows": 4}}, "env.queue_windows: unknown key"),
        ({"eval": {"seeds": "9-3"}}, "eval.seeds"),
        ({"cluster": "no-such-cluster"}, "no-such-cluster"),
        ({"vec_env": "threads"}, "vec_env: 'threads' is not one of dummy, subproc, batched"),
        ({"vec_workers": 1}, "vec_workers: only the batched vec env has workers"),
        ({"vec_env": "batched", "vec_workers": 3}, "vec_workers: 3 workers for 2 envs"),
        ({"env_mix": [{"queue_window": 4}]}, "env_mix[0].queue_window: unknown key"),
        ({"env_mix": [{"cluster": "no-such-cluster"}]}, "env_mix[0]: "),
        ({"env_mix": [{}, {}, {}]}, "env_mix: 3 entries for 2 envs"),
        ({"env": {"wait_guard": {"overdue_factor": -1}}}, "env.wait_guard.overdue_factor: must be > 0"),
        ({"torch_threads": 0}, "torch_threads: must be 'auto' or an integer >= 1, got 0"),
        ({"torch_threads": "all"}, "torch_threads: must be 'auto' or an integer >= 1, got 'all'"),
    ],
)
def test_bad_config_fails_at_start_naming_the_key(tmp_path, overrides, message):
    r = train_in_process("--config", str(write_config(tmp_path, **overrides)), "--out", str(tmp_path / "run"))
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()  # nothing was started


def test_bad_torch_threads_flag_fails_at_start(tmp_path):
    """The one bad command line given to a real train.py process (the others run its `main` here)."""
    r = run_train("--config", str(write_config(tmp_path)), "--out", str(tmp_path / "run"), "--torch-threads", "0")
    assert r.returncode == 2
    assert "--torch-threads" in r.stderr and "must be >= 1" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()


def test_run_trains_with_its_thread_count_records_it_and_its_config_reproduces_it(tmp_path):
    """torch_threads is applied for the run and written into config.yaml and version.json; the
    caller's own count comes back afterwards; and training again from the run's config.yaml, in a
    process with another count, gives the same weights."""
    from agents.config import load_train_config, train_config_from_dict
    from agents.training import train

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        first = tmp_path / "first"
        train(train_config_from_dict({**TINY, "torch_threads": 1}, "tiny.yaml"), first, progress_bar=False, log=lambda *a: None)
        assert torch.get_num_threads() == 2  # the caller's count is given back
        assert yaml.safe_load((first / "config.yaml").read_text())["torch_threads"] == 1
        assert json.loads((first / "version.json").read_text())["torch_threads"] == 1
        torch.set_num_threads(3)
        again = tmp_path / "again"
        train(load_train_config(first / "config.yaml"), again, progress_bar=False, log=lambda *a: None)
        assert json.loads((again / "version.json").read_text())["torch_threads"] == 1
        # "auto" keeps the process's count, and the run states which it was.
        auto = tmp_path / "auto"
        train(train_config_from_dict({**TINY, "total_timesteps": 64}, "tiny.yaml"), auto, progress_bar=False, log=lambda *a: None)
        assert yaml.safe_load((auto / "config.yaml").read_text())["torch_threads"] == 3
    finally:
        torch.set_num_threads(before)
    from agents.policy import load_model

    weights = [[p.detach() for p in load_model(run / "last_model.zip", device="cpu").policy.parameters()] for run in (first, again)]
    assert all(torch.equal(a, b) for a, b in zip(*weights))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_gpu_is_a_clear_error(tmp_path):
    r = train_in_process("--config", str(write_config(tmp_path)), "--out", str(tmp_path / "run"), "--device", "cuda")
    assert r.returncode == 2
    assert "no CUDA device is available" in r.stderr and "Traceback" not in r.stderr


def test_subprocess_workers_give_the_same_episodes_as_in_process_envs():
    from agents.config import train_config_from_dict
    from agents.training import make_vec_env

    def rollout(kind: str) -> list:
        cfg = train_config_from_dict({**TINY, "vec_env": kind}, "<test>")
        vec = make_vec_env(cfg)
        try:
            obs, out = vec.reset(), []
            for _ in range(40):
                masks = np.stack(vec.env_method("action_masks"))
                actions = masks.argmax(axis=1)  # first legal candidate of each env
                obs, rewards, dones, _ = vec.step(actions)
                out.append((obs["candidates"].copy(), rewards.copy(), dones.copy()))
            return out
        finally:
            vec.close()

    a, b = rollout("dummy"), rollout("subproc")
    for (oa, ra, da), (ob, rb, db) in zip(a, b):
        np.testing.assert_array_equal(oa, ob)
        np.testing.assert_allclose(ra, rb, rtol=1e-6)  # DummyVecEnv stores rewards as float32
        np.testing.assert_array_equal(da, db)


SHIPPED = sorted((REPO / "configs" / "train").rglob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.relative_to(REPO / "configs" / "train").with_suffix("").as_posix() for p in SHIPPED])
def test_every_shipped_train_config_loads(path):
    """Each file in configs/train and its subfolders is a train config or a Ray Tune sweep (a `search:` over a config)."""
    from agents.config import load_train_config

    if "search" in yaml.safe_load(path.read_text()):
        from agents.tuning import load_sweep

        sweep = load_sweep(path)
        assert sweep.num_samples >= 1 and load_train_config(sweep.config).total_timesteps > 0
        return
    cfg = load_train_config(path)
    assert cfg.total_timesteps > 0 and cfg.settings()


def test_a_config_with_a_base_states_only_what_it_changes(tmp_path):
    """`base:` merges a variant over its base: mappings key by key at any depth, lists and scalars
    replaced; bases chain; a base is a name in configs/train/ or a path beside the file; the run's
    config.yaml is the merged config; a sweep over such a config searches the merged one."""
    from agents.config import load_train_config
    from agents.tuning import load_sweep

    (tmp_path / "sub").mkdir()
    base = write_config(tmp_path / "sub")  # sub/tiny.yaml
    (tmp_path / "variant.yaml").write_text(yaml.safe_dump(
        {"base": "sub/tiny.yaml", "ppo": {"n_epochs": 2}, "policy": {"encoder_hidden": [32]}, "eval": {"baselines": ["sjf"]}}))
    (tmp_path / "variant2.yaml").write_text(yaml.safe_dump({"base": "variant.yaml", "seed": 5, "ppo": {"target_kl": 0.02}}))
    b, v = load_train_config(base), load_train_config(tmp_path / "variant2.yaml")
    assert v.seed == 5 and v.ppo["target_kl"] == 0.02 and v.ppo["n_epochs"] == 2
    assert v.ppo["n_steps"] == b.ppo["n_steps"] == 32  # kept from the base, beside the changed key
    assert v.policy["encoder_hidden"] == [32] and v.policy["head_hidden"] == [16]
    assert v.eval["baselines"] == ["sjf"] and v.eval["seeds"] == b.eval["seeds"]
    assert v.total_timesteps == b.total_timesteps and v.env == b.env
    v.dump(tmp_path / "dumped.yaml")
    assert "base" not in yaml.safe_load((tmp_path / "dumped.yaml").read_text())
    assert load_train_config(tmp_path / "dumped.yaml").to_dict() == v.to_dict()
    # by name: a shipped config as the base
    (tmp_path / "quick-lr.yaml").write_text("base: research/ppo-quick\nppo: {learning_rate: 0.0001}\n")
    q, shipped = load_train_config(tmp_path / "quick-lr.yaml"), load_train_config("research/ppo-quick")
    assert q.ppo["learning_rate"] == 1e-4 and {**q.to_dict(), "ppo": shipped.ppo} == shipped.to_dict()
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(
        {"config": str(tmp_path / "variant2.yaml"), "num_samples": 2, "search": {"ppo.clip_range": {"choice": [0.1, 0.3]}}}))
    assert load_sweep(tmp_path / "sweep.yaml").num_samples == 2


@pytest.mark.parametrize("body, message", [
    ("base: no-such-config\n", "not a file and not a known train config"),
    ("base: missing.yaml\n", "no such file"),
    ("base: 3\n", "must be a train config's name or a YAML path"),
    ("base: loop-b.yaml\n", "a cycle"),
])
def test_a_bad_base_is_a_clear_error_naming_the_file_and_field(tmp_path, body, message):
    from agents.config import ConfigError, load_train_config

    (tmp_path / "loop-a.yaml").write_text(body)
    (tmp_path / "loop-b.yaml").write_text("base: loop-a.yaml\nseed: 1\n")
    with pytest.raises(ConfigError) as e:
        load_train_config(tmp_path / "loop-a.yaml")
    assert str(tmp_path / "loop-a.yaml") in str(e.value) and ": base: " in str(e.value) and message in str(e.value)
    r = train_in_process("--config", str(tmp_path / "loop-a.yaml"), "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()


# The variants docs/research/learned-rows.md compares with their base config, and the only keys each may change.
VARIANTS = {
    "research/distill-default-s8": ("distill-default", {("distill", "lookahead")}),
    "research/distill-slo-preempt-s8": ("distill-slo-preempt", {("distill", "lookahead")}),
    "research/distill-hetero-s8": ("distill-hetero", {("distill", "lookahead")}),
    "research/distill-topology-stress-s8": ("distill-topology-stress", {("distill", "lookahead")}),
    "research/distill-philly-s8": ("distill-philly", {("distill", "lookahead")}),
    "research/distill-bursty-s8": ("distill-bursty", {("distill", "lookahead")}),
    "research/distill-slo-preempt-s8-long": ("research/distill-slo-preempt-s8", {("total_timesteps",)}),
    "research/distill-slo-preempt-s8-confirm": ("research/distill-slo-preempt-s8", {("distill", "lookahead")}),
    "research/distill-slo-preempt-s8-soft": ("research/distill-slo-preempt-s8", {("distill", "temperature")}),
    "research/distill-hetero-s8-guard": ("research/distill-hetero-s8", {("env", "wait_guard", "overdue_factor"), ("env", "wait_guard", "min_wait_s")}),
    "research/distill-generalist-s8-x3": ("distill-generalist-s8", {("distill", "episodes")}),
    "research/distill-topology-stress-s16": ("research/distill-topology-stress-s8", {("distill", "lookahead"), ("distill", "teacher")}),
}


def _flat(d: dict, prefix: tuple = ()) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "lookahead":
            out.update(_flat(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_variant_config_changes_only_what_its_comparison_varies(variant):
    """The paired comparisons of docs/research/learned-rows.md (8 samples against 4, a longer PPO) hold only if nothing
    else differs between the two configs."""
    from agents.config import load_train_config

    base, allowed = VARIANTS[variant]
    a = _flat(load_train_config(REPO / "configs" / "train" / f"{base}.yaml").to_dict())
    b = _flat(load_train_config(REPO / "configs" / "train" / f"{variant}.yaml").to_dict())
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    assert changed == allowed, f"{variant} differs from {base} in {sorted(changed)}"
