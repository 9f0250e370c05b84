"""An exported policy on disk, read without torch: for the scoring service.

`python -m agents.export` (agents/export.py) writes a directory with two files:

    policy.onnx   the candidate scorer: inputs candidates float32 [B, K, F], global float32 [B, D],
                  mask bool [B, K]; outputs logits float32 [B, K] (invalid candidates at
                  MASKED_LOGIT) and value float32 [B]. B and K are dynamic.
    policy.json   what the graph expects: feature schema version and names, placement rules,
                  the K it was trained with, the bound on WAIT its masks apply (`wait_guard`,
                  envs.decision.candidates.WaitGuard as {overdue_factor, min_wait_s}, or null / absent:
                  none), the anchor to a heuristic the service applies (`anchor`,
                  agents.anchor_rule.Anchor as {baseline, margin}, or null / absent: none), the GPU
                  types the code knew, the sha256 of policy.onnx, the training config and the
                  code version.

`load_policy_metadata(dir)` reads policy.json and refuses a directory that this code cannot
feed correctly (another feature schema, other feature names or rules, a policy.onnx whose bytes
are not those exported, a `wait_guard` or `anchor` that is not valid); `policy_wait_guard(meta)`
is the guard that the service's masks then apply (`build_candidates(..., wait_guard=...)`) and
`policy_anchor(meta)` the anchor its decisions apply, and `policy_clusters(meta)` the clusters it
is deployed on (elsewhere its heuristic decides alone).
`OnnxPolicy(dir)` adds an onnxruntime session. Neither imports torch; docs/export.md has the
details.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from agents.anchor_rule import Anchor
from envs.decision.candidates import WaitGuard, wait_guard_of
from envs.decision.features import CANDIDATE_FEATURES, FEATURE_SCHEMA_VERSION, GLOBAL_FEATURES
from envs.decision.placement import RULES

FORMAT = "gangsched-policy"
FORMAT_VERSION = 1
METADATA_FILE = "policy.json"
ONNX_FILE = "policy.onnx"
INPUT_NAMES = ("candidates", "global", "mask")
OUTPUT_NAMES = ("logits", "value")
# The logit of an invalid candidate: sb3-contrib's MaskableCategoricalDistribution puts masked
# logits at -1e8 (finite, so a softmax over them stays defined); the graph does the same.
MASKED_LOGIT = -1e8
REQUIRED_KEYS = (
    "format", "format_version", "feature_schema_version", "candidate_features", "global_features",
    "queue_window", "rules", "num_candidates", "onnx_file", "onnx_sha256", "opset",
)


class PolicyFileError(ValueError):
    """An exported policy directory that is missing, malformed, or not for this code."""


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _first_difference(name: str, recorded: list, current: tuple) -> str | None:
    """None when equal, else a sentence naming the first differing position."""
    recorded, current = list(recorded), list(current)
    if recorded == current:
        return None
    for i, (a, b) in enumerate(zip(recorded, current)):
        if a != b:
            return f"{name}[{i}] is {a!r} in the file but {b!r} in this code"
    return f"{name} has {len(recorded)} entries in the file but {len(current)} in this code"


def load_policy_metadata(directory: str | Path) -> dict[str, Any]:
    """policy.json of an exported policy directory, checked against this code and policy.onnx.

    Returns the file's fields plus `onnx_path` (the absolute path of the checked graph).
    Raises PolicyFileError naming the file and the mismatch when the directory has no
    policy.json, the file is malformed, its feature schema version, feature names or placement
    rules differ from this code's (envs.decision.features, envs.decision.placement), or policy.onnx is missing or
    its sha256 differs from the one recorded.
    """
    directory = Path(directory)
    meta_path = directory / METADATA_FILE
    if not meta_path.is_file():
        raise PolicyFileError(f"{meta_path}: no such file (not an exported policy directory; write one with python -m agents.export)")
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PolicyFileError(f"{meta_path}: not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise PolicyFileError(f"{meta_path}: not a {FORMAT} file (format is {meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise PolicyFileError(f"{meta_path}: format_version {meta.get('format_version')!r}; this code reads format_version {FORMAT_VERSION}")
    missing = [k for k in REQUIRED_KEYS if k not in meta]
    if missing:
        raise PolicyFileError(f"{meta_path}: missing {', '.join(missing)}")
    version = meta["feature_schema_version"]
    if version != FEATURE_SCHEMA_VERSION:
        raise PolicyFileError(
            f"{meta_path}: feature_schema_version {version!r}, but this code computes feature schema version "
            f"{FEATURE_SCHEMA_VERSION} (envs.decision.features): the policy would misread its inputs; export a model trained with this code"
        )
    for key, current in (("candidate_features", CANDIDATE_FEATURES), ("global_features", GLOBAL_FEATURES), ("rules", RULES)):
        if not isinstance(meta[key], list):
            raise PolicyFileError(f"{meta_path}: {key} must be a list, got {type(meta[key]).__name__}")
        difference = _first_difference(key, meta[key], current)
        if difference:
            raise PolicyFileError(f"{meta_path}: {difference} (feature schema version {FEATURE_SCHEMA_VERSION}); the policy would misread its inputs")
    try:
        policy_wait_guard(meta)
        policy_anchor(meta)
        policy_clusters(meta)
    except ValueError as e:
        raise PolicyFileError(f"{meta_path}: {e}") from None
    onnx_file = meta["onnx_file"]
    if not isinstance(onnx_file, str) or not onnx_file or Path(onnx_file).name != onnx_file:
        raise PolicyFileError(f"{meta_path}: onnx_file must be a file name in the same directory, got {onnx_file!r}")
    onnx_path = directory / onnx_file
    if not onnx_path.is_file():
        raise PolicyFileError(f"{onnx_path}: no such file (named by {meta_path})")
    digest = sha256_file(onnx_path)
    if digest != meta["onnx_sha256"]:
        raise PolicyFileError(
            f"{onnx_path}: sha256 {digest} does not match {meta_path}'s {meta['onnx_sha256']} (the graph was changed or replaced after export)"
        )
    return {**meta, "onnx_path": str(onnx_path.resolve())}


def policy_wait_guard(meta: dict[str, Any]) -> WaitGuard | None:
    """The bound on WAIT recorded in policy.json (`wait_guard`); None when it is absent or null
    (files written before it existed have none). ValueError naming the field when invalid."""
    return wait_guard_of(meta.get("wait_guard"), "wait_guard")


def policy_anchor(meta: dict[str, Any]) -> Anchor | None:
    """The anchor to a heuristic recorded in policy.json (`anchor`, agents.anchor_rule.Anchor); None
    when it is absent or null. ValueError naming the field when invalid."""
    data = meta.get("anchor")
    if data is None:
        return None
    return Anchor.from_dict(data, "anchor")


def policy_clusters(meta: dict[str, Any]) -> list[str] | None:
    """The clusters (by name, envs.cluster.topology.Cluster.name) the policy is deployed on, recorded in
    policy.json (`clusters`, chosen by agents.deploy); None when absent or null: every cluster.
    On any other cluster the deployed policy is its anchor's baseline (or the service's) alone.
    ValueError naming the field when it is not a list of names."""
    clusters = meta.get("clusters")
    if clusters is None:
        return None
    if not isinstance(clusters, list) or not all(isinstance(c, str) and c for c in clusters):
        raise ValueError(f"clusters: must be a list of cluster names or null, got {clusters!r}")
    return list(clusters)


class OnnxPolicy:
    """An exported policy run by onnxruntime on the CPU, one intra-op thread by default.

    `score` takes one observation (candidates (K, F), global (D,), mask (K,)) or a batch
    ((B, K, F), (B, D), (B, K)); K may differ from the K it was trained with.
    """

    def __init__(self, directory: str | Path, intra_op_num_threads: int = 1):
        self.metadata = load_policy_metadata(directory)
        try:
            import onnxruntime as ort
        except ImportError:
            raise ImportError("running an exported policy needs onnxruntime: pip install onnxruntime") from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_num_threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(self.metadata["onnx_path"], sess_options=options, providers=["CPUExecutionProvider"])
        inputs = tuple(i.name for i in self.session.get_inputs())
        outputs = tuple(o.name for o in self.session.get_outputs())
        if inputs != INPUT_NAMES or outputs != OUTPUT_NAMES:
            raise PolicyFileError(f"{self.metadata['onnx_path']}: graph inputs {inputs} and outputs {outputs}; expected {INPUT_NAMES} and {OUTPUT_NAMES}")
        self.num_candidate_features = len(self.metadata["candidate_features"])
        self.num_global_features = len(self.metadata["global_features"])

    def score(self, candidates, global_features, mask) -> tuple[np.ndarray, np.ndarray | float]:
        """-> (logits, value): logits (K,) and a float for one observation, (B, K) and (B,) for
        a batch; invalid candidates' logits are MASKED_LOGIT."""
        c = np.asarray(candidates, dtype=np.float32)
        g = np.asarray(global_features, dtype=np.float32)
        m = np.asarray(mask).astype(bool, copy=False)
        single = c.ndim == 2
        if single:
            c, g, m = c[np.newaxis], g[np.newaxis], m[np.newaxis]
        if c.ndim != 3:
            raise ValueError(f"candidates must have shape (K, F) or (B, K, F); got {np.shape(candidates)}")
        n_obs, n_candidates = c.shape[:2]
        expected = {
            "candidates": (c, (n_obs, n_candidates, self.num_candidate_features)),
            "global": (g, (n_obs, self.num_global_features)),
            "mask": (m, (n_obs, n_candidates)),
        }
        for name, (array, shape) in expected.items():
            if array.shape != shape:
                raise ValueError(f"{name} has shape {array.shape[1:] if single else array.shape}; expected {shape[1:] if single else shape}")
        feed = {name: np.ascontiguousarray(array) for name, (array, _) in expected.items()}
        logits, value = self.session.run(list(OUTPUT_NAMES), feed)
        if single:
            return logits[0], float(value[0])
        return logits, value

    def act(self, candidates, global_features, mask) -> int | np.ndarray:
        """The highest-scoring valid candidate (the torch policy's deterministic action)."""
        logits, _ = self.score(candidates, global_features, mask)
        actions = np.argmax(logits, axis=-1)
        return int(actions) if np.ndim(actions) == 0 else actions
