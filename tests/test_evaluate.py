"""evaluate.py and its library agents.evaluation: argument parsing, statistics, the
results.json schema, paired seeds, the CLI end to end (real runs, tiny budgets), its one-line
errors on bad input, and no torch at import."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import evaluate
from agents.evaluation import mean_ci95, schema_errors, t_quantile, workload_sha256
from envs.cluster.config import load_cluster
from envs.workload.generator import load_workload_spec, make_workload

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "text, seeds",
    [("0-9", list(range(10))), ("0,3,5", [0, 3, 5]), ("0-4,10", [0, 1, 2, 3, 4, 10]), ("7", [7]), (" 2 - 3 ", [2, 3])],
)
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert evaluate.parse_seeds(text) == seeds


@pytest.mark.parametrize("text, message", [("5-2", "start is after end"), ("a", "bad seeds"), ("", "bad seeds"), ("1,1", "twice"), ("0-3,2", "twice")])
def test_parse_seeds_rejects(text: str, message: str) -> None:
    with pytest.raises(evaluate.UsageError, match=message):
        evaluate.parse_seeds(text)


def test_t_quantile_matches_tables() -> None:
    # Two-sided 95% critical values from standard t tables.
    for df, value in ((1, 12.706), (2, 4.303), (9, 2.262), (30, 2.042), (100, 1.984)):
        assert t_quantile(0.975, df) == pytest.approx(value, abs=1e-3)


def test_mean_ci95() -> None:
    s = mean_ci95([1.0, 2.0, 3.0, float("nan")])  # NaN (e.g. no job of a kind) is skipped
    assert s["n"] == 3 and s["mean"] == 2.0
    assert s["ci95_high"] - 2.0 == pytest.approx(4.303 * 1.0 / 3**0.5, abs=1e-3)
    assert mean_ci95([5.0]) == {"mean": 5.0, "ci95_low": None, "ci95_high": None, "n": 1}


def test_workload_hash_is_a_fingerprint_of_the_seed() -> None:
    cluster, spec = load_cluster("h100-4node"), load_workload_spec("llm-mix")
    h = [workload_sha256(make_workload(spec, cluster, s, 10)) for s in (0, 0, 1)]
    assert h[0] == h[1] != h[2]


def test_library_and_baseline_episodes_do_not_import_torch() -> None:
    # A fresh interpreter: the test session itself has torch loaded already.
    code = "\n".join([
        "import agents.evaluation, evaluate, sys; assert 'torch' not in sys.modules",
        "from agents.evaluation import cluster_and_spec, run_baseline",
        "sim, decisions = run_baseline('topology', *cluster_and_spec('h100-4node', 'llm-mix'), seed=0, num_jobs=6)",
        "assert sim.done and decisions > 0",
        "heavy = sorted({'torch', 'stable_baselines3', 'sb3_contrib'} & set(sys.modules))",
        "assert not heavy, heavy",
    ])
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "evaluate.py", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("eval") / "out"
    proc = run_cli("--cluster", "h100-4node", "--policies", "binpack,topology", "--seeds", "0-1", "--num-jobs", "12", "--workers", "2", "--out", str(out))
    return out, proc


def test_cli_smoke_writes_every_output(smoke) -> None:
    out, proc = smoke
    assert proc.returncode == 0, proc.stderr
    for name in ("results.json", "results.md", "jct_cdf.png", "timeline.png", "gantt_topology.png"):
        assert (out / name).stat().st_size > 0, name
    import matplotlib.image as mpimg
    import numpy as np
    from matplotlib.colors import to_rgb

    for name in ("jct_cdf.png", "timeline.png", "gantt_topology.png"):  # drawn, not blank (content: tests/test_plots.py)
        rgb = mpimg.imread(out / name)[..., :3].reshape(-1, 3)
        assert len(np.unique((rgb * 255).round().astype(np.uint8), axis=0)) > 10, name  # not one flat colour
        series = [np.array(to_rgb(f"C{i}")) for i in range(4)]  # the policies' lines, the job kinds' bars
        assert sum(int((np.abs(rgb - c).max(axis=1) < 0.02).sum()) for c in series) > 500, name  # legend handles: < 150
    md = (out / "results.md").read_text()
    assert "| binpack |" in md and "Paired avg JCT vs topology" in md


def test_results_json_follows_the_schema(smoke) -> None:
    out, _ = smoke
    doc = json.loads((out / "results.json").read_text())
    assert schema_errors(doc) == []
    assert doc["seeds"] == [0, 1] and doc["reference"] == "topology"
    assert set(doc["policies"]) == {"binpack", "topology"} and set(doc["paired_vs_reference"]) == {"binpack"}
    assert doc["policies"]["topology"]["summary"]["avg_jct_s"]["n"] == 2
    for runs in (p["runs"] for p in doc["policies"].values()):
        assert all(r["metrics"]["unfinished_jobs"] == 0 for r in runs)


def test_every_policy_saw_the_same_workloads(smoke) -> None:
    out, _ = smoke
    doc = json.loads((out / "results.json").read_text())
    by_seed: dict[int, set[str]] = {}
    for p in doc["policies"].values():
        assert [r["seed"] for r in p["runs"]] == [0, 1]
        for r in p["runs"]:
            by_seed.setdefault(r["seed"], set()).add(r["jobs_sha256"])
    assert all(len(h) == 1 for h in by_seed.values()) and by_seed[0] != by_seed[1]


def test_schema_errors_name_the_problem(smoke) -> None:
    out, _ = smoke
    doc = json.loads((out / "results.json").read_text())
    del doc["policies"]["binpack"]["summary"]["p95_jct_s"]
    doc["seeds"] = ["0"]
    assert schema_errors(doc) == ["$.seeds[0]: expected integer, got str", "$.policies.binpack.summary.p95_jct_s: missing"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policies", "topology,fifo"], "unknown policy 'fifo' (known: binpack, spread"),
        (["--seeds", "5-2"], "bad seed range '5-2': start is after end"),
        (["--policies", "topology,ppo=/nonexistent/model.zip"], "ppo model file not found: /nonexistent/model.zip"),
        (["--policies", "topology,dqn=x.zip"], "unknown policy loader 'dqn='"),
        (["--cluster", "no-such-cluster"], "not a known cluster config"),
        (["--workload", "no-such-workload"], "not a known workload config"),
        (["--policies", "binpack", "--reference", "spread"], "--reference 'spread' is not among --policies"),
        (["--workers", "0"], "--workers must be >= 1"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2_before_any_work(tmp_path: Path, args: list[str], message: str) -> None:
    from tests.helpers import run_main

    out = tmp_path / "out"
    proc = run_main(evaluate.main, [*args, "--out", str(out)])  # evaluate.py's main, in this process
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("evaluate.py: error: ") and "Traceback" not in proc.stderr
    assert message in proc.stderr
    assert proc.stdout == "" and not out.exists()


def test_bad_input_to_the_real_command_line_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    """One bad command line given to a real evaluate.py process (the others run its `main` here)."""
    out = tmp_path / "out"
    proc = run_cli("--policies", "topology,fifo", "--bogus", "--out", str(out))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("evaluate.py: error: ") and "Traceback" not in proc.stderr
    assert "unrecognized arguments: --bogus" in proc.stderr
    assert proc.stdout == "" and not out.exists()


def test_ppo_policy_is_loaded_and_acts_through_the_env(tmp_path: Path) -> None:
    import gymnasium as gym
    from sb3_contrib import MaskablePPO

    from envs import ENV_ID

    env = gym.make(ENV_ID, cluster="h100-4node", num_jobs=6)
    model_path = tmp_path / "model.zip"
    MaskablePPO("MultiInputPolicy", env, n_steps=8, batch_size=8, device="cpu", seed=0).save(model_path)
    out = tmp_path / "out"
    spec = f"ppo={model_path}"
    assert evaluate.main(["--cluster", "h100-4node", "--policies", f"topology,{spec}", "--seeds", "3", "--num-jobs", "6", "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert schema_errors(doc) == []
    runs = doc["policies"][spec]["runs"]
    assert runs[0]["metrics"]["finished_jobs"] == 6 and runs[0]["decisions"] >= 6
    assert runs[0]["jobs_sha256"] == doc["policies"]["topology"]["runs"][0]["jobs_sha256"]


def test_dear_episodes_go_first_and_each_result_and_failure_keeps_its_policy(tmp_path: Path) -> None:
    """run_all submits a simulating policy's episodes first, then a loaded model's, then the
    baselines' (so the workers finish together); the runs and the failed episodes still come
    back under their own policy and seed."""
    from agents.evaluation.policies import parse_policies
    from agents.evaluation.runners import run_all, workload_sha256
    from envs.cluster.config import load_cluster
    from envs.workload.generator import load_workload_spec, make_workload

    import zipfile

    broken = tmp_path / "broken.zip"  # a zip, but no MaskablePPO's: each of its episodes fails in the worker
    with zipfile.ZipFile(broken, "w") as z:
        z.writestr("data", "{}")
    policies = parse_policies(f"ppo={broken},binpack,lookahead")
    seeds = [0, 1]
    cluster, workload = "mixed-64gpu", "llm-mix"
    c, spec = load_cluster(cluster), load_workload_spec(workload)
    hashes = {s: workload_sha256(make_workload(spec, c, s, 12)) for s in seeds}
    out = run_all(policies, seeds, cluster=cluster, workload=workload, num_jobs=12, queue_window=8, workers=0,
                  workload_hashes=hashes, trace_seed=0, progress=False)
    assert [r["seed"] for r in out.runs["binpack"]] == seeds and [r["seed"] for r in out.runs["lookahead"]] == seeds
    assert out.runs["binpack"] != out.runs["lookahead"]
    assert [(m["policy"], m["seed"]) for m in out.missing] == [(f"ppo={broken}", 0), (f"ppo={broken}", 1)]
