"""The native core's features (envs.core.candidate_features, envs.decision.features.
native_candidate_features) against the Python reference `envs.decision.features.candidate_features`: the
same float32 arrays bit for bit, on many decision states of every shipped scenario (random-action
episodes of the env, preempting often, so that candidates with victims, checkpointing and
reserved jobs, invalid WAITs and spanning TP groups on nvl72 all occur), on states rebuilt from
plain data, on candidate sets with an empty window; and bad input refused with a ValueError that
names the argument."""

from __future__ import annotations

import collections

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401 - registers the env
from envs import core as _core
from envs.core import jit as _jit
from envs.decision.candidates import build_candidates
from envs.decision.features import (
    CANDIDATE_FEATURES,
    GLOBAL_FEATURES,
    NUM_CANDIDATE_FEATURES,
    NUM_GLOBAL_FEATURES,
    candidate_features,
    check_native_schema,
    native_candidate_features,
)
from envs.decision.placement import PREEMPT_RULES, RULES
from envs.decision.state import ClusterState
from envs.scenario import scenario_names
from tests.helpers import needs_compiled

pytestmark = needs_compiled()

ENV_ID = "gangsched/GpuCluster-v0"
STEPS = 300  # decisions compared per scenario (over as many episodes as that takes)
# (decisions, jobs) where the defaults (STEPS, 100) leave the cluster too empty to preempt
SIZES = {"large": (700, 600), "nvl72": (STEPS, 400)}


def assert_same(cset, coverage=None, env=None) -> None:
    """The native features of `cset` are the reference's, bit for bit (and clipped, the env's
    clip); with `env` (the env whose decision `cset` is), also as the env's observation is made:
    the candidate set and its clipped features in one call over the simulator's arrays
    (Simulator.native_candidates with `features`)."""
    ref_feats, ref_glob = candidate_features(cset)
    if env is not None:
        out = (np.full((len(cset.mask), len(CANDIDATE_FEATURES)), np.nan, np.float32), np.full(len(GLOBAL_FEATURES), np.nan, np.float32))
        again = env.sim.native_candidates(env.queue_window, env.preempt_las, env.wait_guard, out)
        assert again.observed is out and again.window == list(cset.window) and np.array_equal(again.mask, cset.mask)
        for mine, ref in zip(out, (ref_feats, ref_glob)):
            assert np.array_equal(mine, np.minimum(np.maximum(ref, -1.0), 1.0), equal_nan=True)
    feats, glob = native_candidate_features(cset)
    assert feats.dtype == np.float32 and glob.dtype == np.float32
    if not np.array_equal(feats, ref_feats, equal_nan=True):
        rows, cols = np.nonzero(~((feats == ref_feats) | (np.isnan(feats) & np.isnan(ref_feats))))
        pytest.fail("candidate features differ: " + ", ".join(
            f"row {r} {CANDIDATE_FEATURES[c]} native {feats[r, c]!r} reference {ref_feats[r, c]!r}"
            for r, c in list(zip(rows.tolist(), cols.tolist()))[:6]))
    if not np.array_equal(glob, ref_glob, equal_nan=True):
        cols = np.flatnonzero(glob != ref_glob)
        pytest.fail("global features differ: " + ", ".join(
            f"{GLOBAL_FEATURES[c]} native {glob[c]!r} reference {ref_glob[c]!r}" for c in cols.tolist()))
    clipped = native_candidate_features(cset, clip=True)
    for mine, ref in zip(clipped, (ref_feats, ref_glob)):
        assert np.array_equal(mine, np.minimum(np.maximum(ref, -1.0), 1.0), equal_nan=True)
    if coverage is not None:
        state, R = cset.state, len(RULES)
        valid = cset.valid_placements()
        coverage["states"] += 1
        coverage["victims"] += any(cset.candidates[i].victims for i in valid)
        coverage["preempt_las"] += any(i % R == RULES.index("preempt-las") for i in valid)
        coverage["checkpointing"] += bool(state.checkpointing)
        coverage["reserved"] += bool(state.reserved)
        coverage["wait_valid"] += bool(cset.mask[-1])
        coverage["wait_invalid"] += not cset.mask[-1]
        coverage["empty_window"] += not cset.window
        coverage["restores_owed"] += state.num_restores_owed > 0
        coverage["head_fit_later"] += bool(cset.window) and bool(state.num_free < state.num_gpus[cset.window[0]])
        tp_groups_span = False
        for i in valid:
            cd = cset.candidates[i]
            tp = int(state.tp_degree[cd.job_id])
            nodes = state.cluster.gpu_node[cd.gpus].reshape(-1, tp)
            tp_groups_span |= bool((nodes != nodes[:, :1]).any())
        coverage["spanning_tp"] += tp_groups_span


