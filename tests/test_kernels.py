"""The compiled kernels (envs.core.kernels) against the plain-Python reference they mirror: kernel by
kernel on random inputs, and whole episodes (observations, masks, rewards, metrics) on every
shipped cluster, the two paths run in one process with `envs.core.jit.reference_path()`."""

from __future__ import annotations

import functools
import hashlib
from contextlib import nullcontext as _nullcontext

import numpy as np
import pytest

from envs.core import jit, kernels
from envs.gym.env import GpuClusterEnv
from envs.sim.metrics import episode_metrics
from tests.helpers import needs_compiled

pytestmark = [pytest.mark.skipif(not jit.AVAILABLE, reason="numba is not installed"), needs_compiled()]


def test_pairwise_sum_is_numpys_sum():
    rng = np.random.default_rng(0)
    for n in list(range(0, 40)) + [127, 128, 129, 255, 256, 257, 1000, 5000]:
        for scale in (1.0, 1e-3, 1e6):
            a = rng.random(n) * scale * rng.integers(1, 9, size=n)
            assert kernels.pairwise_sum(a) == float(a.sum()), n


def test_stable_head_is_a_stable_sorts_first_k():
    rng = np.random.default_rng(1)
    for _ in range(500):
        n, k = int(rng.integers(0, 60)), int(rng.integers(1, 20))
        key = rng.integers(0, 5, size=n)  # many ties
        idx = rng.permutation(n + 5)[:n]
        values = np.zeros(n + 5, dtype=np.int64)
        values[idx] = key
        for sign in (1.0, -1.0):
            expect = np.argsort(sign * key.astype(float), kind="stable")[:k].tolist()
            assert kernels._stable_head(values, idx, sign, k).tolist() == expect
            assert kernels._stable_head(values.astype(float), idx, sign, k).tolist() == expect


def test_any_feasible_is_whether_feasible_of_finds_any():
    rng = np.random.default_rng(6)
    for _ in range(300):
        n_jobs, n_classes = int(rng.integers(1, 200)), int(rng.integers(1, 6))
        job_class = rng.integers(0, n_classes, size=n_jobs)
        class_ok = rng.random(n_classes) < 0.3
        queue = rng.permutation(n_jobs)[: int(rng.integers(0, n_jobs + 1))]
        expect = len(queue[class_ok[job_class[queue]]]) > 0
        assert kernels.any_feasible(queue, job_class, class_ok) == expect
        assert (len(kernels.feasible_of(queue, job_class, class_ok)) > 0) == expect


