"""A decision's features in Python against the native core, over the same decision states.

    python -m benchmarks.native_features [--scenarios default,nvl72,large] [--decisions 2000] [--seed 0] [--json]

For each scenario it runs random-action episodes of the env (a preempting action half the time
there is one, as tests/test_native_features.py does) and at each decision times, in this process:
`envs.features.candidate_features(cset)` (the env's observation today: the compiled path where
numba is there, its caches as the env leaves them from step to step), then
`envs.features.native_candidate_features(cset, out=..., sim=...)` (the Python wrapper gathering
the simulator's arrays and each valid candidate's GPUs and victims, and the core's call), and
the core's call alone on arguments made beforehand (envs.core.candidate_features with the
simulator's inputs and an ArrayMemo, as the wrapper passes them; its time is mostly the
binding's marshalling: the arrays by name, the candidates' arrays, the outputs). The candidates' placements are
resolved before any timing (both paths read them). Every native result is checked equal to the
reference. Prints microseconds per decision (mean and median) and the speed-ups.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import gymnasium as gym
import numpy as np

import envs  # noqa: F401 - registers the env
from envs import core as _core
from envs.features import NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES, candidate_features, native_candidate_features
from envs.placement import PREEMPT_RULES, RULES

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


def _core_args(cset):
    valid = cset.valid_placements()
    gpus = [cset.candidates[i].gpus for i in valid]
    victims = [list(cset.candidates[i].victims) for i in valid]
    return dict(state=cset.state, window=cset.window, mask=cset.mask,
                gpus=np.concatenate(gpus) if gpus else np.zeros(0, np.int64),
                gpus_end=np.cumsum([len(g) for g in gpus], dtype=np.int64),
                victims=np.array(sum(victims, []), dtype=np.int64), victims_end=np.cumsum([len(v) for v in victims], dtype=np.int64))


def measure(scenario: str, decisions: int, seed: int) -> dict:
    env = gym.make("gangsched/GpuCluster-v0", scenario=scenario, num_jobs=SIZES.get(scenario, 100))
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    episodes = 0
    py_ns, native_ns, core_ns = [], [], []
    memo = _core.ArrayMemo()
    for _ in range(decisions):
        cset = env.unwrapped.cset
        for i in cset.valid_placements():  # placements resolved untimed: both paths read them
            cset.candidates[i].geometry
        out = (np.empty((len(cset.mask), NUM_CANDIDATE_FEATURES), np.float32), np.empty(NUM_GLOBAL_FEATURES, np.float32))
        args = _core_args(cset)
        args["inputs"] = env.unwrapped.sim.native_feature_inputs()
        a = time.perf_counter_ns()
        ref = candidate_features(cset)
        b = time.perf_counter_ns()
        mine = native_candidate_features(cset, out=out, sim=env.unwrapped.sim)
        c = time.perf_counter_ns()
        _core.candidate_features(**args, out=out, memo=memo)
        d = time.perf_counter_ns()
        if not (np.array_equal(ref[0], mine[0]) and np.array_equal(ref[1], mine[1])):
            raise AssertionError(f"{scenario}: native features differ from the reference")
        py_ns.append(b - a)
        native_ns.append(c - b)
        core_ns.append(d - c)
        _, _, terminated, truncated, _ = env.step(_pick(rng, cset))
        if terminated or truncated:
            episodes += 1
            env.reset(seed=seed + episodes)
    env.close()

    def us(x):
        return {"mean": round(statistics.fmean(x) / 1000, 1), "median": round(statistics.median(x) / 1000, 1)}

    py, native, core = us(py_ns), us(native_ns), us(core_ns)
    return {"scenario": scenario, "decisions": decisions, "episodes": episodes + 1, "python_us": py, "native_us": native,
            "core_call_us": core, "speedup_mean": round(py["mean"] / native["mean"], 1),
            "speedup_median": round(py["median"] / native["median"], 1)}


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
    print(f"{'scenario':<16}{'decisions':>10}{'python us':>18}{'native us':>18}{'core call us':>18}{'speed-up':>12}")
    print(f"{'':<16}{'':>10}{'mean / median':>18}{'mean / median':>18}{'mean / median':>18}{'mean / med':>12}")
    for r in rows:
        def cell(x):
            return f"{x['mean']:.1f} / {x['median']:.1f}"
        print(f"{r['scenario']:<16}{r['decisions']:>10}{cell(r['python_us']):>18}{cell(r['native_us']):>18}"
              f"{cell(r['core_call_us']):>18}{r['speedup_mean']:>6.1f} / {r['speedup_median']:.1f}")


if __name__ == "__main__":
    main()
