"""`POST /v1/score` on the native core against the plain-Python reference: the same answers.

On the compiled path the service works out the placements of a request's valid candidates in
one native call (`Scorer.candidates`: `envs.decision.candidates.placed_natively`) and a model's features
with the native core (`Scorer.features`: `envs.decision.features.native_candidate_features`). Two real
service processes on 127.0.0.1 serve the shipped model `models/generalist`, one as it runs in
production and one on the plain-Python reference (`GANGSCHED_JIT=0`: each placement by
envs.decision.placement, `candidate_features`' Python blocks, sect's Python loop for the anchor); every
state of random-action episodes (victims, checkpointing and reserved jobs, invalid WAITs
included) gets the same answer text from both:
ranks, candidates, GPUs, victims, logits, probabilities and value. In process, the scorer's
features of the same states are the reference's bit for bit, and a served answer is the one the
reference's own objects give (`Scorer.decide` and `describe` under `envs.core.jit.reference_path`).
"""

from __future__ import annotations

import json
import shutil
import urllib.request

import numpy as np
import pytest

from envs.cluster.config import load_cluster
from envs.core import jit as _jit
from envs.decision.candidates import build_candidates
from envs.decision.features import candidate_features
from envs.decision.state import ClusterState
from service.testing import REPO_ROOT, ServiceProcess

from tests.helpers import needs_compiled, needs_service

needs_service()
pytest.importorskip("onnxruntime")
pytest.importorskip("agents.policy_file")
from test_native_features import episode_states  # tests/ is on sys.path  # noqa: E402

MODEL = REPO_ROOT / "models" / "generalist"
EVERY = 3  # every third decision of an episode


def states_of(scenario: str, steps: int, seed: int, num_jobs: int = 100) -> list[dict]:
    """Plain-data states of a random-action episode (preempting often), every EVERY-th decision."""
    out = []
    for k, (_, cset) in enumerate(episode_states(scenario, steps, seed=seed, num_jobs=num_jobs)):
        if k % EVERY == 0:
            out.append(cset.state.to_dict())
    return out


def post(port: int, body: bytes) -> bytes:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/score", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
        return r.read()


def unrestricted_model(tmp_path) -> str:
    """models/generalist without its `clusters` list, so that it is served on any cluster."""
    out = tmp_path / "generalist-any"
    out.mkdir()
    shutil.copy(MODEL / "policy.onnx", out / "policy.onnx")
    meta = json.loads((MODEL / "policy.json").read_text())
    meta.pop("clusters", None)
    (out / "policy.json").write_text(json.dumps(meta))
    return str(out)


def coverage_of(states: list[dict]) -> dict:
    return {"reserved": sum(bool(s.get("reserved")) for s in states),
            "checkpointing": sum(bool(s.get("checkpointing")) for s in states),
            "queued": sum(bool(s.get("queued")) for s in states)}


@pytest.mark.parametrize("scenario,cluster,steps,num_jobs", [("default", "mixed-64gpu", 240, 100),
                                                             ("hetero", "hetero-64gpu", 150, 100),
                                                             ("large", "h100-1024gpu", 700, 600)])
def test_native_answers_are_the_reference_answers(scenario, cluster, steps, num_jobs, tmp_path):
    model = str(MODEL) if cluster != "h100-1024gpu" else unrestricted_model(tmp_path)
    states = states_of(scenario, steps, seed=7, num_jobs=num_jobs)
    assert len(states) >= steps // EVERY
    args = ["--model", model, "--cluster", cluster]
    victims = placements = 0
    with ServiceProcess(args, startup_timeout_s=180.0) as native, \
            ServiceProcess(args, env={"GANGSCHED_JIT": "0"}, startup_timeout_s=180.0) as reference:
        assert native.get("/v1/info")[1]["policy"].startswith("onnx:")
        assert reference.get("/v1/info")[1]["policy"] == native.get("/v1/info")[1]["policy"]
        for state in states:
            body = json.dumps({"state": state}).encode()
            mine, ref = post(native.port, body), post(reference.port, body)
            assert mine == ref, (state["time_s"], json.loads(mine), json.loads(ref))
            answer = json.loads(mine)
            assert not answer["fallback"]
            placements += len(answer["candidates"])
            victims += sum(bool(c["victims"]) for c in answer["candidates"])
    assert placements > len(states) and victims > 0, (placements, victims)
    cover = coverage_of(states)
    assert cover["queued"] > len(states) // 2, cover
    if scenario == "default":
        assert cover["reserved"] and cover["checkpointing"], cover


@needs_compiled()
def test_the_scorers_features_are_the_references_in_process():
    """Scorer.features (the native core) against candidate_features on the plain-Python path, bit
    for bit, on states rebuilt from plain data; and the answer of the native path (its candidates
    by Scorer.candidates) is the one the reference's own objects give (build_candidates, each
    placement in Python)."""
    from agents.policy_file import OnnxPolicy  # noqa: F401 - onnxruntime present (importorskip above)
    from service.scoring import Scorer, describe, load_onnx_policy

    cluster = load_cluster("mixed-64gpu")
    policy, info = load_onnx_policy(MODEL)
    scorer = Scorer("sect", policy, info)
    n = with_victims = native = 0
    for state in states_of("slo-preempt", 150, seed=11) + states_of("default", 90, seed=3):
        assert _jit.ENABLED
        st = ClusterState.from_dict(state, cluster)
        cset = scorer.candidates(st, 8)
        placed_by_core = type(cset.candidates._placer).__name__ == "_Placed"  # envs.decision.candidates.placed_natively's
        assert placed_by_core == bool(cset.valid_placements(preempting=True))
        native += placed_by_core
        feats, glob = scorer.features(cset)
        answer = describe(st, cset, scorer.decide(st, cset))
        with _jit.reference_path():
            st_ref = ClusterState.from_dict(state, cluster)
            cset_ref = build_candidates(st_ref, 8, wait_guard=scorer.wait_guard)
            ref_feats, ref_glob = candidate_features(cset_ref)
            assert scorer.features(cset_ref)[0] is not feats  # the reference path's own computation
            ref_answer = describe(st_ref, cset_ref, scorer.decide(st_ref, cset_ref))
        assert feats.dtype == ref_feats.dtype == np.float32 and glob.dtype == ref_glob.dtype == np.float32
        assert np.array_equal(feats, ref_feats, equal_nan=True) and np.array_equal(glob, ref_glob, equal_nan=True)
        assert json.dumps(answer) == json.dumps(ref_answer)
        n += 1
        with_victims += any(c["victims"] for c in answer["candidates"])
    assert n >= 80 and with_victims > 0 and native >= with_victims, (n, with_victims, native)
