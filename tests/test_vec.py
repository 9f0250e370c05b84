"""The batched vector env: the same episodes as N single envs under SB3's DummyVecEnv, in this
process and over worker processes, and usable by MaskablePPO."""

from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from envs.gym.env import GpuClusterEnv
from envs.gym.vec import BatchedClusterEnv

# Short episodes, one of them cut by max_steps, so that auto-reset and truncation both happen.
KWARGS = {"cluster": "mixed-64gpu", "workload": "llm-mix", "num_jobs": 24, "max_steps": 30}


def _reference(n: int) -> DummyVecEnv:
    return DummyVecEnv([lambda: Monitor(GpuClusterEnv(**KWARGS)) for _ in range(n)])


def _run(vec, steps: int, seed: int = 7):
    """Random valid actions drawn from the masks; every array and info the vec env returns."""
    rng = np.random.default_rng(0)
    vec.seed(seed)
    obs = vec.reset()
    record = [({k: v.copy() for k, v in obs.items()}, [dict(i) for i in vec.reset_infos])]
    for _ in range(steps):
        masks = np.stack(vec.env_method("action_masks"))
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        obs, rewards, dones, infos = vec.step(actions)
        record.append((masks, {k: v.copy() for k, v in obs.items()}, rewards, dones, infos))
    return record


