"""MaskablePPO set-up, callbacks and the training loop behind train.py.

A run directory holds:
    config.yaml        the resolved configuration (file + command-line overrides)
    version.json       code version (git commit, dirty flag), package versions, torch threads, device
    tb/                TensorBoard logs: SB3 losses and fps, scheduling metrics, evaluations, config
    checkpoints/       latest.zip + vecnormalize.pkl + state.json, for --resume
    model.zip          the best model on the validation seeds (what evaluate.py should load)
    last_model.zip     the weights at the end of training
    eval.json          every periodic evaluation (with "run_wall_s": seconds since the run started)
    stages/            every evaluated model (NN-STAGE-TIMESTEPS.zip, named by eval.json's "model"), so
                       that selection can be redone on other seeds without training (agents/reselect.py)
    export/            policy.onnx + policy.json of model.zip, for serving (written by agents/run.py: agents/export.py)
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import torch as th
from sb3_contrib import MaskablePPO
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.logger import TensorBoardOutputFormat
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecNormalize

import envs  # noqa: F401  (registers the env)
from agents.config import TrainConfig
from agents.device import resolve_device
from agents.policy import CandidateScoringPolicy, load_model
from agents.selection import Validation, setting_result, validation_score, validations
from envs.decision.features import FEATURE_SCHEMA_VERSION
from envs.gym.env import TRAIN_SEEDS, GpuClusterEnv
from envs.gym.vec import BatchedClusterEnv

REPO_ROOT = Path(__file__).resolve().parent.parent


def code_version() -> dict:
    """Git commit and whether the tree had uncommitted changes ('unknown' outside a checkout)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "HEAD") or "unknown"
    return {"commit": commit, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def make_vec_env(cfg: TrainConfig) -> VecEnv:
    """n_envs copies of the env, each drawing its workloads from the training seed range."""
    # Worker processes pay off where cores outnumber the trainer's needs (a GPU machine);
    # every kind gives the same episodes for the same seeds.
    kwargs = cfg.episode_env_kwargs()
    if cfg.vec_env == "batched":
        vec: VecEnv = BatchedClusterEnv(kwargs, workers=cfg.vec_workers)
    else:
        fns = [lambda kw=kw: Monitor(GpuClusterEnv(**kw)) for kw in kwargs]
        vec = SubprocVecEnv(fns) if cfg.vec_env == "subproc" else DummyVecEnv(fns)
    # First resets draw workloads from the training range too, never from evaluation seeds.
    vec.seed(TRAIN_SEEDS[0] + 1000 * cfg.seed)
    return vec


def build_model(cfg: TrainConfig, vec: VecEnv, device: th.device, tensorboard_log: str | None) -> MaskablePPO:
    policy_kwargs = dict(cfg.policy, feature_schema_version=FEATURE_SCHEMA_VERSION)  # recorded in the saved model
    for k in ("encoder_hidden", "head_hidden", "value_hidden"):
        if k in policy_kwargs:
            policy_kwargs[k] = tuple(policy_kwargs[k])
    return MaskablePPO(
        CandidateScoringPolicy,
        vec,
        policy_kwargs=policy_kwargs,
        seed=cfg.seed,
        device=device,
        tensorboard_log=tensorboard_log,
        verbose=0,
        **cfg.ppo,
    )


class SchedulingMetricsCallback(BaseCallback):
    """Logs the scheduling metrics of every finished training episode, and the config as text."""

    KEYS = ("avg_jct_s", "p99_jct_s", "avg_slowdown", "gpu_utilisation", "preemptions", "inference_slo_misses")

    def __init__(self, config_text: str):
        super().__init__()
        self.config_text = config_text

    def _on_training_start(self) -> None:
        for fmt in self.logger.output_formats:
            if isinstance(fmt, TensorBoardOutputFormat):
                fmt.writer.add_text("config", "```\n" + self.config_text + "\n```", self.num_timesteps)
                fmt.writer.flush()

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", []):
            m = info.get("metrics")
            if m is None:
                continue
            for k in self.KEYS:
                v = m[k] / 3600.0 if k.endswith("_s") else m[k]
                self.logger.record_mean(f"episode/{k[:-2] + '_h' if k.endswith('_s') else k}", v)
        return True


class EvalAndCheckpointCallback(BaseCallback):
    """Every `eval_every` steps: evaluate on the validation seeds, keep the best model; every
    `checkpoint_every` steps: write a resumable checkpoint.

    The score that selects the model is `validation_score`'s (agents.selection)."""

    def __init__(self, cfg: TrainConfig, out: Path, vals: list[Validation], eval_every: int, checkpoint_every: int,
                 started: float | None = None):
        super().__init__()
        self.cfg, self.out = cfg, out
        self.validations = vals
        self.eval_every, self.checkpoint_every = eval_every, checkpoint_every
        self.history: list[dict] = json.loads((out / "eval.json").read_text()) if (out / "eval.json").exists() else []
        self.best = min((h.get("score", h["objective"]) for h in self.history), default=np.inf)
        self._next_eval = (self._last(self.eval_every) + self.eval_every) if self.history else self.eval_every
        self._next_ckpt = checkpoint_every
        # When the run started (time.perf_counter()), for each entry's "run_wall_s": `started`, else
        # (a resumed run) counted on from its last evaluation, the time between that and the resume unknown.
        self.started = started if started is not None else (
            time.perf_counter() - (self.history[-1].get("run_wall_s", 0.0) if self.history else 0.0))

    def _last(self, every: int) -> int:
        return max((h["timesteps"] for h in self.history), default=0)

    def _on_training_start(self) -> None:
        self._next_ckpt = self.num_timesteps + self.checkpoint_every
        self._next_eval = max(self._next_eval, self.num_timesteps + 1)

    def evaluate(self, stage: str = "ppo") -> dict:
        """The model's score on the validation seeds (see the class); the best so far is model.zip.
        The entry's objective, baseline objective and average JCT are means over the settings.
        Every evaluated model is kept in stages/ (the entry's "model")."""
        t0 = time.perf_counter()
        entry = validation_score([setting_result(self.model, v) for v in self.validations])
        if getattr(self.model, "_logger", None) is not None:  # not yet set before the first learn()
            self.logger.record("eval/objective", entry["objective"])
            self.logger.record("eval/baseline_objective", entry["baseline_objective"])
            self.logger.record("eval/rel_diff_vs_baseline", entry["rel_diff"])
            self.logger.record("eval/avg_jct_h", entry["avg_jct_s"] / 3600)
            for p in entry.get("settings", []):
                self.logger.record(f"eval_setting/{p['name']}/rel_diff_vs_baseline", p["rel_diff"])
        name = f"stages/{len(self.history):02d}-{stage}-{int(self.num_timesteps)}.zip"
        (self.out / "stages").mkdir(exist_ok=True)
        self.model.save(self.out / name)
        now = time.perf_counter()
        entry = {"timesteps": int(self.num_timesteps), "stage": stage, **entry, "model": name, "eval_wall_s": now - t0,
                 "run_wall_s": now - self.started}
        self.history.append(entry)
        (self.out / "eval.json").write_text(json.dumps(self.history, indent=1))
        if entry["score"] < self.best:
            self.best = entry["score"]
            shutil.copyfile(self.out / name, self.out / "model.zip")
        return entry

    def checkpoint(self) -> None:
        ck = self.out / "checkpoints"
        ck.mkdir(exist_ok=True)
        self.model.save(ck / "latest.zip")
        env = self.model.get_env()
        if isinstance(env, VecNormalize):
            env.save(str(ck / "vecnormalize.pkl"))
        (ck / "state.json").write_text(json.dumps({"timesteps": int(self.num_timesteps)}))

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next_eval:
            self.evaluate()
            self._next_eval += self.eval_every
        if self.num_timesteps >= self._next_ckpt:
            self.checkpoint()
            self._next_ckpt += self.checkpoint_every
        return True

    def _on_training_end(self) -> None:
        self.checkpoint()


def train(cfg: TrainConfig, out: Path, resume: bool = False, progress_bar: bool = True, log=print) -> dict:
    """Train (or resume) a run in `out`; returns a summary with the paths written. Runs with
    cfg.torch_threads intra-op threads ("auto": torch's default), resolved into cfg, and gives the
    caller back its own count afterwards."""
    before = th.get_num_threads()
    if cfg.torch_threads != "auto":
        th.set_num_threads(cfg.torch_threads)
    cfg.torch_threads = th.get_num_threads()  # config.yaml and version.json state the count used
    try:
        return _train(cfg, out, resume, progress_bar, log)
    finally:
        th.set_num_threads(before)


def _train(cfg: TrainConfig, out: Path, resume: bool, progress_bar: bool, log) -> dict:
    started = time.perf_counter()  # eval.json's and summary.json's run_wall_s count from here
    device = resolve_device(cfg.device)
    out.mkdir(parents=True, exist_ok=True)
    set_random_seed(cfg.seed)
    vec: VecEnv = make_vec_env(cfg)
    ck = out / "checkpoints"
    if resume:
        if not (ck / "latest.zip").exists():
            raise FileNotFoundError(f"--resume {out}: no checkpoint at {ck / 'latest.zip'}")
        if cfg.normalize_reward and (ck / "vecnormalize.pkl").exists():
            vec = VecNormalize.load(str(ck / "vecnormalize.pkl"), vec)
        model = load_model(ck / "latest.zip", env=vec, device=device)
        model.tensorboard_log = str(out / "tb")
    else:
        if cfg.normalize_reward:
            vec = VecNormalize(vec, norm_obs=False, norm_reward=True, gamma=cfg.ppo["gamma"])
        model = build_model(cfg, vec, device, str(out / "tb"))
        cfg.dump(out / "config.yaml")
    version = {
        **code_version(), "python": platform.python_version(), "torch": th.__version__, "torch_threads": cfg.torch_threads,
        "device": str(device), "cuda": th.cuda.get_device_name(device) if device.type == "cuda" else None,
    }
    (out / "version.json").write_text(json.dumps(version, indent=1))

    vals = validations(cfg)
    for v in vals:
        log(f"{v.name + ': ' if len(vals) > 1 else ''}validation seeds {v.seeds[0]}-{v.seeds[-1]}: best baseline '{v.baseline}', "
            f"objective {v.baseline_objective:.3f}")
    eval_cb = EvalAndCheckpointCallback(cfg, out, vals, cfg.eval["every_timesteps"], cfg.checkpoint_every_timesteps,
                                        None if resume else started)
    if not resume and cfg.bc["episodes"] > 0:
        from agents.imitation import clone, collect

        teacher = vals[0].baseline if cfg.bc["baseline"] == "auto" else cfg.bc["baseline"]
        t0 = time.perf_counter()
        demos = collect(GpuClusterEnv(**vals[0].env_kwargs), teacher, cfg.bc["episodes"], cfg.ppo["gamma"], cfg.seed)  # on the first setting
        stats = clone(model, demos, cfg.bc["epochs"], cfg.bc["batch_size"], cfg.bc["learning_rate"], cfg.seed)
        log(f"behaviour cloning of '{teacher}': {stats['samples']} decisions, accuracy {stats['accuracy']:.3f}, {time.perf_counter() - t0:.0f} s")
        (out / "bc.json").write_text(json.dumps({"teacher": teacher, **stats}, indent=1))
        eval_cb.init_callback(model)
        eval_cb.evaluate("bc")
    if not resume and cfg.distill["rounds"] > 0:
        from agents.distill import distill

        eval_cb.init_callback(model)
        distill(model, cfg, out, vals, eval_cb, log)
    callbacks = CallbackList([SchedulingMetricsCallback((out / "config.yaml").read_text()), eval_cb])
    remaining = cfg.total_timesteps - model.num_timesteps
    t0 = time.perf_counter()
    start_steps = model.num_timesteps
    if remaining > 0:
        model.learn(remaining, callback=callbacks, reset_num_timesteps=not resume, progress_bar=progress_bar, tb_log_name="run")
    wall = time.perf_counter() - t0
    if not eval_cb.history or eval_cb.history[-1]["timesteps"] != model.num_timesteps:
        eval_cb.evaluate()
    model.save(out / "last_model.zip")
    steps = model.num_timesteps - start_steps
    best = min(eval_cb.history, key=lambda h: h.get("score", h["objective"]))
    summary = {
        "timesteps": int(model.num_timesteps), "wall_s": wall, "env_steps_per_s": steps / wall if wall > 0 else 0.0,
        "run_wall_s": time.perf_counter() - eval_cb.started,  # the whole run: baselines, teacher, labels, PPO, evaluations
        "best_validation_objective": best["objective"], "best_validation_rel_diff": best["rel_diff"],
        "best_validation_score": best.get("score", best["objective"]),  # what selected model.zip (EvalAndCheckpointCallback)
        "baseline": best["baseline"], "baseline_objective": best["baseline_objective"],
        **({"settings": [{"name": v.name, "env": v.env_kwargs, "seeds": list(v.seeds), "baseline": v.baseline,
                          "baseline_objective": v.baseline_objective} for v in vals]} if len(vals) > 1 else {}),
        "model": str(out / "model.zip"), "last_model": str(out / "last_model.zip"), "tensorboard": str(out / "tb"),
        "config": str(out / "config.yaml"), "checkpoint": str(ck / "latest.zip"), "device": str(device),
        "torch_threads": cfg.torch_threads,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
