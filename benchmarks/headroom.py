"""How much better than the best heuristic can a scheduler get on a setting? A yardstick for
learned policies.

    python -m benchmarks.headroom [--cluster mixed-64gpu] [--workload llm-mix] [--seeds 0-9]

Runs, on the same workloads: `sect` (the best baseline on the default setting) as deployed,
seeing only the noisy runtime estimates; the same rule made clairvoyant (it sees every job's
true remaining work, which no real scheduler does); and the ideal-runtime lower bound (every
job alone at reference speed from its arrival: no queueing, perfect placement). A policy that
only reorders and places jobs greedily cannot expect more than the clairvoyant rule's gain.
"""

from __future__ import annotations

import argparse

import numpy as np

from baselines import make_baseline
from envs.config import load_cluster, parse_seeds
from envs.metrics import episode_metrics
from envs.replay import replay
from envs.simulator import Simulator
from envs.workload import load_workload_spec, make_workload


class ClairvoyantSimulator(Simulator):
    """A simulator whose schedulers see the truth: remaining work instead of the estimate."""

    def remaining_estimate_s(self, job_id):
        return self.work_left[job_id] + self.restore_s[job_id] * self.needs_restore[job_id]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="mixed-64gpu")
    ap.add_argument("--workload", default="llm-mix")
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--baseline", default="sect")
    args = ap.parse_args()
    cluster, spec = load_cluster(args.cluster), load_workload_spec(args.workload)
    seeds = parse_seeds(args.seeds)
    rows: dict[str, list[float]] = {args.baseline: [], f"{args.baseline}, clairvoyant": [], "ideal-runtime lower bound": []}
    for seed in seeds:
        for label, sim_class in ((args.baseline, Simulator), (f"{args.baseline}, clairvoyant", ClairvoyantSimulator)):
            sim = sim_class(cluster, make_workload(spec, cluster, seed))
            replay(sim, make_baseline(args.baseline, seed=seed).select, queue_window=8)
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