def _pick(rng, cset) -> int:
    """A random valid action, a preempting one half the time there is one, WAIT seldom."""
    valid = np.flatnonzero(cset.mask)
    R = len(RULES)
    preempting = [i for i in valid.tolist() if i != len(cset.mask) - 1 and i % R in PREEMPT_RULES]
    if preempting and rng.random() < 0.5:
        return int(rng.choice(preempting))
    placing = [i for i in valid.tolist() if i != len(cset.mask) - 1]
    if placing and (not cset.mask[-1] or rng.random() < 0.8):
        return int(rng.choice(placing))
    return int(valid[-1])


def episode_states(scenario: str, steps: int, seed: int = 0, num_jobs: int = 100):
    """Decision states of random-action episodes of the env on `scenario`: (env, cset) at each."""
    env = gym.make(ENV_ID, scenario=scenario, num_jobs=num_jobs)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    episode = 0
    for _ in range(steps):
        u = env.unwrapped
        yield u, u.cset
        _, _, terminated, truncated, _ = env.step(_pick(rng, u.cset))
        if terminated or truncated:
            yield env.unwrapped, env.unwrapped.cset  # the terminal state's candidate set
            episode += 1
            env.reset(seed=seed + episode)
    env.close()


COVERAGE = collections.Counter()


@pytest.mark.parametrize("scenario", scenario_names())
def test_native_features_are_the_reference_on_every_scenario(scenario):
    coverage = collections.Counter()
    steps, jobs = SIZES.get(scenario, (STEPS, 100))
    for u, cset in episode_states(scenario, steps, num_jobs=jobs):
        assert_same(cset, coverage, u)
    assert coverage["states"] >= steps
    for case in ("victims", "preempt_las", "checkpointing", "reserved", "wait_invalid", "restores_owed"):
        assert coverage[case], (case, dict(coverage))
    COVERAGE.update(coverage)
    if scenario == "nvl72":
        assert coverage["spanning_tp"], coverage


def test_the_scenarios_covered_the_cases():
    """What the scenario runs above met (run after them; alone it runs a few scenarios itself)."""
    if not COVERAGE:
        for scenario in ("default", "slo-preempt", "nvl72"):
            for _, cset in episode_states(scenario, STEPS):
                assert_same(cset, COVERAGE)
    for case in ("victims", "preempt_las", "checkpointing", "reserved", "wait_valid", "wait_invalid", "restores_owed",
                 "head_fit_later", "spanning_tp"):
        assert COVERAGE[case] > 0, (case, dict(COVERAGE))


def test_the_reference_path_too():
    """With the compiled kernels off, candidate_features' plain-Python blocks: the same arrays."""
    with _jit.reference_path():
        for _, cset in episode_states("slo-preempt", 80, seed=3):
            assert_same(cset)


@pytest.mark.parametrize("scenario", ["default", "nvl72", "topology-stress"])
def test_states_from_plain_data(scenario):
    """A state rebuilt from plain data (the scoring service's): its own arrays, its arrival
    history apart from its jobs, job indices of its own."""
    n = 0
    for u, cset in episode_states(scenario, 60, seed=5):
        state = ClusterState.from_dict(cset.state.to_dict(), u.cluster)
        assert_same(build_candidates(state, u.queue_window))
        n += 1
    assert n >= 60


def test_empty_windows_and_states_between_decisions():
    """Candidate sets of states that are no decision: an empty queue (an empty window, WAIT valid
    or not), the episode's end."""
    seen = collections.Counter()
    for u, _ in episode_states("default", 60, seed=7):
        sim = u.sim
        for preempt_las in (True, False):
            cset = build_candidates(sim.decision_state(), u.queue_window, preempt_las=preempt_las)
            assert_same(cset, seen)
    env = gym.make(ENV_ID, num_jobs=12)
    env.reset(seed=2)
    done = False
    while not done:
        cset = env.unwrapped.cset
        assert_same(cset, seen)
        _, _, done, _, _ = env.step(int(np.flatnonzero(cset.mask)[0]))
    sim = env.unwrapped.sim
    cset = build_candidates(sim.decision_state(), env.unwrapped.queue_window)
    assert not cset.window and not cset.mask.any()
    assert_same(cset, seen)
    assert seen["empty_window"] and seen["wait_invalid"]


