"""CandidateScoringPolicy with real torch, real MaskablePPO and the real env (small configs)."""

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from sb3_contrib import MaskablePPO
from stable_baselines3.common.env_util import make_vec_env

import envs
from agents import CandidateScorer, CandidateScoringPolicy, resolve_device
from agents.policy import CANDIDATES_KEY, GLOBAL_KEY, MASK_KEY

ENV_KWARGS = dict(cluster="h100-4node", workload="llm-mix", num_jobs=12)
SMALL_POLICY = dict(d_model=32, n_heads=4, n_layers=1, encoder_hidden=(64,), head_hidden=(32,), value_hidden=(32,))


def make_env(queue_window: int = 8) -> gym.Env:
    return gym.make(envs.ENV_ID, queue_window=queue_window, **ENV_KWARGS)


def make_model(seed: int = 0, policy_kwargs: dict | None = None, n_envs: int = 2, n_steps: int = 32) -> MaskablePPO:
    """A CPU MaskablePPO on the small env; policy_kwargs defaults to SMALL_POLICY."""
    # A callable, not the id: make_vec_env would pass render_mode="rgb_array", which the env rejects.
    vec_env = make_vec_env(make_env, n_envs=n_envs, seed=seed)
    return MaskablePPO(
        CandidateScoringPolicy,
        vec_env,
        n_steps=n_steps,
        batch_size=n_steps,
        n_epochs=2,
        seed=seed,
        device="cpu",
        policy_kwargs=SMALL_POLICY if policy_kwargs is None else policy_kwargs,
    )


