"""The batched vector env's speed, and where its time goes.

    python -m benchmarks.batch_speed [--batch 16 64] [--threads 1 2] [--steps 40000] [--repeat 3]
        [--cluster mixed-64gpu] [--workload llm-mix] [--workers 0]

For each batch size and thread count: decision steps per second of `BatchedClusterEnv`
(envs.gym.vec), summed over its episodes, under random legal actions (drawn for the whole batch
at once, so the client costs little), best and median of `--repeat` runs of `--steps` steps
each. With each run, where the caller's wall time went: in the native batch (`envs.core.
EpisodeBatch`: stepping an episode itself, or waiting for the threads' steps), the episodes'
resets (a new workload drawn and its first decision), and the rest (each episode's reward, info
and end in Python, the action draw). With one thread every native step runs on the caller's, so
`core alone` (printed then) is the steps per second the native steps would allow if the rest
cost nothing.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from envs.gym.env import GpuClusterEnv
from envs.gym.vec import BatchedClusterEnv


class _Clock:
    """Seconds the caller's thread spent in the native batch (`start` and `next`: stepping an
    episode itself or waiting for one; with one thread, every native step) and in the episodes'
    resets."""

    def __init__(self):
        self.native = self.reset = 0.0

    def timed(self, batch):
        clock = self

        class Timed:
            def start(self, *args):
                t0 = time.perf_counter()
                batch.start(*args)
                clock.native += time.perf_counter() - t0

            def next(self):
                t0 = time.perf_counter()
                done = batch.next()
                clock.native += time.perf_counter() - t0
                return done

        return Timed()

    def __enter__(self):
        reset, clock = GpuClusterEnv.reset, self

        def timed_reset(env, **kwargs):
            t0 = time.perf_counter()
            try:
                return reset(env, **kwargs)
            finally:
                clock.reset += time.perf_counter() - t0

        self._saved = reset
        GpuClusterEnv.reset = timed_reset
        return self

    def __exit__(self, *exc):
        GpuClusterEnv.reset = self._saved


def run(cluster: str, workload: str, batch: int, threads: int, steps: int, workers: int = 0) -> tuple[float, _Clock, float]:
    """(steps/s summed, the clock's split, wall s) of one run."""
    vec = BatchedClusterEnv({"cluster": cluster, "workload": workload}, batch, threads=threads, workers=workers)
    rng = np.random.default_rng(0)
    vec.seed(0)
    vec.reset()
    n = 0
    with _Clock() as clock:
        if vec._batch.local is not None:
            vec._batch.local._native = clock.timed(vec._batch.local._native)
        t0 = time.perf_counter()
        while n < steps:
            masks = vec.action_masks()
            keys = rng.random(masks.shape)
            keys[~masks] = -1.0
            vec.step(keys.argmax(axis=1))  # a uniform draw among each episode's valid candidates
            n += batch
        wall = time.perf_counter() - t0
    vec.close()
    return n / wall, clock, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=40_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cluster", default="mixed-64gpu")
    ap.add_argument("--workload", default="llm-mix")
    ap.add_argument("--workers", type=int, default=0, help="worker processes (the split is then the parent's only)")
    args = ap.parse_args()
    run(args.cluster, args.workload, 4, 1, 2_000)  # warm-up: memo tables, first loads
    print(f"batched env on {args.cluster} / {args.workload}, random legal actions, {args.steps} steps a run, "
          f"{args.repeat} runs; cores this process may use: {len(os.sched_getaffinity(0))}")
    for batch in args.batch:
        for threads in args.threads:
            runs = [run(args.cluster, args.workload, batch, threads, args.steps, args.workers) for _ in range(args.repeat)]
            sps = [r[0] for r in runs]
            best = int(np.argmax(sps))
            rate, clock, wall = runs[best]
            rest = wall - clock.native - clock.reset
            print(f"batch {batch:3d}, threads {threads}: best {max(sps):7.0f}, median {np.median(sps):7.0f} steps/s summed; "
                  f"best run's wall: native call {clock.native / wall:4.0%}, resets {clock.reset / wall:4.0%}, "
                  f"the rest {rest / wall:4.0%}" + (f"; core alone {args.steps / clock.native:7.0f} steps/s" if threads == 1 else ""))


if __name__ == "__main__":
    main()
