"""The bound on WAIT (envs.decision.candidates.WaitGuard): WAIT is invalid exactly while a window job that
could start without preempting has waited longer than max(overdue_factor x estimate,
min_wait_s); off by default (masks unchanged); one implementation that the env, evaluation, a
policy file and the scoring service all apply; bad values rejected with the field named."""

from __future__ import annotations

import hashlib
import json
import zipfile

import numpy as np
import pytest

from agents.evaluation import (
    UsageError,
    parse_policies,
    run_actor,
    run_baseline,
    with_wait_guards,
)
from agents.evaluation.policies import run_config_wait_guard
from envs.cluster.config import load_cluster
from envs.decision.candidates import WaitGuard, build_candidates, wait_guard_of, wait_valid
from envs.decision.placement import PREEMPT, RULES
from envs.decision.state import ClusterState
from envs.gym.env import GpuClusterEnv
from envs.sim.metrics import episode_metrics
from envs.workload.generator import load_workload_spec

CLUSTER = load_cluster("h100-4node")  # 4 x 8 H100 under one leaf
H = 3600.0
GUARD = WaitGuard(1.0, H)


def job(name: str, size: int, estimate_s: float, **extra) -> dict:
    """A queued job (queued since time 0 unless given), or a running one with `gpus` in `extra`."""
    queued = {} if "gpus" in extra else {"queued_since_s": 0.0}
    return {"id": name, "num_gpus": size, "tp_degree": min(size, 8), "estimate_s": estimate_s, "arrival_s": 0.0, **queued, **extra}


def state(now: float, queued: list[dict], running: bool = True) -> ClusterState:
    """A long low-priority job on node 0 (24 GPUs free) unless `running` is False, and `queued`."""
    run = [job("r", 8, 1e7, gpus=list(range(8)), priority="low", preemptible=True)] if running else []
    for q in queued:
        q.setdefault("arrival_s", 0.0)
    return ClusterState.from_dict({"time_s": now, "running": run, "queued": queued}, CLUSTER)


def wait_ok(st: ClusterState, guard: WaitGuard | None = GUARD, queue_window: int = 8) -> bool:
    cset = build_candidates(st, queue_window, wait_guard=guard)
    return bool(cset.mask[cset.wait_index])


# ---------------------------------------------------------------------- the rule


def test_wait_is_removed_only_when_a_startable_window_job_is_overdue():
    overdue = state(2 * H, [job("a", 1, 600.0)])  # waited 2 h > max(1 x 600 s, 1 h)
    assert wait_ok(overdue, None) and not wait_ok(overdue, GUARD)
    assert wait_ok(state(0.9 * H, [job("a", 1, 600.0)]))  # below min_wait_s
    assert wait_ok(state(H, [job("a", 1, 600.0)]))  # exactly the bound: not longer than it
    assert wait_ok(state(2 * H, [job("a", 1, 3 * H)]))  # 2 h < 1 x its 3 h estimate
    assert not wait_ok(state(2 * H, [job("a", 1, 3 * H)]), WaitGuard(0.5, H))  # 2 h > 0.5 x 3 h
    assert wait_ok(state(2 * H, [job("a", 1, 600.0)]), WaitGuard(1.0, 3 * H))  # min_wait_s 3 h
    # Earlier queue stays count (a preempted job back in the queue): wait_s plus the current stay.
    assert not wait_ok(state(2 * H, [job("a", 1, 600.0, queued_since_s=2 * H - 60, wait_s=1.5 * H)]))
    assert wait_ok(state(2 * H, [job("a", 1, 600.0, queued_since_s=2 * H - 60, wait_s=0.5 * H)]))


def test_a_job_that_needs_preemption_or_is_outside_the_window_does_not_count():
    # 32 GPUs with 24 free: only its preempt candidates are valid, so WAIT stays.
    big = state(10 * H, [job("big", 32, 600.0, priority="high")])
    cset = build_candidates(big, 8, wait_guard=GUARD)
    assert cset.mask[: PREEMPT].sum() == 0 and cset.mask[PREEMPT] and cset.mask[cset.wait_index]
    # An overdue job that does not fit beside a startable job that is not overdue: WAIT stays.
    assert wait_ok(state(2 * H, [job("big", 32, 600.0), job("b", 1, 600.0, queued_since_s=2 * H - 60)]))
    # The overdue job second in the FIFO: a window of 1 holds only the head, which is not overdue.
    two = [job("b", 1, 600.0, queued_since_s=2 * H - 60, wait_s=0.0), job("a", 1, 600.0)]
    st = state(2 * H, two)
    assert wait_ok(st, GUARD, queue_window=1) and not wait_ok(st, GUARD, queue_window=2)


