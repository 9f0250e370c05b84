"""Segment requests (Slurm topology/block's `--segment`, counted in GPUs: `Job.segment_gpus`): a
gang of k segments, each inside one block (an NVLink domain; outside them, a leaf switch's nodes).
Feasibility that agrees with every rule's placements on random states, the native core (its
placements, candidates, feasibility, rollouts and replays) against the reference, whole episodes,
the job record's, the workloads' and the decision state's validation, and the speed model (a
segment changes nothing beyond where its GPUs are). The hand-worked placements and the `block`
baseline's choices are in tests/test_segment_rules.py.

The GB200 clusters number trays 18 to a rack (rack r: nodes 18r..18r+17, tray n: GPUs
4n..4n+3); on gb200-nvl72-4rack racks 0-1 are under leaf0, racks 2-3 under leaf1."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from baselines import make_baseline
from envs import core
from envs.cluster.config import ConfigError, load_cluster
from envs.cluster.memo import clear_cluster_memos
from envs.cluster.speed import SpeedModel, placement_profile, rates_of
from envs.core.jit import reference_path
from envs.decision import placement as P
from envs.decision.candidates import build_candidates
from envs.decision.window import class_fits, job_classes
from envs.jobs import Job, JobKind
from envs.sim.replay import replay
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload, workload_spec_from_dict
from tests.helpers import needs_compiled, trays

NVL72_4 = load_cluster("gb200-nvl72-4rack")
STRESS = load_cluster("topo-stress-128gpu")
HETERO = load_cluster("hetero-64gpu")
EXAMPLE = "configs/workloads/llm-mix-nvl72-segments.yaml"


def _job(job_id: int, gpus: int, tp: int = 1, segment: int = 0, *, priority: int = 1, preemptible: bool = True,
         mem: float = 1.0, work_s: float = 3600.0, kind: JobKind = JobKind.PRETRAIN) -> Job:
    return Job(job_id=job_id, arrival_s=0.0, kind=kind, gpus=gpus, tp_degree=tp, mem_per_gpu_gb=mem, work_s=work_s,
               estimate_s=work_s, comm_fraction=0.3, tp_comm_share=0.5, priority=priority, preemptible=preemptible,
               segment_gpus=segment)


def _state(cluster, busy: list[list[int]], queued: list[tuple], *, filler_priority: int = 0):
    """A simulator at time 0 where one low-priority preemptible job holds each list of `busy` GPUs
    and the jobs `queued` ((gpus, tp, segment), priority normal) wait; its decision state."""
    jobs = [_job(i, len(g), work_s=1e6, priority=filler_priority, kind=JobKind.BATCH) for i, g in enumerate(busy)]
    jobs += [_job(len(busy) + k, *shape) for k, shape in enumerate(queued)]
    sim = Simulator(cluster, jobs)
    for i, g in enumerate(busy):
        sim.start(i, np.array(g))
    return sim, sim.decision_state()


def _place(state, j: int, rule: int) -> np.ndarray | None:
    return P.place(state, int(state.num_gpus[j]), int(state.tp_degree[j]), float(state.mem_per_gpu_gb[j]), rule,
                   segment=state.segment_of(j))


# ---------------------------------------------------------------- the job record


@pytest.mark.parametrize("gpus, tp, segment, message", [
    (48, 8, 12, "multiple of the TP group"), (64, 8, 24, "must divide the gang"), (64, 8, -8, "whole number of GPUs >= 0"),
    (64, 8, True, "whole number of GPUs >= 0"), (64, 8, 16.0, "whole number of GPUs >= 0")])
def test_a_bad_segment_is_refused_naming_the_field(gpus, tp, segment, message):
    with pytest.raises(ValueError, match=f"field 'segment_gpus'.*{message}"):
        dataclasses.replace(_job(7, gpus, tp), segment_gpus=segment).validate()


def test_a_segment_request_is_stated_in_the_record_only_when_made():
    assert "segment_gpus" not in _job(0, 64, 8).to_dict()
    assert _job(0, 64, 8, 16).to_dict()["segment_gpus"] == 16 and _job(0, 64, 8, 16).num_segments == 4


# ---------------------------------------------------------------- feasibility agrees with placement


def _random_state(cluster, rng, n_queued: int = 6):
    """Random busy GPUs (low-priority preemptible fillers, whole nodes or parts of them) and
    queued segment jobs of random shapes that fit the cluster's blocks when it is empty."""
    busy, per_node = [], rng.uniform(0.0, 0.9)
    for n in range(cluster.num_nodes):
        lo, size = int(cluster.node_first_gpu[n]), int(cluster.node_gpus[n])
        if rng.random() < per_node:
            k = size if rng.random() < 0.6 else int(rng.integers(1, size + 1))
            busy.append(list(range(lo, lo + k)))
    queued = []
    while len(queued) < n_queued:
        tp = int(rng.choice([1, 2, 4, 8, 16]))
        segment = tp * int(rng.integers(1, 5))
        gpus = segment * int(rng.integers(1, 5))
        if P.segment_total(cluster, P.usable_per_node(cluster, cluster.node_gpus.tolist(), tp), segment) >= gpus:
            queued.append((gpus, tp, segment))
    return _state(cluster, busy, queued)


