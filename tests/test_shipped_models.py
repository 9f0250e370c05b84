"""The trained models shipped under models/: intact, loadable by this code, and still good.

A shipped model is checked against its own files (SHA256SUMS, the hashes its MODEL_CARD.md
states), against this code (feature schema, feature names, rules: a model of an older schema fails
here, so changing the schema means retraining and re-committing the models, CONTRIBUTING.md),
between its two forms (model.zip under torch and policy.onnx under onnxruntime score the same
observations alike), and, slow-marked, on a few test seeds of each scenario it was trained on
against the better of `sect` and `sjf` there.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from agents.shipped import MODELS_DIR, SUMS_FILE, deployment, model_dir, read_sums, shipped_models, verify

pytest.importorskip("onnxruntime")

MODELS = shipped_models()
ALL_TRAINED_SCENARIOS = ("default", "bursty", "slo-preempt", "topology-stress", "hetero")


def test_the_generalist_ships() -> None:
    assert "generalist" in MODELS, f"models/generalist missing; found {MODELS} in {MODELS_DIR}"


@pytest.mark.parametrize("name", MODELS)
def test_files_match_their_recorded_hashes(name: str) -> None:
    directory = model_dir(name)
    assert verify(directory) == []
    card = (directory / "MODEL_CARD.md").read_text()
    for file, digest in read_sums(directory).items():
        if file != "MODEL_CARD.md":  # the card cannot state its own hash
            assert re.search(rf"`?{re.escape(file)}`?\s*\|\s*`?{digest}`?", card), f"{name}: MODEL_CARD.md does not state {file}'s sha256 {digest}"


def test_a_changed_byte_is_caught(tmp_path) -> None:
    import shutil

    copy = tmp_path / "m"
    shutil.copytree(model_dir("generalist"), copy)
    data = bytearray((copy / "model.zip").read_bytes())
    data[len(data) // 2] ^= 1
    (copy / "model.zip").write_bytes(bytes(data))
    (copy / "extra.txt").write_text("x")
    problems = verify(copy)
    assert any("model.zip: sha256 differs" in p for p in problems)
    assert any("extra.txt: not listed" in p for p in problems)
    (copy / SUMS_FILE).write_text("nothex  model.zip\n")
    assert any(f"{SUMS_FILE}:1" in p for p in verify(copy))


@pytest.mark.parametrize("name", MODELS)
def test_torch_and_onnx_forms_are_the_same_policy(name: str) -> None:
    """model.zip (what evaluate.py's learned= runs) and policy.onnx (what the service runs) give
    the same logits on observations of real episodes of each trained scenario."""
    import gymnasium as gym

    import envs  # noqa: F401  registers the env
    from agents.anchor_rule import policy_logits
    from agents.policy import CANDIDATES_KEY, GLOBAL_KEY, load_model
    from agents.policy_file import OnnxPolicy

    d = deployment(name)
    model, guard = load_model(str(d.model), device="cpu"), d.wait_guard
    onnx = OnnxPolicy(model_dir(name))
    rng = np.random.default_rng(0)
    for scenario in ALL_TRAINED_SCENARIOS:
        env = gym.make("gangsched/GpuCluster-v0", scenario=scenario, wait_guard=guard)
        obs, _ = env.reset(seed=0)
        for _ in range(40):
            mask = env.unwrapped.action_masks()
            torch_logits = policy_logits(model, obs, mask)
            onnx_logits, _ = onnx.score(obs[CANDIDATES_KEY], obs[GLOBAL_KEY], mask)
            valid = np.flatnonzero(mask)
            # torch's distribution holds log-probabilities (logits less their log-sum-exp): compare up to that shift
            o, t = onnx_logits[valid].astype(np.float64), torch_logits[valid]
            np.testing.assert_allclose(o - o.max(), t - t.max(), atol=1e-4)
            obs, _, done, truncated, _ = env.step(int(rng.choice(valid)))
            if done or truncated:
                break


def test_the_service_serves_the_generalist_by_name_as_evaluate_runs_it() -> None:
    """`python -m service --model generalist` (no training first) answers /v1/score with the
    choice evaluate.py's `learned=generalist` makes (model.zip under torch with the card's anchor,
    on the env masked by its bound on WAIT), on states of a real episode of a trained scenario."""
    import gymnasium as gym

    import envs  # noqa: F401
    from agents.shipped import load_actor
    from service.testing import ServiceProcess
    from tests.helpers import needs_service

    needs_service()
    httpx = pytest.importorskip("httpx")

    guard = deployment("generalist").wait_guard
    act = load_actor("generalist")
    env = gym.make("gangsched/GpuCluster-v0", scenario="default", wait_guard=guard)
    obs, _ = env.reset(seed=0)
    compared = 0
    with ServiceProcess(["--model", "generalist", "--cluster", "mixed-64gpu"]) as svc, httpx.Client(base_url=svc.url, timeout=30) as c:
        info = c.get("/v1/info").json()
        assert info["torch_imported"] is False
        for _ in range(40):
            action = act(env, obs)
            body = c.post("/v1/score", json={"state": env.unwrapped.state.to_dict(), "queue_window": 8}).json()
            assert body["fallback"] is False
            n = len(env.unwrapped.action_masks())
            ranked = sorted(body["candidates"] + ([dict(body["wait"], index=n - 1)] if body["wait"]["valid"] else []),
                            key=lambda x: x["rank"])
            assert ranked[0]["index"] == action
            compared += 1
            obs, _, done, truncated, _ = env.step(action)
            if done or truncated:
                break
    assert compared == 40


def test_off_its_clusters_the_generalist_is_its_heuristic_alone() -> None:
    """On a cluster policy.json's `clusters` does not list (topology-stress's 128-GPU cluster was
    not validated safe), the deployed policy takes its anchor baseline's choice at every decision,
    in evaluation and in the service; on a listed cluster it departs from it."""
    import gymnasium as gym

    import envs  # noqa: F401
    from agents.shipped import load_actor
    from baselines import make_baseline
    from service.testing import ServiceProcess
    from tests.helpers import needs_service

    needs_service()
    httpx = pytest.importorskip("httpx")

    d = deployment("generalist")
    assert d.clusters and "topo-stress-128gpu" not in d.clusters and "mixed-64gpu" in d.clusters
    act, rule = load_actor("generalist"), make_baseline(d.anchor.baseline)
    departures = {}
    for scenario in ("topology-stress", "default"):
        env = gym.make("gangsched/GpuCluster-v0", scenario=scenario, wait_guard=d.wait_guard)
        obs, _ = env.reset(seed=3)
        departures[scenario] = 0
        for _ in range(150):
            u = env.unwrapped
            action = act(env, obs)
            departures[scenario] += action != int(rule.select(u.cset.state, u.cset))
            obs, _, done, truncated, _ = env.step(action)
            if done or truncated:
                break
    assert departures["topology-stress"] == 0 and departures["default"] > 0, departures
    with ServiceProcess(["--model", "generalist", "--cluster", "topo-stress-128gpu"]) as svc, httpx.Client(base_url=svc.url) as c:
        info = c.get("/v1/info").json()
        assert info["policy"] == f"baseline:{d.anchor.baseline}", info
        assert "deployed on" in svc.output() and "topo-stress-128gpu" in svc.output()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ALL_TRAINED_SCENARIOS)
def test_the_generalist_is_not_worse_than_the_best_heuristic(scenario: str, tmp_path) -> None:
    """Deployed as shipped (`learned=generalist`: policy.json's anchor and bound on WAIT), on
    three test seeds through evaluate.py: its mean objective within 5% of the better of sect and
    sjf on those seeds. The card reports 30 seeds and more; three catch a broken model, anchor,
    guard or schema, not a point of noise."""
    import json

    from evaluate import main as evaluate_main

    out = tmp_path / scenario
    assert evaluate_main(["--scenario", scenario, "--seeds", "0-2", "--policies", "sect,sjf,learned=generalist",
                          "--reference", "sect", "--workers", "2", "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    mean = {p: doc["policies"][p]["summary"]["objective"]["mean"] for p in ("sect", "sjf", "learned=generalist")}
    best = min(mean["sect"], mean["sjf"])
    assert mean["learned=generalist"] <= 1.05 * best, f"{scenario}: {mean}"
