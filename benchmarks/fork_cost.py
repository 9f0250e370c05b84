"""What a simulator fork costs (the lookahead's unit of work), next to copy.deepcopy.

    python -m benchmarks.fork_cost [--number 1000] [--repeat 5]

For mixed-64gpu + llm-mix and h100-1024gpu + llm-mix-large (each workload's default num_jobs),
the `sect` baseline drives an episode to three mid-episode decision points (the first with a
quarter, a half and three quarters of the jobs arrived). At each it times, with timeit (`--number`
calls, best of `--repeat`: on a shared machine the best run is the least disturbed one):

  * `sim.fork()`;
  * `sim.fork(work=..., future_jobs=...)`: sampled work for every arrived unfinished job (its
    estimate times a lognormal factor) and ~100 future jobs (another seed's workload, shifted to
    arrive after now);
  * `sim.fork()` then the fork's first `decision_state()` and `build_candidates` (what a lookahead
    pays before its first decision on the fork: the fork's decision state and candidate-layer
    caches start empty);

and, once or twice, `copy.deepcopy(sim)` (everything, the cluster too) and a deepcopy that shares
the cluster and the job list (as tests/test_simulator.py's exhaustive search does). Prints µs per
call at each point and their mean.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import time
import timeit

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from baselines import make_baseline
from envs.cluster.config import load_cluster
from envs.decision.candidates import apply_candidate, build_candidates
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import JobState, Simulator
from envs.workload.generator import load_workload_spec, make_workload

CASES = (("mixed-64gpu", "llm-mix"), ("h100-1024gpu", "llm-mix-large"))
QUEUE_WINDOW = 8
SHARES = (0.25, 0.5, 0.75)  # of the jobs arrived at the decision points measured
FUTURE_JOBS = 100


def decision_points(cluster_name: str, workload: str) -> list[Simulator]:
    """Copies (forks) of one `sect` episode at its first decision point past each share of
    arrivals."""
    cluster = load_cluster(cluster_name)
    sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, 0))
    rule = make_baseline("sect")
    out = []
    cset = advance_to_decision(sim, QUEUE_WINDOW)
    for share in SHARES:
        while sim._next_arrival < share * sim.num_jobs and not sim.done:
            apply_candidate(sim, cset, rule.select(cset.state, cset))
            cset = advance_to_decision(sim, QUEUE_WINDOW)
        sim.decision_state()
        out.append(sim.fork())
        out[-1].decision_state()  # as the original has it: built
    return out


def substitutes(sim: Simulator, seed: int = 1) -> tuple[dict[int, float], list]:
    """Sampled work for every arrived unfinished job and FUTURE_JOBS future jobs."""
    rng = np.random.default_rng(seed)
    arrived = sim._next_arrival
    live = [j for j in range(arrived) if sim.state[j] != JobState.DONE]
    work = {j: float(sim.estimate[j] * rng.lognormal(0.0, 0.5)) for j in live}
    spec = load_workload_spec("llm-mix")
    other = make_workload(spec, sim.cluster, seed, num_jobs=FUTURE_JOBS)
    future = [dataclasses.replace(j, job_id=arrived + k, arrival_s=sim.now + j.arrival_s) for k, j in enumerate(other)]
    return work, future


def best_us(fn, number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def once_us(fn, times: int = 2) -> float:
    best = float("inf")
    for _ in range(times):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=1000, help="calls per timing")
    ap.add_argument("--repeat", type=int, default=5, help="timings per figure (best is kept)")
    args = ap.parse_args()
    n, r = args.number, args.repeat
    print(f"µs per call, best of {r} x {n} calls (deepcopy: best of 2 single calls)")
    header = f"{'cluster + workload':32} {'point':>36} {'fork()':>9} {'fork(work,future)':>18} {'fork+cands':>11} {'deepcopy':>10} {'deepcopy(shared)':>17}"
    for cluster_name, workload in CASES:
        print()
        print(header)
        rows = []
        for sim in decision_points(cluster_name, workload):
            work, future = substitutes(sim)

            def fork_and_candidates(sim=sim):
                f = sim.fork()
                build_candidates(f.decision_state(), QUEUE_WINDOW)

            row = (
                best_us(sim.fork, n, r),
                best_us(lambda sim=sim, work=work, future=future: sim.fork(work=work, future_jobs=future), n, r),
                best_us(fork_and_candidates, max(n // 10, 1), r),
                once_us(lambda sim=sim: copy.deepcopy(sim)),
                once_us(lambda sim=sim: copy.deepcopy(sim, memo={id(sim.cluster): sim.cluster, id(sim.jobs): sim.jobs})),
            )
            rows.append(row)
            live = sum(1 for j in range(sim._next_arrival) if sim.state[j] != JobState.DONE)
            point = f"{sim._next_arrival}/{sim.num_jobs} arr, {len(sim.running)} run, {live} live"
            print(f"{cluster_name + ' + ' + workload:32} {point:>36} " + " ".join(
                f"{v:>{w}.1f}" for v, w in zip(row, (9, 18, 11, 10, 17))))
        mean = np.mean(rows, axis=0)
        print(f"{'':32} {'mean':>36} " + " ".join(f"{v:>{w}.1f}" for v, w in zip(mean, (9, 18, 11, 10, 17))))
    print(f"\n(work: every arrived unfinished job; future_jobs: {FUTURE_JOBS} jobs of llm-mix seed 1 shifted to after now)")


if __name__ == "__main__":
    main()