def test_idle_cluster_and_no_guard_keep_the_old_rule():
    idle = state(5 * H, [job("a", 1, 600.0)], running=False)
    assert not wait_ok(idle, None) and not wait_ok(idle, GUARD)  # nothing will happen: place something
    st = state(2 * H, [job("a", 1, 600.0)])
    assert wait_valid(st) and not wait_valid(st, GUARD, [int(st.queue[0])], [True])
    assert wait_valid(st, GUARD, [int(st.queue[0])], [False])


def test_default_off_leaves_every_mask_as_it_was():
    """Without a guard WAIT is valid exactly while something runs or checkpoints (the rule before
    the guard existed), and the other candidates never depend on the guard."""
    env = GpuClusterEnv(cluster="h100-4node", num_jobs=40)
    assert env.wait_guard is None
    rng = np.random.default_rng(0)
    env.reset(seed=3)
    for _ in range(150):
        st, mask = env.unwrapped.state, env.action_masks()
        assert mask[-1] == bool(len(st.running) or st.checkpointing)
        guarded = build_candidates(st, 8, wait_guard=WaitGuard(0.01, 0.0)).mask
        assert (guarded[:-1] == mask[:-1]).all() and (guarded[-1] <= mask[-1])
        _, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
        if term or trunc:
            break


# ---------------------------------------------------------------------- one mask everywhere


def _always_wait(env, obs) -> int:
    """A policy that waits whenever it may: the stall the guard is for."""
    mask = env.unwrapped.action_masks()
    return len(mask) - 1 if mask[-1] else int(np.flatnonzero(mask)[0])


def test_env_evaluation_and_plain_data_states_apply_the_same_mask():
    guard = WaitGuard(1.0, 600.0)
    seen = {"decisions": 0, "fired": 0}

    def act(env, obs) -> int:
        u = env.unwrapped
        assert u.wait_guard == guard
        mask = u.action_masks()
        assert (obs["action_mask"].astype(bool) == mask).all()
        # The state as a live cluster (or the service) would send it gives the same mask.
        again = build_candidates(ClusterState.from_dict(u.state.to_dict(), CLUSTER), 8, wait_guard=guard)
        assert (again.mask == mask).all()
        seen["decisions"] += 1
        seen["fired"] += int(not mask[-1] and wait_valid(u.state))
        return _always_wait(env, obs)

    spec = load_workload_spec("llm-mix")
    sim, steps = run_actor(act, CLUSTER, spec, seed=1, num_jobs=40, wait_guard=guard)
    assert sim.done and steps == seen["decisions"] and seen["fired"] > 0
    stalled, _ = run_actor(_always_wait, CLUSTER, spec, seed=1, num_jobs=40)
    delay = lambda s: episode_metrics(s)["avg_queueing_delay_s"]
    assert delay(sim) < delay(stalled)  # the guard ends the stall


def test_baselines_that_never_wait_with_startable_work_are_unchanged():
    spec = load_workload_spec("llm-mix")
    for name in ("sect", "sjf"):
        plain, n0 = run_baseline(name, CLUSTER, spec, seed=2, num_jobs=40)
        guarded, n1 = run_baseline(name, CLUSTER, spec, seed=2, num_jobs=40, wait_guard=WaitGuard(0.01, 0.0))
        assert n0 == n1 and np.array_equal(plain.end, guarded.end, equal_nan=True)


