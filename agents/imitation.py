"""Behaviour-cloning warm start: teach the policy a baseline's choices before PPO.

PPO from a random policy spends most of a CPU budget discovering that starting jobs beats
waiting. Cloning a strong heuristic first (on training seeds only) gives PPO a policy at that
heuristic's level to improve on. The value head is fitted to the discounted returns of the
same episodes, scaled to unit variance as VecNormalize will scale rewards.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch as th
from sb3_contrib import MaskablePPO

from baselines import make_baseline
from envs.gym.env import TRAIN_SEEDS, GpuClusterEnv


@dataclass
class Demonstrations:
    candidates: np.ndarray  # (N, K, F) float32
    global_features: np.ndarray  # (N, D) float32
    masks: np.ndarray  # (N, K) bool
    actions: np.ndarray  # (N,) int64
    returns: np.ndarray  # (N,) discounted return from each step
    targets: np.ndarray | None = None  # (N, K) target distributions (soft labels); None: one-hot `actions`

    def __len__(self) -> int:
        return len(self.actions)


def discounted_returns(rewards: list[float], gamma: float) -> np.ndarray:
    """The discounted return from each step of an episode."""
    out, g = np.empty(len(rewards)), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + gamma * g
        out[t] = g
    return out


def collect(env: GpuClusterEnv, baseline: str, episodes: int, gamma: float, seed: int) -> Demonstrations:
    """Run `baseline` through the env on training-range workloads and record what it did."""
    rng = np.random.default_rng(seed)
    cands, globs, masks, actions, returns = [], [], [], [], []
    for _ in range(episodes):
        workload_seed = int(rng.integers(*TRAIN_SEEDS))
        rule = make_baseline(baseline, seed=workload_seed)
        obs, _ = env.reset(seed=workload_seed)
        rewards = []
        done = False
        while not done:
            a = rule.select(env.state, env.cset)
            cands.append(obs["candidates"])
            globs.append(obs["global"])
            masks.append(obs["action_mask"].astype(bool))
            actions.append(a)
            obs, r, term, trunc, _ = env.step(a)
            rewards.append(r)
            done = term or trunc
        returns.append(discounted_returns(rewards, gamma))
    return Demonstrations(np.stack(cands), np.stack(globs), np.stack(masks), np.array(actions, dtype=np.int64), np.concatenate(returns))


def clone(model: MaskablePPO, demos: Demonstrations, epochs: int, batch_size: int, learning_rate: float, seed: int) -> dict:
    """Fit the policy to the demonstrations (cross-entropy on the masked logits) and the value
    head to the scaled returns. Returns the final accuracy and losses."""
    policy = model.policy
    device = policy.device
    g = th.Generator().manual_seed(seed)
    scale = float(demos.returns.std()) or 1.0
    tensors = {
        "candidates": th.as_tensor(demos.candidates, device=device),
        "global": th.as_tensor(demos.global_features, device=device),
        "action_mask": th.as_tensor(demos.masks, device=device),
    }
    actions = th.as_tensor(demos.actions, device=device)
    soft = None if demos.targets is None else th.as_tensor(demos.targets, dtype=th.float32, device=device)
    targets = th.as_tensor(demos.returns / scale, dtype=th.float32, device=device)
    optimizer = th.optim.Adam(policy.parameters(), lr=learning_rate)
    policy.set_training_mode(True)
    n = len(demos)
    stats = {}
    for _ in range(epochs):
        order = th.randperm(n, generator=g).to(device)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            obs = {k: v[idx] for k, v in tensors.items()}
            if soft is None:
                values, log_prob, _ = policy.evaluate_actions(obs, actions[idx])
                policy_loss = -log_prob.mean()
            else:  # cross-entropy against the target distributions, over the valid candidates
                logits, values = policy.scorer(obs["candidates"], obs["global"], obs["action_mask"])
                log_p = th.log_softmax(logits.masked_fill(~obs["action_mask"], -1e9), dim=1)
                policy_loss = -(soft[idx] * log_p).sum(dim=1).mean()
            value_loss = th.nn.functional.mse_loss(values.flatten(), targets[idx])
            loss = policy_loss + 0.5 * value_loss
            optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
        stats = {"policy_loss": policy_loss.item(), "value_loss": value_loss.item()}
    policy.set_training_mode(False)
    with th.no_grad():
        hits = 0
        for start in range(0, n, 1024):
            obs = {k: v[start : start + 1024] for k, v in tensors.items()}
            dist = policy.get_distribution(obs)
            hits += int((dist.get_actions(deterministic=True) == actions[start : start + 1024]).sum())
    stats["accuracy"] = hits / n
    stats["samples"] = n
    return stats
