"""The compiled feasibility kernels (envs.core.kernels: `class_fits`, `las_totals`, `las_can_place`
inside `run_events`) count TP groups that span trays (rack-scale NVLink domains, the `nvl72`
scenario) as the plain-Python reference does (envs.decision.window `_spanning_totals`: whole TP groups of
free GPUs on nodes with the memory level, plus, per domain that hosts a spanning TP degree, its
fully available trays in whole groups of trays). The reference path (`envs.core.jit.reference_path()`)
is the specification: every expected value here is what it gives, in the same process.

* random states on clusters with spanning domains: the feasibility rows of every class, the
  feasible queue, the preempt-las validity and the jobs only preempt-las places;
* random-action env episodes of the nvl72 scenario: every observation, mask, reward and the
  final metrics, with the events between decisions in the compiled loop;
* replays of the nvl72 scenario's workload under several baselines (preempt-las's `tiresias`
  among them): the schedule digest, the timeline, the integrals and the metrics.
"""

from __future__ import annotations

import numpy as np
import pytest

from envs.cluster.config import cluster_from_dict, load_cluster
from envs.core import jit, kernels
from envs.decision.cache import clear_cluster_memos
from envs.decision.state import ClusterState
from tests.helpers import count_event_loop_stops, needs_compiled
from tests.test_kernels import _episode_digest, _replay_record

pytestmark = [pytest.mark.skipif(not jit.AVAILABLE, reason="numba is not installed"), needs_compiled()]

# Three memory levels (H100 80 GB, B200 180 GB, GB200 186 GB) and four NVLink domains: rackG
# (six GB200 trays of 4: TP 8, 12, 16, 24 span), rackB (eight B200 trays of 4), rackC (four
# B200 nodes of 8: only TP 16 and 24 span; TP 8 sits on one node), rackM (GB200 trays of 4 and
# of 2: no common tray size, so nothing spans there); two H100 nodes of 8 outside any domain.
MIXED = cluster_from_dict({
    "name": "spanning-mix",
    "node_types": {"gb": {"gpu_type": "GB200-186GB", "gpus": 4}, "gb2": {"gpu_type": "GB200-186GB", "gpus": 2},
                   "b": {"gpu_type": "B200-180GB", "gpus": 4}, "b8": {"gpu_type": "B200-180GB", "gpus": 8},
                   "h": {"gpu_type": "H100-80GB", "gpus": 8}},
    "nodes": [{"names": "h0", "type": "h"}, {"names": "g[0-5]", "type": "gb"}, {"names": "b[0-7]", "type": "b"},
              {"names": "c[0-3]", "type": "b8"}, {"names": "m[0-1]", "type": "gb"}, {"names": "m[2-3]", "type": "gb2"},
              {"names": "h1", "type": "h"}],
    "nvlink_domains": [{"name": "rackG", "nodes": "g[0-5]"}, {"name": "rackB", "nodes": "b[0-7]"},
                       {"name": "rackC", "nodes": "c[0-3]"}, {"name": "rackM", "nodes": "m[0-3]"}],
    "switches": [{"name": "leafG", "nodes": "h0,g[0-5]"}, {"name": "leafB", "nodes": "b[0-7]"},
                 {"name": "leafC", "nodes": "c[0-3],m[0-3],h1"}, {"name": "spine", "switches": "leafG,leafB,leafC"}],
}, "<spanning-mix>")

TPS = [1, 2, 4, 6, 8, 12, 16, 24]
MEMORY = [40.0, 100.0, 183.0, 200.0]  # every level, the two largest, GB200 only, none
PRIORITIES = ["low", "normal", "high"]


def test_the_mixed_cluster_spans_where_intended():
    assert MIXED.spanning_domains(8) == (0, 1) and MIXED.spanning_domains(12) == (0, 1)
    assert MIXED.spanning_domains(16) == MIXED.spanning_domains(24) == (0, 1, 2)
    assert not MIXED.spans(4) and not MIXED.spans(6)


