"""How much better than the best heuristic can a scheduler get on a setting? A yardstick for
learned policies.

    python -m benchmarks.headroom [--cluster mixed-64gpu] [--workload llm-mix] [--seeds 0-9]

Runs, on the same workloads: `sect` (the best baseline on the default setting) as deployed,
seeing only the noisy runtime estimates; the same rule as a clairvoyant *oracle* (its workload's
estimates are the true runtimes, which no real scheduler knows: a yardstick, never a policy);
and the ideal-runtime lower bound (every job alone at reference speed from its arrival: no
queueing, perfect placement). A policy that only reorders and places jobs greedily cannot
expect more than the oracle's gain.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from baselines import make_baseline
from envs.cluster.config import load_cluster, parse_seeds
from envs.jobs import Job
from envs.sim.metrics import episode_metrics
from envs.sim.replay import replay
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload


def clairvoyant_oracle(jobs: list[Job]) -> list[Job]:
    """The same jobs with estimates equal to their true work: what an oracle would be told.
    Schedulers act through the honest decision state, so the truth reaches them only this way,
    in the open."""
    return [dataclasses.replace(j, estimate_s=j.work_s) for j in jobs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="mixed-64gpu")
    ap.add_argument("--workload", default="llm-mix")
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--baseline", default="sect")
    args = ap.parse_args()
    cluster, spec = load_cluster(args.cluster), load_workload_spec(args.workload)
    seeds = parse_seeds(args.seeds)
    rows: dict[str, list[float]] = {args.baseline: [], f"{args.baseline}, clairvoyant oracle": [], "ideal-runtime lower bound": []}
    for seed in seeds:
        jobs = make_workload(spec, cluster, seed)
        for label, workload in ((args.baseline, jobs), (f"{args.baseline}, clairvoyant oracle", clairvoyant_oracle(jobs))):
            sim = Simulator(cluster, workload)
            rule = make_baseline(args.baseline, seed=seed)
            replay(sim, rule.select, queue_window=8, preempt_las=rule.preempt_las)
            m = episode_metrics(sim)
            rows[label].append(m["avg_jct_s"] / 3600)
        rows["ideal-runtime lower bound"].append(m["avg_ideal_runtime_s"] / 3600)
    base = np.array(rows[args.baseline])
    print(f"{args.cluster} + {args.workload}, seeds {args.seeds}: average JCT (h), mean over seeds; change against {args.baseline}")
    for label, values in rows.items():
        v = np.array(values)
        print(f"  {label:30s} {v.mean():7.3f} h   {100 * (v.mean() / base.mean() - 1):+6.1f}%")


if __name__ == "__main__":
    main()