def rollout_observations(env: gym.Env, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """n observations from an episode stream of uniformly random valid actions, stacked."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    collected = []
    for _ in range(n):
        collected.append(obs)
        action = rng.choice(np.flatnonzero(obs[MASK_KEY]))
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
    return {key: np.stack([o[key] for o in collected]) for key in obs}


def spread_score_head(policy: CandidateScoringPolicy, observations: dict[str, np.ndarray] | None = None) -> None:
    """Give the final score layer large weights so unmasked logits differ widely between rows
    and masking, not near-uniform initial logits, is what keeps invalid rows out. With
    `observations`, draw them (seeds 0, 1, ...) until the unmasked argmax picks an invalid row of
    at least one of them, so a test that masking keeps those rows out has teeth whatever the
    feature schema makes of the initial weights."""
    weight = policy.scorer.score_head[-1].weight
    for seed in range(100):
        with th.no_grad():
            th.nn.init.normal_(weight, std=10.0, generator=None if observations is None else th.Generator().manual_seed(seed))
        if observations is None:
            return
        obs_tensor, _ = policy.obs_to_tensor(observations)
        with th.no_grad():
            logits, _ = policy.scorer(obs_tensor[CANDIDATES_KEY], obs_tensor[GLOBAL_KEY], obs_tensor[MASK_KEY].bool())
        picks = logits.argmax(dim=-1).numpy()
        if not observations[MASK_KEY][np.arange(len(picks)), picks].all():
            return
    raise AssertionError("no score-head draw of 100 picks an invalid row unmasked")


@pytest.mark.parametrize("n_layers", [0, 2])
@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("pass_action_masks", [False, True])
def test_masked_candidates_never_chosen(n_layers: int, deterministic: bool, pass_action_masks: bool) -> None:
    env = make_env()
    policy = make_model(policy_kwargs=dict(SMALL_POLICY, n_layers=n_layers)).policy
    spread_score_head(policy, rollout_observations(make_env(), 100, seed=3))
    obs, _ = env.reset(seed=3)
    raw_choice_invalid = 0
    for _ in range(300):
        mask = env.unwrapped.action_masks()
        np.testing.assert_array_equal(mask, obs[MASK_KEY].astype(bool))
        action, _ = policy.predict(obs, deterministic=deterministic, action_masks=mask if pass_action_masks else None)
        assert mask[action], f"chose masked candidate {action}"
        obs_tensor, _ = policy.obs_to_tensor(obs)
        with th.no_grad():
            logits, _ = policy.scorer(obs_tensor[CANDIDATES_KEY], obs_tensor[GLOBAL_KEY], obs_tensor[MASK_KEY].bool())
        raw_choice_invalid += int(not mask[int(logits.argmax())])
        obs, _, terminated, truncated, info = env.step(int(action))
        assert not info.get("invalid_action", False)
        if terminated or truncated:
            obs, _ = env.reset()
    # Without the mask the policy would have picked invalid candidates: the test has teeth.
    assert raw_choice_invalid > 0


def test_masked_rows_do_not_change_valid_scores_or_value() -> None:
    th.manual_seed(0)
    scorer = CandidateScorer(candidate_dim=5, global_dim=3, d_model=16, n_heads=2, n_layers=2).eval()
    candidates, global_features = th.rand(4, 9, 5), th.rand(4, 3)
    mask = th.rand(4, 9) < 0.5
    mask[:, 0] = True
    garbage = th.where(mask.unsqueeze(-1), candidates, th.randn(4, 9, 5) * 100)
    logits, value = scorer(candidates, global_features, mask)
    logits_garbage, value_garbage = scorer(garbage, global_features, mask)
    th.testing.assert_close(logits[mask], logits_garbage[mask])
    th.testing.assert_close(value, value_garbage)


def test_scores_follow_candidates_when_rows_are_permuted() -> None:
    th.manual_seed(0)
    scorer = CandidateScorer(candidate_dim=5, global_dim=3, d_model=16, n_heads=2, n_layers=2).eval()
    candidates, global_features = th.rand(2, 7, 5), th.rand(2, 3)
    mask = th.ones(2, 7, dtype=th.bool)
    permutation = th.randperm(7)
    logits, value = scorer(candidates, global_features, mask)
    logits_permuted, value_permuted = scorer(candidates[:, permutation], global_features, mask)
    th.testing.assert_close(logits[:, permutation], logits_permuted)
    th.testing.assert_close(value, value_permuted)


def test_no_valid_candidate_gives_finite_outputs() -> None:
    scorer = CandidateScorer(candidate_dim=5, global_dim=3, d_model=16, n_heads=2, n_layers=1)
    logits, value = scorer(th.rand(2, 4, 5), th.rand(2, 3), th.zeros(2, 4, dtype=th.bool))
    assert th.isfinite(logits).all() and th.isfinite(value).all()


def test_save_and_load_give_identical_deterministic_actions(tmp_path: Path) -> None:
    model = make_model(policy_kwargs=dict(SMALL_POLICY, n_heads=2, n_layers=2))
    model.learn(total_timesteps=64)
    model.save(tmp_path / "model.zip")
    loaded = MaskablePPO.load(tmp_path / "model.zip", device="cpu")
    assert loaded.policy.scorer_kwargs == model.policy.scorer_kwargs
    observations = rollout_observations(make_env(), 200)
    masks = observations[MASK_KEY].astype(bool)
    actions, _ = model.predict(observations, deterministic=True, action_masks=masks)
    loaded_actions, _ = loaded.predict(observations, deterministic=True, action_masks=masks)
    np.testing.assert_array_equal(actions, loaded_actions)
    assert masks[np.arange(len(actions)), actions].all()
    # The policy alone (SB3's policy.save / load) round-trips too.
    model.policy.save(tmp_path / "policy.pt")
    policy = CandidateScoringPolicy.load(tmp_path / "policy.pt", device="cpu")
    np.testing.assert_array_equal(policy.predict(observations, deterministic=True)[0], actions)


def test_same_weights_run_on_a_larger_queue_window(tmp_path: Path) -> None:
    model = make_model()
    assert model.action_space.n == 41
    big_env = make_env(queue_window=16)
    assert big_env.action_space.n == 81
    obs, _ = big_env.reset(seed=5)
    for _ in range(100):
        mask = big_env.unwrapped.action_masks()
        action, _ = model.predict(obs, action_masks=mask)
        assert mask[action]
        obs, _, terminated, truncated, _ = big_env.step(int(action))
        if terminated or truncated:
            obs, _ = big_env.reset()
    # A saved model rebuilt for the larger env keeps its weights and its choices.
    model.save(tmp_path / "model.zip")
    big = MaskablePPO.load(
        tmp_path / "model.zip",
        env=make_vec_env(make_env, n_envs=1, env_kwargs=dict(queue_window=16)),
        custom_objects={"observation_space": big_env.observation_space, "action_space": big_env.action_space},
        device="cpu",
    )
    observations = rollout_observations(big_env, 100)
    np.testing.assert_array_equal(
        model.predict(observations, deterministic=True)[0], big.predict(observations, deterministic=True)[0]
    )


def test_wrong_feature_width_is_rejected() -> None:
    policy = make_model().policy
    obs, _ = make_env().reset(seed=0)
    obs[CANDIDATES_KEY] = obs[CANDIDATES_KEY][:, :-1]
    with pytest.raises(ValueError, match="candidates"):
        policy.predict(obs)


def test_same_seed_reproduces_the_first_update() -> None:
    runs = []
    for _ in range(2):
        model = make_model(seed=7, policy_kwargs={})  # the default size: d_model 64, 2 layers
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(total_timesteps=model.n_steps * model.n_envs)
        after = [p.detach().clone() for p in model.policy.parameters()]
        assert any(not th.equal(b, a) for b, a in zip(before, after)), "the update changed nothing"
        runs.append(after)
    for first, second in zip(*runs):
        assert th.equal(first, second)


def test_policy_rejects_an_observation_space_outside_the_contract() -> None:
    box = spaces.Box(-1, 1, (33, 32), np.float32)
    with pytest.raises(ValueError, match="Dict observation space"):
        CandidateScoringPolicy(box, spaces.Discrete(33), lambda _: 1e-3)
    good = spaces.Dict({CANDIDATES_KEY: box, GLOBAL_KEY: spaces.Box(-1, 1, (12,)), MASK_KEY: spaces.MultiBinary(33)})
    with pytest.raises(ValueError, match="Discrete\\(33\\)"):
        CandidateScoringPolicy(good, spaces.Discrete(34), lambda _: 1e-3)
    with pytest.raises(ValueError, match="multiple of n_heads"):
        CandidateScoringPolicy(good, spaces.Discrete(33), lambda _: 1e-3, d_model=30, n_heads=4)


def test_resolve_device() -> None:
    assert resolve_device("cpu") == th.device("cpu")
    assert resolve_device("auto").type == ("cuda" if th.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="not understood"):
        resolve_device("tpu")
    if th.cuda.is_available():
        assert resolve_device("cuda:0") == th.device("cuda:0")
        with pytest.raises(ValueError, match="only .* CUDA device"):
            resolve_device(f"cuda:{th.cuda.device_count()}")
    else:
        for spec in ("cuda", "cuda:0"):
            with pytest.raises(ValueError, match="no CUDA device is available \\(torch .*build\\)"):
                resolve_device(spec)


def test_a_model_of_another_feature_schema_refuses_to_load(tmp_path):
    """Saved models record the feature schema they were trained on; a model without the record
    (schema 1, before it existed) or with another version is refused with the file named."""
    from sb3_contrib import MaskablePPO

    from agents.policy import CandidateScoringPolicy, load_model
    from envs.decision.features import FEATURE_SCHEMA_VERSION
    from envs.gym.env import GpuClusterEnv

    env = GpuClusterEnv(cluster="h100-4node", workload="llm-mix", num_jobs=10)
    current = MaskablePPO(CandidateScoringPolicy, env, n_steps=16, batch_size=16,
                          policy_kwargs={"d_model": 16, "feature_schema_version": FEATURE_SCHEMA_VERSION})
    current.save(tmp_path / "current.zip")
    assert load_model(tmp_path / "current.zip").policy.feature_schema_version == FEATURE_SCHEMA_VERSION
    old = MaskablePPO(CandidateScoringPolicy, env, n_steps=16, batch_size=16, policy_kwargs={"d_model": 16})
    old.save(tmp_path / "old.zip")
    with pytest.raises(ValueError, match=r"old\.zip: the model was trained on no feature schema version .* retrain"):
        load_model(tmp_path / "old.zip")
    with pytest.raises(ValueError, match="feature schema version 1"):
        CandidateScoringPolicy(env.observation_space, env.action_space, lambda _: 1e-3, feature_schema_version=1)


@pytest.mark.parametrize("n_layers", [0, 1, 2])
def test_packed_scorer_computes_the_dense_function(n_layers: int) -> None:
    """forward_packed against forward_dense: valid rows' logits, values and the gradients of
    both, on batches with no valid row, all rows valid, and the usual few; invalid logits 0."""
    th.manual_seed(0)
    scorer = CandidateScorer(candidate_dim=7, global_dim=3, d_model=16, n_heads=4, n_layers=n_layers)
    for n_obs, n_candidates in ((64, 41), (1, 1), (3, 5)):
        candidates, global_features = th.randn(n_obs, n_candidates, 7), th.randn(n_obs, 3)
        mask = th.rand(n_obs, n_candidates) < 0.15
        mask[0] = False  # no valid row: every row counts as context, as in the dense pass
        mask[-1] = True
        context = mask | ~mask.any(dim=1, keepdim=True)
        grads = []
        outputs = []
        for forward in (scorer.forward_dense, scorer.forward_packed):
            scorer.zero_grad()
            logits, value = forward(candidates, global_features, mask)
            (logits[context].square().sum() + value.square().sum()).backward()
            outputs.append((logits, value))
            grads.append([p.grad.clone() for p in scorer.parameters() if p.grad is not None])
        (dense_logits, dense_value), (packed_logits, packed_value) = outputs
        th.testing.assert_close(packed_logits[context], dense_logits[context], rtol=1e-5, atol=1e-5)
        th.testing.assert_close(packed_value, dense_value, rtol=1e-5, atol=1e-5)
        assert (packed_logits[~context] == 0).all()
        assert len(grads[0]) == len(grads[1]) > 0
        for dense_grad, packed_grad in zip(*grads):
            th.testing.assert_close(packed_grad, dense_grad, rtol=1e-4, atol=1e-5)


def test_packed_policy_trains_reproducibly_saves_and_chooses_as_dense(tmp_path: Path) -> None:
    """`packed: true` in policy_kwargs: the first update reproduces for a seed, the model saves
    and loads packed, and its choices equal the same weights' dense choices."""
    runs = []
    for _ in range(2):
        model = make_model(seed=7, policy_kwargs=dict(SMALL_POLICY, packed=True))
        assert model.policy.scorer.packed
        model.learn(total_timesteps=model.n_steps * model.n_envs)
        runs.append([p.detach().clone() for p in model.policy.parameters()])
    for first, second in zip(*runs):
        assert th.equal(first, second)
    spread_score_head(model.policy)
    model.save(tmp_path / "model.zip")
    loaded = MaskablePPO.load(tmp_path / "model.zip", device="cpu")
    assert loaded.policy.scorer.packed and loaded.policy.scorer_kwargs["packed"]
    observations = rollout_observations(make_env(), 300)
    masks = observations[MASK_KEY].astype(bool)
    packed_actions, _ = loaded.predict(observations, deterministic=True, action_masks=masks)
    loaded.policy.scorer.packed = False
    dense_actions, _ = loaded.predict(observations, deterministic=True, action_masks=masks)
    np.testing.assert_array_equal(packed_actions, dense_actions)
    assert masks[np.arange(len(packed_actions)), packed_actions].all()
