"""The Ray backend (agents/parallel.py, agents/tuning.py, docs/ray.md) on a real Ray instance
started on this machine with 2 CPUs, one per module: evaluation and the leaderboard give the same
results.json as the local backend, a failed episode (a corrupted model, a worker killed
mid-task) is reported with its policy, scenario and seed while the others are kept, Ray's retry
option reruns a killed task, two seeds train as two Tune trials into two complete run folders
that match a plain run (a third, failing trial is reported), and a sweep trains its drawn
settings. Skipped without the `ray` extra; the checks that need no Ray (bad flags, bad sweep files,
`--backend ray` without Ray installed) are in tests/test_ray_flags.py."""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")  # the `ray` extra; without it this module is skipped (tests/test_ray_flags.py still runs)
import ray.cloudpickle
import yaml

import evaluate
import train
from agents.parallel import TaskError, ray_session, run_tasks, task_errors
from benchmarks import leaderboard

REPO = Path(__file__).resolve().parent.parent
TINY_TRAIN = {  # tests/test_train.py's tiny run
    "cluster": "h100-4node", "workload": "llm-mix", "seed": 0, "device": "cpu", "total_timesteps": 128, "n_envs": 2,
    "checkpoint_every_timesteps": 64, "env": {"num_jobs": 12}, "ppo": {"n_steps": 32, "batch_size": 32, "n_epochs": 1},
    "policy": {"d_model": 16, "n_heads": 2, "n_layers": 1, "encoder_hidden": [16], "head_hidden": [16], "value_hidden": [16]},
    "eval": {"every_timesteps": 64, "seeds": "500", "baselines": ["topology", "sjf"]},
}
RUN_FILES = {"config.yaml", "version.json", "model.zip", "last_model.zip", "eval.json", "summary.json", "checkpoints/latest.zip",
             "checkpoints/state.json", "export/policy.onnx", "export/policy.json"}

# The crash helpers below travel to Ray's workers by value (this test module is not importable there).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def session():
    """One local Ray instance with 2 CPUs for the whole module, started by the backend itself."""
    with ray_session(num_cpus=2) as r:
        assert r.cluster_resources()["CPU"] == 2
        yield r
    assert not ray.is_initialized()  # the session that started Ray shut it down


def comparable(doc: dict) -> dict:
    """A results document without what may differ between runs: wall times and the environment."""
    doc = json.loads(json.dumps(doc))
    doc.pop("environment")
    for p in doc["policies"].values():
        for r in p["runs"]:
            r.pop("wall_s")
    return doc


def small_model(path: Path) -> None:
    import gymnasium as gym
    from sb3_contrib import MaskablePPO

    from envs import ENV_ID

    env = gym.make(ENV_ID, cluster="mixed-64gpu", num_jobs=6)
    MaskablePPO("MultiInputPolicy", env, n_steps=8, batch_size=8, device="cpu", seed=0).save(path)


