"""Digests of what the simulator and the env do, for checking that a change alters no result.

    python -m benchmarks.digests [--scenarios a,b] [--seeds N] [--env-steps N]

For every scenario (configs/scenarios/) and every baseline, on the scenario's first `--seeds`
test seeds: the schedule digest of the replay (`benchmarks.replay_philly.schedule_digest`: every
job's end, work, service, interference and rate, every run segment, the energy) and its metrics.
Then, per scenario and seed, an env episode of `--env-steps` random valid actions (a seeded
generator): every observation array, reward and mask. One line per item, the last line a digest
of all of them, so

    python -m benchmarks.ab --base REV --runs 1 --same-output -- python -m benchmarks.digests

fails when a change moves any schedule, metric or observation of any scenario and baseline.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import gymnasium as gym
import numpy as np

from agents.evaluation.runners import cluster_and_spec, run_baseline
from baselines import BASELINES
from benchmarks.replay_philly import schedule_digest
from envs import ENV_ID
from envs.scenario import load_scenario, scenario_names
from envs.sim.metrics import episode_metrics
from envs.sim.simulator import SimConfig


def env_digest(scenario: str, seed: int, steps: int) -> str:
    """Digest of an env episode of `steps` random valid actions on `scenario`, workload `seed`."""
    env = gym.make(ENV_ID, scenario=scenario)
    rng = np.random.default_rng([seed, 0xD16])
    h = hashlib.sha256()
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        for key in sorted(obs):
            h.update(np.ascontiguousarray(obs[key]).tobytes())
        valid = np.flatnonzero(obs["action_mask"])
        obs, reward, terminated, truncated, _ = env.step(int(rng.choice(valid)))
        h.update(np.float64(reward).tobytes())
        if terminated or truncated:
            break
    env.close()
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(scenario_names()), help="comma-separated (default: all)")
    parser.add_argument("--seeds", type=int, default=1, help="the first N test seeds of each scenario")
    parser.add_argument("--env-steps", type=int, default=300)
    args = parser.parse_args(argv)
    total = hashlib.sha256()
    t0 = time.perf_counter()
    for name in args.scenarios.split(","):
        sc = load_scenario(name)
        cluster, spec = cluster_and_spec(sc.cluster, sc.workload)
        for seed in sc.test_seeds[: args.seeds]:
            for policy in BASELINES:
                sim, decisions = run_baseline(policy, cluster, spec, seed, sc.num_jobs, sc.queue_window,
                                              SimConfig(max_checkpoint_s=sc.max_checkpoint_s))
                metrics = json.dumps(episode_metrics(sim), sort_keys=True)
                line = f"{name} seed {seed} {policy}: schedule {schedule_digest(sim)}, {decisions} decisions, " \
                       f"metrics {hashlib.sha256(metrics.encode()).hexdigest()[:16]}"
                print(line, flush=True)
                total.update(line.encode())
            line = f"{name} seed {seed} env: {env_digest(name, seed, args.env_steps)}"
            print(line, flush=True)
            total.update(line.encode())
    print(f"({time.perf_counter() - t0:.0f} s)")
    print(f"all digests {total.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