@pytest.mark.parametrize("cluster", [NVL72_4, STRESS, HETERO], ids=["nvl72-4rack", "topo-stress", "hetero"])
def test_feasibility_counts_agree_with_every_rule_and_the_native_core(cluster):
    """60 random states x 6 queued segment jobs: a class fits now exactly when every rule places
    the job (each segment inside one block, TP groups whole), and fits after preemption exactly
    when the preempt rule finds victims; the native core's per-node counts are the reference's."""
    rng = np.random.default_rng(11)
    arrays = core.cluster_arrays(cluster)
    seen = {True: 0, False: 0}
    for _ in range(60):
        clear_cluster_memos(cluster)
        sim, st = _random_state(cluster, rng)
        with reference_path():
            fits_now, fits_preempt, _, _ = class_fits(st)
            classes = job_classes(st)
            for j in st.queue.tolist():
                seg, tp, need = st.segment_of(j), int(st.tp_degree[j]), int(st.num_gpus[j])
                now = bool(fits_now[classes[j]])
                seen[now] += 1
                for rule in (P.BINPACK, P.SPREAD, P.TOPOLOGY):
                    gpus = _place(st, j, rule)
                    assert (gpus is not None) == now, (j, rule)
                    if gpus is not None:
                        assert cluster.segment_straddles(gpus, seg) is None
                        sim.fork().start(j, gpus)  # the simulator's checks: free, whole, inside blocks
                    free = tuple(P._eligible(cluster, st.node_free.tolist(), 1.0))
                    assert core.node_take(arrays, list(free), need, tp, rule, seg) == P._node_take_segments(
                        cluster, free, need, tp, rule, seg)
                victims = P.choose_victims(st, j)
                assert (victims is not None) == bool(fits_preempt[classes[j]]), j
    assert min(seen.values()) >= 20  # both outcomes, often


@pytest.mark.parametrize("cluster", ["gb200-nvl72-4rack", "gb200-nvl72-8rack", "topo-stress-128gpu", "hetero-64gpu"])
def test_native_segment_placements_are_the_references(cluster):
    """2,000 random per-node free counts, gangs of 1-4 segments of 1-4 TP groups, every rule: the
    native core's node_take is the reference's, dict order included."""
    c = load_cluster(cluster)
    arrays = core.cluster_arrays(c)
    rng = np.random.default_rng(5)
    compared = placed = 0
    gpus = c.node_gpus
    for _ in range(2000):
        busy = rng.uniform(0.0, 0.9)
        free = np.where(rng.random(c.num_nodes) < busy, rng.integers(0, gpus + 1), gpus).tolist()
        tp = int(rng.choice([1, 2, 4, 8, 16]))
        segment = tp * int(rng.integers(1, 5))
        need = segment * int(rng.integers(1, 5))
        for rule in (P.BINPACK, P.SPREAD, P.TOPOLOGY):
            native = core.node_take(arrays, free, need, tp, rule, segment)
            with reference_path():
                reference = P._node_take_segments(c, tuple(free), need, tp, rule, segment)
            assert native == reference, (free, need, tp, segment, rule)
            compared += 1
            placed += native is not None
    assert compared // 20 < placed < compared - compared // 20  # both outcomes, often


