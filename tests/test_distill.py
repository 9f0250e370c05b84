"""Distillation of the lookahead teacher (agents/distill.py): a tiny run end to end through
train.py, labels that do not depend on the number of workers, and bad distill configs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.distill import LabelTask, aggregate, label_episode
from agents.parallel import run_tasks
from tests.test_train import run_train, tb_scalar_tags, train_in_process, write_config

SMALL = {"scenario": "default", "num_jobs": 24}


@pytest.mark.slow  # over 20 s (make test-fast leaves it out)
def test_tiny_distillation_run_student_agrees_with_its_teacher_more_than_the_heuristic(tmp_path):
    cfg = write_config(
        tmp_path,
        cluster=None, workload=None, scenario="default", env={"num_jobs": 40},
        distill={"teacher": "lookahead", "rounds": 2, "episodes": 2, "epochs": 100, "batch_size": 64, "workers": 2, "temperature": 0.0},
        eval={"every_timesteps": 64, "seeds": "100", "baselines": ["sect", "sjf"]},
    )
    text = cfg.read_text().replace("cluster: null\n", "").replace("workload: null\n", "")
    cfg.write_text(text)
    out = tmp_path / "run"
    r = run_train("--config", str(cfg), "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "distill.json").read_text())
    assert summary["teacher"] == "lookahead"
    assert [row["round"] for row in summary["rounds"]] == [0, 1]
    last = summary["rounds"][-1]
    assert last["aggregated"] == sum(row["states"] for row in summary["rounds"])
    # The teacher left the heuristic somewhere (else agreement would prove nothing), and the
    # student learned those states: it agrees with the teacher more often than the heuristic.
    assert any(row["teacher_changes"] > 0 for row in summary["rounds"])
    assert last["agreement"] > last["heuristic_agreement"], last
    assert summary["rounds"][1]["beta"] == 0.5  # round 1 follows the student half the time
    assert (out / "distill" / "student-r0.zip").is_file() and (out / "model.zip").is_file()
    stages = [e["stage"] for e in json.loads((out / "eval.json").read_text())]
    assert stages[:2] == ["distill-r0", "distill-r1"] and "ppo" in stages
    tags = tb_scalar_tags(out)
    assert {"distill/agreement", "distill/heuristic_agreement", "distill/validation_objective", "eval/objective", "time/fps"} <= tags


def test_labels_are_the_same_in_one_process_and_in_two_workers():
    tasks = [LabelTask(SMALL, s, "lookahead", "sect", None, 1.0, 0.97) for s in (1_000_001, 1_000_002)]
    a = run_tasks(label_episode, tasks, workers=1, progress=False)
    b = run_tasks(label_episode, tasks, workers=2, progress=False)
    for x, y in zip(a, b):
        for key in ("candidates", "global", "masks", "labels", "heuristic", "taken", "returns"):
            np.testing.assert_array_equal(x[key], y[key])
    demos, heuristic = aggregate(a)
    assert len(demos) == len(heuristic) == sum(len(e["labels"]) for e in a)
    assert (demos.masks[np.arange(len(demos)), demos.actions]).all()  # every label is a valid action


def test_beta_one_follows_the_teacher_and_beta_zero_the_student(tmp_path):
    teacher = label_episode(LabelTask(SMALL, 1_000_003, "lookahead", "sect", None, 1.0, 0.97))
    np.testing.assert_array_equal(teacher["taken"], teacher["labels"])  # beta 1: the teacher's choice is executed
    assert (teacher["labels"] != teacher["heuristic"]).any()  # the lookahead leaves sect somewhere
    # A student that always waits when it may (an untrained net would be arbitrary): take the
    # tiny run's model; with beta 0 every executed action is the student's, not the teacher's.
    from agents.config import train_config_from_dict
    from agents.training import build_model, make_vec_env

    cfg = train_config_from_dict({"scenario": "default", "env": {"num_jobs": 24}, "n_envs": 1, "ppo": {"n_steps": 64, "batch_size": 64},
                                  "policy": {"d_model": 16, "n_heads": 2, "n_layers": 1, "encoder_hidden": [16], "head_hidden": [16], "value_hidden": [16]}},
                                 "<test>")
    model = build_model(cfg, make_vec_env(cfg), __import__("torch").device("cpu"), None)
    model.save(tmp_path / "student.zip")
    followed = label_episode(LabelTask(SMALL, 1_000_003, "lookahead", "sect", str(tmp_path / "student.zip"), 0.0, 0.97))
    from agents.distill import aggregate as agg, student_actions

    demos, _ = agg([followed])
    np.testing.assert_array_equal(followed["taken"], student_actions(model, demos))
    assert (followed["taken"] != followed["labels"]).any()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"scenario": "default"}, "cluster: conflicts with scenario"),
        ({"distill": {"teacher": "lookahead-oracle", "rounds": 1}}, "distill.teacher: the oracle sees the future"),
        ({"distill": {"teacher": "clairvoyant", "rounds": 1}}, "distill.teacher: 'clairvoyant' is not"),
        ({"distill": {"rounds": 1}, "bc": {"episodes": 4}}, "distill.rounds: distillation and bc are two warm starts"),
        ({"distill": {"beta_decay": 1.5}}, "distill.beta_decay: must be in [0, 1]"),
        ({"distill": {"lookahead": {"samples": 0}}}, "distill.lookahead.samples: must be >= 1"),
        ({"distill": {"lookahead": {"sample": 8}}}, "distill.lookahead.sample: unknown key"),
        ({"distill": {"lookahead": {"confirm_samples": -1}}}, "distill.lookahead.confirm_samples: must be >= 0"),
        ({"distill": {"lookahead": {"base": "sectt"}}}, "distill.lookahead.base: unknown baseline 'sectt'"),
        ({"scenario": "no-such-scenario", "cluster": None, "workload": None}, "scenario"),
    ],
)
def test_bad_distill_config_fails_at_start_naming_the_key(tmp_path, overrides, message):
    cfg = write_config(tmp_path, **overrides)
    cfg.write_text(cfg.read_text().replace("cluster: null\n", "").replace("workload: null\n", ""))
    r = train_in_process("--config", str(cfg), "--out", str(tmp_path / "run"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()


def _mix_config(**overrides):
    from agents.config import train_config_from_dict

    data = {"scenario": "default", "env": {"num_jobs": 24}, "n_envs": 4, "ppo": {"n_steps": 32, "batch_size": 32},
            "env_mix": [{}, {"scenario": "bursty"}, {"scenario": "hetero"}], "distill": {"rounds": 1, "episodes": 5},
            **overrides}
    return train_config_from_dict(data, "<test>")


def test_a_mix_is_labelled_round_robin_each_setting_with_its_own_teacher_heuristic_and_validation_seeds():
    from agents.distill import label_tasks
    from agents.selection import Validation, eval_setting

    cfg = _mix_config()
    settings = cfg.settings()
    assert [s.name for s in settings] == ["default", "scenario=bursty", "scenario=hetero"]
    assert [s.env_kwargs.get("scenario") for s in settings] == ["default", "bursty", "hetero"]
    assert all(s.env_kwargs["num_jobs"] == 24 for s in settings)  # the config's env section holds for every entry
    assert settings[2].seeds == tuple(range(100, 120))  # the scenario's validation seeds
    # The rollout episodes cycle through the entries; the fourth is the first entry again.
    assert [kw.get("scenario") for kw in cfg.episode_env_kwargs()] == ["default", "bursty", "hetero", "default"]
    vals = [Validation(s.name, s.env_kwargs, s.seeds, eval_setting(s.env_kwargs), h, 1.0)
            for s, h in zip(settings, ("sect", "sjf", "priority"))]
    assert vals[2].setting.cluster.name == "hetero-64gpu"
    tasks = label_tasks(cfg, vals, ["lookahead", "sect", "lookahead"], 0, None)
    assert len(tasks) == 5
    assert [t.env_kwargs.get("scenario") for t in tasks] == ["default", "bursty", "hetero", "default", "bursty"]
    assert [t.teacher for t in tasks] == ["lookahead", "sect", "lookahead", "lookahead", "sect"]
    assert [t.heuristic for t in tasks] == ["sect", "sjf", "priority", "sect", "sjf"]
    # One setting: the seeds are those a config without env_mix draws (the mix only assigns them).
    single = _mix_config(env_mix=[])
    (only,) = single.settings()
    one = label_tasks(single, [Validation(only.name, only.env_kwargs, only.seeds, vals[0].setting, "sect", 1.0)], ["lookahead"], 0, None)
    assert [t.seed for t in one] == [t.seed for t in tasks]


def test_distill_lookahead_sets_the_teachers_search_over_the_scenarios_for_labels_and_the_teacher_check():
    from agents.distill import choose_teacher, label_tasks
    from agents.evaluation.policies import SIMULATING, PolicySpec
    from agents.evaluation.runners import RunTask, run_one
    from agents.selection import Validation, eval_setting
    from envs.scenario import load_scenario, lookahead_search

    cfg = _mix_config(env_mix=[], distill={"teacher": "lookahead", "rounds": 1, "episodes": 1, "lookahead": {"samples": 1}})
    assert cfg.distill["lookahead"] == {"samples": 1}
    (only,) = cfg.settings()
    v = Validation(only.name, only.env_kwargs, only.seeds, eval_setting(only.env_kwargs), "sect", 1.0)
    scenario = load_scenario("default").lookahead
    expected = dict(vars(scenario), samples=1)  # the scenario's k, preempt_k and horizon; one sample
    assert vars(lookahead_search(load_scenario("default"), cfg.distill["lookahead"])) == expected
    assert choose_teacher(cfg, v, log=lambda _: None)[1]["lookahead"] == expected  # recorded in distill.json
    # The labels: a one-sample teacher leaves sect on any mean gain (no standard error to beat),
    # so its labels differ from the scenario's four-sample teacher's on the same workload.
    (task,) = label_tasks(cfg, [v], ["lookahead"], 0, None)
    assert task.lookahead == {"samples": 1}
    one = label_episode(task)
    four = label_episode(LabelTask(SMALL, task.seed, "lookahead", "sect", None, 1.0, 0.97))
    assert len(one["labels"]) != len(four["labels"]) or (one["labels"] != four["labels"]).any()
    # The teacher check's episodes: rollouts = candidates x samples, so with samples 1 and 3 the
    # counts differ by the samples' ratio wherever the searched decisions are the same.
    spec = PolicySpec("lookahead", SIMULATING, "lookahead")
    search = {n: run_one(RunTask(spec, 100, "mixed-64gpu", "llm-mix", 12, 8, keep_trace=False, scenario="default",
                                 lookahead=(("samples", n), ("k", 1), ("preempt_k", 0))))["run"]["search"] for n in (1, 3)}
    assert search[1]["rollouts"] > 0 and search[3]["rollouts"] % 3 == 0
    assert search[3]["rollouts"] != search[1]["rollouts"]


def test_the_teacher_check_is_cached_by_its_inputs_and_a_changed_input_or_a_bad_file_runs_it_again(monkeypatch, tmp_path):
    import agents.distill as distill
    from agents.selection import Validation, eval_setting

    calls = []
    real = distill.run_tasks
    monkeypatch.setattr(distill, "run_tasks", lambda fn, tasks, **kw: calls.append(len(tasks)) or real(fn, tasks, **kw))

    logged = []

    def check(env=None, **distill_fields):
        cfg = _mix_config(env_mix=[], env={"num_jobs": 10, **(env or {})},
                          distill={"teacher": "auto", "workers": 1, "lookahead": {"k": 1, "preempt_k": 0, "samples": 1}, **distill_fields})
        (only,) = cfg.settings()
        v = Validation(only.name, only.env_kwargs, (100, 101), eval_setting(only.env_kwargs), "sect", 1e9)
        return distill.choose_teacher(cfg, v, log=logged.append)

    teacher, first = check()
    assert teacher == "lookahead" and calls == [2] and "check_cache" not in first
    files = list(distill.check_cache_dir().glob("*.json"))
    assert len(files) == 1
    _, again = check()  # the same inputs: read, not run
    assert calls == [2] and again["check_cache"] == str(files[0])
    assert again["lookahead_objective"] == first["lookahead_objective"]
    _, other = check(lookahead={"k": 1, "preempt_k": 0, "samples": 2})  # another search: another key
    assert calls == [2, 2] and "check_cache" not in other and len(list(distill.check_cache_dir().glob("*.json"))) == 2
    # With a bound on WAIT in the env the teacher that labels decides under it, so the check runs
    # the lookahead with it: another key, and the guard recorded.
    _, guarded = check(env={"wait_guard": {"overdue_factor": 0.01, "min_wait_s": 0}})
    assert calls == [2, 2, 2] and "check_cache" not in guarded and len(list(distill.check_cache_dir().glob("*.json"))) == 3
    assert guarded["wait_guard"] == {"overdue_factor": 0.01, "min_wait_s": 0.0} and first["wait_guard"] is None
    files[0].write_text("{not json")  # a damaged file: the check runs again and rewrites it
    _, rerun = check()
    assert calls == [2, 2, 2, 2] and rerun["lookahead_objective"] == first["lookahead_objective"]
    assert json.loads(files[0].read_text())["objectives"]
    _, off = check(check_cache=False)
    assert calls == [2, 2, 2, 2, 2] and "check_cache" not in off
    # A cache folder that cannot be made: the check runs, the run goes on, and the log says so.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("GANGSCHED_CACHE_DIR", str(blocker))
    teacher, unwritable = check()
    assert teacher == "lookahead" and calls == [2, 2, 2, 2, 2, 2] and "check_cache" not in unwritable
    assert logged[-2].startswith("teacher check not cached (") and str(blocker) in logged[-2]


def test_a_mix_run_is_selected_on_the_mean_paired_difference_over_its_settings(tmp_path):
    cfg = write_config(
        tmp_path, cluster=None, workload=None, scenario="default", env={"num_jobs": 16}, n_envs=2,
        env_mix=[{}, {"scenario": "hetero"}],
        distill={"teacher": "sjf", "rounds": 1, "episodes": 2, "epochs": 5, "batch_size": 64, "workers": 1},
        eval={"every_timesteps": 64, "seeds": "100", "baselines": ["sect", "sjf"]},
    )
    cfg.write_text(cfg.read_text().replace("cluster: null\n", "").replace("workload: null\n", ""))
    out = tmp_path / "run"
    r = run_train("--config", str(cfg), "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    history = json.loads((out / "eval.json").read_text())
    assert history[0]["stage"] == "distill-r0"
    for h in history:
        names = [p["name"] for p in h["settings"]]
        assert names == ["default", "scenario=hetero"]
        rel = [(p["objective"] - p["baseline_objective"]) / p["baseline_objective"] for p in h["settings"]]
        assert h["score"] == pytest.approx(np.mean(rel)) and h["rel_diff"] == h["score"]
    summary = json.loads((out / "summary.json").read_text())
    best = min(history, key=lambda h: h["score"])
    assert summary["best_validation_rel_diff"] == best["score"]
    assert [s["name"] for s in summary["settings"]] == ["default", "scenario=hetero"]
    choice = json.loads((out / "distill.json").read_text())["teacher_choice"]
    assert [c["setting"] for c in choice] == ["default", "scenario=hetero"]


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"scenario": "bursty", "cluster": "h100-4node"}, "env_mix[0].scenario: conflicts with cluster and workload"),
        ({"scenario": "no-such-scenario"}, "env_mix[0]"),
    ],
)
def test_bad_mix_entry_fails_at_start_naming_it(tmp_path, entry, message):
    cfg = write_config(tmp_path, cluster=None, workload=None, scenario="default", env_mix=[entry])
    cfg.write_text(cfg.read_text().replace("cluster: null\n", "").replace("workload: null\n", ""))
    r = train_in_process("--config", str(cfg), "--out", str(tmp_path / "run"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr and "Traceback" not in r.stderr
