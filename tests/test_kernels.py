"""The compiled kernels (envs.kernels) against the plain-Python reference they mirror: kernel by
kernel on random inputs, and whole episodes (observations, masks, rewards, metrics) on every
shipped cluster, the two paths run in one process with `envs.jit.reference_path()`."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from envs import jit, kernels
from envs.env import GpuClusterEnv
from envs.metrics import episode_metrics

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="numba is not installed")


def test_pairwise_sum_is_numpys_sum():
    rng = np.random.default_rng(0)
    for n in list(range(0, 40)) + [127, 128, 129, 255, 256, 257, 1000, 5000]:
        for scale in (1.0, 1e-3, 1e6):
            a = rng.random(n) * scale * rng.integers(1, 9, size=n)
            assert kernels.pairwise_sum(a) == float(a.sum()), n


def test_stable_head_is_a_stable_sorts_first_k():
    rng = np.random.default_rng(1)
    for _ in range(500):
        n, k = int(rng.integers(0, 60)), int(rng.integers(1, 20))
        key = rng.integers(0, 5, size=n).astype(float)  # many ties
        assert kernels._stable_head(key, k).tolist() == np.argsort(key, kind="stable")[:k].tolist()


def _episode_digest(env_kwargs: dict, seed: int, max_steps: int) -> tuple[str, dict, int]:
    """A digest of everything an episode shows the agent under random valid actions: every
    observation array, mask, reward and end flag; and the final metrics."""
    env = GpuClusterEnv(**env_kwargs)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    h = hashlib.sha256()
    steps = 0
    done = False
    while not done and steps < max_steps:
        for k in ("candidates", "global", "action_mask"):
            h.update(obs[k].tobytes())
        valid = np.flatnonzero(env.action_masks())
        obs, reward, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        h.update(np.float64(reward).tobytes() + bytes([term, trunc]))
        done = term or trunc
        steps += 1
    sim = env.sim
    h.update(np.array([sim.now, sim.useful_work_s, sim.energy_j, sim.jobs_in_system_s, sim.allocated_gpu_s]).tobytes())
    for name in ("work_done", "attained_gpu_s", "run_s", "interference_loss_s", "end", "rate"):
        h.update(getattr(sim, name).tobytes())
    return h.hexdigest(), episode_metrics(sim, env.objective), steps


# Every shipped cluster, with a workload that fits it (small job counts: whole episodes).
EPISODES = [
    ({"scenario": "default", "num_jobs": 80}, 400),
    ({"scenario": "slo-preempt", "num_jobs": 80}, 400),
    ({"scenario": "hetero", "num_jobs": 80}, 400),
    ({"scenario": "topology-stress", "num_jobs": 80}, 400),
    ({"scenario": "large", "num_jobs": 150}, 400),
    ({"scenario": "philly", "num_jobs": 150}, 400),
    ({"cluster": "h100-4node", "workload": "llm-mix", "num_jobs": 60}, 400),
]


@pytest.mark.parametrize("env_kwargs,max_steps", EPISODES, ids=[str(e[0]) for e in EPISODES])
def test_episodes_are_bit_identical_to_the_reference(env_kwargs, max_steps):
    for seed in (0, 1):
        assert jit.ENABLED
        fast = _episode_digest(env_kwargs, seed, max_steps)
        with jit.reference_path():
            assert not jit.ENABLED
            ref = _episode_digest(env_kwargs, seed, max_steps)
        assert fast[2] == ref[2] and fast[2] > 10
        assert {k: repr(v) for k, v in fast[1].items()} == {k: repr(v) for k, v in ref[1].items()}  # nan == nan too
        assert fast[0] == ref[0]


@pytest.mark.parametrize("cluster_name", ["mixed-64gpu", "hetero-64gpu", "philly-sized", "h100-1024gpu",
                                          "topo-stress-128gpu", "h100-4node"])
def test_node_take_is_the_reference_rule(cluster_name):
    """Every placement rule's per-node take (nodes in the reference dict's order) on random
    availability, kernel against reference."""
    from envs.config import load_cluster
    from envs.placement import RULES, _node_take

    c = load_cluster(cluster_name)
    rng = np.random.default_rng(2)
    sizes = c.node_gpus
    for _ in range(400):
        free = tuple(int(rng.integers(0, s + 1)) if rng.random() < 0.7 else 0 for s in sizes)
        tp = int(rng.choice([1, 2, 4, 8]))
        need = tp * int(rng.integers(1, max(2, 2 * sum(free) // tp + 2)))
        for rule in range(len(RULES)):
            fast = _node_take(c, free, need, tp, rule)
            with jit.reference_path():
                ref = _node_take(c, free, need, tp, rule)
            assert fast == ref and (fast is None or list(fast.items()) == list(ref.items())), (free, need, tp, rule)