class _Float64Numpy:
    """numpy with float32 standing for float64: envs.decision.features' reference path then keeps the
    float64 values its float32 features are cast from."""

    float32 = np.float64

    def __getattr__(self, name):
        return getattr(np, name)


@pytest.mark.parametrize("scenario", ["philly", "nvl72", "topology-stress", "hetero"])
def test_the_float64_values_before_the_cast(scenario, monkeypatch):
    """Finer than the float32 features: the float64 values they are cast from, equal to the
    reference path's (on fresh states, whose tables the float64 reference makes)."""
    import envs.decision.features as features

    n = 0
    for u, cset in episode_states(scenario, 150, seed=9, num_jobs=400 if scenario == "nvl72" else 100):
        state = ClusterState.from_dict(cset.state.to_dict(), u.cluster)
        fresh = build_candidates(state, u.queue_window)
        args = _args(fresh)
        with monkeypatch.context() as m, _jit.reference_path():
            m.setattr(features, "np", _Float64Numpy())
            ref_feats, ref_glob = candidate_features(fresh)
        assert ref_feats.dtype == np.float64 and ref_glob.dtype == np.float64
        out = (np.empty((len(fresh.mask), NUM_CANDIDATE_FEATURES)), np.empty(NUM_GLOBAL_FEATURES))
        feats, glob = _core.candidate_features(**args, out=out)
        assert np.array_equal(feats, ref_feats, equal_nan=True), np.argwhere(feats != ref_feats)[:5]
        assert np.array_equal(glob, ref_glob, equal_nan=True), np.flatnonzero(glob != ref_glob)
        n += 1
    assert n >= 150


def test_the_schema_is_the_cores():
    assert _core._core.CANDIDATE_COLUMNS == CANDIDATE_FEATURES
    assert _core._core.GLOBAL_COLUMNS == GLOBAL_FEATURES
    check_native_schema()


def test_a_changed_schema_is_refused(monkeypatch):
    import envs.decision.features as features

    swapped = list(CANDIDATE_FEATURES)
    swapped[5], swapped[6] = swapped[6], swapped[5]
    monkeypatch.setattr(features, "CANDIDATE_FEATURES", tuple(swapped))
    with pytest.raises(RuntimeError, match="column 5 is 'kind_batch', not 'priority'"):
        features.check_native_schema()
    monkeypatch.setattr(features, "CANDIDATE_FEATURES", CANDIDATE_FEATURES + ("extra",))
    with pytest.raises(RuntimeError, match="37 columns, not 38"):
        features.check_native_schema()


def test_out_arrays_are_written_whole():
    for _, cset in episode_states("slo-preempt", 20, seed=1):
        out = (np.full((len(cset.mask), NUM_CANDIDATE_FEATURES), np.nan, dtype=np.float32),
               np.full(NUM_GLOBAL_FEATURES, np.nan, dtype=np.float32))
        feats, glob = native_candidate_features(cset, out=out)
        assert feats is out[0] and glob is out[1]
        ref = candidate_features(cset)
        assert np.array_equal(feats, ref[0]) and np.array_equal(glob, ref[1])


def test_one_memo_over_changing_arrays():
    """An ArrayMemo reused across states: arrays that are new objects are read anew (two
    episodes' states in turn through one memo, the arrays of each replaced as jobs arrive)."""
    memo = _core.ArrayMemo()
    for (_, a), (_, b) in zip(episode_states("default", 60, seed=1), episode_states("philly", 60, seed=2)):
        for cset in (a, b):
            args = _args(cset)
            feats, glob = _core.candidate_features(**args, memo=memo)
            ref = candidate_features(cset)
            assert np.array_equal(feats, ref[0]) and np.array_equal(glob, ref[1])


# ---------------------------------------------------------------------- bad input


