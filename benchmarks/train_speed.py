"""End-to-end training throughput: MaskablePPO on gangsched beside SB3 PPO on CartPole-v1.

    python -m benchmarks.train_speed --config configs/train/ppo.yaml [--device cpu] [--timesteps 16384]
        [--vec-env batched --vec-workers 2]

Both runs use the config's n_envs, n_steps, batch_size and n_epochs, so the difference is what
the scheduling env and the candidate-scoring policy cost beyond PPO itself. A warm-up rollout
and update run first and are not timed. Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import time

import torch as th
from stable_baselines3.common.callbacks import BaseCallback

import envs  # noqa: F401
from agents.config import VEC_ENVS, load_train_config
from agents.device import resolve_device
from agents.training import build_model, make_vec_env


class _RolloutClock(BaseCallback):
    """Wall time spent collecting rollouts (env steps plus policy forward passes)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0
        self._t = 0.0

    def _on_rollout_start(self) -> None:
        self._t = time.perf_counter()

    def _on_rollout_end(self) -> None:
        self.seconds += time.perf_counter() - self._t

    def _on_step(self) -> bool:
        return True


def _timed_learn(model, timesteps: int) -> dict:
    """Steps per second end to end, and how the wall time splits between rollouts and updates."""
    warm = model.n_steps * model.n_envs
    model.learn(warm)
    clock = _RolloutClock()
    t0 = time.perf_counter()
    model.learn(timesteps, reset_num_timesteps=False, callback=clock)
    if model.device.type == "cuda":
        th.cuda.synchronize()
    wall = time.perf_counter() - t0
    return {"fps": round(timesteps / wall, 1), "wall_s": round(wall, 2), "rollout_s": round(clock.seconds, 2),
            "update_s": round(wall - clock.seconds, 2)}


def gangsched_fps(config: str, device: str, timesteps: int, vec_env: str | None = None, vec_workers: int | None = None) -> dict:
    from stable_baselines3.common.vec_env import VecNormalize

    cfg = load_train_config(config)
    cfg.vec_env = vec_env or cfg.vec_env
    cfg.vec_workers = cfg.vec_workers if vec_workers is None else vec_workers
    vec = make_vec_env(cfg)
    if cfg.normalize_reward:
        vec = VecNormalize(vec, norm_obs=False, norm_reward=True, gamma=cfg.ppo["gamma"])
    try:
        return {"vec_env": cfg.vec_env, "vec_workers": cfg.vec_workers,
                **_timed_learn(build_model(cfg, vec, resolve_device(device), None), timesteps)}
    finally:
        vec.close()


def cartpole_fps(config: str, device: str, timesteps: int) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

    cfg = load_train_config(config)
    p = cfg.ppo
    model = PPO("MlpPolicy", sb3_make_vec_env("CartPole-v1", n_envs=cfg.n_envs, seed=cfg.seed), n_steps=p["n_steps"],
                batch_size=p["batch_size"], n_epochs=p["n_epochs"], seed=cfg.seed, device=resolve_device(device), verbose=0)
    return _timed_learn(model, timesteps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/train/ppo.yaml")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--timesteps", type=int, default=16384)
    ap.add_argument("--skip-cartpole", action="store_true")
    ap.add_argument("--vec-env", choices=VEC_ENVS, default=None, help="override the config's vec_env")
    ap.add_argument("--vec-workers", type=int, default=None, help="override the config's vec_workers (batched only)")
    args = ap.parse_args()
    base = {"config": args.config, "device": args.device, "timesteps": args.timesteps, "torch_threads": th.get_num_threads()}
    if args.device != "cpu" and th.cuda.is_available():
        base["gpu"] = th.cuda.get_device_name(0)
    print(json.dumps({**base, "env": "gangsched", **gangsched_fps(args.config, args.device, args.timesteps, args.vec_env, args.vec_workers)}), flush=True)
    if not args.skip_cartpole:
        print(json.dumps({**base, "env": "CartPole-v1", **cartpole_fps(args.config, args.device, args.timesteps)}), flush=True)


if __name__ == "__main__":
    main()
