"""A decision's observation in Python against the native core, over the same decision states.

    python -m benchmarks.native_features [--scenarios default,nvl72,large] [--decisions 2000] [--seed 0] [--json]

For each scenario it runs random-action episodes of the env (a preempting action half the time
there is one, as tests/test_native_features.py does) and at each decision times, in this process:
- `python`: the reference observation, `envs.decision.candidates.build_candidates` of the simulator's
  decision state, each valid candidate's placement resolved, `envs.decision.features.candidate_features`
  (numba's kernels where numba is there) and the clip: what the env did before its observation
  came from the core;
- `native`: `Simulator.native_candidates(..., features=...)`, the candidate set and its clipped
  features in one call over the simulator's arrays: what the env does now;
- `features`: the features alone, in Python (`candidate_features`, the placements resolved) and
  through the core from a decision state (`envs.decision.features.native_candidate_features`, the
  scoring service's kind of call: the state's arrays and the candidates' marshalled per call).
Every native result is checked equal to the reference. Prints microseconds per decision (mean
and median) and the speed-ups of the whole observation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import gymnasium as gym
import numpy as np

import envs  # noqa: F401 - registers the env
from envs.decision.candidates import build_candidates
from envs.decision.features import NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES, candidate_features, native_candidate_features
from envs.decision.placement import PREEMPT_RULES, RULES

SIZES = {"large": 600, "nvl72": 400}  # jobs, where the default (100) leaves the cluster too empty to preempt


def _pick(rng, cset) -> int:
    valid = np.flatnonzero(cset.mask).tolist()
    wait = len(cset.mask) - 1
    placing = [i for i in valid if i != wait]
    preempting = [i for i in placing if i % len(RULES) in PREEMPT_RULES]
    if preempting and rng.random() < 0.5:
        return int(rng.choice(preempting))
    if placing and (not cset.mask[wait] or rng.random() < 0.8):
        return int(rng.choice(placing))
    return wait


def measure(scenario: str, decisions: int, seed: int) -> dict:
    env = gym.make("gangsched/GpuCluster-v0", scenario=scenario, num_jobs=SIZES.get(scenario, 100))
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    episodes = 0
    times: dict[str, list[int]] = {"python": [], "native": [], "features_python": [], "features_native": []}
    u = env.unwrapped
    for _ in range(decisions):
        cset, sim = u.cset, u.sim
        state = sim.decision_state()
        out = (np.empty((len(cset.mask), NUM_CANDIDATE_FEATURES), np.float32), np.empty(NUM_GLOBAL_FEATURES, np.float32))
        a = time.perf_counter_ns()
        ref_set = build_candidates(state, u.queue_window, u.preempt_las, u.wait_guard)
        for i in ref_set.valid_placements():
            ref_set.candidates[i].geometry
        ref = candidate_features(ref_set)
        for x in ref:
            np.minimum(np.maximum(x, -1.0, out=x), 1.0, out=x)
        b = time.perf_counter_ns()
        mine = sim.native_candidates(u.queue_window, u.preempt_las, u.wait_guard, out)
        c = time.perf_counter_ns()
        if not (mine.window == ref_set.window and np.array_equal(mine.mask, ref_set.mask)
                and np.array_equal(ref[0], out[0], equal_nan=True) and np.array_equal(ref[1], out[1], equal_nan=True)):
            raise AssertionError(f"{scenario}: the native observation differs from the reference")
        d = time.perf_counter_ns()
        candidate_features(ref_set)
        e = time.perf_counter_ns()
        native_candidate_features(ref_set, out=out)
        f = time.perf_counter_ns()
        for key, t in zip(times, (b - a, c - b, e - d, f - e)):
            times[key].append(t)
        _, _, terminated, truncated, _ = env.step(_pick(rng, cset))
        if terminated or truncated:
            episodes += 1
            env.reset(seed=seed + episodes)
    env.close()

    def us(x):
        return {"mean": round(statistics.fmean(x) / 1000, 1), "median": round(statistics.median(x) / 1000, 1)}

    t = {k: us(v) for k, v in times.items()}
    return {"scenario": scenario, "decisions": decisions, "episodes": episodes + 1, **{f"{k}_us": v for k, v in t.items()},
            "speedup_mean": round(t["python"]["mean"] / t["native"]["mean"], 1),
            "speedup_median": round(t["python"]["median"] / t["native"]["median"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="default,nvl72,large")
    ap.add_argument("--decisions", type=int, default=2000, help="decisions timed per scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="one JSON line per scenario instead of the table")
    args = ap.parse_args()
    rows = [measure(s, args.decisions, args.seed) for s in args.scenarios.split(",")]
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return
    cols = ("python", "native", "features_python", "features_native")
    print(f"{'scenario':<16}{'decisions':>10}" + "".join(f"{c + ' us':>22}" for c in cols) + f"{'speed-up':>12}")
    print(f"{'':<16}{'':>10}" + "".join(f"{'mean / median':>22}" for _ in cols) + f"{'mean / med':>12}")
    for r in rows:
        def cell(x):
            return f"{x['mean']:.1f} / {x['median']:.1f}"
        print(f"{r['scenario']:<16}{r['decisions']:>10}" + "".join(f"{cell(r[c + '_us']):>22}" for c in cols)
              + f"{r['speedup_mean']:>6.1f} / {r['speedup_median']:.1f}")


if __name__ == "__main__":
    main()