def test_the_native_core_refuses_a_bad_segment():
    arrays = core.cluster_arrays(NVL72_4)
    with pytest.raises(ValueError, match="segment"):
        core.node_take(arrays, NVL72_4.node_gpus.tolist(), 64, 8, P.TOPOLOGY, 12)


# ---------------------------------------------------------------- episodes and baselines


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture(scope="module")
def example_jobs():
    return make_workload(load_workload_spec(EXAMPLE), load_cluster("gb200-nvl72-8rack"), 0, 80)


def test_the_example_workload_asks_for_segments_and_otherwise_draws_the_nvl72_mix(example_jobs):
    """configs/workloads/llm-mix-nvl72-segments.yaml is llm-mix-nvl72 with pretraining gangs larger
    than 64 GPUs in segments of 64 (16 trays: one rack's usual job): the same draws, the same jobs
    but for the segment field."""
    cluster = load_cluster("gb200-nvl72-8rack")
    plain = make_workload(load_workload_spec("llm-mix-nvl72"), cluster, 0, 80)
    assert [dataclasses.replace(j, segment_gpus=0) for j in example_jobs] == plain
    segmented = [j for j in example_jobs if j.segment_gpus]
    assert segmented and all(j.kind == JobKind.PRETRAIN and j.gpus > 64 and j.segment_gpus == 64 for j in segmented)


@pytest.mark.parametrize("rule", ["sect", "topology", "binpack", "spread", "block", "tiresias"])
def test_episodes_keep_every_segment_inside_one_rack(example_jobs, rule):
    """Replays of the example workload (80 jobs) on gb200-nvl72-8rack: every stretch a segment job
    runs has each segment inside one rack, every job ends, and the compiled path's schedule (the
    native candidates, the kernels fed the reference's segment counts, no compiled event loop) is
    the plain-Python reference's."""
    cluster = load_cluster("gb200-nvl72-8rack")
    runs = []
    for path in (None, reference_path):
        clear_cluster_memos(cluster)
        sim = Simulator(cluster, example_jobs)
        with path() if path else _nothing():
            replay(sim, make_baseline(rule).select, 8)
        runs.append(sim)
        assert sim.done
        checked = 0
        for s in sim.segments:
            seg = example_jobs[s.job_id].segment_gpus
            if seg:
                assert cluster.segment_straddles(s.gpus, seg) is None
                checked += 1
        assert checked
    assert [s.gpus.tolist() for s in runs[0].segments] == [s.gpus.tolist() for s in runs[1].segments]
    assert np.array_equal(runs[0].end, runs[1].end)


def test_the_env_runs_segment_episodes(example_jobs):
    from envs.gym.env import GpuClusterEnv

    env = GpuClusterEnv(cluster="gb200-nvl72-8rack", workload=example_jobs)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(60):
        valid = np.flatnonzero(obs["action_mask"])
        obs, _, terminated, truncated, _ = env.step(int(rng.choice(valid)))
        assert np.isfinite(obs["candidates"]).all()
        if terminated or truncated:
            break
    for j, gpus in env.sim.placement.items():
        if example_jobs[j].segment_gpus:
            assert env.cluster.segment_straddles(gpus, 64) is None


# ---------------------------------------------------------------- workloads and traces


