"""One whole episode of the honest lookahead, timed: its wall time and decisions, then its avg JCT
as the last line (what `benchmarks.ab --same-output` compares).

    python -m benchmarks.lookahead_episode [--scenario large] [--jobs N] [--seed 0]

Against an older commit, run this file by its path so that both sides run the same script over
their own code: `python -m benchmarks.ab --base REV --runs 1 --same-output -- python
$PWD/benchmarks/lookahead_episode.py --scenario large`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from agents.lookahead import run_lookahead  # noqa: E402
from envs.cluster.config import load_cluster  # noqa: E402
from envs.sim.metrics import episode_metrics  # noqa: E402
from envs.scenario import load_scenario  # noqa: E402
from envs.workload.generator import load_workload_spec, make_workload  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="large")
    ap.add_argument("--jobs", type=int, default=None, help="the first N jobs (default: the scenario's workload)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    sc = load_scenario(args.scenario)
    cluster, spec = load_cluster(sc.cluster), load_workload_spec(sc.workload)
    jobs = make_workload(spec, cluster, args.seed, args.jobs)
    t0 = time.perf_counter()
    sim, steps, stats = run_lookahead("lookahead", cluster, spec, jobs, args.seed, sc.lookahead, sc.objective,
                                      sc.queue_window, sc.max_checkpoint_s)
    wall = time.perf_counter() - t0
    print(f"lookahead on {args.scenario}, {len(jobs)} jobs, seed {args.seed}: {wall:.1f} s, {steps} decisions, "
          f"{wall / steps * 1e3:.1f} ms per decision, {stats.rollouts} rollouts", file=sys.stderr)
    print(f"avg JCT {episode_metrics(sim)['avg_jct_s']:.6f} s, {steps} decisions, {stats.changed} changed")


if __name__ == "__main__":
    main()