def _args(cset):
    """envs.core.candidate_features' arguments for `cset` (as native_candidate_features makes them)."""
    valid = cset.valid_placements()
    gpus = [cset.candidates[i].gpus for i in valid]
    victims = [list(cset.candidates[i].victims) for i in valid]
    return dict(state=cset.state, window=list(cset.window), mask=cset.mask.copy(),
                gpus=np.concatenate(gpus) if gpus else np.zeros(0, np.int64),
                gpus_end=np.cumsum([len(g) for g in gpus]).astype(np.int64),
                victims=np.array(sum(victims, []), dtype=np.int64),
                victims_end=np.cumsum([len(v) for v in victims]).astype(np.int64))


@pytest.fixture(scope="module")
def a_decision():
    """A decision with placements and victims (slo-preempt)."""
    for _, cset in episode_states("slo-preempt", 200, seed=11):
        if any(cset.candidates[i].victims for i in cset.valid_placements()) and len(cset.window) > 1:
            return cset
    pytest.skip("no decision with victims met")


def _raises(args, name, **changes):
    a = {**args, **changes}
    with pytest.raises(ValueError, match=f"^{name}: "):
        _core.candidate_features(**a)
    memo = _core.ArrayMemo()  # the same through a memo that holds the good arrays
    _core.candidate_features(**args, memo=memo)
    with pytest.raises(ValueError, match=f"^{name}: "):
        _core.candidate_features(**a, memo=memo)
    good = _core.candidate_features(**args, memo=memo)
    assert np.array_equal(good[0], _core.candidate_features(**args)[0])


def test_bad_candidate_arrays_are_refused(a_decision):
    args = _args(a_decision)
    ref = _core.candidate_features(**args)
    assert np.array_equal(ref[0], candidate_features(a_decision)[0])
    n_jobs = len(a_decision.state.num_gpus)
    _raises(args, "window", window=[n_jobs] + args["window"][1:])
    _raises(args, "window", window=[-1] + args["window"][1:])
    _raises(args, "window", window="abc")
    _raises(args, "window", window=list(range(len(args["mask"]))))
    _raises(args, "mask", mask=args["mask"][:-1])
    _raises(args, "mask", mask=args["mask"].astype(np.int8))
    mask = args["mask"].copy()
    mask[len(args["window"]) * len(RULES)] = True  # a valid candidate in an empty slot
    _raises(args, "mask", mask=mask)
    _raises(args, "gpus_end", gpus_end=args["gpus_end"][:-1])
    _raises(args, "gpus_end", gpus_end=np.append(args["gpus_end"], args["gpus_end"][-1]))
    _raises(args, "gpus_end", gpus_end=args["gpus_end"] + len(args["gpus"]))
    _raises(args, "gpus", gpus=args["gpus"][::-1].copy() * 0 + 10**6)
    _raises(args, "gpus", gpus=args["gpus"].astype(np.int32))
    ends = args["gpus_end"].copy()
    ends[0] -= 1  # the first candidate one GPU short of its gang
    _raises(args, "gpus", gpus_end=ends)
    _raises(args, "victims_end", victims_end=args["victims_end"][:-1])
    _raises(args, "victims_end", victims_end=args["victims_end"] + len(args["victims"]) + 1)
    _raises(args, "victims", victims=np.full_like(args["victims"], n_jobs))
    _raises(args, "victims", victims=args["victims"].astype(float))


