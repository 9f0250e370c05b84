"""Env and simulator speed on one core.

    python -m benchmarks.env_speed [--steps 20000] [--jobs 10000] [--repeat 3] [--batch 16] [--batch-workers 2]
        [--reference]

Prints decision steps per second of `gangsched/GpuCluster-v0` under random legal actions on
mixed-64gpu and h100-1024gpu, of the batched vector env (envs.gym.vec.BatchedClusterEnv, `--batch`
episodes in this process, summed over them), and the wall time to replay a 10,000-job workload
on h100-1024gpu under the `topology` baseline without the Gymnasium layer. CartPole-v1 under
random actions runs in the same invocation, and each env figure is printed with its ratio to
CartPole's. Each figure is measured `--repeat` times (the same work each time) and printed as
best and median: on a shared machine the best run is the least disturbed one. The figures are
for the compiled kernels (envs.core.kernels) unless GANGSCHED_JIT=0; `--reference` measures the
plain-Python reference path too, in the same invocation.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym
import numpy as np

import envs  # noqa: F401
from baselines import make_baseline
from envs.cluster.config import load_cluster
from envs.core import jit
from envs.sim.replay import replay
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload


def random_steps_per_s(cluster: str, workload: str, steps: int, num_jobs: int | None = None) -> tuple[float, int]:
    env = gym.make("gangsched/GpuCluster-v0", cluster=cluster, workload=workload, num_jobs=num_jobs)
    u = env.unwrapped
    rng = np.random.default_rng(0)
    done, n, seed = True, 0, 0
    t0 = time.perf_counter()
    while n < steps:
        if done:
            env.reset(seed=seed)
            seed += 1
        valid = np.flatnonzero(u.mask)  # the mask action_masks() returns, without its copy
        a = int(valid[rng.integers(len(valid))])
        _, _, term, trunc, _ = env.step(a)
        done = term or trunc
        n += 1
    return n / (time.perf_counter() - t0), seed


def cartpole_steps_per_s(steps: int) -> float:
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    sample = env.action_space.sample
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(sample())
        if term or trunc:
            env.reset()
    return steps / (time.perf_counter() - t0)


def batched_steps_per_s(cluster: str, workload: str, steps: int, batch: int, workers: int = 0) -> float:
    """Decision steps per second summed over `batch` episodes of the batched vector env (in
    this process, or over `workers` processes)."""
    from envs.gym.vec import BatchedClusterEnv

    vec = BatchedClusterEnv({"cluster": cluster, "workload": workload}, batch, workers=workers)
    rng = np.random.default_rng(0)
    vec.seed(0)
    vec.reset()
    n = 0
    t0 = time.perf_counter()
    while n < steps:
        masks = vec.action_masks()
        actions = [int(v[rng.integers(len(v))]) for v in (np.flatnonzero(m) for m in masks)]
        vec.step(np.array(actions))
        n += batch
    rate = n / (time.perf_counter() - t0)
    vec.close()
    return rate


def replay_seconds(cluster_name: str, workload: str, jobs: int) -> tuple[float, float, int]:
    cluster = load_cluster(cluster_name)
    workload_jobs = make_workload(load_workload_spec(workload), cluster, seed=0, num_jobs=jobs)
    sim = Simulator(cluster, workload_jobs)
    rule = make_baseline("topology")
    t0 = time.perf_counter()
    decisions = replay(sim, rule.select, queue_window=8, preempt_las=rule.preempt_las)
    return time.perf_counter() - t0, sim.now, decisions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16, help="episodes of the batched vector env")
    ap.add_argument("--batch-workers", type=int, default=0,
                    help="also measure the batched env over this many worker processes (not one core: one per worker)")
    ap.add_argument("--reference", action="store_true",
                    help="also measure the plain-Python reference path (envs.core.jit), after the compiled one")
    args = ap.parse_args()
    cart = [cartpole_steps_per_s(args.steps * 5) for _ in range(args.repeat)]
    cart_best = max(cart)
    print(f"CartPole-v1 random actions                            best {cart_best:6.0f}, median {np.median(cart):6.0f} "
          f"steps/s ({args.steps * 5} steps, {args.repeat} runs)")
    paths = [jit.ENABLED] + ([False] if args.reference and jit.ENABLED else [])
    for compiled in paths:
        with contextlib.nullcontext() if compiled else jit.reference_path():
            print(f"-- {'compiled kernels (envs.core.kernels)' if compiled else 'plain-Python reference path (GANGSCHED_JIT=0)'}")
            measure(args, cart_best)


def measure(args, cart_best: float) -> None:
    # Untimed warm-up: the kernels load from numba's cache on first call, and memo tables fill.
    random_steps_per_s("mixed-64gpu", "llm-mix", 300)
    random_steps_per_s("h100-1024gpu", "llm-mix-large", 300, 300)
    replay_seconds("h100-1024gpu", "llm-mix-large", 300)
    for cluster, workload, jobs in (("mixed-64gpu", "llm-mix", None), ("h100-1024gpu", "llm-mix-large", 1000)):
        runs = [random_steps_per_s(cluster, workload, args.steps, jobs) for _ in range(args.repeat)]
        sps = [r[0] for r in runs]
        print(f"env random legal actions  {cluster:13s} {workload:14s} best {max(sps):6.0f}, median {np.median(sps):6.0f} "
              f"decision steps/s = {max(sps) / cart_best:.3f}x CartPole ({args.steps} steps, {runs[0][1]} episodes, {args.repeat} runs)")
    sps = [batched_steps_per_s("mixed-64gpu", "llm-mix", args.steps, args.batch) for _ in range(args.repeat)]
    print(f"batched env, {args.batch} episodes  mixed-64gpu   llm-mix        best {max(sps):6.0f}, median {np.median(sps):6.0f} "
          f"decision steps/s summed = {max(sps) / cart_best:.3f}x CartPole ({args.steps} steps, {args.repeat} runs)")
    if args.batch_workers:
        sps = [batched_steps_per_s("mixed-64gpu", "llm-mix", args.steps, args.batch, args.batch_workers) for _ in range(args.repeat)]
        print(f"batched env, {args.batch} episodes over {args.batch_workers} worker processes, mixed-64gpu: best {max(sps):6.0f}, "
              f"median {np.median(sps):6.0f} decision steps/s summed ({args.steps} steps, {args.repeat} runs)")
    runs = [replay_seconds("h100-1024gpu", "llm-mix-large", args.jobs) for _ in range(args.repeat)]
    walls = [r[0] for r in runs]
    print(f"replay {args.jobs} jobs on h100-1024gpu under topology: best {min(walls):.1f} s, median {np.median(walls):.1f} s wall "
          f"({runs[0][2]} decisions, {runs[0][1] / 86400:.1f} simulated days, {args.repeat} runs)")

if __name__ == "__main__":
    main()
