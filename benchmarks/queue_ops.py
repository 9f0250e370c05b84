"""What the simulator's queue costs per job that enters and leaves it, by queue length.

    python -m benchmarks.queue_ops [--lengths 1000,4000,16000] [--ops 20000] [--repeat 3] [--reference]

`envs.sim.queue.JobQueue` keeps the queued jobs in FIFO order and sorted by remaining estimate;
each arrival is a `push` and each start a `remove`. On the Philly replay the queue holds about
4,250 jobs at a decision (up to 9,884 over the first 20,000 jobs). For each length L the queue is
filled with L jobs of random estimates (exponential, mean 1 h, so ties are rare), then `--ops`
pushes are timed, then as many removals of random queued jobs: the queue stays near L. Prints
µs per push and per remove, best of `--repeat` (on a shared machine the best run is the least
disturbed one). `--reference` also times the reference path (GANGSCHED_JIT=0's code).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from envs.core import jit
from envs.sim.queue import JobQueue


def time_queue(length: int, ops: int, seed: int = 0) -> tuple[float, float]:
    """(µs per push, µs per remove) around a queue of `length` jobs."""
    n = length + ops
    rng = np.random.default_rng(seed)
    remaining = rng.exponential(3600.0, n).tolist()
    q = JobQueue([1] * n, [0] * n)
    for j in range(length):
        q.push(j, remaining[j])
    start = time.perf_counter()
    for j in range(length, n):
        q.push(j, remaining[j])
    pushed = time.perf_counter()
    leaving = rng.permutation(n)[:ops].tolist()
    begin = time.perf_counter()
    for j in leaving:
        q.remove(j)
    removed = time.perf_counter()
    assert q.length == length
    return (pushed - start) / ops * 1e6, (removed - begin) / ops * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="1000,4000,16000", help="queue lengths (comma-separated)")
    parser.add_argument("--ops", type=int, default=20000, help="pushes, then removals, timed at each length")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reference", action="store_true", help="also time the reference path")
    args = parser.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    time_queue(100, 100)  # load the compiled kernels before timing
    paths = [("compiled" if jit.ENABLED else "reference", None)]
    if args.reference and jit.ENABLED:
        paths.append(("reference", jit.reference_path))
    for name, context in paths:
        for length in lengths:
            runs = []
            for r in range(args.repeat):
                if context is None:
                    runs.append(time_queue(length, args.ops, seed=r))
                else:
                    with context():
                        runs.append(time_queue(length, args.ops, seed=r))
            push_us = min(p for p, _ in runs)
            remove_us = min(m for _, m in runs)
            print(f"{name:9s} queue ~{length:6,d} jobs: push {push_us:5.2f} us, remove {remove_us:5.2f} us "
                  f"(best of {args.repeat} x {args.ops:,})")


if __name__ == "__main__":
    main()
