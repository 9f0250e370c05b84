"""Scheduling metrics: the one implementation, used by evaluate.py, training callbacks and tests.

All figures come from a simulator after (or during) an episode. Times in seconds, energy in
kWh. Only finished jobs enter the JCT statistics; `unfinished_jobs` says how many did not.
"""

from __future__ import annotations

import numpy as np

from envs.jobs import JOB_KIND_NAMES, JobKind
from envs.sim.objective import Objective, objective_sums, slo_miss_flags, weighted_total
from envs.sim.simulator import JobState, Simulator

# Every key `episode_metrics` returns, with its direction (for tables and comparisons).
METRICS: dict[str, str] = {
    "objective": "lower", "avg_jct_s": "lower", "weighted_avg_jct_s": "lower", "slo_misses": "lower", "p50_jct_s": "lower", "p95_jct_s": "lower", "p99_jct_s": "lower",
    "avg_slowdown": "lower", "avg_queueing_delay_s": "lower", "makespan_s": "lower",
    "gpu_utilisation": "higher", "goodput": "higher", "fragmentation": "lower",
    "preemptions": "lower", "preemption_gpu_hours": "lower", "inference_slo_misses": "lower",
    "inference_interference": "lower", "energy_kwh": "lower", "starvation_s": "lower",
    "avg_ideal_runtime_s": "lower", "finished_jobs": "higher", "unfinished_jobs": "lower",
    **{f"avg_jct_{name}_s": "lower" for name in JOB_KIND_NAMES.values()},
}


def _time_average(times: np.ndarray, values: np.ndarray, end_s: float) -> float:
    if len(times) == 0 or end_s <= times[0]:
        return float(values[-1]) if len(values) else 0.0
    dt = np.diff(np.append(times, end_s))
    return float((values * dt).sum() / dt.sum())


def episode_metrics(sim: Simulator, objective: Objective | None = None) -> dict[str, float]:
    """Every metric of the design brief for one (finished or truncated) episode, with the
    `objective` (envs.sim.objective; the default: average JCT in hours) first, its priority-weighted
    JCT and its SLO misses. `inference_slo_misses` always uses the default SLO (an inference
    replica finishing later than 3x its ideal runtime), whatever the objective."""
    objective = objective or Objective()
    sums = objective_sums(sim, objective)
    done = ~np.isnan(sim.end)
    arrival = sim.arrival
    jct = (sim.end - arrival)[done]
    ideal = np.array([j.work_s for j in sim.jobs])
    start = float(arrival.min()) if sim.num_jobs else 0.0
    end = float(np.nanmax(sim.end)) if done.any() else sim.now
    makespan = max(end - start, 0.0)
    c = sim.cluster
    timeline = np.array(sim.timeline, dtype=float)
    times = timeline[:, 0] if len(timeline) else np.zeros(0)
    horizon = max(sim.now - start, 1e-9)
    free = c.num_gpus - timeline[:, 1] if len(timeline) else np.zeros(0)
    frag_share = np.divide(timeline[:, 4], free, out=np.zeros_like(free), where=free > 0) if len(timeline) else free
    kinds = np.array([int(j.kind) for j in sim.jobs])
    inference = (kinds == JobKind.INFERENCE) & (sim.run_s > 0)
    # jobs waiting now (queued, or reserved for victims to leave): their current wait is not in wait_s yet
    waiting = (sim.state == JobState.QUEUED) | (sim.state == JobState.RESERVED)
    out = {
        "objective": weighted_total(sums, objective) / max(sim.num_jobs, 1),
        "avg_jct_s": float(jct.mean()) if len(jct) else float("nan"),
        "weighted_avg_jct_s": 3600.0 * sums["weighted_jct"] / max(sim.num_jobs, 1),
        "slo_misses": sums["slo_misses"],
        "p50_jct_s": float(np.percentile(jct, 50)) if len(jct) else float("nan"),
        "p95_jct_s": float(np.percentile(jct, 95)) if len(jct) else float("nan"),
        "p99_jct_s": float(np.percentile(jct, 99)) if len(jct) else float("nan"),
        "avg_slowdown": float((jct / ideal[done]).mean()) if len(jct) else float("nan"),
        "avg_queueing_delay_s": float(sim.wait_s[done].mean()) if len(jct) else float("nan"),
        "makespan_s": makespan,
        "gpu_utilisation": float(sim.allocated_gpu_s / (horizon * c.num_gpus)),
        "goodput": float(sim.useful_work_s / (horizon * c.gpu_speed.sum())),
        "fragmentation": _time_average(times, frag_share, sim.now),
        "preemptions": float(sim.num_preemptions),
        "preemption_gpu_hours": float(sim.preemption_gpu_s / 3600.0),
        "inference_slo_misses": float(slo_miss_flags(sim).sum()),
        "inference_interference": float((sim.interference_loss_s[inference] / sim.run_s[inference]).mean()) if inference.any() else 0.0,
        "energy_kwh": float(sim.energy_j / 3.6e6),
        "starvation_s": float(np.max(sim.wait_s + np.where(waiting, sim.now - sim.queued_since, 0.0))) if sim.num_jobs else 0.0,
        # the lower bound: each job's work at the fastest GPU speed for its kind, no queueing
        "avg_ideal_runtime_s": float((ideal / c.gpu_speed_by_kind.max(axis=0)[kinds]).mean()) if sim.num_jobs else float("nan"),
        "finished_jobs": float(done.sum()),
        "unfinished_jobs": float((~done).sum()),
    }
    for kind, name in JOB_KIND_NAMES.items():
        sel = done & (kinds == kind)
        out[f"avg_jct_{name}_s"] = float((sim.end - arrival)[sel].mean()) if sel.any() else float("nan")
    return out


def job_records(sim: Simulator) -> list[dict]:
    """One record per job: arrival, first start, end, GPUs and nodes of its last placement,
    preemptions, queueing delay, ideal runtime."""
    c = sim.cluster
    out = []
    for j, job in enumerate(sim.jobs):
        gpus = sim.placement.get(j)
        out.append(
            {
                "job_id": job.job_id,
                "kind": JOB_KIND_NAMES[job.kind],
                "gpus_requested": job.gpus,
                "priority": job.priority,
                "tenant": job.tenant,
                "arrival_s": float(job.arrival_s),
                "start_s": None if np.isnan(sim.first_start[j]) else float(sim.first_start[j]),
                "end_s": None if np.isnan(sim.end[j]) else float(sim.end[j]),
                "gpus": [] if gpus is None else [int(g) for g in gpus],
                "nodes": [] if gpus is None else sorted({c.node_names[n] for n in c.gpu_node[gpus]}),
                "preemptions": int(sim.preemptions[j]),
                "queueing_delay_s": float(sim.wait_s[j]),
                "ideal_runtime_s": float(job.work_s),
            }
        )
    return out