def test_evaluation_takes_the_flag_or_the_models_training_config(tmp_path, capsys):
    import evaluate

    model = tmp_path / "run" / "model.zip"
    model.parent.mkdir()
    with zipfile.ZipFile(model, "w") as z:  # a zip is all the parser checks
        z.writestr("data", "{}")
    (model.parent / "config.yaml").write_text("env:\n  wait_guard: {overdue_factor: 2.0, min_wait_s: 1800}\n")
    args = ["--cluster", "h100-4node", "--num-jobs", "5", "--seeds", "0", "--out", str(tmp_path / "out"),
            "--policies", f"sect,ppo={model}"]
    cfg = evaluate.parse_config(args)
    assert [p.wait_guard for p in cfg.policies] == [None, WaitGuard(2.0, 1800.0)]
    cfg = evaluate.parse_config(args + ["--wait-guard", "1"])
    assert [p.wait_guard for p in cfg.policies] == [WaitGuard(1.0, H)] * 2
    cfg = evaluate.parse_config(args + ["--wait-guard", "off"])
    assert [p.wait_guard for p in cfg.policies] == [None, None]
    stage = model.parent / "stages" / "02-ppo-20000.zip"  # a stage train.py kept: its run's guard too
    stage.parent.mkdir()
    stage.write_bytes(model.read_bytes())
    cfg = evaluate.parse_config(args[:-1] + [f"sect,ppo={stage}"])
    assert [p.wait_guard for p in cfg.policies] == [None, WaitGuard(2.0, 1800.0)]
    assert evaluate.main(args + ["--wait-guard", "overdue_factor=1,min_wait_s=-5"]) == 2
    assert "--wait-guard.min_wait_s: must be >= 0" in capsys.readouterr().err

    (model.parent / "config.yaml").write_text("env:\n  wait_guard: {overdue_factor: 0}\n")
    with pytest.raises(UsageError, match=r"config.yaml: env.wait_guard.overdue_factor: must be > 0"):
        run_config_wait_guard(model)
    with pytest.raises(UsageError, match="env.wait_guard.overdue_factor"):
        with_wait_guards(parse_policies(f"ppo={model}"))


def _policy_dir(tmp_path, wait_guard) -> object:
    from agents.policy_file import FORMAT, FORMAT_VERSION
    from envs.decision.features import (
        CANDIDATE_FEATURES,
        FEATURE_SCHEMA_VERSION,
        GLOBAL_FEATURES,
    )

    d = tmp_path / "export"
    d.mkdir(exist_ok=True)
    (d / "policy.onnx").write_bytes(b"not a graph: only its checksum is read here")
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "feature_schema_version": FEATURE_SCHEMA_VERSION,
            "candidate_features": list(CANDIDATE_FEATURES), "global_features": list(GLOBAL_FEATURES), "queue_window": 8,
            "rules": list(RULES), "num_candidates": 41, "onnx_file": "policy.onnx",
            "onnx_sha256": hashlib.sha256((d / "policy.onnx").read_bytes()).hexdigest(), "opset": 18}
    if wait_guard != "absent":
        meta["wait_guard"] = wait_guard
    (d / "policy.json").write_text(json.dumps(meta))
    return d


def test_policy_file_records_the_guard_and_refuses_a_bad_one(tmp_path):
    from agents.policy_file import (
        PolicyFileError,
        load_policy_metadata,
        policy_wait_guard,
    )

    assert policy_wait_guard(load_policy_metadata(_policy_dir(tmp_path, "absent"))) is None  # files from before
    assert policy_wait_guard(load_policy_metadata(_policy_dir(tmp_path, None))) is None
    meta = load_policy_metadata(_policy_dir(tmp_path, GUARD.to_dict()))
    assert policy_wait_guard(meta) == GUARD
    with pytest.raises(PolicyFileError, match=r"policy.json: wait_guard.min_wait_s: must be >= 0"):
        load_policy_metadata(_policy_dir(tmp_path, {"overdue_factor": 1.0, "min_wait_s": -1}))
    with pytest.raises(PolicyFileError, match=r"policy.json: wait_guard: unknown key 'k'"):
        load_policy_metadata(_policy_dir(tmp_path, {"k": 1.0}))


