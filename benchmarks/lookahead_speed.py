"""What a decision of the honest lookahead (agents.lookahead) costs: with its rollouts in the native
core, with them in Python over the compiled kernels, and on the plain-Python reference path, in one
process.

    python -m benchmarks.lookahead_speed [--scenario default] [--jobs 120] [--seed 0]

Runs `lookahead` over the first `--jobs` jobs of the scenario's workload (its own search
settings: candidates x sampled futures, each a rollout of the base rule over the horizon) and
prints wall time per decision and the episode's average JCT, which must be the same on every
path. The rollouts (forks, the event loop, the base rule's candidates and placements) are its
whole cost, so this is the simulation speed the lookahead teacher sees.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import agents.lookahead as lookahead
from agents.lookahead import run_lookahead
from envs.cluster.config import load_cluster
from envs.core import jit
from envs.scenario import load_scenario
from envs.sim.metrics import episode_metrics
from envs.workload.generator import load_workload_spec, make_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="default")
    ap.add_argument("--jobs", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sc = load_scenario(args.scenario)
    cluster, spec = load_cluster(sc.cluster), load_workload_spec(sc.workload)
    jobs = make_workload(spec, cluster, args.seed, args.jobs)
    run = lambda: run_lookahead("lookahead", cluster, spec, jobs, args.seed, sc.lookahead, sc.objective,  # noqa: E731
                                sc.queue_window, sc.max_checkpoint_s)
    run()  # untimed: kernels load from numba's cache, memo tables fill
    paths = [("native rollouts", True, True), ("Python rollouts", True, False), ("reference path", False, False)]
    for label, compiled, native in paths if jit.ENABLED else paths[2:]:
        lookahead.NATIVE_ROLLOUTS = native
        with contextlib.nullcontext() if compiled else jit.reference_path():
            t0 = time.perf_counter()
            sim, steps, _ = run()
            wall = time.perf_counter() - t0
        print(f"lookahead on {args.scenario}, {args.jobs} jobs, seed {args.seed}, {label:16s}: {wall:.1f} s, "
              f"{steps} decisions, {wall / steps * 1e3:.1f} ms per decision (avg JCT {episode_metrics(sim)['avg_jct_s']:.3f} s)")
    lookahead.NATIVE_ROLLOUTS = True

if __name__ == "__main__":
    main()
