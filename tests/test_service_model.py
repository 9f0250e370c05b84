"""The service serving an exported model (onnxruntime), against a real process: its choice is
the torch model's deterministic action on the env, torch is never imported by the server, and a
model directory whose checksum or feature schema does not match its metadata is refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from envs.decision.features import FEATURE_SCHEMA_VERSION
from service.testing import REPO_ROOT, ServiceProcess

from tests.helpers import needs_service, run_main

httpx = pytest.importorskip("httpx")
pytest.importorskip("onnxruntime")
pytest.importorskip("agents.policy_file")
needs_service()
from test_policy import (  # tests/ is on sys.path
    SMALL_POLICY,
    make_env,
    make_model,
    spread_score_head,
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[object, Path]:
    """A tiny MaskablePPO model (score head spread so that logits differ widely) and its export."""
    root = tmp_path_factory.mktemp("model")
    model = make_model(policy_kwargs=dict(SMALL_POLICY, feature_schema_version=FEATURE_SCHEMA_VERSION))
    spread_score_head(model.policy)
    model.save(root / "model.zip")
    out = root / "export"
    r = export_in_process(root / "model.zip", "--out", out)
    assert r.returncode == 0, r.stderr
    return model, out


@pytest.fixture(scope="module")
def served(exported):
    """One service process for the module's exported model, on h100-4node."""
    _, out = exported
    with ServiceProcess(["--model", str(out), "--cluster", "h100-4node"]) as svc:
        yield svc


def export_in_process(*args):
    """agents.export's `main` with this command line, in this process (tests/test_export.py runs
    the real command)."""
    from agents.export import main

    return run_main(main, args)


def test_served_choice_equals_the_torch_models_deterministic_action(exported, served):
    model, out = exported
    env = make_env(queue_window=8)
    obs, _ = env.reset(seed=5)
    compared = placements = 0
    with httpx.Client(base_url=served.url, timeout=30) as c:
        info = c.get("/v1/info").json()
        assert info["policy"].startswith("onnx:") and info["torch_imported"] is False
        assert info["model"]["feature_schema_version"] == FEATURE_SCHEMA_VERSION
        for _ in range(60):
            mask = env.unwrapped.action_masks()
            action, _ = model.predict(obs, deterministic=True, action_masks=mask)
            action = int(action)
            state = env.unwrapped.state
            body = c.post("/v1/score", json={"state": state.to_dict(), "queue_window": 8}).json()
            assert body["policy"] == info["policy"] and body["fallback"] is False
            ranked = sorted(body["candidates"] + ([dict(body["wait"], index=len(mask) - 1)] if body["wait"]["valid"] else []),
                            key=lambda x: x["rank"])
            assert ranked[0]["index"] == action, (ranked[:3], action)
            probs = [x["probability"] for x in ranked]
            assert probs == sorted(probs, reverse=True) and sum(probs) == pytest.approx(1.0, abs=1e-6)
            compared += 1
            placements += action != len(mask) - 1
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                obs, _ = env.reset()
        text = c.get("/metrics").text
        assert f'policy="{info["policy"]}"' in text and "sha256=" in text
    assert compared == 60 and placements >= 10


def _refusal(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service", "--model", str(directory), "--cluster", "h100-4node", "--port", "1"],
                          cwd=REPO_ROOT, check=False, capture_output=True, text=True, timeout=120)


def test_a_model_whose_checksum_or_schema_does_not_match_refuses_to_load(exported, tmp_path):
    _, out = exported
    tampered = tmp_path / "tampered"
    shutil.copytree(out, tampered)
    with open(tampered / "policy.onnx", "ab") as f:
        f.write(b"\0")
    r = _refusal(tampered)
    assert r.returncode == 2 and "sha256" in r.stderr and "does not match" in r.stderr, r.stderr

    old = tmp_path / "old-schema"
    shutil.copytree(out, old)
    meta = json.loads((old / "policy.json").read_text())
    meta["feature_schema_version"] = FEATURE_SCHEMA_VERSION - 1
    (old / "policy.json").write_text(json.dumps(meta))
    r = _refusal(old)
    assert r.returncode == 2 and "feature_schema_version" in r.stderr, r.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    r = _refusal(empty)
    assert r.returncode == 2 and "policy.json" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_logits_give_softmax_probabilities_and_distinct_scores(served):
    state = {"time_s": 10.0, "queued": [{"id": f"j{k}", "num_gpus": g, "tp_degree": 1, "estimate_s": 600.0 * (k + 1)}
                                          for k, g in enumerate([1, 2, 4, 8])]}
    with httpx.Client(base_url=served.url) as c:
        body = c.post("/v1/score", json={"state": state}).json()
    scores = np.array([x["score"] for x in body["candidates"]])
    probs = np.array([x["probability"] for x in body["candidates"]])
    assert np.all(np.diff(scores) <= 0)
    np.testing.assert_allclose(probs, np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum(), rtol=1e-6)
    assert body["wait"]["valid"] is False and body["wait"]["rank"] is None


