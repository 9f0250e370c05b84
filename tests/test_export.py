"""agents.export and agents.policy_file: the ONNX export of a trained policy, its metadata, the
checks that refuse a policy this code would feed wrongly, and onnxruntime-vs-torch parity."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
import torch as th
import yaml
from sb3_contrib import MaskablePPO
from stable_baselines3.common.vec_env import DummyVecEnv

from agents.policy import CANDIDATES_KEY, GLOBAL_KEY, MASK_KEY, CandidateScoringPolicy, load_model
from envs.cluster.topology import GPU_CATALOGUE
from envs.decision.features import CANDIDATE_FEATURES, FEATURE_SCHEMA_VERSION, GLOBAL_FEATURES
from envs.decision.placement import RULES
from envs.gym.env import GpuClusterEnv

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from agents.export import _git_commit  # noqa: E402
from agents.policy_file import MASKED_LOGIT, OnnxPolicy, PolicyFileError, load_policy_metadata  # noqa: E402
from agents.run_dir import model_run_dir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
POLICY = dict(d_model=32, n_heads=4, n_layers=2, encoder_hidden=(32,), head_hidden=(32,), value_hidden=(32,))
TRAIN_CONFIG = {"cluster": "h100-4node", "workload": "llm-mix", "env": {"num_jobs": 12, "queue_window": 8}, "policy": {"d_model": 32}}
# (cluster, num_jobs, queue_window, observations): 1,008 observations in all.
PARITY_SETTINGS = [
    (cluster, num_jobs, window, 112)
    for cluster, num_jobs in (("mixed-64gpu", 30), ("h100-4node", 12), ("h100-1024gpu", 40))
    for window in (4, 8, 16)
]


def run_export(*args: str) -> subprocess.CompletedProcess:
    """`python -m agents.export ...` in a subprocess: the real command line (the module's run fixture)."""
    return subprocess.run([sys.executable, "-m", "agents.export", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def export_in_process(*args: str):
    """agents.export's `main(argv)` in this process (tests.helpers.run_main): the same exit code,
    stdout and stderr without a new interpreter importing torch and the exporter again."""
    from agents.export import main
    from tests.helpers import run_main

    return run_main(main, list(args))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A run directory with a briefly trained model (K=41), its config and version, exported by the CLI."""
    run_dir = tmp_path_factory.mktemp("run")
    env = DummyVecEnv([lambda: GpuClusterEnv(cluster="h100-4node", num_jobs=12, queue_window=8)])
    model = MaskablePPO(CandidateScoringPolicy, env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs=dict(POLICY, feature_schema_version=FEATURE_SCHEMA_VERSION))
    model.learn(64)
    with th.no_grad():  # logits that differ clearly between rows, so the argmax comparison means something
        th.nn.init.normal_(model.policy.scorer.score_head[-1].weight, std=0.3)
    model.save(run_dir / "model.zip")
    (run_dir / "config.yaml").write_text(yaml.safe_dump(TRAIN_CONFIG))
    (run_dir / "version.json").write_text(json.dumps({"commit": "0123abcd", "dirty": False}))
    # The same model claiming another feature schema (as a model from older code would).
    model.policy_kwargs = dict(model.policy_kwargs, feature_schema_version=FEATURE_SCHEMA_VERSION - 1)
    model.save(run_dir / "old_schema.zip")

    r = run_export(str(run_dir / "model.zip"), "--out", str(run_dir / "export"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert str(run_dir / "export" / "policy.onnx") in r.stdout
    return run_dir


def collect_observations(cluster: str, num_jobs: int, queue_window: int, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """n decision points of episodes driven by uniformly random valid actions, stacked."""
    env = GpuClusterEnv(cluster=cluster, workload="llm-mix", num_jobs=num_jobs, queue_window=queue_window)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for _ in range(n):
        out.append(obs)
        obs, _, terminated, truncated, _ = env.step(rng.choice(np.flatnonzero(obs[MASK_KEY])))
        if terminated or truncated:
            obs, _ = env.reset()
    return {key: np.stack([o[key] for o in out]) for key in out[0]}


def test_cli_writes_the_graph_and_its_metadata(run: Path) -> None:
    export = run / "export"
    meta = json.loads((export / "policy.json").read_text())
    assert meta["format"] == "gangsched-policy" and meta["format_version"] == 1
    assert meta["feature_schema_version"] == FEATURE_SCHEMA_VERSION
    assert meta["candidate_features"] == list(CANDIDATE_FEATURES) and meta["global_features"] == list(GLOBAL_FEATURES)
    assert meta["rules"] == list(RULES) and meta["gpu_types"] == list(GPU_CATALOGUE)
    assert (meta["queue_window"], meta["num_candidates"]) == (8, 41)
    assert meta["onnx_file"] == "policy.onnx"
    assert meta["onnx_sha256"] == hashlib.sha256((export / "policy.onnx").read_bytes()).hexdigest()
    assert meta["opset"] >= 17 and meta["masked_logit"] == MASKED_LOGIT
    assert meta["train_config"] == TRAIN_CONFIG
    assert meta["git_commit"] == "0123abcd"  # the run's version.json, not this checkout's HEAD
    assert meta["source_model"] == str(run / "model.zip")
    datetime.fromisoformat(meta["exported_at"])

    graph = onnx.load(str(export / "policy.onnx"))
    onnx.checker.check_model(graph)
    assert max(o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")) == meta["opset"]

    def signature(values) -> list:
        return [(v.name, v.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]) for v in values]

    F, D = len(CANDIDATE_FEATURES), len(GLOBAL_FEATURES)
    (_, _, c_shape), (_, _, g_shape), (_, _, m_shape) = inputs = signature(graph.graph.input)
    assert [(name, dtype) for name, dtype, _ in inputs] == [("candidates", onnx.TensorProto.FLOAT), ("global", onnx.TensorProto.FLOAT), ("mask", onnx.TensorProto.BOOL)]
    batch, k = c_shape[:2]
    assert isinstance(batch, str) and isinstance(k, str) and batch != k  # both symbolic
    assert c_shape == [batch, k, F] and g_shape == [batch, D] and m_shape == [batch, k]
    assert signature(graph.graph.output) == [("logits", onnx.TensorProto.FLOAT, [batch, k]), ("value", onnx.TensorProto.FLOAT, [batch])]


def test_onnxruntime_matches_torch_on_1000_observations(run: Path) -> None:
    """Several clusters and queue windows (K = 21, 41, 81 for a policy trained at 41)."""
    model = load_model(run / "model.zip", device="cpu")
    policy = model.policy
    policy.set_training_mode(False)
    served = OnnxPolicy(run / "export")
    worst = {"logits": 0.0, "value": 0.0}
    n_obs = 0
    for i, (cluster, num_jobs, window, n) in enumerate(PARITY_SETTINGS):
        obs = collect_observations(cluster, num_jobs, window, n, seed=i)
        mask = obs[MASK_KEY].astype(bool)
        assert mask.any(axis=1).all()
        logits, value = served.score(obs[CANDIDATES_KEY], obs[GLOBAL_KEY], obs[MASK_KEY])
        assert logits.dtype == np.float32 and logits.shape == mask.shape and value.shape == (n,)

        tensors, _ = policy.obs_to_tensor(obs)
        with th.no_grad():
            torch_logits, torch_value = policy.scorer(tensors[CANDIDATES_KEY].float(), tensors[GLOBAL_KEY].float(), tensors[MASK_KEY].bool())
        torch_logits, torch_value = torch_logits.numpy(), torch_value.numpy()[:, 0]
        torch_actions, _ = policy.predict(obs, deterministic=True)  # the torch policy's own choice

        worst["logits"] = max(worst["logits"], float(np.abs(logits[mask] - torch_logits[mask]).max()))
        worst["value"] = max(worst["value"], float(np.abs(value - torch_value).max()))
        assert (logits[~mask] == np.float32(MASKED_LOGIT)).all()
        np.testing.assert_array_equal(served.act(obs[CANDIDATES_KEY], obs[GLOBAL_KEY], mask), torch_actions, err_msg=f"{cluster} Q={window}")
        assert mask[np.arange(n), torch_actions].all()
        n_obs += n
    assert n_obs >= 1000
    print(f"parity over {n_obs} observations: max abs diff {worst}")
    assert worst["logits"] <= 1e-5 and worst["value"] <= 1e-5, worst


def test_onnx_policy_scores_one_observation(run: Path) -> None:
    served = OnnxPolicy(run / "export")
    obs = collect_observations("h100-4node", 12, 4, 1)
    logits, value = served.score(obs[CANDIDATES_KEY][0], obs[GLOBAL_KEY][0], obs[MASK_KEY][0])
    assert logits.shape == (21,) and isinstance(value, float)
    batch_logits, batch_value = served.score(obs[CANDIDATES_KEY], obs[GLOBAL_KEY], obs[MASK_KEY])
    np.testing.assert_array_equal(logits, batch_logits[0])
    assert value == pytest.approx(float(batch_value[0]))
    with pytest.raises(ValueError, match="global has shape"):
        served.score(obs[CANDIDATES_KEY][0], obs[GLOBAL_KEY][0][:-1], obs[MASK_KEY][0])


def broken_copy(run: Path, tmp_path: Path, edit) -> Path:
    export = tmp_path / "export"
    shutil.copytree(run / "export", export)
    meta = json.loads((export / "policy.json").read_text())
    edit(meta, export)
    (export / "policy.json").write_text(json.dumps(meta))
    return export


def _flip_one_byte(meta: dict, export: Path) -> None:
    data = bytearray((export / "policy.onnx").read_bytes())
    data[len(data) // 2] ^= 0x01
    (export / "policy.onnx").write_bytes(bytes(data))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda meta, _: meta.update(feature_schema_version=FEATURE_SCHEMA_VERSION - 1),
         f"feature_schema_version {FEATURE_SCHEMA_VERSION - 1}, but this code computes feature schema version {FEATURE_SCHEMA_VERSION}"),
        (_flip_one_byte, "policy.onnx: sha256 [0-9a-f]{64} does not match .*policy.json's [0-9a-f]{64}"),
        (lambda meta, _: meta["candidate_features"].__setitem__(3, "kind_tuning"),
         "candidate_features\\[3\\] is 'kind_tuning' in the file but 'kind_finetune' in this code"),
        (lambda meta, _: meta["global_features"].pop(), f"global_features has {len(GLOBAL_FEATURES) - 1} entries in the file but {len(GLOBAL_FEATURES)}"),
        (lambda meta, _: meta["rules"].reverse(), "rules\\[0\\] is 'preempt-las'"),
        (lambda meta, _: meta.update(format_version=2), "format_version 2; this code reads format_version 1"),
        (lambda meta, _: meta.pop("onnx_sha256"), "missing onnx_sha256"),
        (lambda meta, export: (export / "policy.onnx").unlink(), "policy.onnx: no such file"),
    ],
    ids=["schema-version", "sha256", "candidate-name", "global-count", "rules", "format-version", "no-sha", "no-onnx"],
)
def test_load_policy_metadata_refuses_a_mismatch(run: Path, tmp_path: Path, edit, message: str) -> None:
    export = broken_copy(run, tmp_path, edit)
    with pytest.raises(PolicyFileError, match=message) as caught:
        load_policy_metadata(export)
    assert str(export) in str(caught.value)  # names the file
    with pytest.raises(PolicyFileError):
        OnnxPolicy(export)


def test_load_policy_metadata_of_a_directory_without_export(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match="policy.json: no such file"):
        load_policy_metadata(tmp_path)


def test_cli_refuses_a_model_of_another_feature_schema(run: Path, tmp_path: Path) -> None:
    r = export_in_process(str(run / "old_schema.zip"), "--out", str(tmp_path / "out"))
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "old_schema.zip" in r.stderr and f"feature schema version {FEATURE_SCHEMA_VERSION - 1}" in r.stderr
    assert not (tmp_path / "out" / "policy.json").exists()


def test_serving_side_runs_without_torch(run: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import agents, agents.policy_file, agents.export\n"
        "import numpy as np\n"
        "p = agents.policy_file.OnnxPolicy(sys.argv[1])\n"
        "K, F, D = 65, len(p.metadata['candidate_features']), len(p.metadata['global_features'])\n"
        "mask = np.zeros(K, bool); mask[[2, K - 1]] = True\n"
        "logits, value = p.score(np.zeros((K, F), np.float32), np.zeros(D, np.float32), mask)\n"
        "assert p.act(np.zeros((K, F)), np.zeros(D), mask) in (2, K - 1) and np.isfinite(value)\n"
        "assert 'torch' not in {m.split('.')[0] for m, v in sys.modules.items() if v is not None}\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(run / "export")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]


def test_metadata_outside_a_run_directory(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "config.yaml").write_text("cluster: x\n")
    assert model_run_dir(tmp_path / "checkpoints" / "latest.zip") == tmp_path
    assert model_run_dir(tmp_path / "checkpoints" / "model.zip") == tmp_path
    assert model_run_dir(tmp_path / "stages" / "03-ppo-40000.zip") == tmp_path  # every evaluated stage
    assert model_run_dir(tmp_path / "distill" / "student-r0.zip") == tmp_path  # each round's student
    assert model_run_dir(tmp_path / "other" / "model.zip") is None
    assert model_run_dir(tmp_path.parent / "model.zip") is None


def _head_from_git_files(repo: Path) -> str | None:
    """This checkout's HEAD read from the files git keeps (HEAD, the loose ref, packed-refs), not
    through git: the expected value of `_git_commit(None)`, whose implementation asks git."""
    git = repo / ".git"
    if git.is_file():  # a worktree: "gitdir: <path>", whose commondir file names the shared one
        git = (repo / git.read_text().split("gitdir:", 1)[1].strip()).resolve()
    common = (git / (git / "commondir").read_text().strip()).resolve() if (git / "commondir").is_file() else git
    head = (git / "HEAD").read_text().strip()
    if not head.startswith("ref:"):
        return head  # a detached HEAD holds the commit itself
    ref = head.split(":", 1)[1].strip()
    for d in (git, common):
        if (d / ref).is_file():
            return (d / ref).read_text().strip()
    packed = common / "packed-refs"
    for line in packed.read_text().splitlines() if packed.is_file() else []:
        if line.endswith(" " + ref):
            return line.split()[0]
    return None  # a branch with no commit yet


def test_git_commit_is_the_runs_then_the_checkouts_then_none(tmp_path: Path, monkeypatch) -> None:
    """policy.json's git_commit (agents.export docstring): the run's commit from its version.json,
    else this checkout's HEAD, else None; a run recorded as "unknown" or an unreadable
    version.json gives None, not the checkout's HEAD (the export is not of this checkout's code)."""
    import agents.export as export

    head = _head_from_git_files(REPO)
    assert head is not None and len(head) == 40 and int(head, 16) >= 0
    assert _git_commit(None) == head
    assert _git_commit(tmp_path) == head  # a run folder without version.json: this checkout
    run = tmp_path / "run"
    run.mkdir()
    (run / "version.json").write_text(json.dumps({"commit": "0123abcd" * 5, "dirty": True}))
    assert _git_commit(run) == "0123abcd" * 5  # the run's, though this checkout's HEAD differs
    for text in ('{"commit": "unknown"}', '{"commit": ""}', "{}", "{not json", "[1, 2]"):
        (run / "version.json").write_text(text)
        assert _git_commit(run) is None, text
    # Outside any git checkout (the ceiling keeps git from finding one above the folder): None.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setattr(export, "REPO_ROOT", tmp_path / "run")
    assert _git_commit(None) is None


def test_a_packed_model_exports_the_dense_graph(tmp_path: Path) -> None:
    """A model trained with `packed: true` exports (the fixed-shape dense graph of the same
    weights) and onnxruntime scores as its torch policy does."""
    env = DummyVecEnv([lambda: GpuClusterEnv(cluster="h100-4node", num_jobs=12, queue_window=8)])
    model = MaskablePPO(CandidateScoringPolicy, env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs=dict(POLICY, packed=True, feature_schema_version=FEATURE_SCHEMA_VERSION))
    model.learn(32)
    with th.no_grad():
        th.nn.init.normal_(model.policy.scorer.score_head[-1].weight, std=0.3)
    model.save(tmp_path / "model.zip")
    r = export_in_process(str(tmp_path / "model.zip"), "--out", str(tmp_path / "export"))
    assert r.returncode == 0, r.stderr[-3000:]
    obs = collect_observations("mixed-64gpu", 30, 8, 200)
    mask = obs[MASK_KEY].astype(bool)
    logits, value = OnnxPolicy(tmp_path / "export").score(obs[CANDIDATES_KEY], obs[GLOBAL_KEY], obs[MASK_KEY])
    policy = load_model(tmp_path / "model.zip", device="cpu").policy
    assert policy.scorer.packed
    tensors, _ = policy.obs_to_tensor(obs)
    with th.no_grad():
        torch_logits, torch_value = policy.scorer(tensors[CANDIDATES_KEY].float(), tensors[GLOBAL_KEY].float(), tensors[MASK_KEY].bool())
    assert np.abs(logits[mask] - torch_logits.numpy()[mask]).max() <= 1e-5
    assert np.abs(value - torch_value.numpy()[:, 0]).max() <= 1e-5
    np.testing.assert_array_equal(OnnxPolicy(tmp_path / "export").act(obs[CANDIDATES_KEY], obs[GLOBAL_KEY], mask),
                                  policy.predict(obs, deterministic=True)[0])