def _same_info(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for key in a:
        if key == "terminal_observation":
            for k in a[key]:
                np.testing.assert_array_equal(a[key][k], b[key][k])
        elif key == "episode":
            assert (a[key]["r"], a[key]["l"]) == (b[key]["r"], b[key]["l"])
        else:
            np.testing.assert_equal(a[key], b[key], err_msg=key)  # NaN equals NaN in the metrics


@pytest.mark.parametrize("workers,threads", [(0, 1), (0, 3), (2, None)])
def test_same_episodes_as_dummy_vec_env(workers, threads):
    n, steps = 3, 120
    ref = _reference(n)
    vec = BatchedClusterEnv(KWARGS, n, workers=workers, threads=threads)
    try:
        want, got = _run(ref, steps), _run(vec, steps)
    finally:
        vec.close()
        ref.close()
    ended = sum(int(d.sum()) for *_, d, _ in want[1:])
    truncated = sum(i["TimeLimit.truncated"] for *_, infos in want[1:] for i in infos)
    assert ended >= 6 and truncated >= 1  # the comparison covers auto-resets and truncations
    for k in want[0][0]:
        np.testing.assert_array_equal(got[0][0][k], want[0][0][k])
    for i_got, i_want in zip(got[0][1], want[0][1]):
        _same_info(i_got, i_want)
    for (m1, o1, r1, d1, inf1), (m2, o2, r2, d2, inf2) in zip(got[1:], want[1:]):
        np.testing.assert_array_equal(m1, m2)
        assert m1.dtype == m2.dtype == bool
        for k in o2:
            assert o1[k].dtype == o2[k].dtype
            np.testing.assert_array_equal(o1[k], o2[k])
        np.testing.assert_array_equal(r1, r2)
        assert r1.dtype == r2.dtype
        np.testing.assert_array_equal(d1, d2)
        for a, b in zip(inf1, inf2):
            _same_info(a, b)


def test_each_vector_step_is_one_native_batch(monkeypatch):
    """On the compiled path a vector step begins every episode's step in one native batch
    (`envs.core.EpisodeBatch.start`) and takes each as it finishes; an episode's own native step
    runs only for its first decision, at each reset."""
    from envs.core import jit
    from envs.sim.simulator import NativeEpisode

    if not jit.ENABLED:
        pytest.skip("the native batch needs the compiled path")

    class Counted:  # the batch's EpisodeBatch, its calls counted
        def __init__(self, batch):
            self.batch, self.starts, self.taken = batch, [], []

        def start(self, episodes, actions, *arrays):
            self.starts.append(actions.copy())
            return self.batch.start(episodes, actions, *arrays)

        def next(self):
            done = self.batch.next()
            self.taken += done
            return done

    alone, real_step = [], NativeEpisode.step

    def counted_step(self, action, features):
        alone.append(action)
        return real_step(self, action, features)

    monkeypatch.setattr(NativeEpisode, "step", counted_step)
    vec = BatchedClusterEnv(KWARGS, 3, threads=2)
    counted = vec._batch.local._native = Counted(vec._batch.local._native)
    try:
        record = _run(vec, 60)
    finally:
        vec.close()
    assert sum(int(d.sum()) for *_, d, _ in record[1:]) >= 3  # resets happened
    assert len(counted.starts) == 60 and all((a >= 0).all() for a in counted.starts)
    assert sorted(counted.taken) == sorted(list(range(3)) * 60)  # each episode's step taken once a vector step
    assert alone and set(alone) == {-1}


def test_episodes_leaving_the_native_call_stay_the_same_episodes():
    """An invalid action, or an episode's Python state read mid-episode, steps that episode
    through its env: the batch still gives DummyVecEnv's episodes, step for step."""
    n, steps = 3, 90
    ref, vec = _reference(n), BatchedClusterEnv(KWARGS, n, threads=2)
    try:
        for v in (ref, vec):
            v.seed(7)
        obs_ref, obs_vec = ref.reset(), vec.reset()
        rng = np.random.default_rng(0)
        invalid = 0
        for t in range(steps):
            masks = np.stack(ref.env_method("action_masks"))
            np.testing.assert_array_equal(vec.action_masks(), masks)
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            if t % 7 == 3 and not masks[1].all():  # episode 1: an action its mask does not allow
                actions[1] = int(np.flatnonzero(~masks[1])[0])
                invalid += 1
            if t == 20:  # episode 2's Python state read mid-episode (rebuilt; the episode goes on in Python)
                assert vec.env_method("render_text", indices=[2]) == ref.env_method("render_text", indices=[2])
            (o1, r1, d1, i1), (o2, r2, d2, i2) = ref.step(actions), vec.step(actions)
            for k in o1:
                np.testing.assert_array_equal(o2[k], o1[k])
            np.testing.assert_array_equal(r2, r1)
            np.testing.assert_array_equal(d2, d1)
            for a, b in zip(i2, i1):
                _same_info(a, b)
        assert invalid >= 5
    finally:
        vec.close()
        ref.close()


def test_episode_batch_names_what_is_wrong():
    from envs.core import EpisodeBatch, jit
    from envs.decision.features import NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES

    if not jit.ENABLED:
        pytest.skip("the native batch needs the compiled path")
    env = GpuClusterEnv(**KWARGS)
    env.reset(seed=1)
    core, K = env._episode.core, env.action_space.n
    batch = EpisodeBatch(2)

    def arrays(n=1, **change):
        a = {"candidates": np.zeros((n, K, NUM_CANDIDATE_FEATURES), np.float32),
             "global_": np.zeros((n, NUM_GLOBAL_FEATURES), np.float32), "mask": np.zeros((n, K), bool),
             "floats": np.zeros((n, 4)), "ints": np.zeros((n, 6), np.int64)}
        return {**a, **change}

    with pytest.raises(ValueError, match=r"candidates: a writable C-contiguous float32 array of 1 x 41 x \d+ expected"):
        batch.run([core], np.array([-1]), **arrays(candidates=np.zeros((1, K, NUM_CANDIDATE_FEATURES))))
    with pytest.raises(ValueError, match="ints: 1 x 6 entries expected"):
        batch.run([core], np.array([-1]), **arrays(ints=np.zeros((1, 5), np.int64)))
    with pytest.raises(ValueError, match=r"actions\[1\]: a step for no episode \(None\)"):
        batch.run([core, None], np.array([-2, 0]), **arrays(2))
    with pytest.raises(ValueError, match=r"episodes\[0\]: an Episode or None expected"):
        batch.run(["not an episode"], np.array([0]), **arrays())
    invalid = int(np.flatnonzero(~env.mask)[0])
    with pytest.raises(ValueError, match=r"episodes\[1\]: action: not a valid candidate"):
        batch.run([None, core], np.array([-2, invalid]), **arrays(2))
    out = arrays()
    batch.run([None], np.array([-2]), **out)  # nothing stepped, nothing written
    assert not out["mask"].any() and not out["ints"].any()
    with pytest.raises(ValueError, match="threads: at least 1"):
        EpisodeBatch(0)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        BatchedClusterEnv(KWARGS, 2, threads=0)


def test_observations_are_copies():
    vec = BatchedClusterEnv(KWARGS, 2)
    obs = vec.reset()
    masks = vec.action_masks()
    obs["candidates"][:] = 5.0
    masks[:] = False
    assert vec.action_masks().any(axis=1).all()
    vec.step(np.array([int(np.flatnonzero(m)[0]) for m in vec.action_masks()]))
    assert (vec.reset()["candidates"] <= 1.0).all()
    vec.close()


def test_attributes_and_methods_reach_the_right_episode():
    vec = BatchedClusterEnv(KWARGS, 3, workers=2)
    try:
        vec.seed(11)
        vec.reset()
        assert vec.get_attr("workload_seed") == [11, 12, 13]
        assert vec.get_attr("queue_window", indices=[2]) == [8]
        vec.set_attr("max_steps", 5, indices=[1])
        assert vec.get_attr("max_steps") == [30, 5, 30]
        texts = vec.env_method("render_text", indices=[0, 2])
        assert len(texts) == 2 and all(t.startswith("t=") for t in texts)
        assert vec.has_attr("action_masks")
        with pytest.raises(RuntimeError, match=r"worker 0 \(episodes 0-1\).*AttributeError"):
            vec.get_attr("no_such_attribute", indices=[0])
    finally:
        vec.close()


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="workers must be between 0 and n_envs"):
        BatchedClusterEnv(KWARGS, 2, workers=3)
    with pytest.raises(ValueError, match="n_envs must be >= 1"):
        BatchedClusterEnv(KWARGS, 0)
    with pytest.raises(Exception, match="no-such-cluster"):
        BatchedClusterEnv({**KWARGS, "cluster": "no-such-cluster"}, 2, workers=1)