def _mix(**pretrain) -> dict:
    kind = {"share": 1.0, "gpus": {64: 0.5, 128: 0.5}, "tp_max": 16, "work_median_s": 3600, "mem_per_gpu_gb": 80}
    return {"name": "seg", "num_jobs": 20, "target_load": 0.5, "kinds": {"pretrain": {**kind, **pretrain}}}


@pytest.mark.parametrize("value, message", [(48, "must divide the gang"), (8, "multiple of the TP group"),
                                            (-16, ">= 0"), ("big", "must be int")])
def test_a_kind_mix_with_a_bad_segment_names_file_and_field(value, message):
    with pytest.raises(ConfigError, match=f"mix.yaml.*kinds.pretrain.segment_gpus.*{message}"):
        workload_spec_from_dict(_mix(segment_gpus=value), "mix.yaml")


def test_a_kind_mix_whose_segments_never_fit_names_the_field():
    """Segments of 128 GPUs: no 72-GPU rack holds one."""
    from envs.workload.generator import check_workload_fits

    spec = workload_spec_from_dict(_mix(segment_gpus=128, gpus={256: 1.0}), "mix.yaml")
    with pytest.raises(ConfigError, match="mix.yaml.*kinds.pretrain.segment_gpus.*never fit"):
        check_workload_fits(spec, load_cluster("gb200-nvl72-8rack"))


def test_a_csv_trace_states_segments_per_job(tmp_path):
    from envs.workload.traces import workload_from_trace

    path = tmp_path / "t.csv"
    path.write_text("arrival_s,gpus,work_s,tp_degree,segment_gpus\n0,128,3600,16,64\n10,16,60,4,\n")
    jobs, _ = workload_from_trace({"format": "csv", "path": str(path)}, "w.yaml", NVL72_4, 0)
    assert [j.segment_gpus for j in jobs] == [64, 0]
    path.write_text("arrival_s,gpus,work_s,tp_degree,segment_gpus\n0,128,3600,16,48\n")
    with pytest.raises(ValueError, match=r"t.csv:2.*segment_gpus.*must divide the gang"):
        workload_from_trace({"format": "csv", "path": str(path), "strict": True}, "w.yaml", NVL72_4, 0)


# ---------------------------------------------------------------- speed


def test_a_segment_changes_the_speed_only_through_the_placement():
    """The same GPUs give a job the same profile (rate, traffic, uplinks) with and without a
    segment request: the speed model reads where the GPUs are, never the request."""
    model = SpeedModel()
    job = _job(0, 128, 16, 64)
    for gpus in (trays(range(38, 54), range(56, 72)), trays(range(0, 16), range(20, 36))):
        gpus = np.array(gpus)
        with_segment = placement_profile(NVL72_4, job, gpus, model)
        without = placement_profile(NVL72_4, dataclasses.replace(job, segment_gpus=0), gpus, model)
        for f in dataclasses.fields(with_segment):
            a, b = getattr(with_segment, f.name), getattr(without, f.name)
            for g in dataclasses.fields(a) if f.name == "geometry" else ():
                assert np.array_equal(getattr(a, g.name), getattr(b, g.name)), g.name
            if f.name != "geometry":
                assert a == b, f.name
        assert with_segment.efficiency() == without.efficiency()
        assert rates_of(NVL72_4, [with_segment], model).tolist() == rates_of(NVL72_4, [without], model).tolist()
    # the speed does follow the placement: inside racks 2 and 3 the TP-16 groups run on NVLink,
    # whereas split over racks 0 and 1 (trays 0-15 and 20-35: a group on trays 16-19 of rack 0 and
    # rack 1) a group crosses the network
    inside = placement_profile(NVL72_4, job, np.array(trays(range(38, 54), range(56, 72))), model)
    split = placement_profile(NVL72_4, job, np.array(trays(range(4, 18), range(18, 20), range(20, 36))), model)
    assert inside.efficiency() > split.efficiency()


