"""Model selection on the validation seeds: what a validation episode runs on, each setting's best
heuristic, a model's results on a setting and the score that ranks models.

train.py's periodic evaluation keeps the model with the lowest `validation_score` (agents.training);
agents.reselect redoes the selection on other seeds, agents.anchor scores a model anchored at each
margin by the same rule, and agents.distill labels its teacher's settings with `Validation`.
Nothing here imports torch: the models scored are loaded by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from agents.config import Setting, TrainConfig
from agents.evaluation import model_actor, run_actor, run_baseline
from envs.cluster.topology import Cluster
from envs.decision.candidates import WaitGuard
from envs.gym.env import GpuClusterEnv
from envs.sim.metrics import episode_metrics
from envs.sim.objective import Objective
from envs.sim.simulator import SimConfig
from envs.workload.generator import WorkloadSpec

if TYPE_CHECKING:
    from sb3_contrib import MaskablePPO


@dataclass(frozen=True)
class EvalSetting:
    """What a validation episode runs on: the config's cluster and workload, or its scenario's
    (with the scenario's objective, which then scores model selection)."""

    cluster: Cluster
    spec: WorkloadSpec
    num_jobs: int | None
    queue_window: int
    objective: Objective
    max_checkpoint_s: float
    wait_guard: WaitGuard | None = None  # the env's bound on WAIT: the model is selected with the mask it trains with


def eval_setting(cfg: TrainConfig | dict) -> EvalSetting:
    """Resolved by the env itself (a scenario's settings, then the config's env overrides), once:
    for a config's own setting, or for env arguments (a `Setting`'s)."""
    env = GpuClusterEnv(**(cfg if isinstance(cfg, dict) else cfg.env_kwargs()))
    return EvalSetting(env.cluster, env.workload_spec, env.num_jobs, env.queue_window, env.objective, env.sim_config.max_checkpoint_s,
                       env.wait_guard)


def run_policy_episode(model: MaskablePPO, e: EvalSetting, seed: int, actor=None) -> dict:
    """Metrics of one deterministic evaluation episode of `model` on workload `seed`; "objective"
    is the setting's (the scenario's) objective. `actor`: model -> the actor that acts
    (default: the model's deterministic choice; agents.anchor anchors it to a heuristic)."""
    sim, _ = run_actor((actor or model_actor)(model), e.cluster, e.spec, seed, e.num_jobs, e.queue_window, e.objective, e.max_checkpoint_s,
                       e.wait_guard)
    return episode_metrics(sim, e.objective)


def baseline_objective(name: str, e: EvalSetting, seed: int) -> float:
    sim, _ = run_baseline(name, e.cluster, e.spec, seed, e.num_jobs, e.queue_window, SimConfig(max_checkpoint_s=e.max_checkpoint_s))
    return episode_metrics(sim, e.objective)["objective"]


def best_baseline(cfg: TrainConfig, seeds: list[int], setting: EvalSetting) -> tuple[str, float]:
    """The baseline with the lowest mean objective (average JCT in hours by default) on `seeds`
    of `setting` (or the configured one)."""
    names = cfg.eval["baselines"] if cfg.eval["baseline"] == "auto" else [cfg.eval["baseline"]]
    scores = {n: float(np.mean([baseline_objective(n, setting, s) for s in seeds])) for n in names}
    name = min(scores, key=scores.get)
    return name, scores[name]


@dataclass(frozen=True)
class Validation(Setting):
    """One setting model selection scores (agents.config.Setting), with its evaluation setting
    and its best baseline on the validation seeds."""

    setting: EvalSetting
    baseline: str
    baseline_objective: float


def setting_result(model: MaskablePPO, v: Validation, actor=None, per_seed: bool = False) -> dict:
    """`model` (acting through `actor`, as in `run_policy_episode`) on the validation seeds of
    one setting: mean objective and average JCT, and the relative difference of the mean
    objective to the setting's best baseline; with `per_seed`, also each seed's objective
    ("objectives", in the order of the seeds)."""
    runs = [run_policy_episode(model, v.setting, s, actor) for s in v.seeds]
    obj = float(np.mean([m["objective"] for m in runs]))
    out = {"name": v.name, "objective": obj, "avg_jct_s": float(np.mean([m["avg_jct_s"] for m in runs])),
           "baseline": v.baseline, "baseline_objective": v.baseline_objective,
           "rel_diff": (obj - v.baseline_objective) / v.baseline_objective}
    if per_seed:
        out["objectives"] = [float(m["objective"]) for m in runs]
    return out


def validation_score(per: list[dict]) -> dict:
    """The model-selection entry of a model's `setting_result`s (lower "score" is better): on one
    setting its mean objective; on several the mean over them of the relative difference to each
    one's best baseline, so that no setting's objective scale outweighs another's. Objective,
    baseline objective and average JCT are means over the settings."""
    mean = lambda key: float(np.mean([p[key] for p in per]))  # noqa: E731
    obj, rel = mean("objective"), mean("rel_diff")
    entry = {"objective": obj, "avg_jct_s": mean("avg_jct_s"), "baseline": per[0]["baseline"] if len(per) == 1 else "per setting",
             "baseline_objective": mean("baseline_objective"), "rel_diff": rel, "score": obj if len(per) == 1 else rel}
    if len(per) > 1:
        entry["settings"] = per
    return entry


def validations(cfg: TrainConfig) -> list[Validation]:
    """The config's settings (one, or each distinct env_mix entry) with their best baselines."""
    out = []
    for st in cfg.settings():
        setting = eval_setting(st.env_kwargs)
        out.append(Validation(st.name, st.env_kwargs, st.seeds, setting, *best_baseline(cfg, list(st.seeds), setting)))
    return out

