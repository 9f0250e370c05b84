"""Batched vector envs: N episodes of `GpuClusterEnv` stepped in one call.

Every episode writes its observation, mask, reward and end flags straight into preallocated
batch arrays, so one observation batch comes out of each step for one batched policy forward,
and auto-reset happens inside. Two faces over the same machinery:

* `BatchedClusterEnv`: a Stable-Baselines3 `VecEnv`, which MaskablePPO trains on (action masks
  included). For the same `seed()` and actions it gives exactly what
  `DummyVecEnv([Monitor(GpuClusterEnv(**kwargs)) ...])` gives: observations, masks, rewards,
  dones, the terminal observation, `TimeLimit.truncated` and Monitor's `episode` record.
* `BatchedClusterVectorEnv`: a Gymnasium `VectorEnv` with same-step auto-reset, for libraries
  built on Gymnasium's vector API. It gives what `gymnasium.vector.SyncVectorEnv` over the same
  envs gives with `autoreset_mode=SAME_STEP` (`final_obs` and `final_info` of ended episodes).

On the compiled path the episodes' steps are native (`envs.core.EpisodeBatch`): each episode's
step runs on one of a pool of `threads` threads with the GIL released and writes its row of the
batch arrays, while Python takes each finished one's reward, info and auto-reset. An episode whose
action is invalid, or whose Python state was read mid-episode, steps through its env as usual.
The episodes run in this process (`workers=0`), or split into contiguous chunks over `workers`
processes that write into shared memory (each with its own threads). Only infos and the final
observation of an ended episode travel through pipes. Results do not depend on the number of
workers or threads (tests/test_vec.py).

Each episode may have its own env arguments (a list of dicts: say, clusters of different
sizes), as long as their observation and action spaces agree (the same queue window).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import OrderedDict
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from envs.core import jit as _jit
from envs.gym.env import GpuClusterEnv, observed_mask

_KEYS = ("candidates", "global", "action_mask")


def _buffer_specs(space: gym.spaces.Dict, n: int) -> list[tuple[str, tuple, np.dtype]]:
    """(name, shape, dtype) of every batch array for n episodes: the observation's keys, the
    raw action mask (what `action_masks()` returns), the reward and the end flags."""
    K = space["action_mask"].n
    return [
        *((k, (n, *space[k].shape), np.dtype(space[k].dtype)) for k in _KEYS),
        ("mask", (n, K), np.dtype(bool)),
        ("reward", (n,), np.dtype(np.float64)),
        ("terminated", (n,), np.dtype(bool)),
        ("truncated", (n,), np.dtype(bool)),
    ]


def _aligned(size: int) -> int:
    return -(-size // 8) * 8


def _views(raw, specs) -> dict[str, np.ndarray]:
    """Numpy views of one flat byte buffer laid out as `specs` (each array 8-byte aligned)."""
    out, offset = {}, 0
    for name, shape, dtype in specs:
        count = int(np.prod(shape))
        out[name] = np.frombuffer(raw, dtype=dtype, count=count, offset=offset).reshape(shape)
        offset += _aligned(count * dtype.itemsize)
    return out


def _nbytes(specs) -> int:
    return sum(_aligned(int(np.prod(shape)) * dtype.itemsize) for _, shape, dtype in specs)


class _Episodes:
    """A chunk of episodes and the batch arrays they write into (local arrays, or views of a
    worker's shared memory): the one implementation of stepping, auto-reset and the episode
    record (Monitor's: summed reward, length, wall time)."""

    def __init__(self, env_kwargs: list[dict], buffers: dict[str, np.ndarray], threads: int = 1):
        self.envs = [GpuClusterEnv(**kw) for kw in env_kwargs]
        self.buf = buffers
        self._rewards: list[list[float]] = [[] for _ in self.envs]
        self._started = [time.time()] * len(self.envs)
        n = len(self.envs)
        if _jit.ENABLED:  # the native episodes' steps over a pool of threads
            from envs.core import EpisodeBatch
            self._native = EpisodeBatch(max(1, min(threads, n)))
            self._codes = np.full(n, -2, dtype=np.int64)  # each episode's action in the native call; -2: not in it
            self._floats = np.zeros((n, 4))
            self._ints = np.zeros((n, 6), dtype=np.int64)
        else:
            self._native = None

    def _write(self, i: int, obs: dict) -> None:
        buf = self.buf
        buf["candidates"][i] = obs["candidates"]
        buf["global"][i] = obs["global"]
        buf["action_mask"][i] = obs["action_mask"]
        buf["mask"][i] = self.envs[i].mask

    def _row(self, i: int) -> dict:
        """Episode i's observation as the native call wrote it into the batch arrays (a copy; its
        `action_mask` as the env's: the mask, or WAIT alone where nothing is valid)."""
        buf = self.buf
        return {"candidates": buf["candidates"][i].copy(), "global": buf["global"][i].copy(),
                "action_mask": observed_mask(buf["mask"][i])}

    def _begin(self, i: int) -> None:
        self._rewards[i], self._started[i] = [], time.time()

    def _begin_native_steps(self, actions: list[int]) -> list[int | None]:
        """The steps of the episodes the core carries on, with a valid action, begun on the batch's
        threads: each one's action, None for the others."""
        codes, cores, taken = self._codes, [None] * len(self.envs), [None] * len(self.envs)
        codes.fill(-2)
        for i, env in enumerate(self.envs):
            episode, mask, a = env._episode, env.mask, actions[i]
            if episode is not None and not episode.finished and 0 <= a < len(mask) and mask[a]:
                codes[i], cores[i], taken[i] = a, episode.core, a
        if any(a is not None for a in taken):
            buf = self.buf
            self._native.start(cores, codes, buf["candidates"], buf["global"], buf["mask"], self._floats, self._ints)
        return taken

    def reset(self, seeds: Sequence[int | None], options: Sequence[dict | None]) -> list[dict]:
        infos = []
        for i, env in enumerate(self.envs):
            obs, info = env.reset(seed=seeds[i], **({"options": options[i]} if options[i] else {}))
            self._begin(i)
            self._write(i, obs)
            infos.append(info)
        return infos

    def step(self, actions: Sequence[int]) -> tuple[list[dict], list[tuple | None]]:
        """Step every episode. Returns each one's step info and, for each episode that ended
        (and was reset), (final observation, episode record, reset info); None for the others.
        The native steps run on the batch's threads meanwhile: the other episodes step first,
        then each native one's reward, info and end are taken as its step finishes."""
        actions = [int(a) for a in actions]
        taken = self._begin_native_steps(actions) if self._native is not None else [None] * len(self.envs)
        infos: list[dict | None] = [None] * len(self.envs)
        ends: list[tuple | None] = [None] * len(self.envs)
        for i, env in enumerate(self.envs):
            if taken[i] is None:
                obs, reward, terminated, truncated, info = env.step(actions[i])
                self._took(i, obs, reward, terminated, truncated, info, infos, ends)
        if any(a is not None for a in taken):
            masks, floats, ints = self.buf["mask"], self._floats, self._ints
            while finished := self._native.next():
                for i in finished:
                    if taken[i] is not None:  # its observation is in the batch arrays
                        reward, terminated, truncated, info = self.envs[i]._took_step(taken[i], masks[i], floats[i].tolist(),
                                                                                    ints[i].tolist())
                        self._took(i, None, reward, terminated, truncated, info, infos, ends)
            action_mask = self.buf["action_mask"]  # the native rows' observed_mask, for the whole batch at once
            np.copyto(action_mask, masks)
            action_mask[~masks.any(axis=1), -1] = 1
        return infos, ends

    def _took(self, i: int, obs: dict | None, reward: float, terminated: bool, truncated: bool, info: dict,
              infos: list, ends: list) -> None:
        """Episode i's step into the batch arrays, its record and, where it ended, its reset
        (`obs`: its observation, None where the native call wrote it into the batch arrays)."""
        buf = self.buf
        buf["reward"][i], buf["terminated"][i], buf["truncated"][i] = reward, terminated, truncated
        self._rewards[i].append(reward)
        if terminated or truncated:
            record = {"r": round(sum(self._rewards[i]), 6), "l": len(self._rewards[i]),
                      "t": round(time.time() - self._started[i], 6)}
            final = obs if obs is not None else self._row(i)
            obs, reset_info = self.envs[i].reset()
            self._begin(i)
            ends[i] = (final, record, reset_info)
        if obs is not None:
            self._write(i, obs)
        infos[i] = info

    def call(self, what: str, name: str, indices: Sequence[int], args=(), kwargs=None, value=None) -> list:
        if what == "get_attr":
            return [getattr(self.envs[i], name) for i in indices]
        if what == "set_attr":
            for i in indices:
                setattr(self.envs[i], name, value)
            return [None] * len(indices)
        return [getattr(self.envs[i], name)(*args, **(kwargs or {})) for i in indices]


def _worker(conn, env_kwargs: list[dict], raw, specs, threads: int) -> None:
    """A worker process: one chunk of episodes over shared memory, driven through `conn`."""
    try:
        episodes = _Episodes(env_kwargs, _views(raw, specs), threads)
        conn.send(("ok", None))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            cmd, data = conn.recv()
        except EOFError:
            return
        if cmd == "close":
            conn.close()
            return
        try:
            if cmd == "step":
                result = episodes.step(data)
            elif cmd == "reset":
                result = episodes.reset(*data)
            else:
                result = episodes.call(cmd, *data)
            conn.send(("ok", result))
        except Exception as exc:  # noqa: BLE001
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class _Batch:
    """The episodes of a batched env, in this process or over worker processes, and the batch
    arrays the caller reads after each call (`buf`)."""

    def __init__(self, env_kwargs: dict | Sequence[dict], n_envs: int | None, workers: int, start_method: str | None,
                 threads: int | None = None):
        if n_envs is not None and n_envs < 1:
            raise ValueError(f"n_envs must be >= 1, got {n_envs}")
        kwargs = [dict(env_kwargs)] * (n_envs or 1) if isinstance(env_kwargs, dict) else [dict(k) for k in env_kwargs]
        n = len(kwargs)
        if n_envs is not None and n != n_envs:
            raise ValueError(f"{n} env argument sets for n_envs={n_envs}")
        if n < 1:
            raise ValueError("no env arguments: at least one episode is needed")
        if not 0 <= workers <= n:
            raise ValueError(f"workers must be between 0 and n_envs ({n}), got {workers}")
        if threads is None:  # the cores this process may run on, shared among the worker processes
            threads = max(1, len(os.sched_getaffinity(0)) // max(workers, 1))
        elif threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = threads
        # Check the arguments here, with the caller's traceback, and that the spaces agree.
        first, seen = GpuClusterEnv(**kwargs[0]), {repr(sorted(kwargs[0].items()))}
        for i, kw in enumerate(kwargs):
            key = repr(sorted(kw.items()))
            if key not in seen:
                seen.add(key)
                probe = GpuClusterEnv(**kw)
                if probe.observation_space != first.observation_space:
                    raise ValueError(f"env {i}'s observation space differs from env 0's (queue_window "
                                     f"{probe.queue_window} vs {first.queue_window})")
        self.observation_space, self.action_space, self.metadata = first.observation_space, first.action_space, first.metadata
        self.num_envs, self.workers, self.env_kwargs = n, workers, kwargs
        self.closed = False
        specs = _buffer_specs(self.observation_space, n)
        self.buf = {name: np.zeros(shape, dtype) for name, shape, dtype in specs}
        if workers == 0:
            self.local: _Episodes | None = _Episodes(kwargs, self.buf, threads)
            self.chunks = [range(n)]
            return
        self.local = None
        ctx = mp.get_context(start_method or ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"))
        bounds = np.linspace(0, n, workers + 1).round().astype(int)
        self.chunks = [range(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
        self.parts, self.conns, self.procs = [], [], []
        for chunk in self.chunks:
            chunk_specs = _buffer_specs(self.observation_space, len(chunk))
            raw = ctx.RawArray("b", _nbytes(chunk_specs))
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, kwargs[chunk.start:chunk.stop], raw, chunk_specs, threads),
                               daemon=True)
            proc.start()
            child.close()
            self.parts.append(_views(raw, chunk_specs))
            self.conns.append(parent)
            self.procs.append(proc)
        try:
            for k in range(workers):
                self._receive(k)
        except BaseException:
            for proc in self.procs:
                proc.terminate()
            raise

    def _receive(self, k: int):
        chunk = self.chunks[k]
        try:
            status, result = self.conns[k].recv()
        except EOFError:
            self.procs[k].join(timeout=2)
            raise RuntimeError(f"vec env worker {k} (episodes {chunk.start}-{chunk.stop - 1}) died (exit code "
                               f"{self.procs[k].exitcode}); workers start by forkserver or spawn, so the main "
                               "script must be a file whose work runs under `if __name__ == \"__main__\":`") from None
        if status == "error":
            raise RuntimeError(f"vec env worker {k} (episodes {chunk.start}-{chunk.stop - 1}): {result}")
        return result

    def _gather(self) -> None:
        for part, chunk in zip(self.parts, self.chunks):
            for name, array in part.items():
                self.buf[name][chunk.start:chunk.stop] = array

    def reset(self, seeds: Sequence[int | None], options: Sequence[dict | None]) -> list[dict]:
        if self.local is not None:
            return self.local.reset(seeds, options)
        for conn, c in zip(self.conns, self.chunks):
            conn.send(("reset", (list(seeds[c.start:c.stop]), list(options[c.start:c.stop]))))
        infos = [info for k in range(self.workers) for info in self._receive(k)]
        self._gather()
        return infos

    def step(self, actions: Sequence[int]) -> tuple[list[dict], list[tuple | None]]:
        if self.local is not None:
            return self.local.step(actions)
        for conn, c in zip(self.conns, self.chunks):
            conn.send(("step", actions[c.start:c.stop]))
        infos, ends = [], []
        for k in range(self.workers):
            part_infos, part_ends = self._receive(k)
            infos += part_infos
            ends += part_ends
        self._gather()
        return infos, ends

    def call(self, what: str, name: str, indices: Sequence[int], args=(), kwargs=None, value=None) -> list:
        if self.local is not None:
            return self.local.call(what, name, indices, args, kwargs, value)
        out: dict[int, Any] = {}
        for k, chunk in enumerate(self.chunks):
            mine = [i for i in indices if i in chunk]
            if mine:
                self.conns[k].send((what, (name, [i - chunk.start for i in mine], args, kwargs, value)))
                out.update(zip(mine, self._receive(k)))
        return [out[i] for i in indices]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.local is not None:
            for env in self.local.envs:
                env.close()
            return
        for conn in self.conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()


class BatchedClusterEnv(VecEnv):
    """`n_envs` episodes of `GpuClusterEnv(**env_kwargs)` (or one episode per dict of a list)
    stepped in one call, in this process (`workers=0`) or in `workers` processes, each holding a
    contiguous chunk of them: an SB3 `VecEnv`. `threads`: the threads each process steps its
    episodes on (default: the cores this process may use, divided among the workers).

    `action_masks()` returns the (n_envs, K) mask batch; `env_method("action_masks")` (what
    MaskablePPO calls) returns its rows without asking the episodes.
    """

    def __init__(self, env_kwargs: dict | Sequence[dict], n_envs: int | None = None, workers: int = 0,
                 start_method: str | None = None, threads: int | None = None):
        self._batch = _Batch(env_kwargs, n_envs, workers, start_method, threads)
        b = self._batch
        self.env_kwargs, self.workers = b.env_kwargs, workers
        super().__init__(b.num_envs, b.observation_space, b.action_space)
        self.metadata = b.metadata
        self._actions: list[int] = []

    def reset(self) -> VecEnvObs:
        self.reset_infos = self._batch.reset(self._seeds, self._options)
        self._reset_seeds()
        self._reset_options()
        return self._observations()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs).tolist()

    def step_wait(self) -> VecEnvStepReturn:
        infos, ends = self._batch.step(self._actions)
        buf = self._batch.buf
        for i, info in enumerate(infos):
            info["TimeLimit.truncated"] = bool(buf["truncated"][i] and not buf["terminated"][i])
            if ends[i] is not None:
                final, record, self.reset_infos[i] = ends[i]
                info["episode"] = record
                info["terminal_observation"] = final
        dones = buf["terminated"] | buf["truncated"]
        return self._observations(), buf["reward"].astype(np.float32), dones, infos

    def _observations(self) -> dict[str, np.ndarray]:
        return OrderedDict((k, self._batch.buf[k].copy()) for k in _KEYS)

    def action_masks(self) -> np.ndarray:
        """(n_envs, K) bool: each episode's valid candidates now."""
        return self._batch.buf["mask"].copy()

    def close(self) -> None:
        self._batch.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._batch.call("get_attr", attr_name, list(self._get_indices(indices)))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._batch.call("set_attr", attr_name, list(self._get_indices(indices)), value=value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        idx = list(self._get_indices(indices))
        if method_name == "action_masks" and not method_args and not method_kwargs:
            return list(self._batch.buf["mask"][idx])
        return self._batch.call("env_method", method_name, idx, method_args, method_kwargs)

    def env_is_wrapped(self, wrapper_class, indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(list(self._get_indices(indices)))

    def has_attr(self, attr_name: str) -> bool:
        return hasattr(GpuClusterEnv, attr_name)

    def __del__(self):
        if "_batch" in self.__dict__:
            self._batch.close()


class BatchedClusterVectorEnv(gym.vector.VectorEnv):
    """The same batched episodes as a Gymnasium `VectorEnv` (same-step auto-reset: an ended
    episode's last observation and info are in `infos["final_obs"]` / `infos["final_info"]`,
    and the observation returned is its next episode's first). `action_masks()` gives the
    (num_envs, K) mask batch; `call(name)` reaches every episode's env."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env_kwargs: dict | Sequence[dict], num_envs: int | None = None, workers: int = 0,
                 start_method: str | None = None, threads: int | None = None):
        self._batch = b = _Batch(env_kwargs, num_envs, workers, start_method, threads)
        self.num_envs = b.num_envs
        self.single_observation_space, self.single_action_space = b.observation_space, b.action_space
        self.observation_space = batch_space(b.observation_space, b.num_envs)
        self.action_space = batch_space(b.action_space, b.num_envs)
        self.metadata = {**b.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict | None = None):
        if seed is None or isinstance(seed, list):
            seeds = seed or [None] * self.num_envs
        else:
            seeds = [seed + i for i in range(self.num_envs)]
        if len(seeds) != self.num_envs:
            raise ValueError(f"reset(seed=...): {len(seeds)} seeds for {self.num_envs} envs")
        infos: dict = {}
        for i, info in enumerate(self._batch.reset(seeds, [options] * self.num_envs)):
            infos = self._add_info(infos, info, i)
        return self._observations(), infos

    def step(self, actions):
        infos, ends = self._batch.step(np.asarray(actions).reshape(self.num_envs).tolist())
        buf = self._batch.buf
        out: dict = {}
        for i, info in enumerate(infos):
            if ends[i] is not None:
                final, _, reset_info = ends[i]
                out = self._add_info(out, {"final_obs": final, "final_info": info}, i)
                info = reset_info
            out = self._add_info(out, info, i)
        return self._observations(), buf["reward"].copy(), buf["terminated"].copy(), buf["truncated"].copy(), out

    def _observations(self) -> dict[str, np.ndarray]:
        return {k: self._batch.buf[k].copy() for k in _KEYS}

    def action_masks(self) -> np.ndarray:
        return self._batch.buf["mask"].copy()

    def call(self, name: str, *args, **kwargs) -> tuple:
        idx = list(range(self.num_envs))
        if callable(getattr(GpuClusterEnv, name, None)):  # a method: called in each episode's process
            return tuple(self._batch.call("env_method", name, idx, args, kwargs))
        return tuple(self._batch.call("get_attr", name, idx))

    def get_attr(self, name: str) -> tuple:
        return tuple(self._batch.call("get_attr", name, list(range(self.num_envs))))

    def set_attr(self, name: str, values) -> None:
        values = values if isinstance(values, (list, tuple)) else [values] * self.num_envs
        for i, v in enumerate(values):
            self._batch.call("set_attr", name, [i], value=v)

    def close_extras(self, **kwargs) -> None:
        self._batch.close()