# ---------------------------------------------------------------- the native world


def _segment_env_states(jobs, steps: int, seed: int):
    """The simulators of a random-action env episode on gb200-nvl72-8rack over `jobs` (its
    decisions on the reference path, as every segment episode's are), one per decision."""
    from envs.gym.env import GpuClusterEnv

    env = GpuClusterEnv(cluster="gb200-nvl72-8rack", workload=jobs)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        yield env.sim, env.queue_window
        valid = np.flatnonzero(obs["action_mask"])
        obs, _, terminated, truncated, _ = env.step(int(rng.choice(valid)))
        if terminated or truncated:
            return


def _busier(jobs, factor: float = 0.5):
    """The workload with arrivals compressed (a queue that builds: segment jobs wait and victims
    are needed), and the fine-tunes of 16 and 32 GPUs (TP-8) in segments of 16 too."""
    return [dataclasses.replace(j, arrival_s=j.arrival_s * factor,
                                segment_gpus=16 if j.kind == JobKind.FINETUNE and j.gpus in (16, 32) else j.segment_gpus)
            for j in jobs]


@needs_compiled()
def test_native_candidates_and_feasibility_of_segment_states_are_the_references(example_jobs):
    """At every decision of a random-action episode with segment jobs (and at the events after
    every fifth): the native core's window, mask, placements and victims (with and without
    preempt-las, with a wait guard and a small window), can_place and any_feasible, and the
    Python candidate layer's on the compiled path, are the plain-Python reference's."""
    from envs.decision.candidates import WaitGuard
    from envs.decision.window import any_feasible, can_place

    def placements(cset):
        return [(i, cset.candidates[i].gpus.tolist(), tuple(cset.candidates[i].victims))
                for i in np.flatnonzero(cset.mask[:-1]).tolist()]

    seen = {"states": 0, "segment_window": 0, "segment_placed": 0, "victims": 0, "places": 0}
    for k, (sim, q) in enumerate(_segment_env_states(_busier(example_jobs), 150, 3)):
        seen["states"] += 1
        for window, las, guard in ((q, True, None), (q, False, None), (3, True, WaitGuard(1.0, 600.0))):
            with reference_path():
                ref = build_candidates(sim.decision_state(), window, las, guard)
                want = placements(ref)
            nat = sim.native_candidates(window, las, guard)
            assert nat.window == list(ref.window) and np.array_equal(nat.mask, ref.mask)
            got = placements(nat)
            assert got == want
            # the Python candidate layer on the compiled path (its kernels fed the reference's
            # segment counts), on a fresh state of its own: its caches start empty
            mid = build_candidates(sim.fork().decision_state(), window, las, guard)
            assert list(mid.window) == list(ref.window) and np.array_equal(mid.mask, ref.mask)
            assert placements(mid) == want
            seen["segment_window"] += any(sim.jobs[j].segment_gpus for j in ref.window)
            seen["segment_placed"] += any(sim.jobs[nat.candidates[i].job_id].segment_gpus for i, _, _ in got)
            seen["victims"] += any(v for _, _, v in got)
        if k % 5 == 0:
            fork = sim.fork()
            for _ in range(6):
                with reference_path():
                    state = fork.decision_state()
                    want = can_place(state), any_feasible(state)
                assert (fork.native_can_place(True), fork.native_can_place(False)) == want
                seen["places"] += want[0]
                if fork.done or not (len(fork.running) or fork.checkpointing):
                    break
                fork.advance()
    assert seen["states"] >= 100 and seen["places"] > 0, seen
    assert seen["segment_window"] > 20 and seen["segment_placed"] > 5 and seen["victims"] > 0, seen


