"""The rollout loop alone, per vector env kind: env steps against policy forward passes.

    python -m benchmarks.rollout_speed [--config configs/train/ppo.yaml] [--steps 600] [--torch-threads 1]
        [--kinds dummy,batched,batched:2,subproc] [--device cpu]

For each kind (`batched:N` is the batched env over N worker processes) it runs `--steps` vector
steps the way MaskablePPO collects a rollout (masks, one batched forward pass of the config's
untrained policy, then one vector step) and prints env steps per second and the wall time per
vector step split into the vector env's step and the policy's forward pass. `--torch-threads`
sets the trainer's torch threads: on a machine with few cores, idle torch threads compete with
env workers.
"""

from __future__ import annotations

import argparse
import json
import time

import torch as th
from sb3_contrib.common.maskable.utils import get_action_masks

import envs  # noqa: F401
from agents.config import VEC_ENVS, load_train_config
from agents.device import resolve_device
from agents.training import build_model, make_vec_env


def rollout_speed(config: str, kind: str, workers: int, steps: int, device: str) -> dict:
    cfg = load_train_config(config)
    cfg.vec_env, cfg.vec_workers = kind, workers
    vec = make_vec_env(cfg)
    try:
        model = build_model(cfg, vec, resolve_device(device), None)
        obs = vec.reset()
        t_env = t_policy = 0.0
        start = time.perf_counter()
        for _ in range(steps):
            a = time.perf_counter()
            masks = get_action_masks(vec)
            with th.no_grad():
                actions, _ = model.predict(obs, action_masks=masks, deterministic=False)
            b = time.perf_counter()
            obs, _, _, _ = vec.step(actions)
            t_policy += b - a
            t_env += time.perf_counter() - b
        wall = time.perf_counter() - start
    finally:
        vec.close()
    return {"vec_env": kind, "vec_workers": workers, "n_envs": cfg.n_envs, "env_steps_per_s": round(steps * cfg.n_envs / wall, 1),
            "ms_per_vector_step": round(1000 * wall / steps, 2), "env_ms": round(1000 * t_env / steps, 2),
            "policy_ms": round(1000 * t_policy / steps, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/train/ppo.yaml")
    ap.add_argument("--steps", type=int, default=600, help="vector steps per kind")
    ap.add_argument("--torch-threads", type=int, default=None, help="torch threads of this process (default: torch's)")
    ap.add_argument("--kinds", default="dummy,batched,batched:2,subproc", help="vector env kinds; batched:N has N workers")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    if args.torch_threads:
        th.set_num_threads(args.torch_threads)
    for item in args.kinds.split(","):
        kind, _, workers = item.strip().partition(":")
        if kind not in VEC_ENVS:
            ap.error(f"--kinds: {kind!r} is not one of {', '.join(VEC_ENVS)}")
        result = rollout_speed(args.config, kind, int(workers or 0), args.steps, args.device)
        print(json.dumps({"config": args.config, "torch_threads": th.get_num_threads(), **result}), flush=True)


if __name__ == "__main__":
    main()
