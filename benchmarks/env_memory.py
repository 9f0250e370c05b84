"""Memory per episode of the batched vector env (envs.gym.vec.BatchedClusterEnv), in one process.

    python -m benchmarks.env_memory [--cluster mixed-64gpu] [--workload llm-mix] [--batch 8 64] [--steps 400]
    python -m benchmarks.env_memory --resident 1024 --steps 1000

For each batch size, builds the batched env, resets it and steps every episode `--steps`
random legal actions (an episode that ends starts again), then reports the Python heap the
batch holds (tracemalloc, numpy's arrays included: numpy reports its allocations to it) and the
process's resident set. The cost of one more episode is the difference between two batch sizes
over the difference of their episode counts, so what every process holds once (imports, the
cluster's memo tables shared by its episodes, filled by a first untimed batch, numba's kernels)
cancels out, except where the shared memo tables keep growing with the states more episodes
visit (that growth is counted per episode). An episode that ends starts afresh, so `--steps`
below an episode's length measures episodes part of the way through.

`--resident N` measures the whole batch instead: the growth of the process's resident set over
making N episodes and stepping them (no tracemalloc, so N can be 1,024), one-off costs (the
kernels' first load) and the shared memo tables included.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import tracemalloc

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")


def stepped_batch(cluster: str, workload: str, batch: int, steps: int):
    """A batched env of `batch` episodes, reset and stepped `steps` random legal actions."""
    from envs.gym.vec import BatchedClusterEnv

    vec = BatchedClusterEnv({"cluster": cluster, "workload": workload}, batch)
    rng = np.random.default_rng(0)
    vec.seed(0)
    vec.reset()
    for _ in range(steps):
        masks = vec.action_masks()
        vec.step(np.array([int(v[rng.integers(len(v))]) for v in (np.flatnonzero(m) for m in masks)]))
    return vec


def held_after_steps(cluster: str, workload: str, batch: int, steps: int) -> tuple[float, float]:
    """(MB traced by tracemalloc while the batch is alive, after `steps` steps; peak RSS MB)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    vec = stepped_batch(cluster, workload, batch, steps)
    gc.collect()
    held = (tracemalloc.get_traced_memory()[0] - base) / 2**20
    tracemalloc.stop()
    vec.close()
    return held, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def resident_after_steps(cluster: str, workload: str, batch: int, steps: int) -> tuple[float, float]:
    """(the process's resident set before the batch is made, and after `steps` steps of it), MB:
    no tracemalloc, so a batch of 1,024 episodes runs at the env's own speed."""
    import envs.gym.vec  # noqa: F401  (its imports are the process's, not the batch's)

    def resident_mb() -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

    gc.collect()
    before = resident_mb()
    vec = stepped_batch(cluster, workload, batch, steps)
    gc.collect()
    after = resident_mb()
    vec.close()
    return before, after


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="mixed-64gpu")
    ap.add_argument("--workload", default="llm-mix")
    ap.add_argument("--batch", type=int, nargs=2, default=[8, 64])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--resident", type=int, default=None, metavar="N",
                    help="instead: the resident set one batch of N episodes adds (Linux /proc; 1,024 episodes x 1,000 steps: ~15 min)")
    args = ap.parse_args()
    if args.resident is not None:
        before, after = resident_after_steps(args.cluster, args.workload, args.resident, args.steps)
        print(f"{args.cluster} + {args.workload}, {args.resident} episodes x {args.steps} steps: resident set {before:.0f} -> "
              f"{after:.0f} MB, {after - before:.0f} MB for the batch: {(after - before) / args.resident:.2f} MB per episode "
              f"(the memo tables they share included)")
        return
    small, large = sorted(args.batch)
    held_after_steps(args.cluster, args.workload, small, args.steps)  # warm-up: the memo tables every episode shares
    held_small, _ = held_after_steps(args.cluster, args.workload, small, args.steps)
    held_large, rss = held_after_steps(args.cluster, args.workload, large, args.steps)
    per = (held_large - held_small) / (large - small)
    print(f"{args.cluster} + {args.workload}, {args.steps} steps an episode: {small} episodes hold {held_small:.1f} MB, "
          f"{large} hold {held_large:.1f} MB: {per:.2f} MB per episode (peak RSS {rss:.0f} MB)")


if __name__ == "__main__":
    main()