def test_an_anchored_model_is_served_with_its_anchor(exported, tmp_path):
    """policy.json's anchor (agents.anchor) is applied by the service: at an infinite margin every
    served choice is the anchor baseline's, also where the model's own choice differs."""
    from baselines import make_baseline

    model, out = exported
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(out.parent / "model.zip", run / "model.zip")
    (run / "config.yaml").write_text("cluster: h100-4node\n")
    (run / "anchor.json").write_text(json.dumps({"model": "model.zip", "baseline": "sect", "margin": "inf"}))
    r = export_in_process(str(run / "model.zip"), "--anchor", "--no-check")
    assert r.returncode == 0 and "anchored to sect at margin inf" in r.stdout, r.stderr
    assert json.loads((run / "export" / "policy.json").read_text())["anchor"] == {"baseline": "sect", "margin": "inf"}
    sect = make_baseline("sect")
    env = make_env(queue_window=8)
    obs, _ = env.reset(seed=5)
    differs = 0
    with ServiceProcess(["--model", str(run / "export"), "--cluster", "h100-4node"]) as svc, httpx.Client(base_url=svc.url, timeout=30) as c:
        info = c.get("/v1/info").json()
        assert info["anchor"] == {"baseline": "sect", "margin": "inf"} and info["torch_imported"] is False
        for _ in range(40):
            u = env.unwrapped
            mask = u.action_masks()
            own = int(model.predict(obs, deterministic=True, action_masks=mask)[0])
            choice = int(sect.select(u.cset.state, u.cset))
            body = c.post("/v1/score", json={"state": u.state.to_dict(), "queue_window": 8}).json()
            assert body["fallback"] is False
            ranked = sorted(body["candidates"] + ([dict(body["wait"], index=len(mask) - 1)] if body["wait"]["valid"] else []),
                            key=lambda x: x["rank"])
            assert ranked[0]["index"] == choice
            differs += own != choice
            obs, _, terminated, truncated, _ = env.step(choice)
            if terminated or truncated:
                obs, _ = env.reset()
    assert differs >= 5  # the anchor, not the model, made those choices

    bad = tmp_path / "bad"
    shutil.copytree(run / "export", bad)
    meta = json.loads((bad / "policy.json").read_text())
    meta["anchor"] = {"baseline": "sect", "margin": -1}
    (bad / "policy.json").write_text(json.dumps(meta))
    r = _refusal(bad)
    assert r.returncode == 2 and "anchor.margin" in r.stderr and "Traceback" not in r.stderr, r.stderr

    # An anchor chosen for deploying on another scenario (agents.anchor --scenario) is exported
    # from its file; one chosen for another of the run's models is refused, nothing written.
    (run / "anchor-philly.json").write_text(json.dumps({"model": "model.zip", "scenario": "philly", "baseline": "sjf",
                                                         "margin": 2.0}))
    r = export_in_process(str(run / "model.zip"), "--out", str(tmp_path / "philly"), "--anchor", str(run / "anchor-philly.json"),
                          "--no-check")
    assert r.returncode == 0 and "anchored to sjf at margin 2.0" in r.stdout, r.stderr
    assert json.loads((tmp_path / "philly" / "policy.json").read_text())["anchor"] == {"baseline": "sjf", "margin": 2.0}
    # A bound on WAIT chosen with the margin (agents.anchor --wait-guards) is what policy.json
    # records, unless --wait-guard says otherwise.
    guard = {"overdue_factor": 2.0, "min_wait_s": 600.0}
    (run / "anchor-philly.json").write_text(json.dumps({"model": "model.zip", "scenario": "philly", "baseline": "sjf",
                                                         "margin": 2.0, "wait_guard": guard}))
    for extra, expect in (([], guard), (["--wait-guard", "off"], None)):
        r = export_in_process(str(run / "model.zip"), "--out", str(tmp_path / "guarded"),
                              "--anchor", str(run / "anchor-philly.json"), "--no-check", *extra)
        assert r.returncode == 0, r.stderr
        assert json.loads((tmp_path / "guarded" / "policy.json").read_text())["wait_guard"] == expect
    (run / "anchor-philly.json").write_text(json.dumps({"model": "stages/other.zip", "baseline": "sjf", "margin": 2.0}))
    r = export_in_process(str(run / "model.zip"), "--out", str(tmp_path / "other"),
                          "--anchor", str(run / "anchor-philly.json"), "--no-check")
    assert r.returncode == 2 and "the margin was chosen for" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "other").exists()
