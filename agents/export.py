"""Export a trained policy for serving: an ONNX graph of its candidate scorer and policy.json.

    python -m agents.export runs/NAME/model.zip [--out DIR] [--wait-guard K|overdue_factor=K,min_wait_s=S|off]
                                                [--anchor [FILE]]      (default DIR: runs/NAME/export)

writes DIR/policy.onnx and DIR/policy.json (see agents/policy_file.py, which reads them without
torch, and docs/export.md). A model trained on another feature schema is refused. train.py
calls `export_model` at the end of every run, into <run dir>/export/. policy.json records the
bound on WAIT (`wait_guard`, envs.decision.candidates.WaitGuard) that the served masks apply: the run's
`env: wait_guard:` by default, or --wait-guard's (a guard added to a model trained without one,
or `off`). With --anchor it also records the anchor to a heuristic that `python -m agents.anchor`
chose for this model (its run's anchor.json, or FILE: an anchor-SCENARIO.json chosen with
--scenario; `anchor`), which the scoring service then applies, and, unless --wait-guard says
otherwise, the bound on WAIT chosen with the margin where the file records one
(`python -m agents.anchor --wait-guards`).

The graph comes from torch's dynamo exporter (`torch.onnx.export(..., dynamo=True)`, which needs
onnxscript): the TorchScript exporter (`dynamo=False`, deprecated since torch 2.9) traces
nn.MultiheadAttention's reshapes with the example's K as a constant, so its graph fails on any
other K; the dynamo exporter keeps B and K symbolic. Torch is imported inside the functions only,
so `import agents.export` stays light.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agents.policy_file import (
    FORMAT,
    FORMAT_VERSION,
    INPUT_NAMES,
    MASKED_LOGIT,
    METADATA_FILE,
    ONNX_FILE,
    OUTPUT_NAMES,
    PolicyFileError,
    sha256_file,
)
from agents.run_dir import deployed_wait_guard, model_run_dir, read_anchor, run_config_wait_guard

# The opset the dynamo exporter emits natively in torch 2.13; asking it for 17 makes it try
# onnx's version converter, which fails on this graph and keeps 18 anyway.
OPSET = 18
CHECK_TOLERANCE = 1e-4  # max abs difference between torch and onnxruntime in the post-export check
REPO_ROOT = Path(__file__).resolve().parent.parent


def _git_commit(run_dir: Path | None) -> str | None:
    """The run's commit from its version.json, else this checkout's HEAD, else None."""
    if run_dir is not None and (run_dir / "version.json").is_file():
        try:
            commit = json.loads((run_dir / "version.json").read_text()).get("commit")
        except (json.JSONDecodeError, OSError, AttributeError):
            commit = None
        return commit if commit and commit != "unknown" else None
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (r.stdout.strip() or None) if r.returncode == 0 else None


def _serving_graph(scorer):
    """The scorer with the policy's masking applied and the value squeezed: what is exported."""
    import torch as th

    class ServingGraph(th.nn.Module):
        def __init__(self, scorer: th.nn.Module):
            super().__init__()
            self.scorer = scorer

        def forward(self, candidates: th.Tensor, global_features: th.Tensor, mask: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
            logits, value = self.scorer.forward_dense(candidates, global_features, mask)  # packed or not: a fixed-shape graph
            # As CandidateScoringPolicy._distribution -> MaskableCategoricalDistribution.apply_masking.
            masked = th.where(mask, logits, th.full_like(logits, MASKED_LOGIT))
            return masked, value.squeeze(-1)

    return ServingGraph(scorer).eval()


def _random_inputs(n_obs: int, n_candidates: int, candidate_dim: int, global_dim: int, seed: int):
    import torch as th

    gen = th.Generator().manual_seed(seed)
    candidates = th.rand(n_obs, n_candidates, candidate_dim, generator=gen) * 2 - 1
    global_features = th.rand(n_obs, global_dim, generator=gen) * 2 - 1
    mask = th.rand(n_obs, n_candidates, generator=gen) < 0.5
    mask[:, -1] = True  # WAIT, always valid in the env
    return candidates, global_features, mask


def _export_onnx(graph, example: tuple, path: Path, opset: int) -> None:
    import logging
    import warnings

    import torch as th

    batch, n_candidates = th.export.Dim("batch"), th.export.Dim("num_candidates")
    fastpath = th.backends.mha.get_fastpath_enabled()
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    try:
        # The fused inference kernel of nn.TransformerEncoderLayer has no ONNX translation.
        th.backends.mha.set_fastpath_enabled(False)
        quiet.setLevel(logging.ERROR)  # "torchvision is not installed. Skipping torchvision::nms"...
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            th.onnx.export(
                graph,
                example,
                str(path),
                input_names=list(INPUT_NAMES),
                output_names=list(OUTPUT_NAMES),
                opset_version=opset,
                dynamo=True,
                dynamic_shapes={
                    "candidates": {0: batch, 1: n_candidates},
                    "global_features": {0: batch},
                    "mask": {0: batch, 1: n_candidates},
                },
                external_data=False,
                verbose=False,
            )
    finally:
        th.backends.mha.set_fastpath_enabled(fastpath)
        quiet.setLevel(level)


def _check_with_onnxruntime(graph, path: Path, candidate_dim: int, global_dim: int, n_candidates: int) -> dict | None:
    """Torch and onnxruntime on random inputs at the trained K and two others; None without onnxruntime."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    import numpy as np
    import torch as th

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    worst = {"logits": 0.0, "value": 0.0}
    sizes = sorted({n_candidates, 2 * n_candidates - 1, 5})
    for i, k in enumerate(sizes):
        candidates, global_features, mask = _random_inputs(3, k, candidate_dim, global_dim, seed=100 + i)
        with th.no_grad():
            logits, value = graph(candidates, global_features, mask)
        out_logits, out_value = session.run(list(OUTPUT_NAMES), {"candidates": candidates.numpy(), "global": global_features.numpy(), "mask": mask.numpy()})
        worst["logits"] = max(worst["logits"], float(np.abs(out_logits - logits.numpy()).max()))
        worst["value"] = max(worst["value"], float(np.abs(out_value - value.numpy()).max()))
    if max(worst.values()) > CHECK_TOLERANCE:
        raise RuntimeError(f"{path}: onnxruntime and torch differ by {worst} (> {CHECK_TOLERANCE}) on random inputs; the export is wrong")
    return {"num_candidates": sizes, "max_abs_diff": worst}


_FROM_CONFIG: Any = object()


def export_model(model_path: str | Path, out_dir: str | Path, *, opset: int = OPSET, check: bool = True,
                 wait_guard: Any = _FROM_CONFIG, anchor: bool | str | Path = False,
                 clusters: list[str] | None = None) -> dict[str, Any]:
    """Write out_dir/policy.onnx and out_dir/policy.json for the MaskablePPO model at model_path.

    `wait_guard` (a WaitGuard or any form `envs.decision.candidates.wait_guard_of` reads; None: none) is
    recorded in policy.json; by default the run config's `env.wait_guard` (none without one).
    ValueError naming the field for an invalid one, before anything is written. With `anchor`
    True, the run's anchor.json for this model (agents.run_dir.read_anchor; ValueError without
    one) is recorded as policy.json's `anchor`; with an anchor file's path (anchor-SCENARIO.json),
    that file's anchor, which must have been chosen for this model; otherwise `anchor` is null.
    `clusters` (names) records the clusters the policy is deployed on (None: every cluster; with an
    anchor file and no `clusters`, the file's, as agents.deploy writes them). With an anchor and `wait_guard` left to its default, the bound on WAIT is the one the anchor
    file records as chosen with the margin, where it records one.

    Raises ValueError naming the file for a model of another feature schema or policy class
    (FileNotFoundError when there is no such file). With `check` and onnxruntime installed, the
    graph is run beside torch on random inputs of several K (RuntimeError past 1e-4).
    Returns {"onnx", "metadata": paths, "policy": policy.json's content, "check": ...}.
    """
    import yaml

    from agents.policy import CANDIDATES_KEY, CandidateScoringPolicy, load_model
    from envs.cluster.topology import GPU_CATALOGUE
    from envs.decision.candidates import wait_guard_of
    from envs.decision.features import CANDIDATE_FEATURES, FEATURE_SCHEMA_VERSION, GLOBAL_FEATURES
    from envs.decision.placement import RULES

    model_path = Path(model_path)
    if not model_path.is_file() and not Path(f"{model_path}.zip").is_file():
        raise FileNotFoundError(f"{model_path}: no such model file")
    run_dir = model_run_dir(model_path)
    guard = run_config_wait_guard(model_path) if wait_guard is _FROM_CONFIG else wait_guard_of(wait_guard)
    if anchor:
        anchored = model_path if anchor is True else anchor  # as anchored= takes it
        anchor = read_anchor(model_path, None if anchor is True else anchor)
        if wait_guard is _FROM_CONFIG:  # the bound chosen with the margin (agents.anchor --wait-guards), else the run's
            guard = deployed_wait_guard(anchored)
        if clusters is None and anchored is not model_path:  # the clusters agents.deploy chose with it
            from agents.policy_file import policy_clusters

            clusters = policy_clusters(json.loads(Path(anchored).read_text()))
    train_config = yaml.safe_load((run_dir / "config.yaml").read_text()) if run_dir is not None else None
    model = load_model(model_path, device="cpu")  # refuses another feature schema
    policy = model.policy
    if not isinstance(policy, CandidateScoringPolicy):
        raise ValueError(f"{model_path}: policy is {type(policy).__name__}; only CandidateScoringPolicy models can be exported")
    policy.set_training_mode(False)
    scorer = policy.scorer.float()
    n_candidates = int(policy.observation_space[CANDIDATES_KEY].shape[0])
    if (n_candidates - 1) % len(RULES):
        raise ValueError(f"{model_path}: the model has {n_candidates} candidates, not queue_window x {len(RULES)} + 1")

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx_path, meta_path = out_dir / ONNX_FILE, out_dir / METADATA_FILE
    tmp_onnx = out_dir / f".{ONNX_FILE}.tmp"
    graph = _serving_graph(scorer)
    example = _random_inputs(2, n_candidates, policy.candidate_dim, policy.global_dim, seed=0)
    try:
        _export_onnx(graph, example, tmp_onnx, opset)
        import onnx

        proto = onnx.load(str(tmp_onnx))
        onnx.checker.check_model(proto)
        written_opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), opset)
        check_result = _check_with_onnxruntime(graph, tmp_onnx, policy.candidate_dim, policy.global_dim, n_candidates) if check else None
        os.replace(tmp_onnx, onnx_path)
    finally:
        tmp_onnx.unlink(missing_ok=True)

    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "feature_schema_version": int(model.policy_kwargs.get("feature_schema_version", FEATURE_SCHEMA_VERSION)),
        "candidate_features": list(CANDIDATE_FEATURES),
        "global_features": list(GLOBAL_FEATURES),
        "queue_window": (n_candidates - 1) // len(RULES),
        "rules": list(RULES),
        "num_candidates": n_candidates,
        "wait_guard": None if guard is None else guard.to_dict(),
        "anchor": anchor.to_dict() if anchor else None,
        "clusters": None if clusters is None else list(clusters),
        "gpu_types": list(GPU_CATALOGUE),
        "onnx_file": ONNX_FILE,
        "onnx_sha256": sha256_file(onnx_path),
        "opset": int(written_opset),
        "masked_logit": MASKED_LOGIT,
        "train_config": train_config,
        "git_commit": _git_commit(run_dir),
        "source_model": str(model_path),
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    tmp_meta = out_dir / f".{METADATA_FILE}.tmp"
    tmp_meta.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(tmp_meta, meta_path)  # last: a directory with policy.json is complete
    return {"onnx": str(onnx_path), "metadata": str(meta_path), "policy": meta, "check": check_result}


def _parse_guard(text: str):
    from envs.decision.candidates import wait_guard_of

    return wait_guard_of(text, "--wait-guard")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agents.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a saved MaskablePPO model, e.g. runs/NAME/model.zip")
    ap.add_argument("--out", help="output directory (default: export/ beside the model)")
    ap.add_argument("--no-check", action="store_true", help="skip the onnxruntime-vs-torch check on random inputs")
    ap.add_argument("--wait-guard", default=None, metavar="K|overdue_factor=K,min_wait_s=S|off",
                    help="the bound on WAIT recorded in policy.json (default: the run config's env.wait_guard)")
    ap.add_argument("--anchor", nargs="?", const=True, default=False, metavar="FILE",
                    help="record the anchor to a heuristic that python -m agents.anchor chose for this model (its run's "
                         "anchor.json, or FILE: an anchor-SCENARIO.json written with --scenario)")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else Path(args.model).parent / "export"
    try:
        guard = {} if args.wait_guard is None else {"wait_guard": _parse_guard(args.wait_guard)}
        result = export_model(args.model, out, check=not args.no_check, anchor=args.anchor, **guard)
    except (ValueError, FileNotFoundError, PolicyFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    meta = result["policy"]
    guard = meta["wait_guard"]
    print(f"wrote {result['onnx']} and {result['metadata']} (feature schema {meta['feature_schema_version']}, "
          f"trained with K={meta['num_candidates']}, opset {meta['opset']}, "
          f"wait guard {'off' if guard is None else ', '.join(f'{k} {v:g}' for k, v in guard.items())}"
          f"{'' if meta['anchor'] is None else ', anchored to ' + meta['anchor']['baseline'] + ' at margin ' + str(meta['anchor']['margin'])})")
    if result["check"]:
        d = result["check"]["max_abs_diff"]
        print(f"onnxruntime vs torch at K={result['check']['num_candidates']}: max abs diff logits {d['logits']:.1e}, value {d['value']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
