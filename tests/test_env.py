"""The Gymnasium contract of gangsched/GpuCluster-v0."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the env)
from envs.decision.features import NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES
from envs.gym.env import GpuClusterEnv


def rollout(env, seed, policy_seed=0, max_steps=10_000):
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(policy_seed)
    trace, total = [], 0.0
    for _ in range(max_steps):
        mask = env.unwrapped.action_masks()
        assert (obs["action_mask"].astype(bool) == mask).all()
        a = int(rng.choice(np.flatnonzero(mask)))
        obs, r, term, trunc, info = env.step(a)
        trace.append((a, r, obs["candidates"].tobytes(), obs["global"].tobytes()))
        total += r
        if term or trunc:
            return trace, total, info
    raise AssertionError("episode did not end")


@pytest.mark.parametrize("cluster", ["h100-4node", "mixed-64gpu"])
def test_check_env_passes_without_warnings(cluster):
    env = gym.make("gangsched/GpuCluster-v0", cluster=cluster, num_jobs=30)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []


def test_defaults_and_spaces():
    env = gym.make("gangsched/GpuCluster-v0")
    u = env.unwrapped
    assert u.cluster.name == "mixed-64gpu" and u.workload_spec.name == "llm-mix"
    K = u.action_space.n
    assert K == 8 * 5 + 1
    assert u.observation_space["candidates"].shape == (K, NUM_CANDIDATE_FEATURES)
    assert u.observation_space["global"].shape == (NUM_GLOBAL_FEATURES,)
    obs, info = env.reset(seed=3)
    assert obs["candidates"].dtype == np.float32 and np.abs(obs["candidates"]).max() <= 1.0
    assert u.observation_space.contains(obs)


def test_same_seed_same_episode_bit_for_bit():
    env = gym.make("gangsched/GpuCluster-v0", num_jobs=60)
    a = rollout(env, seed=7)
    b = rollout(env, seed=7)
    assert a[0] == b[0] and a[1] == b[1]
    c = rollout(env, seed=8)
    assert c[0] != a[0]


def test_return_is_minus_sum_of_jcts():
    env = gym.make("gangsched/GpuCluster-v0", num_jobs=40)
    _, total, info = rollout(env, seed=1)
    sim = env.unwrapped.sim
    assert sim.done and info["metrics"]["finished_jobs"] == 40
    assert total == pytest.approx(-np.sum(sim.end - sim.arrival) / 3600.0, rel=1e-9)


def test_unseeded_resets_never_draw_evaluation_seeds():
    env = gym.make("gangsched/GpuCluster-v0", num_jobs=5)
    env.reset(seed=0)
    for _ in range(5):
        env.reset()
        assert env.unwrapped.workload_seed >= 1_000_000


def test_invalid_action_is_a_flagged_noop():
    env = gym.make("gangsched/GpuCluster-v0", num_jobs=20)
    env.reset(seed=0)
    mask = env.unwrapped.action_masks()
    bad = int(np.flatnonzero(~mask)[0])
    before = env.unwrapped.sim.now, len(env.unwrapped.sim.queue)
    _, r, *_rest, info = env.step(bad)
    assert info.get("invalid_action") and r == 0.0
    assert (env.unwrapped.sim.now, len(env.unwrapped.sim.queue)) == before


def test_truncation_cap():
    env = gym.make("gangsched/GpuCluster-v0", num_jobs=100, max_steps=5)
    env.reset(seed=0)
    for i in range(5):
        _, _, term, trunc, info = env.step(int(np.flatnonzero(env.unwrapped.action_masks())[0]))
    assert trunc and not term and "metrics" in info


def test_render_shows_node_occupancy():
    env = gym.make("gangsched/GpuCluster-v0", cluster="h100-4node", num_jobs=20, render_mode="ansi")
    env.reset(seed=0)
    env.step(int(np.flatnonzero(env.unwrapped.action_masks())[0]))
    text = env.render()
    lines = text.splitlines()
    assert lines[0].startswith("t=") and len(lines) == 5
    assert all(l.split()[0].startswith("h100-") for l in lines[1:])
    busy = sum(c != "." for l in lines[1:] for c in l.split("[")[1].split("]")[0])
    assert busy == env.unwrapped.sim.allocated_gpus > 0


def test_features_do_not_grow_with_cluster_size():
    small = GpuClusterEnv(cluster="mixed-64gpu", workload="llm-mix")
    large = GpuClusterEnv(cluster="h100-1024gpu", workload="llm-mix-large", num_jobs=300)
    assert small.observation_space == large.observation_space
    obs, _ = large.reset(seed=0)
    assert large.observation_space.contains(obs)