def test_bad_state_arrays_are_refused(a_decision):
    args = _args(a_decision)
    state = a_decision.state
    K, F, FG = len(args["mask"]), NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES
    read_only = np.zeros(FG, np.float32)
    read_only.flags.writeable = False
    for feats, glob, name in ((np.zeros((K - 1, F), np.float32), np.zeros(FG, np.float32), "out_candidates"),
                              (np.zeros((K, F), np.int32), np.zeros(FG, np.float32), "out_candidates"),
                              (np.zeros((K, F)), np.zeros(FG, np.float32), "out_global"),  # float64 both or neither
                              (np.zeros((K, F), np.float32), np.zeros(FG + 1, np.float32), "out_global"),
                              (np.zeros((K, F), np.float32), read_only, "out_global")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            _core.candidate_features(**args, out=(feats, glob))

    def broken(**fields):
        """A copy of the state with these fields replaced."""
        s = ClusterState(**{name: getattr(state, name) for name in ClusterState.__slots__})
        for k, v in fields.items():
            setattr(s, k, v)
        return s

    for field, value, name in (
            ("estimate_s", state.estimate_s[:-1], "estimate"),
            ("estimate_s", state.estimate_s.astype(np.float32), "estimate"),
            ("rate", state.rate[:-1], "rate"),
            ("kind", state.kind.astype(np.int32), "kind"),
            ("needs_restore", state.needs_restore.astype(np.int64), "needs_restore"),
            ("queue", np.append(state.queue, len(state.num_gpus)).astype(np.int64), "q_ids"),
            ("node_free", state.node_free[:-1], "node_free"),
            ("node_free", state.node_free + 100, "node_free"),
            ("node_pressure", np.zeros(len(state.node_pressure) + 1), "node_pressure"),
            ("uplink_demand", np.zeros(len(state.uplink_demand) + 1), "uplink_demand"),
            ("running", np.append(state.running, -1).astype(np.int64), "running"),
            ("checkpointing", [len(state.num_gpus)], "checkpointing"),
            ("checkpointing", "x", "checkpointing"),
            ("arrival_requested_gpu_s", state.arrival_requested_gpu_s[:-1], "arrival_requested"),
    ):
        _raises(args, name, state=broken(**{field: value}))
    arrays, running, checkpointing, reserved, now, known = _core.feature_inputs(state)
    for at, name in ((3, "q_ids"), (4, "arrival_times"), (2, "estimate")):  # counts beyond the arrays
        counts = list(known)
        counts[at] = 10**6
        with pytest.raises(ValueError, match=f"^{name}: "):
            _core._core.candidate_features(
                _core.cluster_arrays(state.cluster), _core.rate_model(state.speed_model), arrays, running, checkpointing,
                reserved, now, counts, args["window"], args["mask"], args["gpus"], args["gpus_end"], args["victims"],
                args["victims_end"], np.zeros((len(args["mask"]), NUM_CANDIDATE_FEATURES), np.float32),
                np.zeros(NUM_GLOBAL_FEATURES, np.float32))
    kinds = state.kind.copy()
    kinds[args["window"][0]] = 7
    _raises(args, "kind", state=broken(kind=kinds))
    tp = state.tp_degree.copy()
    tp[args["window"][0]] = 3 * state.num_gpus[args["window"][0]] + 1
    _raises(args, "tp_degree", state=broken(tp_degree=tp))
    with pytest.raises(ValueError, match="^counts: "):
        _core._core.candidate_features(
            _core.cluster_arrays(state.cluster), _core.rate_model(state.speed_model), {}, [], [], [], 0.0, [0, 0],
            [], np.zeros(1, bool), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
            np.zeros(0, np.int64), np.zeros((1, NUM_CANDIDATE_FEATURES), np.float32), np.zeros(NUM_GLOBAL_FEATURES, np.float32))
    with pytest.raises(ValueError, match="^estimate: missing"):
        _core._core.candidate_features(
            _core.cluster_arrays(state.cluster), _core.rate_model(state.speed_model), {}, [], [], [], 0.0, [0] * 8,
            [], np.zeros(1, bool), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
            np.zeros(0, np.int64), np.zeros((1, NUM_CANDIDATE_FEATURES), np.float32), np.zeros(NUM_GLOBAL_FEATURES, np.float32))


def test_exact_sums_are_fsum():
    """The arrival windows' sums are math.fsum's, bit for bit (the core's exact_sum)."""
    import math

    rng = np.random.default_rng(0)
    cases = [[], [0.0], [-0.0], [1e16, 1.0, 1.0], [0.1] * 10, [1e16, 1.0, -1e16, 1e-16, 3.0, 0.1, 0.2, 0.3] * 3,
             [1e308, 1e308, -1e308], [math.inf, 1.0], [-math.inf, 1.0], [math.nan, 1.0], [1e-16, 1.0, 1e16]]
    cases += [(rng.standard_normal(n) * 10.0 ** rng.integers(-20, 20, n)).tolist() for n in range(1, 60)]
    cases += [(rng.random(n) * 1e6).tolist() for n in (100, 1000)]
    for values in cases:
        try:
            expected = math.fsum(values)
        except OverflowError:
            continue
        got = _core._core.exact_sum(np.array(values, dtype=np.float64))
        assert got == expected or (math.isnan(got) and math.isnan(expected)), values
        assert math.copysign(1.0, got) == math.copysign(1.0, expected) or math.isnan(expected)
    assert math.isnan(_core._core.exact_sum(np.array([math.inf, -math.inf])))  # Python: ValueError