@needs_compiled()
def test_native_rollouts_of_segment_states_leave_what_the_python_loop_leaves(example_jobs):
    """From decision states of an episode with segment jobs, `sect`'s rollout to a 3-hour horizon
    in the native core (Simulator.rollout_sect) and in the Python loop (on the reference path)
    leave every per-job array, the time, the integrals and the counters bit for bit the same."""
    from types import SimpleNamespace

    import agents.lookahead as L
    from envs.sim.replay import candidates_now
    from envs.sim.simulator import _ROLLOUT_JOB_ARRAYS
    from tests.test_native_rollout import SCALARS

    sect = make_baseline("sect")
    loop = SimpleNamespace(base=SimpleNamespace(select=sect.select, preempt_las=False), queue_window=8,
                           _cost=lambda sim, horizon: 0.0)
    rollouts = segment_starts = 0
    for k, (sim, q) in enumerate(_segment_env_states(_busier(example_jobs), 120, 5)):
        if k % 6:
            continue
        until = sim.now + 3 * 3600.0
        native, python = sim.fork(), sim.fork()
        out = native.rollout_sect(q, until)
        cset = candidates_now(python, q, preempt_las=False)
        action = sect.select(cset.state, cset)
        started = {j for j in python.running.tolist()}
        L.Lookahead._python_rollout(loop, python, cset, action, until)
        for name in _ROLLOUT_JOB_ARRAYS:
            a, b = getattr(native, name), getattr(python, name)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (k, name)
        for name in SCALARS:
            assert getattr(native, name) == getattr(python, name), (k, name)
        segment_starts += sum(1 for j in python.placement if j not in started and python.jobs[j].segment_gpus)
        rollouts += 1
        assert out["decisions"] >= 1
    assert rollouts >= 15 and segment_starts > 0


@needs_compiled()
@pytest.mark.parametrize("rule", ["sect", "sjf", "topology", "binpack", "spread"])
def test_native_replays_of_segment_workloads_are_the_python_loops(example_jobs, rule):
    """A whole replay in the native core (Simulator.replay_native: its windows, feasibility,
    placements and events) of a workload with segment jobs (the busier example: fine-tunes in
    segments too) gives the plain-Python reference loop's schedule, floats and timeline."""
    cluster = load_cluster("gb200-nvl72-8rack")
    jobs = _busier(example_jobs)
    clear_cluster_memos(cluster)
    native = Simulator(cluster, jobs)
    decisions = native.replay_native(rule, 8)
    clear_cluster_memos(cluster)
    ref = Simulator(cluster, jobs)
    with reference_path():
        assert replay(ref, make_baseline(rule).select, 8, preempt_las=False) == decisions
    assert [(s.job_id, s.gpus.tolist(), s.start_s, s.end_s) for s in native.segments] == \
        [(s.job_id, s.gpus.tolist(), s.start_s, s.end_s) for s in ref.segments]
    assert np.array_equal(native.end, ref.end) and native.timeline == ref.timeline
    assert any(jobs[s.job_id].segment_gpus for s in native.segments)


# ---------------------------------------------------------------- the decision state's plain data


def test_the_plain_data_form_carries_segments(example_jobs):
    """At decisions of a segment episode: `from_dict(state.to_dict())` gives the same candidates
    (window, mask, GPUs, victims) as the simulator's state, segment requests included (a job
    without one writes no field, so states without segments read as before)."""
    from envs.decision.state import ClusterState

    compared = with_segments = 0
    for k, (sim, q) in enumerate(_segment_env_states(_busier(example_jobs), 60, 9)):
        state = sim.decision_state()
        data = state.to_dict()
        with_segments += any(d.get("segment_gpus") for s in ("running", "queued") for d in data[s])
        assert all("segment_gpus" not in d for s in ("running", "queued") for d in data[s]
                   if not sim.jobs[d["id"]].segment_gpus)
        back = ClusterState.from_dict(data, sim.cluster)
        with reference_path():
            a = build_candidates(state, q)
            b = build_candidates(back, q)
        assert [state.name_of(j) for j in a.window] == [back.name_of(j) for j in b.window]
        assert np.array_equal(a.mask, b.mask)
        for i in np.flatnonzero(a.mask[:-1]).tolist():
            assert a.candidates[i].gpus.tolist() == b.candidates[i].gpus.tolist()
            assert [state.name_of(v) for v in a.candidates[i].victims] == [back.name_of(v) for v in b.candidates[i].victims]
        compared += 1
    assert compared >= 40 and with_segments >= 10