def test_ray_and_local_backends_give_identical_results(session, tmp_path, monkeypatch):
    # A scenario (its file reaches the workers), two baselines and a model given by a relative
    # path (the workers get it as an absolute path; the label stays as typed).
    monkeypatch.chdir(tmp_path)
    small_model(tmp_path / "model.zip")
    common = ["--scenario", "default", "--policies", "binpack,topology,ppo=model.zip", "--seeds", "0-1", "--num-jobs", "12"]
    assert evaluate.main([*common, "--out", "local"]) == 0
    assert evaluate.main([*common, "--out", "ray", "--backend", "ray"]) == 0
    local, remote = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("local", "ray"))
    assert comparable(local) == comparable(remote)
    assert set(remote["policies"]) == {"binpack", "topology", "ppo=model.zip"} and "missing" not in remote
    assert remote["policies"]["ppo=model.zip"]["runs"][1]["metrics"]["finished_jobs"] == 12
    assert (local["environment"]["backend"], remote["environment"]["backend"]) == ("local", "ray")
    assert remote["environment"]["workers"] == 2  # the cluster's CPUs
    assert (tmp_path / "ray" / "gantt_topology.png").stat().st_size > 0

    # The leaderboard, one scenario, both backends.
    board = ["--scenarios", "default", "--seeds", "0", "--policies", "sjf,topology"]
    assert leaderboard.main([*board, "--out", "lb-local"]) == 0
    assert leaderboard.main([*board, "--out", "lb-ray", "--backend", "ray"]) == 0
    local, remote = (json.loads((tmp_path / d / "default" / "results.json").read_text()) for d in ("lb-local", "lb-ray"))
    assert comparable(local) == comparable(remote) and remote["environment"]["backend"] == "ray"


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_failed_episode_is_reported_with_policy_scenario_and_seed(session, tmp_path, capsys, backend):
    bad = tmp_path / "corrupt.zip"  # a zip file (passes the cheap check), but no model in it
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("data", "not a MaskablePPO model")
    spec = f"ppo={bad}"
    out = tmp_path / "out"
    rc = evaluate.main(["--scenario", "default", "--policies", f"topology,{spec}", "--seeds", "3,4", "--num-jobs", "10",
                        "--backend", backend, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    for seed in (3, 4):
        assert f"evaluate.py: episode failed: policy {spec}, scenario default, seed {seed}: " in err
    assert f"2 of 4 episodes missing ({spec} seed 3, {spec} seed 4); the others' results are kept; tracebacks in {out / 'errors.log'}" in err
    assert (out / "errors.log").read_text().count("Traceback (most recent call last)") == 2
    doc = json.loads((out / "results.json").read_text())
    assert [r["seed"] for r in doc["policies"]["topology"]["runs"]] == [3, 4]  # kept
    assert doc["policies"][spec]["runs"] == []
    assert [(m["policy"], m["scenario"], m["seed"]) for m in doc["missing"]] == [(spec, "default", 3), (spec, "default", 4)]
    assert all(m["error"] and "traceback" not in m for m in doc["missing"])
    assert "## Missing episodes (2)" in (out / "results.md").read_text()


def crash_on(x: int) -> int:
    """x squared; the task for 2 kills its own worker process, as the OOM killer would."""
    if x == 2:
        os._exit(1)
    return x * x


def crash_once(args: tuple[int, str]) -> int:
    """x squared; the first attempt at 2 kills its worker, a rerun succeeds."""
    x, marker = args
    if x == 2 and not os.path.exists(marker):
        Path(marker).write_text("killed once")
        os._exit(1)
    return x * x


def raise_on(x: int) -> int:
    if x == 1:
        raise ValueError(f"bad task {x}")
    return x


def test_teacher_labels_are_identical_on_ray_and_local(session):
    from agents.distill import LabelTask, label_episode

    tasks = [LabelTask({"scenario": "default", "num_jobs": 16}, s, "lookahead", "sect", None, 1.0, 0.97) for s in (1_000_011, 1_000_012)]
    local = run_tasks(label_episode, tasks, workers=1, progress=False)
    remote = run_tasks(label_episode, tasks, backend="ray", progress=False)
    for a, b in zip(local, remote):
        for key in ("candidates", "global", "masks", "labels", "heuristic", "taken", "returns", "gains"):
            np.testing.assert_array_equal(a[key], b[key])
    assert any((e["labels"] != e["heuristic"]).any() for e in local)  # the teacher's own choices, not only the heuristic's


def test_worker_killed_mid_task_fails_that_task_only_and_ray_retries_it(session, tmp_path):
    results = run_tasks(crash_on, [0, 1, 2, 3], backend="ray", on_error="keep", progress=False, ray_options={"max_retries": 0})
    errors = task_errors(results)
    assert [e.index for e in errors] == [2] and errors[0].error.startswith("WorkerCrashedError: The worker died")
    assert [r for r in results if not isinstance(r, TaskError)] == [0, 1, 9]
    assert results[:2] == [0, 1] and results[3] == 9  # in task order

    # Ray's default max_retries (3) reruns a task whose worker died.
    marker = str(tmp_path / "killed")
    assert run_tasks(crash_once, [(x, marker) for x in range(4)], backend="ray", progress=False) == [0, 1, 4, 9]
    assert Path(marker).exists()  # the first attempt did die

    # The local pool: a killed worker fails what had not finished, with a clear error, and raises nothing.
    results = run_tasks(crash_on, [0, 1, 2, 3], workers=2, on_error="keep", progress=False)
    assert isinstance(results[2], TaskError) and "a worker process died" in results[2].error
    assert all(r == x * x or (isinstance(r, TaskError) and "BrokenProcessPool" in r.error) for x, r in enumerate(results))

    # A raised exception is the task's own, in either mode, on either backend.
    for backend in ("local", "ray"):
        with pytest.raises(ValueError, match="bad task 1"):
            run_tasks(raise_on, [0, 1, 2], backend=backend, progress=False)
        kept = run_tasks(raise_on, [0, 1, 2], backend=backend, on_error="keep", progress=False)
        assert kept[0] == 0 and kept[2] == 2 and str(kept[1]) == "ValueError: bad task 1"


def timed(args: tuple[int, str]) -> tuple[float, float]:
    """Sleeps a moment; (start, end) wall-clock times."""
    import time

    start = time.time()
    time.sleep(0.5)
    return start, time.time()


def test_max_in_flight_caps_the_tasks_running_at_once(session):
    spans = sorted(run_tasks(timed, [(i, "") for i in range(3)], backend="ray", progress=False, max_in_flight=1))
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))  # one after another
    spans = sorted(run_tasks(timed, [(i, "") for i in range(2)], backend="ray", progress=False))
    assert spans[1][0] < spans[0][1]  # uncapped: both CPUs at once