def test_served_policy_applies_the_models_guard():
    """The service's masks apply the guard of the model it serves (policy.json's, carried by
    ModelInfo), unless given another; a model that always prefers WAIT cannot take it then."""
    pytest.importorskip("fastapi")  # the `service` extra
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.scoring import ModelInfo, Scorer

    class PrefersWait:
        def score(self, candidates, global_features, mask):
            logits = np.zeros(mask.shape, dtype=np.float32)
            logits[:, -1] = 10.0
            return logits, np.zeros(len(mask), dtype=np.float32)

    st = state(2 * H, [job("a", 1, 600.0)])
    env_mask = build_candidates(ClusterState.from_dict(st.to_dict(), CLUSTER), 8, wait_guard=GUARD).mask
    for guard, expect_wait in ((GUARD, False), (None, True)):
        scorer = Scorer("sect", PrefersWait(), ModelInfo("x", "ab" * 32, 3, 8, wait_guard=guard))
        assert scorer.wait_guard == guard
        with TestClient(create_app(CLUSTER, scorer)) as c:
            body = c.post("/v1/score", json={"state": st.to_dict()}).json()
            assert c.get("/v1/info").json()["wait_guard"] == (guard.to_dict() if guard else None)
        assert body["wait"]["valid"] is expect_wait and (body["wait"]["rank"] == 1) is expect_wait
        if guard is not None:
            ranked = {cd["index"] for cd in body["candidates"]}
            assert ranked == set(np.flatnonzero(env_mask).tolist())
    assert Scorer("sect", PrefersWait(), ModelInfo("x", "ab" * 32, 3, 8, wait_guard=GUARD), wait_guard=None).wait_guard is None


# ---------------------------------------------------------------------- bad values


@pytest.mark.parametrize("value, message", [
    ({"overdue_factor": -1}, "wait_guard.overdue_factor: must be > 0"),
    ({"overdue_factor": 1, "min_wait_s": -1}, "wait_guard.min_wait_s: must be >= 0"),
    ({"overdue_factor": "x"}, "wait_guard.overdue_factor: must be a finite number"),
    ({"min_wait_s": 60}, "wait_guard.overdue_factor: required"),
    ({"overdue_factor": 1, "patience": 3}, "wait_guard: unknown key 'patience'"),
    ("soon", "wait_guard: 'soon' is not 'off', a number"),
    ("overdue_factor=1,min_wait_s=abc", "wait_guard.min_wait_s: must be a number"),
    ([1, 2], "wait_guard: must be null, 'off', a number or a mapping"),
    (float("inf"), "wait_guard.overdue_factor: must be a finite number"),
])
def test_bad_values_name_the_field(value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")) as e:
        GpuClusterEnv(cluster="h100-4node", wait_guard=value)
    assert "\n" not in str(e.value)


def test_the_forms_of_a_guard():
    assert wait_guard_of(None) is None and wait_guard_of("off") is None and wait_guard_of(False) is None
    assert wait_guard_of(2) == wait_guard_of("2") == wait_guard_of({"overdue_factor": 2}) == WaitGuard(2.0, H)
    assert wait_guard_of("overdue_factor=0.5,min_wait_s=60") == WaitGuard(0.5, 60.0)
    assert wait_guard_of(GUARD.to_dict()) == GUARD and str(GUARD) == "overdue_factor=1,min_wait_s=3600"
    assert GpuClusterEnv(cluster="h100-4node", wait_guard={"overdue_factor": 3}).wait_guard == WaitGuard(3.0, H)


def test_service_command_line_refuses_a_bad_guard(capsys):
    from service.__main__ import main

    assert main(["--cluster", "h100-4node", "--wait-guard", "overdue_factor=0"]) == 2
    assert "--wait-guard.overdue_factor: must be > 0" in capsys.readouterr().err


def test_a_train_config_guard_reaches_the_rollouts_and_model_selection():
    from agents.config import train_config_from_dict
    from agents.selection import eval_setting
    from agents.training import make_vec_env

    cfg = train_config_from_dict({"scenario": "default", "n_envs": 2, "vec_env": "batched",
                                  "env": {"wait_guard": {"overdue_factor": 2, "min_wait_s": 3600}},
                                  "ppo": {"n_steps": 32, "batch_size": 32}}, "<test>")
    want = WaitGuard(2.0, 3600.0)
    assert eval_setting(cfg).wait_guard == want
    vec = make_vec_env(cfg)
    try:
        assert vec.get_attr("wait_guard") == [want, want]
    finally:
        vec.close()
    assert eval_setting(train_config_from_dict({"scenario": "default"}, "<test>")).wait_guard is None
