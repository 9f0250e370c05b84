"""Compare schedulers on the same workloads and write results.json, results.md and plots.

    python evaluate.py --cluster mixed-64gpu --workload llm-mix \
        --policies binpack,spread,topology,easy,ppo=runs/model.zip --seeds 0-9 --out results/

Every policy runs on exactly the same workloads (workload seed s is the same job list for
every policy), so comparisons are paired per seed. A policy is a baseline name (see
`baselines.BASELINES`) or `PREFIX=ARG` for a policy loaded by `POLICY_LOADERS[PREFIX]`
(`ppo=PATH`: a MaskablePPO zip). Bad input gives a one-line error and exit code 2 before any
episode runs. The results.json schema is `RESULTS_SCHEMA` (documented in docs/evaluate.md).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from baselines import BASELINES, make_baseline
from envs import ENV_ID
from envs.config import ConfigError, load_cluster
from envs.config import parse_seeds as envs_parse_seeds
from envs.jobs import JOB_KIND_NAMES, Job
from envs.metrics import METRICS, episode_metrics
from envs.replay import replay
from envs.simulator import Simulator
from envs.topology import Cluster
from envs.workload import WorkloadSpec, load_workload_spec, make_workload

SCHEMA_VERSION = 1
PLOT_SEED_INDEX = 0  # timelines and the Gantt chart show the first seed
EPISODE_STEP_CAP = 10_000_000  # learned policies run to the end; no truncation in evaluation


class UsageError(ValueError):
    """Bad command-line input; reported as one line, exit code 2."""


# ---------------------------------------------------------------- policies


Actor = Callable[[Any, dict], int]  # (env, observation) -> action


class PolicyLoader(Protocol):
    """Loads a `PREFIX=ARG` policy that acts through the Gymnasium env."""

    def check(self, arg: str) -> None:
        """Raise UsageError (one line) when `arg` cannot be loaded; cheap, runs before any work."""

    def load(self, arg: str) -> Actor:
        """The actor; called once per worker process."""


class MaskablePPOLoader:
    """`ppo=PATH`: a zip saved by sb3-contrib's MaskablePPO, acting deterministically."""

    def check(self, arg: str) -> None:
        path = Path(arg)
        if not path.is_file():
            raise UsageError(f"ppo model file not found: {arg}")
        if not zipfile.is_zipfile(path):
            raise UsageError(f"ppo model file is not a MaskablePPO zip: {arg}")

    def load(self, arg: str) -> Actor:
        from sb3_contrib import MaskablePPO

        return model_actor(MaskablePPO.load(arg, device="cpu"))


POLICY_LOADERS: dict[str, PolicyLoader] = {"ppo": MaskablePPOLoader()}


@dataclass(frozen=True)
class PolicySpec:
    label: str  # as given on the command line; the key in results.json
    loader: str | None  # None for a baseline, else a key of POLICY_LOADERS
    arg: str  # the baseline name, or the loader's argument


def parse_policy(text: str) -> PolicySpec:
    """`NAME` (a baseline) or `PREFIX=ARG` (a loaded policy), checked without loading it."""
    text = text.strip()
    if "=" in text:
        prefix, arg = text.split("=", 1)
        if prefix not in POLICY_LOADERS:
            raise UsageError(f"unknown policy loader '{prefix}=' in '{text}' (known: {', '.join(p + '=PATH' for p in POLICY_LOADERS)})")
        POLICY_LOADERS[prefix].check(arg)
        return PolicySpec(text, prefix, arg)
    if text not in BASELINES:
        known = ", ".join([*BASELINES, *(p + "=PATH" for p in POLICY_LOADERS)])
        raise UsageError(f"unknown policy '{text}' (known: {known})")
    return PolicySpec(text, None, text)


def parse_policies(text: str) -> list[PolicySpec]:
    specs = [parse_policy(p) for p in text.split(",") if p.strip()]
    if not specs:
        raise UsageError("--policies needs at least one policy")
    labels = [s.label for s in specs]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise UsageError(f"policy '{dup[0]}' is listed twice")
    return specs


