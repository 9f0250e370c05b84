"""A batched vector env: N episodes of `GpuClusterEnv` stepped in one call.

`BatchedClusterEnv` is a Stable-Baselines3 `VecEnv` (MaskablePPO reads its action masks) that
writes every episode's observation, mask, reward and done flag straight into preallocated
batch arrays: one observation batch comes out of each `step` for one batched policy forward,
and auto-reset happens inside, as in SB3's own vector envs.

The episodes run in this process (`workers=0`), or split into contiguous chunks over `workers`
processes that write into shared memory, so that on a machine with spare cores the env steps
of a rollout run side by side while the trainer waits for them once per vector step. Only
per-episode extras (infos, and the terminal observation at an episode's end) travel through
pipes.

Same seeds, same episodes: for the same `seed()` and actions it gives what
`DummyVecEnv([Monitor(GpuClusterEnv(**kwargs)) ...])` gives (observations, masks, rewards,
dones, the terminal observation, `TimeLimit.truncated`, Monitor's `episode` record), whatever
the number of workers (tests/test_vec.py), so a training run's first update does not depend on
which vector env produced its rollout.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from envs.env import GpuClusterEnv

_KEYS = ("candidates", "global", "action_mask")


def _buffer_specs(space, n: int) -> list[tuple[str, tuple, np.dtype]]:
    """(name, shape, dtype) of every batch array for n episodes: the observation's keys, the
    raw action mask (what `action_masks()` returns), the reward and the done flag."""
    K = space["action_mask"].n
    return [
        *((k, (n, *space[k].shape), np.dtype(space[k].dtype)) for k in _KEYS),
        ("mask", (n, K), np.dtype(bool)),
        ("reward", (n,), np.dtype(np.float32)),
        ("done", (n,), np.dtype(bool)),
    ]


def _views(raw, specs) -> dict[str, np.ndarray]:
    """Numpy views of one flat byte buffer laid out as `specs` (each array 8-byte aligned)."""
    out, offset = {}, 0
    for name, shape, dtype in specs:
        size = int(np.prod(shape)) * dtype.itemsize
        out[name] = np.frombuffer(raw, dtype=dtype, count=int(np.prod(shape)), offset=offset).reshape(shape)
        offset += -(-size // 8) * 8
    return out


def _nbytes(specs) -> int:
    return sum(-(-int(np.prod(shape)) * dtype.itemsize // 8) * 8 for _, shape, dtype in specs)


class _Episodes:
    """A chunk of episodes and the batch arrays they write into (local, or views of shared
    memory): the one implementation of stepping, auto-reset and Monitor's episode record."""

    def __init__(self, env_kwargs: dict, n: int, buffers: dict[str, np.ndarray]):
        self.envs = [GpuClusterEnv(**env_kwargs) for _ in range(n)]
        self.buf = buffers
        self._rewards: list[list[float]] = [[] for _ in range(n)]  # Monitor's record: rewards and start time
        self._started = [time.time()] * n

    def _write(self, i: int, obs: dict) -> None:
        buf = self.buf
        buf["candidates"][i] = obs["candidates"]
        buf["global"][i] = obs["global"]
        buf["action_mask"][i] = obs["action_mask"]
        buf["mask"][i] = self.envs[i].cset.mask

    def reset(self, seeds: Sequence[int | None], options: Sequence[dict]) -> list[dict]:
        infos = []
        for i, env in enumerate(self.envs):
            obs, info = env.reset(seed=seeds[i], **({"options": options[i]} if options[i] else {}))
            self._begin(i)
            self._write(i, obs)
            infos.append(info)
        return infos

    def _begin(self, i: int) -> None:
        self._rewards[i], self._started[i] = [], time.time()

    def step(self, actions: Sequence[int]) -> tuple[list[dict], list[dict | None]]:
        """Step every episode; returns the step infos and, per episode that ended and was
        reset, its reset info (None for the others)."""
        rewards, dones = self.buf["reward"], self.buf["done"]
        infos: list[dict] = []
        reset_infos: list[dict | None] = []
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, info = env.step(actions[i])
            rewards[i] = reward
            done = dones[i] = terminated or truncated
            info["TimeLimit.truncated"] = truncated and not terminated
            self._rewards[i].append(reward)
            reset_info = None
            if done:
                info["episode"] = {"r": round(sum(self._rewards[i]), 6), "l": len(self._rewards[i]),
                                   "t": round(time.time() - self._started[i], 6)}
                info["terminal_observation"] = obs
                obs, reset_info = env.reset()
                self._begin(i)
            self._write(i, obs)
            infos.append(info)
            reset_infos.append(reset_info)
        return infos, reset_infos

    def call(self, what: str, name: str, indices: Sequence[int], args=(), kwargs=None, value=None) -> list:
        if what == "get_attr":
            return [getattr(self.envs[i], name) for i in indices]
        if what == "set_attr":
            for i in indices:
                setattr(self.envs[i], name, value)
            return [None] * len(indices)
        return [getattr(self.envs[i], name)(*args, **(kwargs or {})) for i in indices]