def test_unreachable_cluster_is_a_one_line_error(tmp_path):
    import subprocess

    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "evaluate.py", "--policies", "topology", "--seeds", "0", "--backend", "ray", "--ray-address", "127.0.0.1:1",
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("evaluate.py: error: cannot reach the Ray cluster at 127.0.0.1:1: ")
    assert r.stderr.count("\n") == 1 and not out.exists()


def tree(run: Path) -> set[str]:
    return {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and "tfevents" not in p.name}


def without_wall(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if k not in ("eval_wall_s", "run_wall_s")} for h in history]


@pytest.mark.slow  # over 20 s (make test-fast leaves it out)
def test_two_seeds_train_as_tune_trials_into_complete_run_folders(session, tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_TRAIN))
    out = tmp_path / "runs"
    out.mkdir()
    (out / "seed-2").write_text("a file where seed 2's run folder would go")  # seed 2's trial fails
    assert train.main(["--no-progress", "--backend", "ray", "--seeds", "0-2", "--config", str(config), "--out", str(out)]) == 1
    captured = capsys.readouterr()
    stdout = captured.out
    assert f"trial failed: seed 2: FileExistsError: [Errno 17] File exists: '{out / 'seed-2'}'" in captured.err
    assert "error: 1 of 3 trials failed; the others' run folders are complete" in captured.err
    for seed in (0, 1):
        run = out / f"seed-{seed}"
        assert RUN_FILES <= tree(run), RUN_FILES - tree(run)
        assert list(run.glob("tb/*/events.out.tfevents*"))
        assert yaml.safe_load((run / "config.yaml").read_text())["seed"] == seed
        assert f"seed {seed}: best validation objective" in stdout
    report = json.loads((out / "trials.json").read_text())
    assert [t["seed"] for t in report["trials"]] == [0, 1, 2] and report["trials"][2]["error"].startswith("FileExistsError")
    assert report["best"]["run_dir"] in {str(out / "seed-0"), str(out / "seed-1")}
    assert report["best"]["best_validation_objective"] == min(t["best_validation_objective"] for t in report["trials"][:2])
    assert "best trial on the validation seeds" in stdout

    # A trial's folder is what a plain train.py run with the same config, seed and torch thread
    # count (Ray gives a trial one thread per CPU it reserves; the folder states the count) writes.
    trial = out / "seed-1"
    threads = yaml.safe_load((trial / "config.yaml").read_text())["torch_threads"]
    assert json.loads((trial / "version.json").read_text())["torch_threads"] == threads
    plain = tmp_path / "plain"
    assert train.main(["--no-progress", "--config", str(config), "--seed", "1", "--torch-threads", str(threads), "--out", str(plain)]) == 0
    assert tree(plain) == tree(trial)
    assert (plain / "config.yaml").read_text() == (trial / "config.yaml").read_text()
    a, b = without_wall(json.loads((plain / "eval.json").read_text())), without_wall(json.loads((trial / "eval.json").read_text()))
    assert len(a) == len(b)
    for x, y in zip(a, b):  # the same evaluations: labels equal, numbers equal up to float noise
        assert {k: v for k, v in x.items() if isinstance(v, str)} == {k: v for k, v in y.items() if isinstance(v, str)}
        assert {k: v for k, v in x.items() if not isinstance(v, str)} == pytest.approx({k: v for k, v in y.items() if not isinstance(v, str)})


@pytest.mark.slow  # over 20 s (make test-fast leaves it out)
def test_sweep_trains_each_drawn_setting_and_reports_the_best(session, tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_TRAIN))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"config": str(config), "num_samples": 2, "search_seed": 0,
                                     "search": {"ppo.learning_rate": {"loguniform": [1e-4, 1e-3]}, "ppo.clip_range": {"choice": [0.1, 0.3]}}}))
    out = tmp_path / "sweep"
    assert train.main(["--no-progress", "--backend", "ray", "--sweep", str(sweep), "--out", str(out)]) == 0
    report = json.loads((out / "trials.json").read_text())
    assert report["kind"] == "sweep" and len(report["trials"]) == 2
    for t in report["trials"]:
        run = Path(t["run_dir"])
        assert run.parent == out and run.name.startswith("trial-") and RUN_FILES <= tree(run)
        ppo = yaml.safe_load((run / "config.yaml").read_text())["ppo"]
        assert ppo["learning_rate"] == t["settings"]["ppo.learning_rate"] and 1e-4 <= ppo["learning_rate"] <= 1e-3
        assert ppo["clip_range"] == t["settings"]["ppo.clip_range"] in (0.1, 0.3)
    assert report["best"] == min(report["trials"], key=lambda t: t["best_validation_objective"])
    assert f"best trial on the validation seeds: {report['best']['run_dir']}" in capsys.readouterr().out