def test_preemptible_gpus_are_the_references():
    """(owner, node) of the GPUs held by running preemptible jobs, kernel against reference, on
    random allocations (free GPUs, running and checkpointing owners, preemptible or not)."""
    from types import SimpleNamespace

    from envs.decision.cache import per_alloc
    from envs.decision.window import _preemptible_gpus

    rng = np.random.default_rng(7)
    for _ in range(300):
        n_jobs, n_gpus = int(rng.integers(1, 40)), int(rng.integers(1, 80))
        owner = np.where(rng.random(n_gpus) < 0.3, -1, rng.integers(0, n_jobs, size=n_gpus)).astype(np.int64)
        state = SimpleNamespace(
            gpu_owner=owner, num_gpus=np.ones(n_jobs, dtype=np.int64), preemptible=rng.random(n_jobs) < 0.5,
            running=np.flatnonzero(rng.random(n_jobs) < 0.7), node_preemptible=np.ones((1, 1), dtype=np.int64),
            cluster=SimpleNamespace(gpu_node=np.arange(n_gpus, dtype=np.int64) // 4), derived=None, alloc_version=0)
        fast = _preemptible_gpus(state)
        per_alloc(state).clear()
        with jit.reference_path():
            ref = _preemptible_gpus(state)
        for a, b in zip(fast, ref):
            assert a.dtype == b.dtype and a.tolist() == b.tolist()


def test_las_only_queue_is_the_references():
    """The queued jobs only preempt-las places (in LAS queue order), kernel against reference, at
    every event of preemption-heavy episodes, decision or not."""
    from envs.decision.cache import per_state
    from envs.decision.candidates import apply_candidate, build_candidates
    from envs.decision.window import las_only_queue

    nonempty = 0
    for seed in (0, 1):
        env = GpuClusterEnv(scenario="slo-preempt", num_jobs=150)
        env.reset(seed=seed)
        sim, rng = env.sim, np.random.default_rng(seed)
        while not sim.done:
            state = sim.decision_state()
            valid = []
            if sim.queue_len:
                fast = las_only_queue(state).tolist()
                per_state(state).clear()
                with jit.reference_path():
                    assert las_only_queue(state).tolist() == fast
                nonempty += bool(fast)
                cset = build_candidates(state)
                valid = np.flatnonzero(cset.mask[:-1])
            if len(valid) and (not len(sim.running) or rng.random() < 0.7):
                apply_candidate(sim, cset, int(rng.choice(valid)))
            else:
                sim.advance()
    assert nonempty > 20


def test_next_end_estimate_is_the_references():
    """The scheduler's expected next end of a running job (ClusterState.next_event_estimate_s),
    kernel against numpy: jobs past their estimate, restores owed, any subset running."""
    rng = np.random.default_rng(8)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        estimate, done = rng.random(n) * 1e5, rng.random(n) * 1e5
        restore_left = np.where(rng.random(n) < 0.3, rng.random(n) * 600.0, 0.0)
        rate = rng.random(n) * 2.0 + 0.01
        run = rng.permutation(n)[: int(rng.integers(1, n + 1))]
        now = float(rng.random() * 1e6)
        expect = now + float((restore_left[run] + np.maximum(estimate[run] - done[run], 0.0) / rate[run]).min())
        assert kernels.next_end_estimate_s(now, run, estimate, done, restore_left, rate) == expect


def test_masked_sum_is_numpys_sum_of_the_selection():
    rng = np.random.default_rng(4)
    for n in list(range(0, 20)) + [64, 127, 128, 129, 300, 1000]:
        for p in (0.0, 0.3, 0.9, 1.0):
            values = rng.random(n) * rng.integers(1, 1000, size=n)
            mask = rng.random(n) < p
            assert kernels.masked_sum(values, mask) == float(values[mask].sum()), (n, p)


def test_advance_running_is_the_references_integration_and_finish_test():
    """One event's integration over the running jobs and the finished-jobs test
    (Simulator._integrate(dt, finish=True), one kernel call) against the reference path's
    numpy formulas, on random running sets: with and without restore time owed, dt of zero,
    jobs that finish exactly, within float slack, or not at all."""
    from types import SimpleNamespace

    from envs.sim.simulator import Simulator

    rng = np.random.default_rng(9)
    finished_some = finished_none = 0
    fields = ("rate", "overhead_left", "work_left", "work_done", "work_total", "attained_gpu_s", "run_s",
              "interference_loss_s", "interference")
    for trial in range(300):
        n_jobs = int(rng.integers(1, 60))
        run = rng.permutation(n_jobs)[: int(rng.integers(1, n_jobs + 1))].astype(np.int64)
        dt = 0.0 if trial % 7 == 0 else float(rng.random() * 100)
        rate = rng.random(n_jobs) * 2 + 0.05
        work_left = rng.random(n_jobs) * 200
        ends = rng.random(n_jobs) < 0.3  # these end within dt, within float slack (1e-7 s) of it, or just after
        work_left[ends] = rate[ends] * (dt * rng.choice([1.0, 0.5], size=ends.sum()) + rng.choice([0.0, 1e-9, 5e-7], size=ends.sum()))
        restoring = trial % 2 == 0
        overhead = np.where(rng.random(n_jobs) < 0.5, rng.random(n_jobs) * 20, 0.0) if restoring else np.zeros(n_jobs)
        total = work_left + rng.random(n_jobs) * 50
        arrays = dict(rate=rate, overhead_left=overhead, work_left=work_left, work_done=total - work_left, work_total=total,
                      attained_gpu_s=rng.random(n_jobs) * 10, run_s=rng.random(n_jobs), interference_loss_s=rng.random(n_jobs),
                      interference=rng.random(n_jobs) * 0.5 + 0.5)

        def sim():
            s = Simulator.__new__(Simulator)
            for name, a in arrays.items():
                setattr(s, name, a.copy())
            s.gpus_req = rng_gpus.copy()
            s.running = run.copy()
            s._restoring = set(run[overhead[run] > 0].tolist())
            s._scratch = np.full(n_jobs, -1, dtype=np.int64)
            s.jobs_in_system, s.jobs_in_system_s, s.energy_j, s.allocated_gpu_s, s.useful_work_s = len(run), 0.0, 0.0, 0.0, 0.0
            s.power, s.ledger = SimpleNamespace(power_w=1234.5), SimpleNamespace(allocated_gpus=17)
            return s

        rng_gpus = rng.integers(1, 9, size=n_jobs)
        fast, ref = sim(), sim()
        k = fast._integrate(dt, finish=True)
        with jit.reference_path():
            assert ref._integrate(dt, finish=True) is None
        for name in fields:
            assert np.array_equal(getattr(fast, name), getattr(ref, name)), (trial, name)
        assert fast.useful_work_s == ref.useful_work_s and fast._restoring == ref._restoring, trial
        done = (ref.overhead_left[run] + ref.work_left[run] / ref.rate[run]) <= 1e-7
        assert fast._scratch[:k].tolist() == run[done].tolist(), trial
        assert fast._scratch[k:len(run)][::-1].tolist() == run[~done].tolist(), trial  # the others, filled from the back
        finished_some += k > 0
        finished_none += k == 0
    assert finished_some > 100 and finished_none > 20


def test_queue_removal_is_the_references():
    """The queue kept by pushes and removals (a job's positions by binary search over the sort
    keys and over enqueue ranks), kernel against reference: the same FIFO and sorted ids, and
    the sorted ids are in the order of (remaining estimate, enqueue rank) after every step."""
    from envs.sim.queue import JobQueue

    n = 400
    rng = np.random.default_rng(5)
    ops = []
    queued: list[int] = []
    for j in range(n):
        ops.append(("push", j, float(rng.integers(0, 30)) * 60.0))  # many ties
        queued.append(j)
        while queued and rng.random() < 0.45:
            ops.append(("remove", queued.pop(int(rng.integers(len(queued)))), None))
    for j in queued[: len(queued) // 2]:  # removed jobs come back, with new ranks, as after a preemption
        ops += [("remove", j, None), ("push", j, float(rng.integers(0, 30)) * 60.0)]

    def run() -> list:
        q = JobQueue([1] * n, [0] * n)
        seen = []
        for op, j, remaining in ops:
            q.push(j, remaining) if op == "push" else q.remove(j)
            by_remaining = q.by_remaining()
            assert by_remaining == sorted(by_remaining) and sorted(j for _, _, j in by_remaining) == sorted(q.jobs())
            seen.append((q.jobs(), q.sorted_ids[: q.length].tolist()))
        return seen

    fast = run()
    with jit.reference_path():
        assert fast == run()



@pytest.mark.parametrize("cluster_name,workload,policy", [("topo-stress-128gpu", "topology-stress", "spread"),
                                                          ("mixed-64gpu", "llm-mix-bursty", "spread"),
                                                          ("philly-sized", "philly-full", "topology")])
def test_rate_update_is_the_references(cluster_name, workload, policy):
    """LoadModel.update_rates on the compiled path (envs.core.kernels.update_rates over the placed
    records' table) against its reference path, from copies of one load model: at decision points
    of an episode, random running jobs stop and start again on each copy alike, and the rates and
    interference come out bit for bit the same; on clusters whose jobs span nodes and cross
    uplinks (the test counts both), and on Philly's single-node jobs."""
    from baselines import make_baseline
    from envs.cluster.config import load_cluster
    from envs.decision.candidates import apply_candidate
    from envs.sim.replay import advance_to_decision
    from envs.sim.simulator import Simulator
    from envs.workload.generator import load_workload_spec, make_workload

    cluster = load_cluster(cluster_name)
    sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, 3, num_jobs=200))
    rule, rng = make_baseline(policy), np.random.default_rng(4)
    checked = crossing = multi = 0
    cset = advance_to_decision(sim, 8)
    while not sim.done and checked < 60:
        run = sim.running.tolist()
        if len(run) >= 2:
            load = sim.load
            out = {}
            for compiled in (True, False):
                m, rate, interference = load.copy(), sim.rate.copy(), sim.interference.copy()
                stopped = [run[i] for i in rng.permutation(len(run))[: max(1, len(run) // 3)]] if compiled else stopped
                with (jit.reference_path() if not compiled else _nullcontext()):
                    for j in stopped:
                        m.stop(j)
                    kept = np.array([j for j in run if j not in stopped], dtype=np.int64)
                    m.update_rates(rate, interference, kept)
                    after_stop = (rate[kept].copy(), interference[kept].copy())
                    for j in stopped:
                        m.start(j, sim.profiles[j])
                    m.update_rates(rate, interference, np.array(run, dtype=np.int64))
                out[compiled] = (after_stop, rate.copy(), interference.copy())
                assert not m.dirty_node.any() and not m.dirty_uplink.any()
            fast, ref = out[True], out[False]
            assert all(np.array_equal(a, b) for a, b in zip(fast[0], ref[0]))
            assert np.array_equal(fast[1], ref[1]) and np.array_equal(fast[2], ref[2])
            assert np.array_equal(fast[1][run], sim.rate[run])  # everything started again: the rates as before
            checked += 1
            crossing += any(len(load.placed[j].uplinks) for j in run)
            multi += any(len(load.placed[j].nodes) > 1 for j in run)
        apply_candidate(sim, cset, rule.select(cset.state, cset))
        cset = advance_to_decision(sim, 8)
    assert checked >= 20
    if cluster_name != "philly-sized":
        assert crossing >= 5 and multi >= 5, (crossing, multi)


def test_a_full_memo_renews_the_table_and_changes_nothing(monkeypatch):
    """When the load model's memo of placed records is full it starts a new memo and a new table
    holding only its placed jobs' records (LoadModel._renew): the episode is the same bit for
    bit, the table stays bounded, and a fork made before a renewal goes on with its own table."""
    import envs.sim.load
    from baselines import make_baseline
    from envs.cluster.config import load_cluster
    from envs.sim.replay import replay
    from envs.sim.simulator import Simulator
    from envs.workload.generator import load_workload_spec, make_workload

    cluster = load_cluster("topo-stress-128gpu")
    jobs = make_workload(load_workload_spec("topology-stress"), cluster, 2, num_jobs=150)

    def run(fork_at: int | None = None):
        sim = Simulator(cluster, jobs)
        select = make_baseline("spread").select
        fork = None
        if fork_at is not None:
            replay(sim, select, 8, max_steps=fork_at)
            fork = sim.fork()
        replay(sim, select, 8)
        if fork is not None:
            replay(fork, select, 8)
            sim = fork
        digest = hashlib.sha256()
        for name in ("end", "work_done", "interference_loss_s", "rate"):
            digest.update(getattr(sim, name).tobytes())
        return digest.hexdigest(), sim.load._table.rows, len(sim.load.placed)

    full = run()
    assert full[1] > 20  # without a renewal the table keeps every record made
    monkeypatch.setattr(envs.sim.load, "PLACED_MEMO_LIMIT", 3)
    small = run()
    assert small[0] == full[0]
    assert small[1] <= 3 + 1 + small[2] + 1  # the memo's records, the one added after it filled, the placed jobs'
    forked = run(fork_at=40)
    assert forked[0] == full[0]
    with jit.reference_path():
        assert run()[0] == full[0]


def test_queue_benchmark_times_both_paths(capsys):
    """benchmarks.queue_ops times push and remove on both paths around a queue it keeps at each
    length (it checks the length itself), one line per path and length."""
    from benchmarks.queue_ops import main

    main(["--lengths", "30,60", "--ops", "200", "--repeat", "1", "--reference"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["compiled"] * 2 * jit.ENABLED + ["reference"] * 2
    assert all("push" in line and "remove" in line for line in lines)


def _episode_digest(env_kwargs: dict, seed: int, max_steps: int, python_loop: bool = False) -> tuple[str, dict, int]:
    """A digest of everything an episode shows the agent under random valid actions: every
    observation array, mask, reward and end flag; and the final metrics. With `python_loop` the
    env's episode runs in the Python decision loop (its candidate set read after the reset moves
    it there from the native core)."""
    env = GpuClusterEnv(**env_kwargs)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    if python_loop:
        assert env.cset is not None
    h = hashlib.sha256()
    steps = 0
    done = False
    while not done and steps < max_steps:
        for k in ("candidates", "global", "action_mask"):
            h.update(obs[k].tobytes())
        valid = np.flatnonzero(env.action_masks())
        obs, reward, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        h.update(np.float64(reward).tobytes() + bytes([term, trunc]))
        done = term or trunc
        steps += 1
    sim = env.sim
    h.update(np.array([sim.now, sim.useful_work_s, sim.energy_j, sim.jobs_in_system_s, sim.allocated_gpu_s]).tobytes())
    for name in ("work_done", "attained_gpu_s", "run_s", "interference_loss_s", "end", "rate"):
        h.update(getattr(sim, name).tobytes())
    return h.hexdigest(), episode_metrics(sim, env.objective), steps


@functools.lru_cache(maxsize=None)
def _reference_episode_digest(env_items: tuple, seed: int, max_steps: int) -> tuple[str, dict, int]:
    """`_episode_digest` on the reference path, computed once per module for the tests that hold
    the compiled path to the same episode (test_episodes_are_bit_identical_to_the_reference and
    test_env_steps_run_the_compiled_event_loop_with_the_preempt_las_test share two); each test
    runs its compiled episode itself. `env_items`: the env's keyword arguments as sorted items."""
    with jit.reference_path():
        assert not jit.ENABLED
        return _episode_digest(dict(env_items), seed, max_steps)


def _reference_digest_of(env_kwargs: dict, seed: int, max_steps: int) -> tuple[str, dict, int]:
    return _reference_episode_digest(tuple(sorted(env_kwargs.items())), seed, max_steps)


# Every shipped cluster, with a workload that fits it (small job counts: whole episodes).
EPISODES = [
    ({"scenario": "default", "num_jobs": 80}, 400),
    ({"scenario": "slo-preempt", "num_jobs": 80}, 400),
    ({"scenario": "hetero", "num_jobs": 80}, 400),
    ({"scenario": "topology-stress", "num_jobs": 80}, 400),
    ({"scenario": "large", "num_jobs": 150}, 400),
    ({"scenario": "philly", "num_jobs": 150}, 400),
    ({"cluster": "h100-4node", "workload": "llm-mix", "num_jobs": 60}, 400),
]


@pytest.mark.parametrize("env_kwargs,max_steps", EPISODES, ids=[str(e[0]) for e in EPISODES])
def test_episodes_are_bit_identical_to_the_reference(env_kwargs, max_steps):
    for seed in (0, 1):
        assert jit.ENABLED
        fast = _episode_digest(env_kwargs, seed, max_steps)
        ref = _reference_digest_of(env_kwargs, seed, max_steps)
        assert fast[2] == ref[2] and fast[2] > 10
        assert {k: repr(v) for k, v in fast[1].items()} == {k: repr(v) for k, v in ref[1].items()}  # nan == nan too
        assert fast[0] == ref[0]


@pytest.mark.parametrize("cluster_name", ["mixed-64gpu", "hetero-64gpu", "philly-sized", "h100-1024gpu",
                                          "topo-stress-128gpu", "h100-4node"])
def test_node_take_is_the_reference_rule(cluster_name):
    """Every placement rule's per-node take (nodes in the reference dict's order) on random
    availability, kernel against reference."""
    from envs.cluster.config import load_cluster
    from envs.decision.placement import RULES, _node_take

    c = load_cluster(cluster_name)
    rng = np.random.default_rng(2)
    sizes = c.node_gpus
    for _ in range(400):
        free = tuple(int(rng.integers(0, s + 1)) if rng.random() < 0.7 else 0 for s in sizes)
        tp = int(rng.choice([1, 2, 4, 8]))
        need = tp * int(rng.integers(1, max(2, 2 * sum(free) // tp + 2)))
        for rule in range(len(RULES)):
            fast = _node_take(c, free, need, tp, rule)
            with jit.reference_path():
                ref = _node_take(c, free, need, tp, rule)
            assert fast == ref and (fast is None or list(fast.items()) == list(ref.items())), (free, need, tp, rule)


def _queued(i: int, gpus: int, estimate_s: float, priority: str, attained: float) -> dict:
    return {"id": f"j{i}", "num_gpus": gpus, "tp_degree": 1, "mem_per_gpu_gb": 40.0, "kind": "finetune",
            "priority": priority, "preemptible": True, "comm_fraction": 0.1, "tp_comm_share": 0.5,
            "estimate_s": estimate_s, "checkpoint_s": 10.0, "restore_s": 10.0, "arrival_s": float(i),
            "attained_gpu_s": attained, "queued_since_s": float(i)}


def _windows_match_the_reference(queued: list[dict]) -> list[list[str]]:
    """select_window on h100-4node (8 of its 32 GPUs busy) with `queued` waiting, compiled and
    reference, for 3, 8 and 16 slots: asserts they are equal and full; returns the windows'
    job names."""
    from envs.cluster.config import load_cluster
    from envs.decision.cache import clear_cluster_memos
    from envs.decision.state import ClusterState
    from envs.decision.window import select_window

    cluster = load_cluster("h100-4node")
    running = {**_queued(0, 8, 1e5, "high", 0.0), "preemptible": False, "gpus": list(range(8))}
    del running["queued_since_s"]
    data = {"time_s": 5000.0, "running": [running], "queued": queued}
    windows = []
    for q in (3, 8, 16):
        state = ClusterState.from_dict(data, cluster)
        fast = select_window(state, q)
        clear_cluster_memos(cluster)
        with jit.reference_path():
            ref = select_window(ClusterState.from_dict(data, cluster), q)
        assert fast == ref and len(fast) == q
        windows.append([state.names[j] for j in fast])
    return windows


@pytest.mark.parametrize("blocked_first", [0, 300])
def test_window_is_the_references(blocked_first):
    """The round-robin window over a long queue, kernel against reference: with the shortest
    order walked from the sorted queue, and (300 infeasible short jobs first) computed from the
    remaining estimates instead."""
    rng = np.random.default_rng(3)
    queued = [_queued(1 + i, 32, 100.0 + i, "normal", 0.0) for i in range(blocked_first)]
    queued += [_queued(1000 + i, int(rng.choice([1, 2, 4])), float(rng.integers(1, 50)) * 600.0,
                       str(rng.choice(["low", "normal", "high"])), float(rng.integers(0, 4)) * 3600.0)
               for i in range(200)]
    _windows_match_the_reference(queued)


@pytest.mark.parametrize("tail", ["none", "high", "low"])
def test_window_over_a_long_queue_of_equal_jobs_is_the_references(tail):
    """The kernel stops its pass early once both heads hold jobs no later job can beat (equal
    priorities, no service yet): the window is still the reference's, and a high-priority job
    at the very end of the queue ("high") still takes its slot by the priority order. With every
    job of the low class ("low") the bound never holds and the whole queue is read."""
    rng = np.random.default_rng(5)
    prio = "low" if tail == "low" else "normal"
    queued = [_queued(1 + i, 32, 100.0 + i, prio, 0.0) for i in range(50)]  # never fit: 24 GPUs are free
    queued += [_queued(100 + i, int(rng.choice([1, 2, 4])), float(rng.integers(1, 50)) * 600.0, prio, 0.0)
               for i in range(400)]
    if tail == "high":
        queued.append(_queued(999, 2, 1e6, "high", 0.0))
    windows = _windows_match_the_reference(queued)
    if tail == "high":
        assert all("j999" in w for w in windows)  # the priority order's head


def _in_fresh_process(code: str, **env) -> str:
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return out.stdout.strip()


_DIGEST_CODE = """
import numpy as np
from envs.core import jit
from tests.test_kernels import _episode_digest
print(jit.AVAILABLE, jit.ENABLED, _episode_digest({"scenario": "default", "num_jobs": 40}, 0, 200)[0])
"""


def test_gangsched_jit_0_and_a_machine_without_numba_run_the_reference_path():
    expect = _episode_digest({"scenario": "default", "num_jobs": 40}, 0, 200)[0]
    assert _in_fresh_process(_DIGEST_CODE, GANGSCHED_JIT="0") == f"True False {expect}"
    no_numba = "import sys; sys.modules['numba'] = None\n" + _DIGEST_CODE  # `import numba` raises ImportError
    assert _in_fresh_process(no_numba) == f"False False {expect}"
    assert _in_fresh_process(_DIGEST_CODE) == f"True True {expect}"


def _replay_record(cluster_name: str, workload: str, rule: str, seed: int, num_jobs: int) -> tuple:
    """Everything a replay leaves behind: the schedule's digest (benchmarks.replay_philly), the
    timeline, the finished order, the integrals and version counters, and the metrics."""
    from baselines import make_baseline
    from benchmarks.replay_philly import schedule_digest
    from envs.cluster.config import load_cluster
    from envs.decision.cache import clear_cluster_memos
    from envs.sim.replay import replay
    from envs.sim.simulator import Simulator
    from envs.workload.generator import load_workload_spec, make_workload

    cluster = load_cluster(cluster_name)
    clear_cluster_memos(cluster)  # start from no job classes, as a fresh process would (a test counts their stops)
    sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, seed, num_jobs))
    base = make_baseline(rule)
    # through the Python decision loop and its compiled event loop: a whole replay of a rule the
    # native core carries out would be one native call (tests/test_native_replay.py holds it to this loop)
    steps = replay(sim, lambda state, cset: base.select(state, cset), queue_window=8, preempt_las=base.preempt_las)
    return (steps, schedule_digest(sim), sim.timeline, sim.finished_order, sim.version, sim.ledger.alloc_version,
            [sim.now, sim.jobs_in_system_s, sim.energy_j, sim.allocated_gpu_s, sim.useful_work_s, sim.preemption_gpu_s],
            {k: repr(v) for k, v in episode_metrics(sim).items()})


REPLAYS = [  # every shipped cluster; `priority` preempts, so restores are owed inside the compiled loop
    ("mixed-64gpu", "llm-mix-bursty", "sect", 300),
    ("mixed-64gpu", "slo-preempt", "priority", 300),
    ("hetero-64gpu", "llm-mix", "sjf", 200),
    ("topo-stress-128gpu", "topology-stress", "spread", 200),
    ("h100-1024gpu", "llm-mix-large", "topology", 300),
    ("philly-sized", "philly-busy-vc", "binpack", 400),
    ("h100-4node", "llm-mix", "easy", 80),
    ("mixed-64gpu", "slo-preempt", "tiresias", 300),  # preempt-las: the loop's test is can_place (las_can_place)
    ("topo-stress-128gpu", "topology-stress", "tiresias", 200),
]


@pytest.mark.parametrize("cluster_name,workload,rule,num_jobs", REPLAYS, ids=[f"{r[0]}-{r[2]}" for r in REPLAYS])
def test_events_between_decisions_in_one_compiled_call_are_the_references(cluster_name, workload, rule, num_jobs,
                                                                          monkeypatch):
    """The events between decisions run in Simulator.run_events (envs.core.kernels.run_events):
    completions, arrivals and restores, until a queued job fits (for a rule that may take
    preempt-las, `tiresias`: until some queued job has a valid placement, preempt-las's
    included); a start it chooses is carried out in the same call (Simulator.start_and_run).
    The replay is the reference path's, bit for bit; with buffers of 3 events the calls also
    stop to be emptied (EV_ROOM), and jobs of a shape not yet registered stop them too
    (EV_NEW_CLASS)."""
    from envs.sim import simulator

    stops: dict[int, int] = {}
    starts = [0]
    run_events = simulator.Simulator._run_events

    def counted(self, *args):
        stop = run_events(self, *args)
        stops[stop] = stops.get(stop, 0) + 1
        starts[0] += args[-2] >= 0  # `launch`: a start in the same call
        return stop

    monkeypatch.setattr(simulator.Simulator, "_run_events", counted)
    monkeypatch.setattr(simulator._EventBuffers, "ROWS", 3)
    fast = _replay_record(cluster_name, workload, rule, 0, num_jobs)
    with jit.reference_path():
        ref = _replay_record(cluster_name, workload, rule, 0, num_jobs)
    assert fast[0] == ref[0] and fast[0] > 20
    assert fast[1:] == ref[1:]
    assert stops[kernels.EV_FEASIBLE] > 10 and stops[kernels.EV_ROOM] and stops[kernels.EV_NEW_CLASS], stops
    assert starts[0] > 10


def test_python_loop_runs_the_compiled_event_loop_with_the_preempt_las_test(monkeypatch):
    """The Python decision loop on the compiled path (the env's, once its Python state is read;
    every replay with a rule that is not native) steps through envs.sim.replay.decide: a start,
    or a WAIT, and the events after it are one compiled call whose stop test is the decision
    loop's can_place, so it also stops where preempt-las is a queued job's only valid placement.
    The episodes are bit for bit the reference path's; here: those calls happen, with starts,
    WAITs and stops made by the preempt-las test alone."""
    from envs.decision.window import any_feasible
    from envs.sim import replay, simulator

    counts = {"starts": 0, "las_only": 0, "waits": 0, "waits_in_python": 0}
    run_events, decide, apply_candidate = simulator.Simulator._run_events, replay.decide, replay.apply_candidate

    def counted(self, class_of_shape, class_index, until, test_first, las, launch, launch_gpus):
        stop = run_events(self, class_of_shape, class_index, until, test_first, las, launch, launch_gpus)
        assert las is not None  # the env offers preempt-las
        counts["starts"] += launch >= 0
        counts["las_only"] += stop == kernels.EV_FEASIBLE and not any_feasible(self.decision_state())
        return stop

    def fusable(sim, cset, action):  # a WAIT with no job checkpointing or reserved
        return jit.ENABLED and action == cset.wait_index and not sim.checkpointing and not sim.reserved

    def counted_decide(sim, cset, action, *args, **kwargs):
        counts["waits"] += fusable(sim, cset, action)
        return decide(sim, cset, action, *args, **kwargs)

    def counted_apply(sim, cset, action):
        counts["waits_in_python"] += fusable(sim, cset, action)
        return apply_candidate(sim, cset, action)

    monkeypatch.setattr(simulator.Simulator, "_run_events", counted)
    monkeypatch.setattr("envs.gym.env.decide", counted_decide)
    monkeypatch.setattr(replay, "apply_candidate", counted_apply)
    for env_kwargs in ({"scenario": "slo-preempt", "num_jobs": 80}, {"scenario": "philly", "num_jobs": 150}):
        fast = _episode_digest(env_kwargs, 0, 400, python_loop=True)
        ref = _reference_digest_of(env_kwargs, 0, 400)  # the reference path does not reach the counters above
        assert fast[0] == ref[0]
    assert counts["starts"] > 50 and counts["las_only"] > 10 and counts["waits"] > 20, counts
    assert counts["waits_in_python"] == 0, counts


def test_run_events_stops_at_a_lookaheads_horizon_as_the_reference():
    """The honest lookahead's rollouts advance forks to a horizon (advance_to_decision's `until`):
    its decisions and the episode are the reference path's, and its rollouts stopped there (with
    the rollouts in Python, as where the native rollout does not serve: tests/test_native_rollout.py
    checks that one)."""
    import agents.lookahead as L
    from agents.lookahead import run_lookahead
    from envs.cluster.config import load_cluster
    from envs.scenario import load_scenario
    from envs.workload.generator import load_workload_spec, make_workload
    from tests.helpers import count_event_loop_stops

    sc = load_scenario("default")
    cluster, spec = load_cluster(sc.cluster), load_workload_spec(sc.workload)
    jobs = make_workload(spec, cluster, 3, num_jobs=30)
    def record():
        sim, steps, stats = run_lookahead("lookahead", cluster, spec, jobs, 3, sc.lookahead, sc.objective)
        return steps, stats.searched, stats.changed, sim.finished_order, sim.timeline, sim.end.tolist()

    with pytest.MonkeyPatch.context() as m:
        stops = count_event_loop_stops(m)
        m.setattr(L, "NATIVE_ROLLOUTS", False)
        fast = record()
    with jit.reference_path():
        ref = record()
    assert fast == ref and fast[1] > 5
    assert stops.get(kernels.EV_UNTIL, 0) > 5, stops


@pytest.mark.parametrize("env_kwargs", [{"scenario": "slo-preempt", "num_jobs": 120}, {"scenario": "hetero", "num_jobs": 120},
                                        {"scenario": "topology-stress", "num_jobs": 120}, {"scenario": "philly", "num_jobs": 200}],
                         ids=lambda kw: kw["scenario"])
def test_candidate_features_kernel_is_the_reference(env_kwargs):
    """envs.core.kernels.candidate_rows (the job and placement blocks of candidate_features) writes
    bit for bit what the reference path writes, on the same candidate set, over random-action
    episodes that reach rows with victims and window jobs that owe a restore."""
    from envs.decision.features import candidate_features

    env = GpuClusterEnv(**env_kwargs)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    states = victim_rows = restoring = 0
    for _ in range(300):
        cset = env.cset
        fast = candidate_features(cset)
        with jit.reference_path():
            ref = candidate_features(cset)
        assert fast[0].tobytes() == ref[0].tobytes() and fast[1].tobytes() == ref[1].tobytes()
        states += 1
        victim_rows += sum(bool(cset.candidates[i].victims) for i in cset.valid_placements())
        restoring += bool(len(cset.window)) and bool(cset.state.needs_restore[cset.window].any())
        valid = np.flatnonzero(cset.mask)
        _, _, term, trunc, _ = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            env.reset(seed=states)
    assert victim_rows > 20 and restoring > 5, (victim_rows, restoring)


def test_log_scale_kernel_is_the_reference():
    from envs.decision.features import log_scale

    xs = np.concatenate([[0.0, -0.0, -5.0, 1e-300, 1.0, 3600.0, 1e6, 1e12], np.random.default_rng(0).exponential(5e4, 500)])
    assert [kernels.log_scale(x) for x in xs] == [log_scale(float(x)) for x in xs]