def _worker(conn, env_kwargs: dict, n: int, raw, specs) -> None:
    """A worker process: one chunk of episodes over shared memory, driven through `conn`."""
    try:
        episodes = _Episodes(env_kwargs, n, _views(raw, specs))
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


class BatchedClusterEnv(VecEnv):
    """`n_envs` episodes of `GpuClusterEnv(**env_kwargs)` stepped in one call, in this process
    (`workers=0`) or in `workers` processes, each holding a contiguous chunk of them.

    `action_masks()` returns the (n_envs, K) mask batch; `env_method("action_masks")` (what
    MaskablePPO calls) returns its rows without asking the episodes.
    """

    def __init__(self, env_kwargs: dict, n_envs: int, workers: int = 0, start_method: str | None = None):
        if n_envs < 1:
            raise ValueError(f"n_envs must be >= 1, got {n_envs}")
        if not 0 <= workers <= n_envs:
            raise ValueError(f"workers must be between 0 and n_envs ({n_envs}), got {workers}")
        self._closed = True  # until the episodes exist
        probe = GpuClusterEnv(**env_kwargs)  # checks the kwargs here, with the caller's traceback
        space = probe.observation_space
        probe.close()
        self.num_envs = n_envs
        self.env_kwargs = dict(env_kwargs)
        self.workers = workers
        specs = _buffer_specs(space, n_envs)
        self._actions: np.ndarray | None = None
        # The batch arrays the trainer reads (with workers: gathered from their shared memory).
        self._buf = {name: np.zeros(shape, dtype) for name, shape, dtype in specs}
        if workers == 0:
            self._local: _Episodes | None = _Episodes(self.env_kwargs, n_envs, self._buf)
            self._chunks = [range(n_envs)]
        else:
            self._local = None
            self._start_workers(space, start_method)
        self._closed = False
        super().__init__(n_envs, space, probe.action_space)
        self.metadata = probe.metadata

    def _start_workers(self, space, start_method: str | None) -> None:
        workers, n_envs = self.workers, self.num_envs
        ctx = mp.get_context(start_method or ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"))
        bounds = np.linspace(0, n_envs, workers + 1).round().astype(int)
        self._chunks = [range(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
        self._raws, self._buf_parts, self._conns, self._procs = [], [], [], []
        for chunk in self._chunks:
            chunk_specs = _buffer_specs(space, len(chunk))
            raw = ctx.RawArray("b", _nbytes(chunk_specs))
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, self.env_kwargs, len(chunk), raw, chunk_specs), daemon=True)
            proc.start()
            child.close()
            self._raws.append(raw)
            self._buf_parts.append(_views(raw, chunk_specs))
            self._conns.append(parent)
            self._procs.append(proc)
        try:
            for k in range(workers):
                self._receive(k)
        except BaseException:
            for proc in self._procs:
                proc.terminate()
            raise

    # ------------------------------------------------------------------ workers

    def _receive(self, k: int):
        try:
            status, result = self._conns[k].recv()
        except EOFError:
            raise RuntimeError(f"vec env worker {k} (episodes {self._chunks[k].start}-{self._chunks[k].stop - 1}) "
                               f"died (exit code {self._procs[k].exitcode})") from None
        if status == "error":
            raise RuntimeError(f"vec env worker {k} (episodes {self._chunks[k].start}-{self._chunks[k].stop - 1}): {result}")
        return result

    def _gather(self) -> None:
        for part, chunk in zip(self._buf_parts, self._chunks):
            for name, array in part.items():
                self._buf[name][chunk.start:chunk.stop] = array

    def _split(self, values: Sequence) -> list[list]:
        return [list(values[c.start:c.stop]) for c in self._chunks]

    # ------------------------------------------------------------------ VecEnv

    def reset(self) -> VecEnvObs:
        seeds, options = list(self._seeds), list(self._options)
        if self._local is not None:
            self.reset_infos = self._local.reset(seeds, options)
        else:
            for conn, s, o in zip(self._conns, self._split(seeds), self._split(options)):
                conn.send(("reset", (s, o)))
            self.reset_infos = [info for k in range(self.workers) for info in self._receive(k)]
            self._gather()
        self._reset_seeds()
        self._reset_options()
        return self._observations()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs)

    def step_wait(self) -> VecEnvStepReturn:
        actions = self._actions.tolist()
        if self._local is not None:
            infos, reset_infos = self._local.step(actions)
        else:
            for conn, chunk in zip(self._conns, self._chunks):
                conn.send(("step", actions[chunk.start:chunk.stop]))
            infos, reset_infos = [], []
            for k in range(self.workers):
                part_infos, part_resets = self._receive(k)
                infos += part_infos
                reset_infos += part_resets
            self._gather()
        for i, reset_info in enumerate(reset_infos):
            if reset_info is not None:
                self.reset_infos[i] = reset_info
        buf = self._buf
        return self._observations(), buf["reward"].copy(), buf["done"].copy(), infos

    def _observations(self) -> dict[str, np.ndarray]:
        return OrderedDict((k, self._buf[k].copy()) for k in _KEYS)

    def action_masks(self) -> np.ndarray:
        """(n_envs, K) bool: each episode's valid candidates now."""
        return self._buf["mask"].copy()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._local is not None:
            for env in self._local.envs:
                env.close()
            return
        for conn in self._conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()

    def _call(self, what: str, name: str, indices: VecEnvIndices, args=(), kwargs=None, value=None) -> list:
        idx = list(self._get_indices(indices))
        if self._local is not None:
            return self._local.call(what, name, idx, args, kwargs, value)
        out: dict[int, Any] = {}
        for k, chunk in enumerate(self._chunks):
            mine = [i for i in idx if i in chunk]
            if mine:
                self._conns[k].send((what, (name, [i - chunk.start for i in mine], args, kwargs, value)))
                out.update(zip(mine, self._receive(k)))
        return [out[i] for i in idx]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call("get_attr", attr_name, indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._call("set_attr", attr_name, indices, value=value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        if method_name == "action_masks" and not method_args and not method_kwargs:
            return list(self._buf["mask"][list(self._get_indices(indices))])
        return self._call("env_method", method_name, indices, method_args, method_kwargs)

    def env_is_wrapped(self, wrapper_class, indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(list(self._get_indices(indices)))

    def has_attr(self, attr_name: str) -> bool:
        return attr_name == "action_masks" or hasattr(GpuClusterEnv, attr_name)

    def __del__(self):
        try:
            if hasattr(self, "_local"):
                self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
