"""Distillation of a teacher into the candidate-scoring policy (DAgger), before PPO.

The teacher is the honest `lookahead` (agents.lookahead: it simulates sampled futures at every
decision) or a heuristic. The student is the network PPO then trains: it decides in one forward
pass, so it can be served. Round 0 follows the teacher; round r follows the teacher's action
with probability `beta_decay ** r` and the student's otherwise, so later rounds visit the states
the student's own mistakes lead to (Ross et al., AISTATS 2011). Every visited state is labelled
with the teacher's choice, the labels of all rounds are aggregated, and the student is fitted to
them with the behaviour-cloning loss of agents.imitation (cross-entropy on the masked logits,
its value head on the scaled returns).

Episodes are labelled in parallel worker processes (`agents.parallel.run_tasks`); each task is
one training-range workload seed and gives the same labels in any worker. The student reaches a
worker as a saved model file (`distill/student-rN.zip` in the run folder).

`teacher: auto` distils the lookahead only where it beats the best heuristic on the validation
seeds; elsewhere the student clones the best heuristic and PPO has to find the gain alone. That
check is deterministic and the same for every training seed of a config, so its result is kept
in a cache file (`check_cache_dir()`) keyed by everything it depends on: the episodes' tasks, the
scenario, cluster and workload files, the workloads' job lists and the simulator's and the
lookahead's source. A change to any of them is a new key; `distill.check_cache: false` turns the
cache off.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agents.imitation import Demonstrations, clone, discounted_returns
from agents.parallel import run_tasks
from envs.gym.env import TRAIN_SEEDS

TEACHER_RNG_TAG = 0xD1A6  # the student/teacher coin flips of a labelling episode
ROOT = Path(__file__).resolve().parent.parent
# What a lookahead episode's result depends on, besides its task and config files.
CHECK_SOURCES = ("envs", "baselines", "agents/lookahead.py", "agents/evaluation")


@dataclass(frozen=True)
class LabelTask:
    """One labelled episode: workload `seed` of the env `env_kwargs`, following the teacher with
    probability `beta` per decision and else the student saved at `student` (None: teacher only)."""

    env_kwargs: dict
    seed: int
    teacher: str  # "lookahead" or a baseline name
    heuristic: str  # the best heuristic: its choices are recorded to measure agreement against
    student: str | None
    beta: float
    gamma: float
    lookahead: dict = field(default_factory=dict)  # the training config's distill.lookahead (envs.scenario.lookahead_search)


def label_episode(task: LabelTask) -> dict:
    """Run one episode, recording at every decision the observation, the teacher's choice, the
    best heuristic's choice and the action taken; returns numpy arrays and the episode's stats."""
    from agents.lookahead import Lookahead
    from baselines import make_baseline
    from envs.gym.env import GpuClusterEnv

    env = GpuClusterEnv(**task.env_kwargs)
    obs, _ = env.reset(seed=task.seed)
    heuristic = make_baseline(task.heuristic, seed=task.seed)
    if task.teacher == "lookahead":
        from envs.scenario import lookahead_search

        teacher = Lookahead(env.sim, env.workload_spec, lookahead_search(env.scenario, task.lookahead), env.objective, env.queue_window,
                            clairvoyant=False, seed=task.seed)
    else:
        teacher = make_baseline(task.teacher, seed=task.seed)
    student = None
    if task.student is not None and task.beta < 1.0:
        from agents.policy import load_model

        student = load_model(task.student, device="cpu")
    coin = np.random.default_rng([task.seed, TEACHER_RNG_TAG])
    cands, globs, masks, labels, heur, taken, rewards, gains = [], [], [], [], [], [], [], []
    K = len(env.cset.mask)
    done = env.sim.done
    while not done:
        state, cset = env.state, env.cset
        h = heuristic.select(state, cset)
        t = teacher.select(state, cset)
        gain = np.full(K, np.nan, dtype=np.float32)  # the teacher's estimated gain over its base, where it searched
        search = getattr(teacher, "last_search", None)
        if search is not None:
            gain[search[0]] = -search[1]
        a = t
        if student is not None and coin.random() >= task.beta:
            a = int(student.predict(obs, action_masks=cset.mask, deterministic=True)[0])
        cands.append(obs["candidates"])
        globs.append(obs["global"])
        masks.append(obs["action_mask"].astype(bool))
        labels.append(t)
        gains.append(gain)
        heur.append(h)
        taken.append(a)
        obs, r, term, trunc, info = env.step(a)
        rewards.append(r)
        done = term or trunc
    returns = discounted_returns(rewards, task.gamma)
    return {
        "candidates": np.stack(cands), "global": np.stack(globs), "masks": np.stack(masks),
        "labels": np.array(labels, dtype=np.int64), "heuristic": np.array(heur, dtype=np.int64),
        "taken": np.array(taken, dtype=np.int64), "returns": returns, "gains": np.stack(gains),
        "objective": float(info["metrics"]["objective"]),
    }


def label_tasks(cfg, vals: list, teachers: list[str], round_: int, student: str | None) -> list[LabelTask]:
    """The round's labelling tasks: `distill.episodes` training-range workload seeds, drawn from
    the run's seed and the round (never a validation or test seed), given round-robin to the
    settings `vals` (agents.selection.Validation; one unless the config has an env_mix), each
    with its teacher in `teachers` and its best heuristic."""
    d = cfg.distill
    rng = np.random.default_rng([cfg.seed, round_, 0xDA6])
    seeds = rng.integers(*TRAIN_SEEDS, size=d["episodes"])
    beta = 1.0 if student is None else float(d["beta_decay"]) ** round_
    n = len(vals)
    return [LabelTask(vals[i % n].env_kwargs, int(s), teachers[i % n], vals[i % n].baseline, student, beta, float(cfg.ppo["gamma"]),
                      d["lookahead"]) for i, s in enumerate(seeds)]


def aggregate(episodes: list[dict], temperature: float = 0.0) -> tuple[Demonstrations, np.ndarray]:
    """The labelled states of `episodes` as demonstrations (actions = the teacher's choices;
    with a temperature > 0, soft targets from its estimated gains), and the best heuristic's
    choices on the same states."""
    cat = lambda k: np.concatenate([e[k] for e in episodes])  # noqa: E731
    demos = Demonstrations(cat("candidates"), cat("global"), cat("masks"), cat("labels"), cat("returns"))
    if temperature > 0:
        demos.targets = soft_targets(demos.actions, cat("gains"), temperature)
    return demos, cat("heuristic")


def soft_targets(labels: np.ndarray, gains: np.ndarray, temperature: float) -> np.ndarray:
    """(N, K) target distributions: where the teacher searched, a softmax of its estimated gains
    over the candidates it simulated (`temperature` in the objective's units: job-hours for a
    JCT objective); elsewhere, and with temperature 0, its choice (one-hot)."""
    n, k = gains.shape
    out = np.zeros((n, k), dtype=np.float32)
    out[np.arange(n), labels] = 1.0
    if temperature <= 0:
        return out
    for i in np.flatnonzero(~np.isnan(gains).all(axis=1)):
        ev = ~np.isnan(gains[i])
        z = gains[i, ev].astype(np.float64) / temperature
        p = np.exp(z - z.max())
        out[i] = 0.0
        out[i, ev] = p / p.sum()
    return out


def student_actions(model, demos: Demonstrations, chunk: int = 2048) -> np.ndarray:
    """The student's deterministic choices on the demonstrations' states."""
    import torch as th

    policy = model.policy
    policy.set_training_mode(False)
    out = []
    with th.no_grad():
        for lo in range(0, len(demos), chunk):
            obs = {
                "candidates": th.as_tensor(demos.candidates[lo : lo + chunk], device=policy.device),
                "global": th.as_tensor(demos.global_features[lo : lo + chunk], device=policy.device),
                "action_mask": th.as_tensor(demos.masks[lo : lo + chunk], device=policy.device),
            }
            out.append(policy.get_distribution(obs).get_actions(deterministic=True).cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def check_cache_dir() -> Path:
    """Where teacher checks are cached: $GANGSCHED_CACHE_DIR/teacher-check, else
    ~/.cache/gangsched/teacher-check."""
    base = os.environ.get("GANGSCHED_CACHE_DIR") or Path.home() / ".cache" / "gangsched"
    return Path(base) / "teacher-check"


def _source_digest() -> str:
    digest = hashlib.sha256()
    for name in CHECK_SOURCES:
        top = ROOT / name
        for path in sorted(top.rglob("*")) if top.is_dir() else [top]:
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def check_key(tasks: list) -> str:
    """The cache key of a teacher check's episodes (agents.evaluation.runners.RunTask): the tasks,
    the contents of their scenario, cluster and workload files, each seed's job list, the
    source the simulation runs (CHECK_SOURCES), and Python's and numpy's versions."""
    from agents.evaluation.runners import cluster_and_spec, workload_sha256
    from envs.cluster.config import resolve_config
    from envs.workload.generator import make_workload

    parts: dict = {"tasks": [dataclasses.asdict(t) for t in tasks], "source": _source_digest(), "files": {}, "jobs": [],
                   "versions": [sys.version, np.__version__]}
    for t in tasks:
        for name, kind in ((t.scenario, "scenarios"), (t.cluster, "clusters"), (t.workload, "workloads")):
            if name is not None and f"{kind}/{name}" not in parts["files"]:
                parts["files"][f"{kind}/{name}"] = hashlib.sha256(resolve_config(name, kind).read_bytes()).hexdigest()
        cluster, spec = cluster_and_spec(t.cluster, t.workload)
        parts["jobs"].append(workload_sha256(make_workload(spec, cluster, t.seed, t.num_jobs)))
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _cached_check(path: Path, n: int) -> list[float] | None:
    """The objectives of a cached check, or None where there is none or it is unreadable (then
    the check runs again and rewrites it)."""
    try:
        objectives = json.loads(path.read_text())["objectives"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    ok = isinstance(objectives, list) and len(objectives) == n and all(isinstance(o, (int, float)) for o in objectives)
    return [float(o) for o in objectives] if ok else None


def choose_teacher(cfg, v, log=print) -> tuple[str, dict]:
    """`distill.teacher` for the setting `v` (agents.selection.Validation), with "auto" resolved on
    its validation seeds: the honest lookahead where its mean objective beats the best
    heuristic's, else the best heuristic. The lookahead's episodes come from the cache
    (`check_cache_dir()`) where the same check ran before."""
    from envs.scenario import load_scenario, lookahead_search

    teacher = cfg.distill["teacher"]
    kw = v.env_kwargs
    scenario = kw.get("scenario")
    sc = load_scenario(scenario) if scenario is not None else None
    search = lookahead_search(sc, cfg.distill["lookahead"])
    guard = v.setting.wait_guard
    info: dict = {"setting": v.name, "requested": teacher, "heuristic": v.baseline, "heuristic_objective": v.baseline_objective,
                  "lookahead": dataclasses.asdict(search), "wait_guard": None if guard is None else guard.to_dict()}
    if teacher != "auto":
        return teacher, info
    from agents.evaluation.policies import SIMULATING, PolicySpec
    from agents.evaluation.runners import RunTask, run_one

    cluster, workload = kw.get("cluster"), kw.get("workload")
    if sc is not None:
        cluster, workload = cluster or sc.cluster, workload or sc.workload
    tasks = [RunTask(PolicySpec("lookahead", SIMULATING, "lookahead"), s, cluster, workload, v.setting.num_jobs, v.setting.queue_window,
                     keep_trace=False, scenario=scenario, wait_guard=v.setting.wait_guard, lookahead=tuple(cfg.distill["lookahead"].items()))
             for s in v.seeds]  # the teacher that labels: with the env's bound on WAIT at its decisions
    t0 = time.perf_counter()
    cache = check_cache_dir() / f"{check_key(tasks)}.json" if cfg.distill["check_cache"] else None
    objectives = _cached_check(cache, len(tasks)) if cache is not None else None
    if objectives is not None:
        info.update(check_cache=str(cache))
    else:
        runs = run_tasks(run_one, tasks, workers=cfg.distill["workers"], desc="teacher check")
        objectives = [r["run"]["metrics"]["objective"] for r in runs]
        if cache is not None:
            record = {"seeds": [t.seed for t in tasks], "objectives": objectives, "setting": v.name, "lookahead": info["lookahead"],
                      "wall_s": time.perf_counter() - t0}
            try:
                cache.parent.mkdir(parents=True, exist_ok=True)
                tmp = cache.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(record, indent=1))
                tmp.replace(cache)  # whole or not at all
            except OSError as e:  # the run goes on; the next one checks again
                log(f"teacher check not cached ({cache.parent}: {e.strerror or e})")
    la = float(np.mean(objectives))
    info.update(lookahead_objective=la, check_wall_s=time.perf_counter() - t0)
    chosen = "lookahead" if la < v.baseline_objective else v.baseline
    where = f"cached: {cache}" if "check_cache" in info else f"{info['check_wall_s']:.0f} s"
    log(f"teacher check on {len(v.seeds)} validation seeds of {v.name}: lookahead {la:.3f} vs {v.baseline} {v.baseline_objective:.3f} "
        f"-> distil '{chosen}' ({where})")
    return chosen, info


def distill(model, cfg, out: Path, vals: list, eval_cb, log=print) -> dict:
    """The DAgger rounds of `cfg.distill` on `model` (in place), over the settings `vals`
    (agents.selection.Validation: the config's, or each env_mix entry, each with its own teacher
    and best heuristic). Logs to TensorBoard (tb/distill), writes distill.json, and evaluates the
    student on the validation seeds after every round (the best so far becomes model.zip, as
    during PPO)."""
    from torch.utils.tensorboard import SummaryWriter

    d = cfg.distill
    chosen = [choose_teacher(cfg, v, log) for v in vals]
    teachers = [t for t, _ in chosen]
    teacher = teachers[0] if len(set(teachers)) == 1 else ", ".join(f"{v.name}: {t}" for v, t in zip(vals, teachers))
    heuristic = f"the {vals[0].baseline} heuristic" if len(vals) == 1 else "the best heuristic per setting"
    folder = out / "distill"
    folder.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(str(out / "tb" / "distill"))
    episodes: list[dict] = []
    rounds = []
    student: str | None = None
    t_start = time.perf_counter()
    for r in range(d["rounds"]):
        t0 = time.perf_counter()
        tasks = label_tasks(cfg, vals, teachers, r, student)
        new = run_tasks(label_episode, tasks, workers=d["workers"], backend=d["backend"], desc=f"labelling round {r}")
        label_wall = time.perf_counter() - t0
        fresh, fresh_heur = aggregate(new)
        np.savez_compressed(folder / f"labels-r{r}.npz", candidates=fresh.candidates, global_features=fresh.global_features, masks=fresh.masks,
                            labels=fresh.actions, returns=fresh.returns, heuristic=fresh_heur,
                            gains=np.concatenate([e["gains"] for e in new]))
        # Agreement on the states this round visited, before training on them (on-policy for r > 0).
        before = float((student_actions(model, fresh) == fresh.actions).mean()) if r > 0 else float("nan")
        episodes.extend(new)
        demos, heur = aggregate(episodes, d["temperature"] if "lookahead" in teachers else 0.0)
        stats = clone(model, demos, d["epochs"], d["batch_size"], d["learning_rate"], cfg.seed + r)
        student_agree = float((student_actions(model, demos) == demos.actions).mean())
        heuristic_agree = float((heur == demos.actions).mean())
        student = str(folder / f"student-r{r}.zip")
        model.save(student)
        entry = eval_cb.evaluate(stage=f"distill-r{r}")
        row = {
            "round": r, "teacher": teacher, "beta": tasks[0].beta, "episodes": len(new), "states": int(len(fresh)), "aggregated": int(len(demos)),
            "teacher_changes": float((fresh.actions != fresh_heur).mean()), "label_wall_s": label_wall,
            "labels_per_s": len(fresh) / max(label_wall, 1e-9), "agreement_before": before, "agreement": student_agree,
            "heuristic_agreement": heuristic_agree, "followed_objective": float(np.mean([e["objective"] for e in new])),
            "validation_objective": entry["objective"], "validation_rel_diff": entry["rel_diff"],
            "wall_s": time.perf_counter() - t0, **{f"clone_{k}": v for k, v in stats.items()},
        }
        rounds.append(row)
        for k in ("agreement", "heuristic_agreement", "agreement_before", "teacher_changes", "labels_per_s", "validation_objective",
                  "validation_rel_diff", "followed_objective"):
            if not np.isnan(row[k]):
                writer.add_scalar(f"distill/{k}", row[k], r)
        writer.flush()
        log(f"distill round {r} ({teacher}, beta {row['beta']:.2f}): {row['states']} states in {label_wall:.0f} s, "
            f"student agrees with the teacher on {student_agree:.3f} of {len(demos)} ({heuristic} {heuristic_agree:.3f}); "
            f"validation objective {entry['objective']:.3f} ({entry['rel_diff']:+.1%} vs {heuristic.removeprefix('the ')})")
    writer.close()
    record = chosen[0][1] if len(vals) == 1 else [info for _, info in chosen]
    summary = {"teacher": teacher, "teacher_choice": record, "rounds": rounds, "wall_s": time.perf_counter() - t_start,
               "config": dict(d)}
    (out / "distill.json").write_text(json.dumps(summary, indent=1))
    return summary


__all__ = ["LabelTask", "aggregate", "check_cache_dir", "check_key", "choose_teacher", "distill", "label_episode", "label_tasks", "student_actions"]