def test_bad_segments_in_plain_data_name_the_field():
    from envs.decision.state import ClusterState

    def run(gpus, segment):
        return {"id": "r", "gpus": gpus, "tp_degree": 4, "segment_gpus": segment, "estimate_s": 60.0, "arrival_s": 0.0}

    queued = {"id": "q", "num_gpus": 64, "tp_degree": 8, "segment_gpus": 12, "estimate_s": 60.0}
    with pytest.raises(ValueError, match=r"queued\[0\]\.segment_gpus: 12 must be a multiple of the TP group"):
        ClusterState.from_dict({"queued": [queued]}, NVL72_4)
    with pytest.raises(ValueError, match=r"running\[0\]\.gpus: segment 1 .* not inside one block \(segment_gpus 16\)"):
        ClusterState.from_dict({"running": [run(trays(range(0, 4), range(16, 20)), 16)]}, NVL72_4)
    st = ClusterState.from_dict({"running": [run(trays(range(14, 18), range(18, 22)), 16)], "queued": [dict(queued, segment_gpus=32)]},
                                NVL72_4)
    assert st.segment_gpus.tolist() == [16, 32] and st.to_dict()["running"][0]["segment_gpus"] == 16


def test_sects_native_choice_on_segment_states_is_the_python_loops(example_jobs):
    """`sect`'s choice over a decision state in the native core (envs.core.choose_sect, which
    places segment jobs' candidates in segments) is the Python loop's at every decision of a
    segment episode."""
    from baselines.base import wait_or_any
    from envs.decision.placement import RULES

    sect = make_baseline("sect")
    segment_choices = 0
    for sim, q in _segment_env_states(_busier(example_jobs), 100, 4):
        state = sim.decision_state()
        with reference_path():
            cset = build_candidates(state, q)
            want = sect.select(state, cset)
        got = core.choose_sect(state, cset.window, cset.mask, len(RULES))
        assert (got if got >= 0 else wait_or_any(cset)) == want
        segment_choices += 0 <= got < len(cset.candidates) and bool(sim.jobs[cset.candidates[got].job_id].segment_gpus)
    assert segment_choices >= 3


@pytest.mark.parametrize("name", ["lookahead", "lookahead-oracle"])
def test_the_lookahead_on_a_segment_workload_is_the_same_with_native_rollouts(example_jobs, name, monkeypatch):
    """The honest lookahead (sampled futures drawn from the state, segment requests included) and
    its oracle on 40 jobs of the busier segment workload: the native rollouts (the core's worlds)
    give the Python loop's schedule."""
    import dataclasses as dc

    import agents.lookahead as L
    from envs.scenario import load_scenario

    sc = load_scenario("nvl72")
    cluster = load_cluster(sc.cluster)
    jobs = _busier(example_jobs)[:40]
    search = dc.replace(sc.lookahead, k=2, preempt_k=1, samples=2, horizon_s=3600.0)
    runs = []
    for native in (True, False):
        monkeypatch.setattr(L, "NATIVE_ROLLOUTS", native)
        clear_cluster_memos(cluster)
        sim, steps, _ = L.run_lookahead(name, cluster, load_workload_spec(EXAMPLE), jobs, 1, search, sc.objective,
                                        sc.queue_window, sc.max_checkpoint_s)
        runs.append((steps, [(s.job_id, s.gpus.tolist(), s.start_s, s.end_s) for s in sim.segments]))
    assert runs[0] == runs[1]
    assert any(jobs[j].segment_gpus for j, *_ in runs[0][1])
