"""The results document: its schema (`RESULTS_SCHEMA`, documented in docs/evaluate.md), a
checker for it, the document built from every policy's runs, and results.md, the readable
report of one.

A document is JSON-safe: NaN and infinite values (e.g. the JCT of a kind with no finished job)
are null. Policies keep their command-line order; runs are in seed order.
"""

from __future__ import annotations

import datetime
import math
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from agents.evaluation.stats import mean_ci95, paired_rel_diff
from envs.jobs import JOB_KIND_NAMES
from envs.sim.metrics import METRICS
from envs.sim.objective import OBJECTIVE_TERMS

SCHEMA_VERSION = 2  # 2: scenario, objective, paired_metric; paired entries name their metric

_NUM = {"type": "number", "nullable": True}
_SUMMARY = {"type": "object", "properties": {"mean": _NUM, "ci95_low": _NUM, "ci95_high": _NUM, "n": {"type": "integer"}}}
RESULTS_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "schema_version": {"type": "integer", "const": SCHEMA_VERSION},
        "cluster": {"type": "string"},
        "workload": {"type": "string"},
        "scenario": {"type": "string", "nullable": True},
        "objective": {"type": "object", "nullable": True, "properties": {t: {"type": "number"} for t in OBJECTIVE_TERMS}},
        "paired_metric": {"type": "string"},
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
            "values": {"type": "object", "properties": {"metric": {"type": "string"}, "rel_diff_mean": _NUM, "ci95_low": _NUM, "ci95_high": _NUM, "n": {"type": "integer"}}},
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


def environment_record(workers: int, wall_s: float, started: datetime.datetime, command: str, backend: str = "local") -> dict:
    """results.json's `environment`: Python, platform, package versions, git commit (null
    outside a checkout), the command as typed, start time (UTC), workers, wall time and the
    backend that ran the episodes (`local` or `ray`; agents/parallel.py)."""
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
        "command": command,
        "started_utc": started.isoformat(timespec="seconds"),
        "workers": workers,
        "wall_s": wall_s,
        "backend": backend,
    }


def build_results(
    runs: dict[str, list[dict]],
    *,
    cluster: str,
    workload: str,
    num_jobs: int | None,
    queue_window: int,
    seeds: list[int],
    reference: str,
    environment: dict,
    scenario: str | None = None,
    objective: dict | None = None,
    missing: list[dict] | None = None,
) -> dict:
    """The results.json document from every policy's runs (each sorted by seed); `cluster` and
    `workload` are config names, `reference` a key of `runs`. With a `scenario` (and its
    `objective`, as `Objective.to_dict()`), policies are paired on the objective, else on the
    average JCT. `missing`: the episodes that failed (`run_all`'s records); when there are any,
    the document lists them under "missing", summaries cover the runs that finished and the
    paired comparison the seeds the reference finished too."""
    paired_metric = "objective" if scenario else "avg_jct_s"
    policies = {
        label: {"runs": rs, "summary": {m: mean_ci95([r["metrics"][m] for r in rs]) for m in METRICS}}
        for label, rs in runs.items()
    }
    ref_runs = runs[reference]
    ref_seeds = {r["seed"] for r in ref_runs}
    extra = {"missing": missing} if missing else {}
    return _json_safe(
        {
            "schema_version": SCHEMA_VERSION,
            "cluster": cluster,
            "workload": workload,
            "scenario": scenario,
            "objective": objective,
            "paired_metric": paired_metric,
            "num_jobs": num_jobs,
            "queue_window": queue_window,
            "seeds": seeds,
            "reference": reference,
            "policies": policies,
            "paired_vs_reference": {label: paired_rel_diff([r for r in rs if r["seed"] in ref_seeds], ref_runs, paired_metric)
                                    for label, rs in runs.items() if label != reference},
            "lower_bound": {"avg_ideal_runtime_s": mean_ci95([r["metrics"]["avg_ideal_runtime_s"] for r in ref_runs])},
            "environment": environment,
            **extra,
        }
    )


# ---------------------------------------------------------------- results.md


# (metric, column title, scale): the table's columns; times shown in hours.
TABLE_COLUMNS: tuple[tuple[str, str, float], ...] = (
    ("objective", "objective", 1.0),
    ("avg_jct_s", "avg JCT h", 1 / 3600),
    ("p95_jct_s", "p95 JCT h", 1 / 3600),
    ("p99_jct_s", "p99 JCT h", 1 / 3600),
    ("avg_slowdown", "slowdown", 1.0),
    ("gpu_utilisation", "utilisation", 1.0),
    ("goodput", "goodput", 1.0),
    ("fragmentation", "fragmentation", 1.0),
    ("preemptions", "preemptions", 1.0),
    ("preemption_gpu_hours", "preempt GPU-h", 1.0),
    ("slo_misses", "SLO misses", 1.0),
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
    title = f"# scenario {doc['scenario']}: {doc['workload']} on {doc['cluster']}" if doc.get("scenario") else f"# {doc['workload']} on {doc['cluster']}"
    metric = doc.get("paired_metric", "avg_jct_s")
    objective = doc.get("objective")
    weights = ", ".join(f"{k} {v:g}" for k, v in (objective or {}).items() if k in OBJECTIVE_TERMS and v)
    lines = [
        title,
        "",
        f"Objective (lower is better; envs/sim/objective.py): {weights or 'avg_jct 1'} per job.",
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
        f"## Paired {'objective' if metric == 'objective' else 'avg JCT'} vs {doc['reference']}",
        "",
        "(policy - reference) / reference per seed; negative is better.",
        "",
        "| policy | mean | 95% CI |",
        "|---|---|---|",
    ]
    for label, d in doc["paired_vs_reference"].items():
        mean = "n/a" if d["rel_diff_mean"] is None else f"{d['rel_diff_mean']:+.1%}"
        ci = "n/a" if d["ci95_low"] is None else f"[{d['ci95_low']:+.1%}, {d['ci95_high']:+.1%}]"
        lines.append(f"| {label} | {mean} | {ci} |")
    if doc.get("missing"):
        lines += ["", f"## Missing episodes ({len(doc['missing'])})", "", "Failed, left out of every figure above.", "",
                  "| policy | scenario | seed | error |", "|---|---|---|---|"]
        lines += [f"| {m['policy']} | {m['scenario'] or '-'} | {m['seed']} | {m['error'].replace('|', '/')} |" for m in doc["missing"]]
    env = doc["environment"]
    backend = f", backend {env['backend']}" if env.get("backend", "local") != "local" else ""
    lines += ["", f"Wall time {env['wall_s']:.1f} s with {env['workers']} worker(s){backend}. Command: `{env['command']}`", ""]
    return "\n".join(lines)
