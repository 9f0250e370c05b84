"""The scoring core of the service: a decision state in, ranked candidates out. No HTTP here.

Contract:
* Candidates, the mask and the features come from the project's own decision-state code
  (`envs.decision.candidates.build_candidates`, `envs.decision.features.candidate_features`), never a copy, so the
  service ranks exactly the actions the env offers a policy and a baseline. On the compiled path
  the native core works out the valid candidates' placements in one call (`Scorer.candidates`)
  and a model's features (`Scorer.features`), bit for bit the same (tests/test_service_native.py). `Scorer.wait_guard`
  is the bound on WAIT those masks apply (`build_candidates(..., wait_guard=scorer.wait_guard)`):
  the model's policy.json `wait_guard` unless the service was given another.
* `Scorer.decide(state, cset)` ranks the valid candidates:
  - with an exported model (`OnnxPolicy`): by the model's logits; probabilities are the softmax
    of the logits over the valid candidates (WAIT included when valid). The model's choice is
    the arg-max, the same as `MaskablePPO.predict(..., deterministic=True)` on the env. With
    an anchor (policy.json's `anchor`, agents.anchor) the choice is
    `agents.anchor_rule.anchored_choice` of the logits and the anchor baseline's choice, ranked first;
    the others follow by logit.
  - with the planner (`agents.lookahead.StatePlanner`, `python -m service --policy lookahead`):
    the honest lookahead's choice on the state is ranked first with score 1 and probability 1,
    the others follow as for a baseline. When the search fails or runs past its time budget
    the decision falls back to the baseline, as when inference fails.
  - with a baseline (no model, or inference failed): the baseline's choice (`select`) is ranked
    first with score 1 and probability 1; every other valid candidate follows in candidate
    order with score 0 and probability 0.
  When inference or the planner fails (an exception, a wrong shape, a non-finite logit, a
  search past its budget) the decision falls back to the baseline, `Decision.fallback` is true and `Scorer.on_fallback` is called (the service
  counts fallbacks in its metrics).
* `restrict` (a bool mask over the candidates) limits the ranking to some valid candidates, e.g.
  one job's placements for the Kubernetes extender; the model still sees the full mask, a
  baseline selects among the restricted ones.
* `describe(state, cset, decision)` writes the JSON form of `POST /v1/score` (docs/service.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.anchor_rule import anchored_choice
from baselines import make_baseline
from envs.core import jit as _jit
from envs.decision.candidates import CandidateSet, WaitGuard, build_candidates, placed_natively
from envs.decision.features import FEATURE_SCHEMA_VERSION, candidate_features, ensure_native_schema, native_candidate_features
from envs.decision.placement import RULES
from envs.decision.state import ClusterState

log = logging.getLogger("gangsched.service")


@dataclass
class Decision:
    order: list[int]  # candidate indices, best first (valid, and within `restrict` when given)
    scores: np.ndarray  # (K,) float64: logits (model) or 1/0 (baseline); -inf where not ranked
    probabilities: np.ndarray  # (K,) float64, 0 where not ranked
    policy: str  # "onnx:<sha256 prefix>", "planner:lookahead" or "baseline:<name>"
    fallback: bool = False
    value: float | None = None  # the model's value estimate (None for a baseline)
    reason: str = ""  # why a fallback happened

    @property
    def choice(self) -> int | None:
        return self.order[0] if self.order else None


@dataclass
class ModelInfo:
    directory: str
    sha256: str
    feature_schema_version: int
    queue_window: int | None
    metadata: dict = field(default_factory=dict)
    wait_guard: WaitGuard | None = None  # policy.json's: the bound on WAIT the model's masks apply
    anchor: Any = None  # policy.json's: agents.anchor_rule.Anchor its decisions apply, or None


class PolicyLoadError(RuntimeError):
    """A model directory that cannot be served; the message says why (checksum, schema, files)."""


def load_onnx_policy(directory: str | Path) -> tuple[Any, ModelInfo]:
    """Load an exported policy through `agents.policy_file` (torch-free): checks policy.json's
    sha256 of policy.onnx and the feature schema version against this code's. Raises
    PolicyLoadError with a clear message."""
    try:
        from agents.policy_file import (
            OnnxPolicy,
            PolicyFileError,
            load_policy_metadata,
            policy_anchor,
            policy_wait_guard,
        )
    except ImportError as e:  # the export module is missing in this checkout
        raise PolicyLoadError(f"cannot load models: agents.policy_file is unavailable ({e})") from None
    d = Path(directory)
    if not d.is_dir():
        raise PolicyLoadError(f"--model {d}: not a directory (expected an export dir with policy.onnx and policy.json)")
    try:
        meta = load_policy_metadata(d)
        policy = OnnxPolicy(d)
    except (PolicyFileError, ValueError, OSError) as e:
        raise PolicyLoadError(f"--model {d}: refused: {e}") from None
    version = meta.get("feature_schema_version")
    if version != FEATURE_SCHEMA_VERSION:  # policy_file checks it too; the service never serves another schema
        raise PolicyLoadError(f"--model {d}: feature_schema_version {version!r} in policy.json, this code computes "
                              f"version {FEATURE_SCHEMA_VERSION}: re-export a model trained on this schema")
    sha = str(meta.get("onnx_sha256", ""))
    qw = meta.get("queue_window")
    return policy, ModelInfo(str(d), sha, int(version), int(qw) if isinstance(qw, int) else None, meta, policy_wait_guard(meta),
                             policy_anchor(meta))


def _softmax_over(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    p = np.zeros(len(scores))
    if allowed.any():
        s = scores[allowed]
        e = np.exp(s - s.max())
        p[allowed] = e / e.sum()
    return p


class Scorer:
    """Ranks candidate sets with a model (onnxruntime), the planner or a baseline; see the module
    docstring. `planner` (an `agents.lookahead.StatePlanner`) excludes `model`; it searches the
    masks this scorer ranks (its `wait_guard` is set to the scorer's)."""

    _MODEL_GUARD: Any = object()

    def __init__(self, baseline: str = "sect", model: Any = None, model_info: ModelInfo | None = None,
                 on_fallback: Callable[[str], None] | None = None, wait_guard: WaitGuard | None = _MODEL_GUARD,
                 planner: Any = None):
        if planner is not None and model is not None:
            raise ValueError("a scorer serves a model or the planner, not both")
        self.baseline_name = baseline
        self.baseline = make_baseline(baseline)
        self.model = model
        self.model_info = model_info
        self.on_fallback = on_fallback or (lambda reason: None)
        # The bound on WAIT of the masks this scorer ranks: given, else the model's (policy.json), else none.
        if wait_guard is Scorer._MODEL_GUARD:
            wait_guard = model_info.wait_guard if model_info is not None else None
        self.wait_guard: WaitGuard | None = wait_guard
        self.anchor = model_info.anchor if model is not None and model_info is not None else None
        self.anchor_rule = make_baseline(self.anchor.baseline) if self.anchor is not None else None
        self.planner = planner
        if planner is not None:
            planner.wait_guard = self.wait_guard
        if model is not None and _jit.ENABLED:
            ensure_native_schema()  # the core's feature columns are the schema's, else RuntimeError at start-up

    @property
    def policy_name(self) -> str:
        if self.model is not None and self.model_info is not None:
            return f"onnx:{self.model_info.sha256[:16]}"
        if self.planner is not None:
            return "planner:lookahead"
        return f"baseline:{self.baseline_name}"

    def candidates(self, state: ClusterState, queue_window: int) -> CandidateSet:
        """`build_candidates(state, queue_window, wait_guard=self.wait_guard)`, for an answer that
        lists every valid candidate. On the compiled path, where a preempting candidate is valid,
        every valid candidate's placement is worked out by the native core in one call
        (`envs.decision.candidates.placed_natively`, bit for bit the same): choosing victims in Python is
        most of a large cluster's decision, and it is new for each state. Otherwise (and with
        GANGSCHED_JIT=0) each placement is worked out in Python on first access, where the
        placement rules' per-cluster memos answer a free-GPU placement seen before in less time
        than the native call takes."""
        cset = build_candidates(state, queue_window, wait_guard=self.wait_guard)
        return placed_natively(cset) if _jit.ENABLED and cset.valid_placements(preempting=True) else cset

    @staticmethod
    def features(cset: CandidateSet) -> tuple[np.ndarray, np.ndarray]:
        """The features the model scores: `envs.decision.features.candidate_features(cset)`, computed by the
        native core (`native_candidate_features`, bit for bit the same arrays) on the compiled
        path, by the plain-Python reference with GANGSCHED_JIT=0."""
        return native_candidate_features(cset) if _jit.ENABLED else candidate_features(cset)

    def _infer(self, cset: CandidateSet) -> tuple[np.ndarray, float | None]:
        feats, glob = self.features(cset)
        K = len(cset.candidates)
        out = self.model.score(feats[None], glob[None], cset.mask[None])
        logits, value = out[0], out[1] if len(out) > 1 else None
        logits = np.asarray(logits, dtype=np.float64).reshape(-1)
        if logits.shape != (K,):
            raise ValueError(f"the model returned {logits.shape[0]} logits for {K} candidates")
        if not np.isfinite(logits[cset.mask]).all():
            raise ValueError("the model returned a non-finite logit for a valid candidate")
        v = None if value is None else float(np.asarray(value, dtype=np.float64).reshape(-1)[0])
        return logits, v

    def decide(self, state: ClusterState, cset: CandidateSet, restrict: np.ndarray | None = None) -> Decision:
        mask = cset.mask if restrict is None else cset.mask & restrict
        K = len(cset.candidates)
        if not mask.any():
            return Decision([], np.full(K, -np.inf), np.zeros(K), self.policy_name)
        view = cset if restrict is None else CandidateSet(cset.state, cset.window, cset.candidates, mask)  # what a rule picks from
        reason = ""
        if self.model is not None:
            try:
                logits, value = self._infer(cset)
                scores = np.where(mask, logits, -np.inf)
                idx = np.flatnonzero(mask)
                order = idx[np.argsort(-logits[idx], kind="stable")].tolist()
                if self.anchor is not None:
                    choice = anchored_choice(logits, mask, int(self.anchor_rule.select(state, view)), self.anchor.margin)
                    order = [choice] + [i for i in order if i != choice]
                return Decision(order, scores, _softmax_over(logits, mask), self.policy_name, value=value)
            except Exception as e:  # noqa: BLE001 - inference must never take the service down: fall back, count it
                reason = f"{type(e).__name__}: {e}"
                log.warning("inference failed, falling back to baseline %s: %s", self.baseline_name, reason)
                self.on_fallback(type(e).__name__)
        elif self.planner is not None:
            try:
                choice = self.planner.choose(state, cset, restrict)
                return self._ranked_first(choice, mask, self.policy_name)
            except Exception as e:  # noqa: BLE001 - a failed search must never take the service down: fall back, count it
                reason = f"{type(e).__name__}: {e}"
                log.warning("the planner failed, falling back to baseline %s: %s", self.baseline_name, reason)
                self.on_fallback(type(e).__name__)
        choice = int(self.baseline.select(state, view))
        if not mask[choice]:  # a baseline never picks an invalid candidate; guard the restricted view anyway
            choice = int(np.flatnonzero(mask)[0])
        decision = self._ranked_first(choice, mask, f"baseline:{self.baseline_name}")
        decision.fallback = self.model is not None or self.planner is not None
        decision.reason = reason
        return decision

    @staticmethod
    def _ranked_first(choice: int, mask: np.ndarray, policy: str) -> Decision:
        """`choice` first with score 1 and probability 1, the other valid candidates after it in
        candidate order with score 0."""
        if not mask[choice]:
            raise ValueError(f"candidate {choice} is not among the valid ones")
        order = [choice] + [i for i in np.flatnonzero(mask).tolist() if i != choice]
        scores = np.where(mask, 0.0, -np.inf)
        scores[choice] = 1.0
        probs = np.zeros(len(mask))
        probs[choice] = 1.0
        return Decision(order, scores, probs, policy)


# ---------------------------------------------------------------------- JSON form


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def placement_of(state: ClusterState, gpus: np.ndarray | None) -> dict:
    """Node names, global GPU ids and local GPU indices per node of a placement."""
    if gpus is None:
        return {"nodes": [], "gpus": [], "gpus_by_node": {}}
    c = state.cluster
    by_node: dict[str, list[int]] = {}
    for g in gpus.tolist():
        by_node.setdefault(c.node_names[int(c.gpu_node[g])], []).append(int(c.gpu_local[g]))
    return {"nodes": list(by_node), "gpus": [int(g) for g in gpus.tolist()], "gpus_by_node": by_node}


def describe_candidate(state: ClusterState, cset: CandidateSet, decision: Decision, i: int, rank: int) -> dict:
    cd = cset.candidates[i]
    victims = list(cd.victims)
    cost = float(state.preemption_cost_gpu_s(np.array(victims, dtype=np.int64)).sum()) if victims else 0.0
    out = {"rank": rank, "index": i, "job_id": state.name_of(cd.job_id), "rule": RULES[cd.rule]}
    out.update(placement_of(state, cd.gpus))
    out.update({"victims": [state.name_of(v) for v in victims], "checkpoint_cost_gpu_s": cost,
                "score": _finite(decision.scores[i]), "probability": float(decision.probabilities[i])})
    return out


def describe(state: ClusterState, cset: CandidateSet, decision: Decision) -> dict:
    """The response of POST /v1/score: ranks over every valid action (WAIT included), the
    placements in `candidates`, WAIT in `wait`."""
    w = cset.wait_index
    ranked = []
    wait = {"valid": bool(cset.mask[w]), "rank": None, "score": None, "probability": 0.0}
    for rank, i in enumerate(decision.order, start=1):
        if i == w:
            wait.update(rank=rank, score=_finite(decision.scores[i]), probability=float(decision.probabilities[i]))
        else:
            ranked.append(describe_candidate(state, cset, decision, i, rank))
    return {
        "policy": decision.policy,
        "fallback": decision.fallback,
        "queue_window": (len(cset.candidates) - 1) // len(RULES),
        "window": [state.name_of(j) for j in cset.window],
        "candidates": ranked,
        "wait": wait,
        "value": decision.value,
    }
