"""What the compiled kernels cost before they pay: compile time on a cold cache, load time from
numba's on-disk cache, against the plain-Python reference path.

    python -m benchmarks.jit_compile [--steps 300] [--repeat 3]

Each measurement is a fresh Python process that imports gangsched and runs the first `--steps`
decisions of a mixed-64gpu episode under random legal actions (seed 0), timed from before the
first import of envs to the last step:

  * cold: numba compiles every kernel the episode calls (NUMBA_CACHE_DIR pointed at a new
    empty folder, so nothing is cached);
  * warm: the same process again on that folder, now holding the compiled kernels;
  * reference: GANGSCHED_JIT=0, no kernel at all.

cold - warm is the one-off compile cost on a new machine (or after the kernels change); warm -
reference is what loading the cached kernels adds to every new process.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import time
t0 = time.perf_counter()
import numpy as np
from envs.gym.env import GpuClusterEnv
env = GpuClusterEnv(cluster="mixed-64gpu", workload="llm-mix")
rng = np.random.default_rng(0)
env.reset(seed=0)
for _ in range({steps}):
    valid = np.flatnonzero(env.action_masks())
    _, _, term, trunc, _ = env.step(int(valid[rng.integers(len(valid))]))
    if term or trunc:
        env.reset()
print(time.perf_counter() - t0)
"""


def run_child(steps: int, cache_dir: str, jit: bool) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, GANGSCHED_JIT="1" if jit else "0", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _CHILD.format(steps=steps)], env=env, capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cold, warm, ref = [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="gangsched-numba-") as cache:
            cold.append(run_child(args.steps, cache, True))
            warm.append(run_child(args.steps, cache, True))
            ref.append(run_child(args.steps, cache, False))
    best = min
    print(f"import + first {args.steps} decisions (mixed-64gpu), best of {args.repeat} fresh processes:")
    print(f"  cold cache (compiles every kernel it calls) {best(cold):6.2f} s")
    print(f"  warm cache (loads them from disk)           {best(warm):6.2f} s")
    print(f"  reference path (GANGSCHED_JIT=0)            {best(ref):6.2f} s")
    print(f"  one-off compile cost {best(cold) - best(warm):.2f} s; cached kernels add {best(warm) - best(ref):+.2f} s to a new process")


if __name__ == "__main__":
    main()
