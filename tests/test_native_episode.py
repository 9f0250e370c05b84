"""The env's episode carried on by the native core (envs.core's Episode, Simulator.native_episode).

On the compiled path the env makes one native call per decision: the chosen candidate carried
out, the events to the next decision, its candidate set and its features. The Python decision
loop (GANGSCHED_JIT=0 runs the reference) is the specification: every observation, mask, reward,
info and the final metrics and records must be the same, and reading the env's Python state
mid-episode (`env.sim`, `env.cset`, `env.state`) rebuilds it so that the episode goes on
unchanged.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from envs import core
from envs.core import jit
from envs.decision.features import NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES
from envs.gym.env import GpuClusterEnv
from envs.jobs import PRIORITY_HIGH
from envs.sim import simulator as simulator_module
from envs.sim.metrics import episode_metrics
from envs.sim.simulator import Simulator

pytestmark = pytest.mark.skipif(not jit.ENABLED, reason="the native episode is the compiled path's")

# Every shipped scenario (small job counts: whole episodes), one with a wait guard, one without preempt-las,
# and gangs asking for segments.
EPISODES = [
    {"scenario": "default", "num_jobs": 60},
    {"scenario": "slo-preempt", "num_jobs": 60},
    {"scenario": "hetero", "num_jobs": 60},
    {"scenario": "topology-stress", "num_jobs": 60},
    {"scenario": "bursty", "num_jobs": 60},
    {"scenario": "nvl72", "num_jobs": 60},
    {"scenario": "large", "num_jobs": 120},
    {"scenario": "philly", "num_jobs": 120},
    {"scenario": "default", "num_jobs": 60, "wait_guard": {"overdue_factor": 2.0, "min_wait_s": 600.0}, "queue_window": 3},
    {"scenario": "slo-preempt", "num_jobs": 60, "preempt_las": False},
    {"cluster": "gb200-nvl72-8rack", "workload": "llm-mix-nvl72-segments", "num_jobs": 100},  # segment requests
]


def _record(env_kwargs: dict, seed: int, read_python_at: int | None = None, invalid_every: int = 0) -> tuple:
    """Everything an episode under random valid actions shows: a digest of every observation,
    reward, end flag and info, the number of steps, the final metrics, segments and timeline.
    `read_python_at`: read `env.sim` and `env.state` before that step (the Python state rebuilt
    there); `invalid_every`: an invalid action every so many steps."""
    env = GpuClusterEnv(**env_kwargs)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    h = hashlib.sha256()
    steps, done = 0, False
    while not done:
        for k in ("candidates", "global", "action_mask"):
            h.update(obs[k].tobytes())
        h.update(repr(sorted(info.items())).encode())
        if steps == read_python_at:
            assert env.sim is not None and not env.sim._spent and env.state.now == env.sim.now
        mask = env.action_masks()
        if invalid_every and steps % invalid_every == invalid_every - 1 and not mask.all():
            action = int(np.flatnonzero(~mask)[0])
        else:
            valid = np.flatnonzero(mask)
            action = int(valid[rng.integers(len(valid))])
        obs, reward, term, trunc, info = env.step(action)
        h.update(np.float64(reward).tobytes() + bytes([term, trunc]))
        done = term or trunc
        steps += 1
    sim = env.sim
    h.update(repr(sorted(info.items())).encode())
    segments = [(s.job_id, s.gpus.tolist(), s.start_s, s.end_s, s.preempted) for s in sim.segments]
    metrics = {k: repr(v) for k, v in episode_metrics(sim, env.objective).items()}  # nan == nan too
    return h.hexdigest(), steps, metrics, segments, list(sim.timeline), list(sim.finished_order)


@pytest.fixture(scope="module")
def references():
    """Each episode on the plain-Python reference path."""
    out = {}
    with jit.reference_path():
        for i, kw in enumerate(EPISODES):
            out[i] = _record(kw, seed=i)
    return out


@pytest.mark.parametrize("i", range(len(EPISODES)), ids=[str(e) for e in EPISODES])
def test_native_episodes_are_the_reference_bit_for_bit(i, references, monkeypatch):
    """The whole episode in the core (the Python loop never runs: `decide` is not called), and
    everything it shows is the reference's: observations, masks, rewards, infos, metrics, segments
    (GPUs and times), timeline rows and the finished order."""
    def no_python_loop(*args, **kwargs):
        raise AssertionError("the env's Python decision loop ran")

    monkeypatch.setattr("envs.gym.env.decide", no_python_loop)
    got = _record(EPISODES[i], seed=i)
    ref = references[i]
    assert got[1] == ref[1] and got[1] > 20
    assert got[2] == ref[2]
    assert got[3] == ref[3] and any(s[4] for s in got[3]) == any(s[4] for s in ref[3])
    assert got[4] == ref[4] and got[5] == ref[5]
    assert got[0] == ref[0]


@pytest.mark.parametrize("i", [0, 1, 5, 8])
def test_reading_the_python_state_mid_episode_changes_nothing(i, references):
    """`env.sim` / `env.state` read at some step rebuild the Python state (the actions so far
    replayed through the Python loop), and the episode goes on there: the same episode."""
    ref = references[i]
    for at in (0, 7, ref[1] // 2):
        assert _record(EPISODES[i], seed=i, read_python_at=at) == ref


def test_invalid_actions_change_nothing(references):
    """An invalid action: reward 0, the same observation, `invalid_action` in the info; the
    episode then goes on as it would have (the same as on the reference path, invalid actions
    included)."""
    kw = EPISODES[1]
    with jit.reference_path():
        ref = _record(kw, seed=1, invalid_every=5)
    got = _record(kw, seed=1, invalid_every=5)
    assert got == ref and got[1] > references[1][1]  # the invalid actions are steps too
    env = GpuClusterEnv(**kw)
    obs, _ = env.reset(seed=3)
    bad = int(np.flatnonzero(~env.action_masks())[0])
    obs2, reward, term, trunc, info = env.step(bad)
    assert reward == 0.0 and info.get("invalid_action") and not (term or trunc)
    assert all(np.array_equal(obs[k], obs2[k]) for k in obs)


def test_the_simulator_is_spent_until_the_end_and_written_back_after_it():
    env = GpuClusterEnv(scenario="default", num_jobs=30)
    env.reset(seed=0)
    sim = env._sim
    assert sim._spent and env._episode is not None
    with pytest.raises(ValueError, match="consumed"):
        sim.fork()
    done = False
    while not done:
        _, _, term, trunc, info = env.step(int(np.flatnonzero(env.action_masks())[-1 if env.action_masks()[:-1].sum() == 0 else 0]))
        done = term or trunc
    assert env._episode.finished and env.sim is sim  # finished: the written-back simulator, nothing rebuilt
    assert sim.done and len(sim.finished_order) == 30 and len(sim.segments) >= 30
    assert info["metrics"]["avg_jct_s"] > 0


def _episode_of(scenario: str = "default", num_jobs: int = 30):
    env = GpuClusterEnv(scenario=scenario, num_jobs=num_jobs)
    from envs.workload.generator import make_workload
    sim = Simulator(env.cluster, make_workload(env.workload_spec, env.cluster, 0, env.num_jobs), env.sim_config)
    return env, sim


def _outputs(K: int):
    return np.empty((K, NUM_CANDIDATE_FEATURES), np.float32), np.empty(NUM_GLOBAL_FEATURES, np.float32)


def test_bad_input_is_a_clear_error():
    env, sim = _episode_of()
    K = env.action_space.n
    episode = sim.native_episode(env.queue_window, env.preempt_las, env.wait_guard)
    with pytest.raises(ValueError, match="out_candidates"):
        episode.step(-1, (np.empty((K - 1, NUM_CANDIDATE_FEATURES), np.float32), np.empty(NUM_GLOBAL_FEATURES, np.float32)))
    with pytest.raises(ValueError, match="out_global"):
        episode.step(-1, (np.empty((K, NUM_CANDIDATE_FEATURES), np.float32), np.empty(3, np.float32)))
    mask = episode.step(-1, _outputs(K))
    invalid = int(np.flatnonzero(~mask)[0])
    with pytest.raises(ValueError, match="action: not a valid candidate"):
        episode.step(invalid, _outputs(K))
    with pytest.raises(ValueError, match="action: not a valid candidate"):
        episode.step(K, _outputs(K))
    episode.step(int(np.flatnonzero(mask)[0]), _outputs(K))  # still usable after a refused action
    with pytest.raises(ValueError, match="consumed"):
        sim.native_episode(env.queue_window)
    env2, sim2 = _episode_of()
    state = sim2._native_state()
    with pytest.raises(ValueError, match="queue_window"):
        core.Episode(*state, PRIORITY_HIGH, 0, True, [], simulator_module._LAS_THRESHOLDS, 4.0)
    with pytest.raises(ValueError, match="wait_guard"):
        core.Episode(*state, PRIORITY_HIGH, 4, True, [1.0], simulator_module._LAS_THRESHOLDS, 4.0)
    with pytest.raises(ValueError, match="las_thresholds"):
        core.Episode(*state, PRIORITY_HIGH, 4, True, [], [2.0, 1.0], 4.0)
    arrays = dict(state[2])
    arrays["work_left"] = arrays["work_left"][:-1].copy()
    with pytest.raises(ValueError, match="work_left"):
        core.Episode(state[0], state[1], arrays, *state[3:], PRIORITY_HIGH, 4, True, [], simulator_module._LAS_THRESHOLDS, 4.0)