def test_first_training_update_is_the_same_as_with_dummy_vec_env():
    """MaskablePPO on the batched env (in this process and over 2 workers) makes the same first
    update, bit for bit on CPU, as on DummyVecEnv: same rollout, same masks, same episodes."""
    import torch as th

    from agents.config import train_config_from_dict
    from agents.training import build_model, make_vec_env

    base = {"cluster": "mixed-64gpu", "workload": "llm-mix", "seed": 3, "device": "cpu", "n_envs": 3,
            "env": {"num_jobs": 24}, "ppo": {"n_steps": 32, "batch_size": 48, "n_epochs": 2},
            "policy": {"d_model": 16, "n_heads": 2, "n_layers": 1, "encoder_hidden": [16], "head_hidden": [16],
                       "value_hidden": [16]}}
    params = {}
    for kind, workers in (("dummy", 0), ("batched", 0), ("batched", 2)):
        cfg = train_config_from_dict({**base, "vec_env": kind, "vec_workers": workers}, "<test>")
        vec = make_vec_env(cfg)
        try:
            model = build_model(cfg, vec, th.device("cpu"), None)
            before = [p.detach().clone() for p in model.policy.parameters()]
            model.learn(total_timesteps=32 * 3)
            params[kind, workers] = [p.detach().clone() for p in model.policy.parameters()]
        finally:
            vec.close()
    assert any(not th.equal(b, a) for b, a in zip(before, params["dummy", 0])), "the update changed nothing"
    for key in (("batched", 0), ("batched", 2)):
        for want, got in zip(params["dummy", 0], params[key]):
            assert th.equal(want, got), key