def parse_seeds(text: str) -> list[int]:
    """`0-9`, `0,3,5`, `0-4,10`: distinct non-negative integers, in the order given."""
    try:
        return envs_parse_seeds(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


# ---------------------------------------------------------------- one episode


@dataclass(frozen=True)
class RunTask:
    policy: PolicySpec
    seed: int
    cluster: str
    workload: str
    num_jobs: int | None
    queue_window: int
    keep_trace: bool  # return the timeline and segments for plots


def workload_sha256(jobs: list[Job]) -> str:
    """Fingerprint of a job list: equal for every policy of one seed (the pairing property)."""
    text = json.dumps([j.to_dict() for j in jobs], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def _cluster_and_spec(cluster: str, workload: str) -> tuple[Cluster, WorkloadSpec]:
    return load_cluster(cluster), load_workload_spec(workload)


@functools.lru_cache(maxsize=None)
def _actor(loader: str, arg: str) -> Actor:
    return POLICY_LOADERS[loader].load(arg)


def run_baseline(name: str, cluster: Cluster, spec: WorkloadSpec, seed: int, num_jobs: int | None = None, queue_window: int = 8) -> tuple[Simulator, int]:
    """A baseline on workload `seed`, through the bare replay loop: the finished simulator and
    the number of decisions taken."""
    sim = Simulator(cluster, make_workload(spec, cluster, seed, num_jobs))
    return sim, replay(sim, make_baseline(name, seed=seed).select, queue_window)


def run_actor(act: Actor, cluster: Cluster, spec: WorkloadSpec, seed: int, num_jobs: int | None = None, queue_window: int = 8) -> tuple[Simulator, int]:
    """An actor (env, observation) -> action on workload `seed`, through the Gymnasium env."""
    import gymnasium as gym

    env = gym.make(ENV_ID, cluster=cluster, workload=spec, num_jobs=num_jobs, queue_window=queue_window, max_steps=EPISODE_STEP_CAP)
    obs, _ = env.reset(seed=seed)
    steps, done = 0, env.unwrapped.sim.done
    while not done:
        obs, _, terminated, truncated, _ = env.step(act(env, obs))
        steps += 1
        done = terminated or truncated
    sim = env.unwrapped.sim
    env.close()
    return sim, steps


def model_actor(model: Any, deterministic: bool = True) -> Actor:
    """An actor from an in-memory MaskablePPO model."""

    def act(env: Any, obs: dict) -> int:
        action, _ = model.predict(obs, action_masks=env.unwrapped.action_masks(), deterministic=deterministic)
        return int(action)

    return act


def _run_episode(task: RunTask) -> tuple[Simulator, int]:
    """The finished simulator and the number of decisions taken."""
    cluster, spec = _cluster_and_spec(task.cluster, task.workload)
    if task.policy.loader is None:
        return run_baseline(task.policy.arg, cluster, spec, task.seed, task.num_jobs, task.queue_window)
    return run_actor(_actor(task.policy.loader, task.policy.arg), cluster, spec, task.seed, task.num_jobs, task.queue_window)


def run_one(task: RunTask) -> dict:
    """One (policy, seed) episode: its run record for results.json plus data for plots."""
    start = time.perf_counter()
    sim, decisions = _run_episode(task)
    done = ~np.isnan(sim.end)
    out: dict[str, Any] = {
        "run": {
            "seed": task.seed,
            "jobs_sha256": workload_sha256(sim.jobs),
            "decisions": decisions,
            "wall_s": time.perf_counter() - start,
            "metrics": episode_metrics(sim),
        },
        "jct_s": (sim.end - sim.arrival)[done].tolist(),
    }
    if task.keep_trace:
        out["timeline"] = [list(row) for row in sim.timeline]
        out["segments"] = [(s.job_id, s.gpus.tolist(), s.start_s, s.end_s, s.preempted) for s in sim.segments]
        out["job_kinds"] = [JOB_KIND_NAMES[j.kind] for j in sim.jobs]
    return out


# ---------------------------------------------------------------- statistics


def t_quantile(p: float, df: int) -> float:
    """Quantile `p` (> 0.5) of Student's t with `df` degrees of freedom: bisection on the CDF,
    integrated with Simpson's rule (accurate to ~1e-6, enough for confidence intervals)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        xs = np.linspace(0.0, x, 4001)
        pdf = np.exp(log_norm - (df + 1) / 2 * np.log1p(xs**2 / df))
        h = xs[1] - xs[0]
        return 0.5 + h / 3 * (pdf[0] + pdf[-1] + 4 * pdf[1:-1:2].sum() + 2 * pdf[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def mean_ci95(values: list[float]) -> dict[str, float | int | None]:
    """Mean and two-sided 95% t-interval over the finite values; the interval is null below
    two values."""
    x = np.array([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    n = len(x)
    if n == 0:
        return {"mean": None, "ci95_low": None, "ci95_high": None, "n": 0}
    mean = float(x.mean())
    if n < 2:
        return {"mean": mean, "ci95_low": None, "ci95_high": None, "n": 1}
    half = t_quantile(0.975, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return {"mean": mean, "ci95_low": mean - half, "ci95_high": mean + half, "n": n}


def paired_rel_diff(runs: list[dict], ref_runs: list[dict], metric: str = "avg_jct_s") -> dict:
    """Per seed (policy - reference) / reference of `metric`, with its mean and 95% t-interval."""
    ref = {r["seed"]: r["metrics"][metric] for r in ref_runs}
    diffs = [(r["metrics"][metric] - ref[r["seed"]]) / ref[r["seed"]] for r in runs]
    s = mean_ci95(diffs)
    return {f"{metric.removesuffix('_s')}_rel_diff_mean": s["mean"], "ci95_low": s["ci95_low"], "ci95_high": s["ci95_high"], "n": s["n"]}


# ---------------------------------------------------------------- results.json and its schema


_NUM = {"type": "number", "nullable": True}
_SUMMARY = {"type": "object", "properties": {"mean": _NUM, "ci95_low": _NUM, "ci95_high": _NUM, "n": {"type": "integer"}}}
RESULTS_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "schema_version": {"type": "integer", "const": SCHEMA_VERSION},
        "cluster": {"type": "string"},
        "workload": {"type": "string"},
        "num_jobs": {"type": "integer", "nullable": True},
        "queue_window": {"type": "integer"},
        "seeds": {"type": "array", "items": {"type": "integer"}},
        "reference": {"type": "string"},
        "policies": {
            "type": "map",
            "values": {
                "type": "object",
                "properties": {
                    "runs": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "seed": {"type": "integer"},
                                "jobs_sha256": {"type": "string"},
                                "decisions": {"type": "integer"},
                                "wall_s": {"type": "number"},
                                "metrics": {"type": "object", "properties": {m: _NUM for m in METRICS}},
                            },
                        },
                    },
                    "summary": {"type": "object", "properties": {m: _SUMMARY for m in METRICS}},
                },
            },
        },
        "paired_vs_reference": {
            "type": "map",
            "values": {"type": "object", "properties": {"avg_jct_rel_diff_mean": _NUM, "ci95_low": _NUM, "ci95_high": _NUM, "n": {"type": "integer"}}},
        },
        "lower_bound": {"type": "object", "properties": {"avg_ideal_runtime_s": _SUMMARY}},
        "environment": {
            "type": "object",
            "properties": {
                "python": {"type": "string"},
                "platform": {"type": "string"},
                "packages": {"type": "map", "values": {"type": "string", "nullable": True}},
                "git_commit": {"type": "string", "nullable": True},
                "command": {"type": "string"},
                "started_utc": {"type": "string"},
                "workers": {"type": "integer"},
                "wall_s": {"type": "number"},
            },
        },
    },
}


def schema_errors(doc: Any, schema: dict = RESULTS_SCHEMA, path: str = "$") -> list[str]:
    """Problems of `doc` against a JSON-schema-like `schema` (types object with required
    `properties`, map with `values`, array with `items`, number, integer, string; `nullable`,
    `const`). Empty when it conforms."""
    if doc is None:
        return [] if schema.get("nullable") else [f"{path}: null not allowed"]
    t = schema["type"]
    checks = {
        "object": isinstance(doc, dict),
        "map": isinstance(doc, dict),
        "array": isinstance(doc, list),
        "string": isinstance(doc, str),
        "integer": isinstance(doc, int) and not isinstance(doc, bool),
        "number": isinstance(doc, (int, float)) and not isinstance(doc, bool),
    }
    if not checks[t]:
        return [f"{path}: expected {t}, got {type(doc).__name__}"]
    if "const" in schema and doc != schema["const"]:
        return [f"{path}: expected {schema['const']!r}, got {doc!r}"]
    errors: list[str] = []
    if t == "object":
        for key, sub in schema["properties"].items():
            if key not in doc:
                errors.append(f"{path}.{key}: missing")
            else:
                errors.extend(schema_errors(doc[key], sub, f"{path}.{key}"))
    elif t == "map":
        for key, value in doc.items():
            errors.extend(schema_errors(value, schema["values"], f"{path}.{key}"))
    elif t == "array":
        for i, item in enumerate(doc):
            errors.extend(schema_errors(item, schema["items"], f"{path}[{i}]"))
    return errors


def _json_safe(x: Any) -> Any:
    """NaN and inf become null (JSON has neither)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _environment(workers: int, wall_s: float, started: datetime.datetime, argv: list[str]) -> dict:
    packages = {}
    for name in ("numpy", "networkx", "gymnasium", "stable-baselines3", "sb3-contrib", "torch", "matplotlib"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent, timeout=10).stdout.strip() or None
    except OSError:
        commit = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": packages,
        "git_commit": commit,
        "command": " ".join(["python", "evaluate.py", *argv]),
        "started_utc": started.isoformat(timespec="seconds"),
        "workers": workers,
        "wall_s": wall_s,
    }


def build_results(cfg: "EvalConfig", runs: dict[str, list[dict]], environment: dict) -> dict:
    """The results.json document from every policy's runs (each sorted by seed)."""
    policies = {
        label: {"runs": rs, "summary": {m: mean_ci95([r["metrics"][m] for r in rs]) for m in METRICS}}
        for label, rs in runs.items()
    }
    ref_runs = runs[cfg.reference]
    return _json_safe(
        {
            "schema_version": SCHEMA_VERSION,
            "cluster": cfg.cluster_name,
            "workload": cfg.workload_name,
            "num_jobs": cfg.num_jobs,
            "queue_window": cfg.queue_window,
            "seeds": cfg.seeds,
            "reference": cfg.reference,
            "policies": policies,
            "paired_vs_reference": {label: paired_rel_diff(rs, ref_runs) for label, rs in runs.items() if label != cfg.reference},
            "lower_bound": {"avg_ideal_runtime_s": mean_ci95([r["metrics"]["avg_ideal_runtime_s"] for r in ref_runs])},
            "environment": environment,
        }
    )


# ---------------------------------------------------------------- results.md


# (metric, column title, scale): the table's columns; times shown in hours.
TABLE_COLUMNS: tuple[tuple[str, str, float], ...] = (
    ("avg_jct_s", "avg JCT h", 1 / 3600),
    ("p95_jct_s", "p95 JCT h", 1 / 3600),
    ("p99_jct_s", "p99 JCT h", 1 / 3600),
    ("avg_slowdown", "slowdown", 1.0),
    ("gpu_utilisation", "utilisation", 1.0),
    ("goodput", "goodput", 1.0),
    ("fragmentation", "fragmentation", 1.0),
    ("preemptions", "preemptions", 1.0),
    ("inference_slo_misses", "SLO misses", 1.0),
    ("inference_interference", "interference", 1.0),
    ("energy_kwh", "energy kWh", 1.0),
)
KIND_COLUMNS = tuple((f"avg_jct_{name}_s", f"{name} h", 1 / 3600) for name in JOB_KIND_NAMES.values())


def _cell(s: dict, scale: float) -> str:
    if s["mean"] is None:
        return "n/a"
    mean = s["mean"] * scale
    digits = 3 if abs(mean) < 10 else 1 if abs(mean) < 1000 else 0
    if s["ci95_low"] is None:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {(s['ci95_high'] - s['mean']) * scale:.{digits}f}"


def _table(doc: dict, columns: tuple[tuple[str, str, float], ...]) -> list[str]:
    lines = ["| policy | " + " | ".join(title for _, title, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for label, p in doc["policies"].items():
        lines.append(f"| {label} | " + " | ".join(_cell(p["summary"][m], scale) for m, _, scale in columns) + " |")
    return lines


def results_markdown(doc: dict) -> str:
    """A readable report: key metrics with 95% CIs, per-kind JCTs, the paired comparison."""
    n = len(doc["seeds"])
    lb = doc["lower_bound"]["avg_ideal_runtime_s"]["mean"]
    lines = [
        f"# {doc['workload']} on {doc['cluster']}",
        "",
        f"{n} paired seeds ({', '.join(map(str, doc['seeds']))}); mean ± 95% t-interval half-width over seeds. "
        f"Lower bound on avg JCT (ideal runtimes, no queueing): {lb / 3600:.2f} h." if lb is not None else "",
        "",
        *_table(doc, TABLE_COLUMNS),
        "",
        "## Average JCT by job kind",
        "",
        *_table(doc, KIND_COLUMNS),
        "",
        f"## Paired avg JCT vs {doc['reference']}",
        "",
        "(policy - reference) / reference per seed; negative is better.",
        "",
        "| policy | mean | 95% CI |",
        "|---|---|---|",
    ]
    for label, d in doc["paired_vs_reference"].items():
        mean = "n/a" if d["avg_jct_rel_diff_mean"] is None else f"{d['avg_jct_rel_diff_mean']:+.1%}"
        ci = "n/a" if d["ci95_low"] is None else f"[{d['ci95_low']:+.1%}, {d['ci95_high']:+.1%}]"
        lines.append(f"| {label} | {mean} | {ci} |")
    env = doc["environment"]
    lines += ["", f"Wall time {env['wall_s']:.1f} s with {env['workers']} worker(s). Command: `{env['command']}`", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- plots


def write_plots(out: Path, cluster: Cluster, reference: str, seed: int, jcts: dict[str, list[float]], traces: dict[str, dict]) -> list[Path]:
    """jct_cdf.png (all seeds pooled), timeline.png (seed `seed`), gantt_<reference>.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, values in jcts.items():
        x = np.sort(np.array(values)) / 3600
        ax.step(x, np.arange(1, len(x) + 1) / max(len(x), 1), where="post", label=label)
    ax.set(xscale="log", xlabel="job completion time (h)", ylabel="fraction of jobs", title="JCT CDF (all seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    paths.append(out / "jct_cdf.png")
    fig.savefig(paths[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)

    fig, (ax_u, ax_q) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for label, tr in traces.items():
        tl = np.array(tr["timeline"], dtype=float)
        ax_u.step(tl[:, 0] / 3600, tl[:, 1] / cluster.num_gpus, where="post", label=label, lw=0.8)
        ax_q.step(tl[:, 0] / 3600, tl[:, 2], where="post", label=label, lw=0.8)
    ax_u.set(ylabel="allocated GPU share", title=f"utilisation and queue (seed {seed})")
    ax_q.set(xlabel="time (h)", ylabel="queued jobs")
    ax_u.legend(fontsize=8, ncol=2)
    paths.append(out / "timeline.png")
    fig.savefig(paths[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)

    tr = traces[reference]
    kinds = list(JOB_KIND_NAMES.values())
    colours = {k: plt.get_cmap("tab10")(i) for i, k in enumerate(kinds)}
    bars: dict[tuple[int, str, bool], list[tuple[float, float]]] = {}
    for job_id, gpus, start, end, preempted in tr["segments"]:
        for g in gpus:
            bars.setdefault((g, tr["job_kinds"][job_id], preempted), []).append((start / 3600, (end - start) / 3600))
    fig, ax = plt.subplots(figsize=(11, max(3.0, cluster.num_gpus * 0.06)))
    for (g, kind, preempted), spans in bars.items():
        ax.broken_barh(spans, (g, 0.9), facecolors=colours[kind], edgecolor="black" if preempted else "none", linewidth=0.3)
    ax.set_yticks(cluster.node_first_gpu + cluster.node_gpus / 2, list(cluster.node_names), fontsize=7)
    for first in cluster.node_first_gpu[1:]:
        ax.axhline(first, color="grey", lw=0.4)
    ax.set(xlabel="time (h)", ylim=(0, cluster.num_gpus), title=f"GPU occupancy, {reference}, seed {seed} (outlined: preempted)")
    ax.invert_yaxis()
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in kinds], labels=kinds, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    paths.append(out / f"gantt_{_file_safe(reference)}.png")
    fig.savefig(paths[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)
    return paths


def _file_safe(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in label)


# ---------------------------------------------------------------- the command line


@dataclass(frozen=True)
class EvalConfig:
    cluster: str
    workload: str
    cluster_name: str
    workload_name: str
    policies: list[PolicySpec]
    seeds: list[int]
    reference: str
    out: Path
    workers: int
    num_jobs: int | None
    queue_window: int
    workload_hashes: dict[int, str]  # seed -> workload_sha256, drawn once before any episode


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="evaluate.py", description="Compare schedulers on the same (paired) workloads.")
    p.add_argument("--cluster", default="mixed-64gpu", help="config name in configs/clusters/ or a YAML path")
    p.add_argument("--workload", default="llm-mix", help="config name in configs/workloads/ or a YAML path")
    p.add_argument("--policies", default=",".join(BASELINES), help=f"comma list of baselines ({', '.join(BASELINES)}) and PREFIX=PATH ({', '.join(POLICY_LOADERS)})")
    p.add_argument("--seeds", default="0-9", help="workload seeds: 0-9, 0,3,5 or 0-4,10")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--reference", default=None, help="policy for paired comparisons and the Gantt chart (default topology if listed, else the first)")
    p.add_argument("--workers", type=int, default=1, help="processes")
    p.add_argument("--num-jobs", type=int, default=None, help="override the workload's job count")
    p.add_argument("--queue-window", type=int, default=8, help="jobs per decision (Q)")
    return p


def parse_config(argv: list[str]) -> EvalConfig:
    """Validate everything (policies, seeds, model files, configs, workload generation) before
    any episode runs. Raises UsageError or ConfigError."""
    args = _parser().parse_args(argv)
    policies = parse_policies(args.policies)
    seeds = parse_seeds(args.seeds)
    labels = [p.label for p in policies]
    reference = args.reference or ("topology" if "topology" in labels else labels[0])
    if reference not in labels:
        raise UsageError(f"--reference '{reference}' is not among --policies ({', '.join(labels)})")
    for flag, value in (("--workers", args.workers), ("--num-jobs", args.num_jobs), ("--queue-window", args.queue_window)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out} exists and is not a directory")
    cluster, spec = _cluster_and_spec(args.cluster, args.workload)
    hashes = {s: workload_sha256(make_workload(spec, cluster, s, args.num_jobs)) for s in seeds}
    return EvalConfig(
        args.cluster, args.workload, cluster.name, spec.name, policies, seeds, reference, args.out,
        args.workers, args.num_jobs, args.queue_window, hashes,
    )


def _worker_init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per worker, also for torch


def run_all(cfg: EvalConfig) -> tuple[dict[str, list[dict]], dict[str, list[float]], dict[str, dict]]:
    """Every (policy, seed) episode, in a process pool when workers > 1, with a progress bar.
    Returns runs per policy (sorted by seed), pooled JCTs per policy, plot traces per policy."""
    from tqdm import tqdm

    plot_seed = cfg.seeds[PLOT_SEED_INDEX]
    tasks = [
        RunTask(p, s, cfg.cluster, cfg.workload, cfg.num_jobs, cfg.queue_window, keep_trace=s == plot_seed)
        for p in cfg.policies
        for s in cfg.seeds
    ]
    outputs: dict[tuple[str, int], dict] = {}
    with tqdm(total=len(tasks), desc="episodes", unit="ep", file=sys.stderr) as bar:
        if cfg.workers == 1:
            for t in tasks:
                outputs[(t.policy.label, t.seed)] = run_one(t)
                bar.update()
        else:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")  # torch and fork do not mix
            with ProcessPoolExecutor(cfg.workers, mp_context=ctx, initializer=_worker_init) as pool:
                futures = {pool.submit(run_one, t): t for t in tasks}
                for f in as_completed(futures):
                    t = futures[f]
                    outputs[(t.policy.label, t.seed)] = f.result()
                    bar.update()
    runs, jcts, traces = {}, {}, {}
    for p in cfg.policies:
        outs = [outputs[(p.label, s)] for s in cfg.seeds]
        for o in outs:
            if o["run"]["jobs_sha256"] != cfg.workload_hashes[o["run"]["seed"]]:
                raise RuntimeError(f"{p.label} saw a different workload for seed {o['run']['seed']}: runs are not paired")
        runs[p.label] = [o["run"] for o in outs]
        jcts[p.label] = [x for o in outs for x in o["jct_s"]]
        traces[p.label] = outputs[(p.label, plot_seed)]
    return runs, jcts, traces


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_config(argv)
    except (UsageError, ConfigError) as e:
        print(f"evaluate.py: error: {e}", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    runs, jcts, traces = run_all(cfg)
    cfg.out.mkdir(parents=True, exist_ok=True)
    doc = build_results(cfg, runs, _environment(cfg.workers, time.perf_counter() - t0, started, argv))
    (cfg.out / "results.json").write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    (cfg.out / "results.md").write_text(results_markdown(doc))
    cluster, _ = _cluster_and_spec(cfg.cluster, cfg.workload)
    plots = write_plots(cfg.out, cluster, cfg.reference, cfg.seeds[PLOT_SEED_INDEX], jcts, traces)
    print(results_markdown(doc))
    print(f"wrote {cfg.out / 'results.json'}, {cfg.out / 'results.md'}, " + ", ".join(str(p) for p in plots))
    return 0


if __name__ == "__main__":
    sys.exit(main())