def _random_state(cluster, rng: np.random.Generator) -> dict:
    """A state as plain data: racks filled unevenly (per node: whole, partly or not free), the
    busy GPUs held by running TP-1 jobs of random priority, preemptibility and attained service
    (all three LAS queues); 12 queued jobs of random TP degree, gang, memory and priority, some
    of them starved (queued long against their executed time)."""
    gpus = cluster.node_gpus.tolist()
    first = np.concatenate([[0], np.cumsum(gpus)[:-1]]).tolist()
    busy_share = rng.uniform(0.0, 0.9)
    held = []
    for n, g in enumerate(gpus):
        u = rng.random()
        k = 0 if u > busy_share else (g if u < busy_share / 3 else int(rng.integers(1, g + 1)))
        held += list(range(first[n], first[n] + g))[g - k:]
    rng.shuffle(held)
    running = []
    while held:
        size = int(rng.integers(1, 9))
        take, held = held[:size], held[size:]
        running.append({"id": f"r{len(running)}", "num_gpus": len(take), "gpus": sorted(take),
                        "priority": PRIORITIES[int(rng.integers(0, 3))], "preemptible": bool(rng.random() < 0.7),
                        "estimate_s": 1e5, "arrival_s": 0.0, "mem_per_gpu_gb": 1.0,
                        "attained_gpu_s": float(rng.choice([0.0, 2000.0 * len(take), 8000.0 * len(take), 1e5 * len(take)]))})
    queued = []
    for i in range(12):
        tp = int(rng.choice(TPS))
        queued.append({"id": f"q{i}", "num_gpus": tp * int(rng.integers(1, min(6, sum(gpus) // tp) + 1)), "tp_degree": tp,
                       "mem_per_gpu_gb": float(rng.choice(MEMORY)), "priority": PRIORITIES[int(rng.integers(0, 3))],
                       "estimate_s": 3600.0, "arrival_s": 0.0, "queued_since_s": float(rng.choice([0.0, 9000.0])),
                       "attained_gpu_s": float(rng.choice([0.0, 4000.0, 90000.0]))})
    return {"time_s": 10000.0, "running": running, "queued": queued}


def _views(data: dict, cluster) -> tuple:
    """What the window shows of a fresh state from `data` on the current path."""
    from envs.decision.window import class_fits, feasible_queue, job_classes, las_fits, las_only_queue

    state = ClusterState.from_dict(data, cluster)
    fits = class_fits(state)
    queue = state.queue
    return (tuple(f.tolist() for f in fits[:3]), job_classes(state)[queue].tolist(), feasible_queue(state).tolist(),
            las_fits(state, queue).tolist(), las_only_queue(state).tolist())


@pytest.mark.parametrize("cluster_name", ["gb200-nvl72-4rack", "spanning-mix"])
def test_feasibility_on_random_states_is_the_references(cluster_name):
    """Per class: fits now, only after preemption, either; the feasible queue; preempt-las
    validity per queued job and the jobs only it places; compiled against reference on 300
    random states. The states are checked to need the spanning count: classes whose TP degree
    spans trays are found feasible often, and infeasible often."""
    from envs.decision.window import _classes

    cluster = MIXED if cluster_name == "spanning-mix" else load_cluster(cluster_name)
    clear_cluster_memos(cluster)
    rng = np.random.default_rng(11)
    spanning_fit = spanning_blocked = spanning_las = 0
    for _ in range(300):
        data = _random_state(cluster, rng)
        assert jit.ENABLED
        fast = _views(data, cluster)
        with jit.reference_path():
            ref = _views(data, cluster)
        assert fast == ref, data
        cls = _classes(ClusterState.from_dict(data, cluster))
        spans = [cluster.spans(cls.tp[c]) for c in fast[1]]
        either = [fast[0][2][c] for c in fast[1]]
        spanning_fit += sum(s and e for s, e in zip(spans, either))
        spanning_blocked += sum(s and not e for s, e in zip(spans, either))
        spanning_las += sum(s and f for s, f in zip(spans, fast[3]))
    assert spanning_fit > 100 and spanning_blocked > 100 and spanning_las > 5, (spanning_fit, spanning_blocked, spanning_las)


def test_class_fits_kernel_adds_whole_groups_of_trays_by_hand():
    """gb200-nvl72-4rack (racks of 18 trays of 4): free trays 0-8 of rack 0 (9: two TP-16
    groups of four trays, four TP-8 pairs), trays 18-20 of rack 1 (3: no TP-16 group, one
    pair), tray 21 with 3 GPUs free (no whole tray). Row 0 (no preemption) per class, by hand:
    TP 16 -> 2 groups = 32 GPUs, TP 8 -> 5 pairs = 40, TP 12 -> three trays a group: 3 + 1 = 4
    groups = 48, TP 4 -> 12 trays = 48 (one group per whole tray; tray 21 has no 4)."""
    from envs.decision.window import _class_index

    c = load_cluster("gb200-nvl72-4rack")
    clear_cluster_memos(c)
    data = {"time_s": 0.0, "queued": [
        {"id": f"q{k}", "num_gpus": need, "tp_degree": tp, "mem_per_gpu_gb": 100.0, "priority": "normal",
         "estimate_s": 60.0, "arrival_s": 0.0}
        for k, (tp, need) in enumerate([(16, 32), (16, 48), (8, 40), (8, 48), (12, 48), (12, 60), (4, 48), (4, 52)])]}
    state = ClusterState.from_dict(data, c)
    from envs.decision.window import class_fits

    class_fits(state)  # registers the classes
    index = _class_index(state)
    free = np.zeros(c.num_nodes, dtype=np.int64)
    free[0:9] = 4
    free[18:21] = 4
    free[21] = 3
    rows = kernels.class_fits(free, np.zeros_like(state.node_preemptible), *index)
    assert rows[0].tolist() == [True, False, True, False, True, False, True, False]


EPISODES = [({"scenario": "nvl72", "num_jobs": 150}, 400), ({"scenario": "nvl72", "num_jobs": 400}, 600)]


@pytest.mark.parametrize("env_kwargs,max_steps", EPISODES, ids=["nvl72-150", "nvl72-400"])
def test_nvl72_episodes_are_bit_identical_to_the_reference(env_kwargs, max_steps, monkeypatch):
    """Random-action env episodes of nvl72 in the Python decision loop on the compiled path (the
    env's once its Python state is read; tests/test_native_episode.py has the native episode's):
    every observation, mask, reward, end flag and the final metrics as the reference path's; the
    events between decisions ran in the compiled loop with the spanning rows in its class index
    (no fallback to the reference path)."""
    from envs.sim import simulator

    calls = {"spanning": 0, "feasible": 0}
    run_events = simulator.Simulator._run_events

    def counted(self, class_of_shape, class_index, *args):
        stop = run_events(self, class_of_shape, class_index, *args)
        calls["spanning"] += len(class_index[7]) > 0  # span rows: TP degrees whose groups span trays
        calls["feasible"] += stop == kernels.EV_FEASIBLE
        return stop

    monkeypatch.setattr(simulator.Simulator, "_run_events", counted)
    for seed in (0, 1):
        fast = _episode_digest(env_kwargs, seed, max_steps, python_loop=True)
        with jit.reference_path():
            ref = _episode_digest(env_kwargs, seed, max_steps)
        assert fast[2] == ref[2] and fast[2] > 100
        assert {k: repr(v) for k, v in fast[1].items()} == {k: repr(v) for k, v in ref[1].items()}
        assert fast[0] == ref[0]
    assert calls["spanning"] > 100 and calls["feasible"] > 100, calls


REPLAYS = ["sect", "binpack", "topology", "tiresias", "priority"]


@pytest.mark.parametrize("rule", REPLAYS)
def test_nvl72_replays_in_the_compiled_event_loop_are_the_references(rule, monkeypatch):
    """A replay of nvl72's workload (400 jobs) under `rule`: the schedule digest, timeline,
    finished order, version counters, integrals and metrics are the reference path's; the events
    between decisions ran in the compiled loop, with buffers of 3 events so that its calls also
    stop to be emptied (EV_ROOM)."""
    from envs.sim import simulator

    stops = count_event_loop_stops(monkeypatch)
    monkeypatch.setattr(simulator._EventBuffers, "ROWS", 3)
    fast = _replay_record("gb200-nvl72-8rack", "llm-mix-nvl72", rule, 0, 400)
    with jit.reference_path():
        ref = _replay_record("gb200-nvl72-8rack", "llm-mix-nvl72", rule, 0, 400)
    assert fast[0] == ref[0] and fast[0] > 300
    assert fast[1] == ref[1]  # the schedule digest
    assert fast[2:] == ref[2:]
    assert stops[kernels.EV_FEASIBLE] > 100 and stops[kernels.EV_ROOM] and stops[kernels.EV_NEW_CLASS], stops