def _assert_same(got, want) -> None:
    """Equal values, types and dtypes, through dicts and object arrays (Gymnasium's infos)."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            _assert_same(got[k], want[k])
    elif isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape
        if want.dtype == object:
            for g, w in zip(got.ravel(), want.ravel()):
                _assert_same(g, w)
        else:
            np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_equal(got, want)


@pytest.mark.parametrize("workers", [0, 2])
def test_gymnasium_vector_env_matches_sync_vector_env_same_step(workers):
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from envs.gym.vec import BatchedClusterVectorEnv

    n, steps = 3, 100
    ref = gym.vector.SyncVectorEnv([lambda: GpuClusterEnv(**KWARGS) for _ in range(n)], autoreset_mode=AutoresetMode.SAME_STEP)
    vec = BatchedClusterVectorEnv(KWARGS, n, workers=workers)
    assert vec.observation_space == ref.observation_space and vec.action_space == ref.action_space
    assert vec.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    try:
        rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
        (oa, ia), (ob, ib) = ref.reset(seed=5), vec.reset(seed=5)
        _assert_same(ob, oa)
        _assert_same(ib, ia)
        ended = finals = 0
        for _ in range(steps):
            ma = np.stack(ref.call("action_masks"))
            mb = vec.action_masks()
            np.testing.assert_array_equal(mb, ma)
            act = np.array([rng_a.choice(np.flatnonzero(m)) for m in ma])
            assert (act == np.array([rng_b.choice(np.flatnonzero(m)) for m in mb])).all()
            ra, rb = ref.step(act), vec.step(act)
            for x, y in zip(ra, rb):  # obs, rewards (float64), terminations, truncations, infos
                _assert_same(y, x)
            ended += int(ra[2].sum() + ra[3].sum())
            finals += "final_obs" in ra[4]
        assert ended >= 4 and finals >= 1
        assert vec.call("queue_window") == (8, 8, 8)
        assert len(vec.call("render_text")) == 3
    finally:
        vec.close()
        ref.close()


def test_episodes_may_differ_in_cluster_but_not_in_spaces():
    mixed = [{**KWARGS, "cluster": "mixed-64gpu"}, {**KWARGS, "cluster": "h100-4node"}]
    vec = BatchedClusterEnv(mixed)
    try:
        vec.seed(0)
        vec.reset()
        assert [c.num_gpus for c in vec.get_attr("cluster")] == [64, 32]
    finally:
        vec.close()
    with pytest.raises(ValueError, match="env 1's observation space differs from env 0's"):
        BatchedClusterEnv([KWARGS, {**KWARGS, "queue_window": 4}])
    with pytest.raises(ValueError, match="2 env argument sets for n_envs=3"):
        BatchedClusterEnv(mixed, 3)


def test_env_mix_gives_each_rollout_episode_its_setting_on_every_vec_env():
    from agents.config import train_config_from_dict
    from agents.training import make_vec_env

    base = {"cluster": "mixed-64gpu", "workload": "llm-mix", "n_envs": 3, "env": {"num_jobs": 24},
            "env_mix": [{}, {"cluster": "h100-4node", "num_jobs": 12}], "ppo": {"n_steps": 32, "batch_size": 32}}
    runs = {}
    for kind in ("dummy", "batched"):
        vec = make_vec_env(train_config_from_dict({**base, "vec_env": kind}, "<test>"))
        try:
            assert [c.num_gpus for c in vec.get_attr("cluster")] == [64, 32, 64]
            assert vec.get_attr("num_jobs") == [24, 12, 24]
            runs[kind] = _run(vec, 40)
        finally:
            vec.close()
    for a, b in zip(runs["dummy"][1:], runs["batched"][1:]):
        np.testing.assert_array_equal(a[1]["candidates"], b[1]["candidates"])
        np.testing.assert_array_equal(a[2], b[2])
