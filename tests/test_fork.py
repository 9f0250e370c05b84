"""Simulator forks (lookahead) and advance_until.

A fork is an independent copy of a simulator at one moment: with no arguments it continues bit
for bit as the original would, it shares nothing mutable with it, and stepping either leaves the
other as it was. `work` substitutes the true work of arrived jobs, `future_jobs` the jobs still to
arrive. `advance_until` stops at a horizon between events.

What a fork does not copy: its `timeline` and `segments` start at the fork. So of the metrics of
envs.sim.metrics only `fragmentation` (a time average over the timeline) differs between a fork run to
the end and its original; the fork's timeline and segments are exactly the original's from the
fork on.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest

from baselines import make_baseline
from envs.cluster.config import load_cluster
from envs.cluster.speed import PlacementGeometry, PlacementProfile, SpeedModel
from envs.cluster.topology import Cluster
from envs.decision.candidates import apply_candidate, build_candidates
from envs.decision.state import JobLists
from envs.decision.window import feasible_queue
from envs.jobs import Job
from envs.sim.ledger import AllocationLedger
from envs.sim.load import LoadModel, Placed
from envs.sim.metrics import episode_metrics
from envs.sim.power import PowerMeter
from envs.sim.queue import JobQueue
from envs.sim.replay import advance_to_decision, replay
from envs.sim.simulator import JOB_ARRAYS, JobState, SimConfig, Simulator, _job_arrays
from envs.workload.generator import load_workload_spec, make_workload
from tests.helpers import needs_compiled

Q = 8  # queue window
TIMELINE_METRICS = {"fragmentation"}  # read sim.timeline, which a fork starts afresh
PER_JOB_RESULTS = ("end", "first_start", "wait_s", "preemptions", "attained_gpu_s", "run_s", "work_done",
                   "interference_loss_s")


def new_sim(cluster: str = "mixed-64gpu", workload: str = "llm-mix", seed: int = 0, num_jobs: int | None = None) -> Simulator:
    c = load_cluster(cluster)
    return Simulator(c, make_workload(load_workload_spec(workload), c, seed, num_jobs=num_jobs))


def run_to_end(sim: Simulator, policy: str) -> None:
    replay(sim, make_baseline(policy).select, Q)
    assert sim.done


def decision_points(sim: Simulator, policy: str, at):
    """Drive `sim` with `policy` to the end, calling `at(sim, step)` at each decision point (the
    candidates are built, nothing decided yet)."""
    rule = make_baseline(policy)
    cset = advance_to_decision(sim, Q)
    step = 0
    while not sim.done:
        at(sim, step)
        apply_candidate(sim, cset, rule.select(cset.state, cset))
        step += 1
        cset = advance_to_decision(sim, Q)


def to_decision(sim: Simulator, policy: str, until) -> Simulator:
    """Drive `sim` with `policy` to the first decision point where `until(sim, step)` holds."""
    rule = make_baseline(policy)
    cset = advance_to_decision(sim, Q)
    step = 0
    while not until(sim, step):
        assert not sim.done, "no such decision point"
        apply_candidate(sim, cset, rule.select(cset.state, cset))
        step += 1
        cset = advance_to_decision(sim, Q)
    return sim


def metrics_equal(a: dict, b: dict, skip=()) -> list[str]:
    """Names of the metrics that differ (NaN equals NaN)."""
    assert a.keys() == b.keys()
    return [k for k in a if k not in skip and not (a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])))]


def assert_same_values(a, b, path: str = "sim",
                       skip=("_state", "_state_arrived", "_scratch", "_events", "_placed_of", "_table", "job_slot",
                             "_next_event")) -> None:
    """`a` and `b` hold the same values all the way down (arrays: same dtype, shape and
    elements, NaN equal to NaN; a queue's id arrays as far as they are used). `skip`: attributes
    not compared (by default the decision state cache, the next event's time cached per state
    version, which the compiled event loop leaves as it was and reads of next_event_s fill, the kernels' scratch buffers, the load
    model's memo of `Placed` records, keyed by profile identity, and the table of their values
    with the rows in it, which depend on the order the memo was filled in)."""
    if isinstance(a, Cluster):
        assert a is b or a.name == b.name, path
    elif isinstance(a, (SimConfig, SpeedModel)):
        assert a == b, path
    elif isinstance(a, JobQueue):
        assert set(vars(a)) == set(vars(b)), f"{path}: attributes differ"
        for name in ("ids", "sorted_ids"):
            assert_same_values(getattr(a, name)[: a.length], getattr(b, name)[: b.length], f"{path}.{name}[:length]")
        for name in vars(a):
            if name not in ("ids", "sorted_ids"):
                assert_same_values(getattr(a, name), getattr(b, name), f"{path}.{name}")
    elif isinstance(a, (int, str, bytes, type(None), np.generic, Job)):
        assert type(a) is type(b) and a == b, f"{path}: {a!r} != {b!r}"
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, path
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), path
    elif isinstance(a, float):
        assert type(b) is float and (a == b or (math.isnan(a) and math.isnan(b))), f"{path}: {a!r} != {b!r}"
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: lengths {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_values(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert type(b) is dict and list(a) == list(b), f"{path}: keys differ"
        for k in a:
            assert_same_values(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (set, frozenset)):
        assert a == b, path
    elif hasattr(a, "__dict__") or hasattr(type(a), "__slots__"):
        assert type(a) is type(b), path
        names = list(vars(a)) if hasattr(a, "__dict__") else list(type(a).__slots__)
        if hasattr(a, "__dict__"):
            assert set(vars(a)) == set(vars(b)), f"{path}: attributes differ"
        for name in names:
            if name not in skip:
                assert_same_values(getattr(a, name), getattr(b, name), f"{path}.{name}")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def vars_of(record) -> dict:
    """A (frozen) dataclass record's fields, nested records too, as a dict."""
    if not dataclasses.is_dataclass(record):
        return record
    return {f.name: vars_of(getattr(record, f.name)) for f in dataclasses.fields(record)}


def snapshot(sim: Simulator) -> Simulator:
    """A deep copy of `sim`'s values (the cluster shared) to compare with later."""
    return copy.deepcopy(sim, memo={id(sim.cluster): sim.cluster, id(sim._state): None})


# ---------------------------------------------------------------- bit for bit


@pytest.mark.parametrize("policy, seed", [("priority", 1), ("sect", 0)])
def test_fork_continues_bit_for_bit(policy, seed):
    """Forks taken at decision points (for `priority`, also where checkpoints and reservations
    are in flight) run to the end exactly as the original does, and the original after forking
    runs exactly as one that never forked."""
    reference = new_sim(seed=seed)
    run_to_end(reference, policy)
    ref_metrics = episode_metrics(reference)

    sim = new_sim(seed=seed)
    forked_at = []

    def at(s: Simulator, step: int) -> None:
        in_flight = bool(s.checkpointing or s.reserved)
        if not (step in (0, 7, 60, 150) or (in_flight and sum(1 for _, _, f in forked_at if f) < 4)):
            return
        k_seg, k_tl = len(s.segments), len(s.timeline)
        f = s.fork()
        assert f.now == s.now and f.num_jobs == s.num_jobs and f.version == s.version
        # The same decision state and candidates.
        assert f.decision_state().to_dict() == s.decision_state().to_dict()
        ours, theirs = build_candidates(f.decision_state(), Q), build_candidates(s.decision_state(), Q)
        assert ours.window == theirs.window and np.array_equal(ours.mask, theirs.mask)
        for i in np.flatnonzero(ours.mask)[:-1].tolist():
            a, b = ours.candidates[i], theirs.candidates[i]
            assert np.array_equal(a.gpus, b.gpus) and a.victims == b.victims
            assert_same_values(vars_of(a.profile), vars_of(b.profile), f"candidate {i}")
        run_to_end(f, policy)  # the fork runs while the original waits at its decision point
        forked_at.append((step, s.now, in_flight))
        np.testing.assert_equal(metrics_equal(episode_metrics(f), ref_metrics, skip=TIMELINE_METRICS), [])
        for name in PER_JOB_RESULTS:
            np.testing.assert_array_equal(getattr(f, name), getattr(reference, name), err_msg=name)
        assert f.finished_order == reference.finished_order
        assert (f.energy_j, f.jobs_in_system_s, f.useful_work_s) == (reference.energy_j, reference.jobs_in_system_s, reference.useful_work_s)
        # Its timeline and segments are the original's from the fork on.
        assert f.timeline == reference.timeline[k_tl:]
        assert_same_values(f.segments, reference.segments[k_seg:], "segments")

    decision_points(sim, policy, at)
    if policy == "priority":
        assert sum(1 for *_, f in forked_at if f) >= 2, "no decision point with a checkpoint or reservation in flight"
    assert len(forked_at) >= 4
    # Forking changed nothing: the original is the run that never forked.
    assert_same_values(sim, reference)
    np.testing.assert_equal(metrics_equal(episode_metrics(sim), ref_metrics), [])


def test_fork_of_fork_and_fork_before_any_decision():
    sim = new_sim(seed=1)
    f = sim.fork().fork()  # at t=0, before any decision
    run_to_end(sim, "sect")
    run_to_end(f, "sect")
    for name in PER_JOB_RESULTS:
        np.testing.assert_array_equal(getattr(f, name), getattr(sim, name), err_msg=name)
    assert f.timeline == sim.timeline[1:] and len(f.segments) == len(sim.segments)


# ---------------------------------------------------------------- nothing shared


def _in_flight(s: Simulator, step: int) -> bool:
    return bool(s.checkpointing) and bool(s.reserved) and len(s.running) > 2 and s.queue_len > 0


SHARED_TYPES = (Cluster, SimConfig, SpeedModel, Job, PlacementProfile, PlacementGeometry, Placed)  # never changed
IMMUTABLE = (int, float, bool, str, bytes, type(None), np.generic)


def assert_nothing_mutable_shared(a, b, path: str, shared_arrays: bool = False) -> int:
    """`a` (the fork's) and `b` (the original's) share no mutable object, walking containers and
    components; SHARED_TYPES are shared by design (checked: the same object) and so are the
    placements' GPU arrays (`shared_arrays`). Returns the number of mutable objects checked."""
    if isinstance(a, IMMUTABLE):
        return 0
    if path.endswith((".load._node_gpus", ".load._uplink_cap", ".job_queue.shape")):  # never changed: the cluster's
        # constants, and the jobs' shape ids (those of the simulator's shared _JobShapes)
        assert a is b, f"{path}: expected shared"
        return 0
    if isinstance(a, SHARED_TYPES):
        assert a is b, f"{path}: expected shared"
        return 0
    if isinstance(a, np.ndarray):
        if shared_arrays:
            assert a is b, f"{path}: expected shared"
            return 0
        assert a is not b and not np.shares_memory(a, b), f"{path}: shared array"
        return 1
    if isinstance(a, tuple):  # immutable itself; what it holds may not be
        return sum(assert_nothing_mutable_shared(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b)))
    if path.endswith((".load._placed_of", ".load._table")):  # shared by design: a memo of never-changed records by
        assert a is b, f"{path}: expected shared"  # profile identity, and their values as append-only arrays
        return 0
    if path == "sim._shapes":  # shared by design: the same jobs' shapes (a fork with other future jobs makes its own)
        assert a is b, f"{path}: expected shared"
        return 0
    assert a is not b, f"{path}: shared {type(a).__name__}"
    if isinstance(a, list):
        assert len(a) == len(b)
        return 1 + sum(assert_nothing_mutable_shared(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b)))
    if isinstance(a, dict):
        assert list(a) == list(b)
        if path.endswith(".load.crossing"):  # the Placed records' uplinks lists, never changed
            assert all(a[k] is b[k] for k in a), path
            return 1
        shared_arrays = path.endswith((".placement", "._mem_ok"))  # never changed in place
        return 1 + sum(assert_nothing_mutable_shared(a[k], b[k], f"{path}[{k!r}]", shared_arrays=shared_arrays)
                       for k in a)
    if isinstance(a, set):
        assert all(isinstance(x, IMMUTABLE) for x in a)
        return 1
    if isinstance(a, (JobQueue, AllocationLedger, LoadModel, PowerMeter, JobLists)):
        names = list(vars(a)) if hasattr(a, "__dict__") else list(type(a).__slots__)
        if hasattr(a, "__dict__"):
            assert set(vars(a)) == set(vars(b)), f"{path}: attributes differ"
        return 1 + sum(assert_nothing_mutable_shared(getattr(a, n), getattr(b, n), f"{path}.{n}") for n in names)
    raise AssertionError(f"{path}: unexpected {type(a).__name__} (add it to the walk)")


def test_fork_shares_nothing_mutable():
    sim = to_decision(new_sim(seed=1), "priority", lambda s, step: _in_flight(s, step) and len(s.load.crossing) > 0)
    sim.decision_state()
    f = sim.fork()
    assert set(vars(f)) == set(vars(sim))
    assert f._state is None and f._state_arrived == -1 and f.timeline == [] and f.segments == []
    checked = 0
    for name, value in vars(sim).items():
        if name in ("_state", "timeline", "segments"):  # the fork's own (None, [], [])
            assert getattr(f, name) is not value
            continue
        checked += assert_nothing_mutable_shared(getattr(f, name), value, f"sim.{name}")
    assert checked > 60
    # Not vacuous: the containers the walk went through hold things.
    assert sim.placement and sim.load.placed and sim.checkpointing and sim.reserved and sim._segment_start
    assert sim.load.crossing and sim._job_lists.num_gpus and sim.job_queue.length
    # Its decision state is its own and the same as the original's.
    fs, ss = f.decision_state(), sim.decision_state()
    assert fs is not ss and fs.to_dict() == ss.to_dict()
    assert fs.gpu_owner is f.gpu_owner and not np.shares_memory(fs.work_done_s, ss.work_done_s)


def test_job_arrays_cover_every_per_job_array():
    sim = new_sim(num_jobs=30)
    per_job = {k for k, v in vars(sim).items() if isinstance(v, np.ndarray) and v.shape[:1] == (30,)}
    assert per_job == set(JOB_ARRAYS)
    assert tuple(_job_arrays([], SimConfig())) == JOB_ARRAYS


def test_shared_objects_are_never_changed():
    """The fork and its original share placements' GPU arrays, PlacementProfiles and the load
    model's Placed records: running both to the end changes none of them."""
    sim = to_decision(new_sim(seed=1), "priority", _in_flight)
    f = sim.fork()
    arrays = list(sim.placement.values())
    copies = [a.copy() for a in arrays]
    froze = [a for a in arrays if a.flags.writeable]
    for a in froze:
        a.flags.writeable = False  # an in-place write now raises
    records = list(sim.load.placed.values())
    fields = [(p.profile, list(p.nodes), list(p.counts), p.pressure, p.sensitivity, list(p.uplinks), p.base_rate,
               (p.node0, p.own0, p.gpus0, p.coeff_sensitivity)) for p in records]
    profiles = list(sim.profiles.values())
    geometry = [[np.array(x) for x in (p.nodes, p.gpus_on_node, p.uplinks, p.uplink_demand_GBps)] for p in profiles]
    try:
        run_to_end(f, "priority")
        run_to_end(sim, "priority")
    finally:
        for a in froze:
            a.flags.writeable = True
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c)
    for p, (profile, nodes, counts, pressure, sensitivity, uplinks, base_rate, single) in zip(records, fields):
        assert p.profile is profile
        assert (p.nodes, p.counts, p.pressure, p.sensitivity, p.uplinks, p.base_rate) == (
            nodes, counts, pressure, sensitivity, uplinks, base_rate)
        assert (p.node0, p.own0, p.gpus0, p.coeff_sensitivity) == single
    for p, g in zip(profiles, geometry):
        for x, y in zip(g, (p.nodes, p.gpus_on_node, p.uplinks, p.uplink_demand_GBps)):
            np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------- independence


@pytest.mark.parametrize("step_which", ["fork", "original"])
def test_stepping_one_leaves_the_other_unchanged(step_which):
    sim = to_decision(new_sim(seed=1), "priority", _in_flight)
    f = sim.fork()
    still, stepped = (sim, f) if step_which == "fork" else (f, sim)
    before = snapshot(still)
    state = still.decision_state().to_dict()
    queue = (still.queue, list(still.queue_by_remaining()), still.job_queue.enqueue_seq.copy())
    run_to_end(stepped, "priority")
    assert_same_values(still, before)
    assert still.decision_state().to_dict() == state
    assert (still.queue, still.queue_by_remaining()) == queue[:2]
    np.testing.assert_array_equal(still.job_queue.enqueue_seq, queue[2])
    assert not still.done and stepped.done


# ---------------------------------------------------------------- work


def test_fork_with_more_work_finishes_the_job_later():
    sim = to_decision(new_sim(), "sect", lambda s, step: step >= 40 and s.queue_len >= 2)
    j = int(sim.queue_ids()[-1])
    w = float(sim.work_total[j])
    f = sim.fork(work={j: 2 * w})
    assert f.work_total[j] == 2 * w and f.work_left[j] == 2 * w and f.jobs[j].work_s == 2 * w
    assert sim.work_total[j] == w and sim.jobs[j].work_s == w and f.jobs is not sim.jobs
    assert f.jobs[j] == dataclasses.replace(sim.jobs[j], work_s=2 * w)
    run_to_end(sim, "sect")
    run_to_end(f, "sect")
    assert f.end[j] > sim.end[j]
    # Everything was the same until the original finished the job.
    before = sim.end <= sim.end[j]
    before[j] = False
    np.testing.assert_array_equal(f.end[before], sim.end[before])


def test_fork_with_unchanged_work_is_the_plain_fork():
    sim = to_decision(new_sim(seed=1), "priority", _in_flight)
    live = [j for j in range(sim._next_arrival) if sim.state[j] != JobState.DONE]
    f = sim.fork(work={j: float(sim.work_total[j]) for j in live})
    run_to_end(sim, "priority")
    run_to_end(f, "priority")
    for name in PER_JOB_RESULTS:
        np.testing.assert_array_equal(getattr(f, name), getattr(sim, name), err_msg=name)


def test_fork_with_work_below_work_done_finishes_soon():
    sim = to_decision(new_sim(), "sect", lambda s, step: step >= 20 and any(s.work_done[r] > 10 for r in s.running))
    r = next(int(r) for r in sim.running if sim.work_done[r] > 10 and r not in sim._restoring)
    f = sim.fork(work={r: 1.0})
    assert f.work_total[r] == sim.work_done[r] + 1.0 and f.work_left[r] == pytest.approx(1.0)
    assert f.work_done[r] == sim.work_done[r]
    while f.state[r] != JobState.DONE:
        f.advance()
        assert f.work_done[r] >= sim.work_done[r]  # what a scheduler sees never goes back
    assert f.end[r] == pytest.approx(sim.now + 1.0 / sim.rate[r], rel=1e-9)


def test_fork_work_errors():
    sim = to_decision(new_sim(), "sect", lambda s, step: step >= 40 and s.num_done > 0)
    done = sim.finished_order[0]
    future = sim._next_arrival
    with pytest.raises(ValueError, match=f"job {done}: it is done"):
        sim.fork(work={done: 100.0})
    with pytest.raises(ValueError, match=f"job {future}: it has not arrived"):
        sim.fork(work={future: 100.0})
    with pytest.raises(ValueError, match="job -1"):
        sim.fork(work={-1: 100.0})
    queued = int(sim.queue_ids()[0])
    for bad in (0.0, -5.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"job {queued}"):
            sim.fork(work={queued: bad})


# ---------------------------------------------------------------- future jobs


def test_fork_without_future_jobs_ends_with_the_arrived_ones():
    sim = to_decision(new_sim(), "sect", lambda s, step: step >= 60)
    arrived = sim._next_arrival
    assert arrived < sim.num_jobs
    f = sim.fork(future_jobs=[])
    assert f.num_jobs == arrived and f.next_arrival_s == math.inf
    assert all(len(getattr(f, name)) == arrived for name in JOB_ARRAYS)
    run_to_end(f, "sect")
    assert f.done and not np.isnan(f.end).any() and sorted(f.finished_order) == list(range(arrived))
    assert sim.num_jobs == 200 and not sim.done


def test_fork_with_the_same_future_jobs_is_the_plain_fork():
    sim = to_decision(new_sim(seed=1), "priority", _in_flight)
    f = sim.fork(future_jobs=sim.jobs[sim._next_arrival:])
    g = sim.fork()
    run_to_end(f, "priority")
    run_to_end(g, "priority")
    assert_same_values(f, g, "fork")


def test_fork_with_other_future_jobs():
    sim = to_decision(new_sim(), "sect", lambda s, step: step >= 60)
    arrived, now = sim._next_arrival, sim.now
    other = make_workload(load_workload_spec("llm-mix"), sim.cluster, 1)[:60]
    future = [dataclasses.replace(j, job_id=arrived + k, arrival_s=now + j.arrival_s) for k, j in enumerate(other)]
    f = sim.fork(future_jobs=future)
    n = arrived + len(future)
    assert f.num_jobs == n and all(len(getattr(f, name)) == n for name in JOB_ARRAYS)
    assert len(f.job_queue.enqueue_seq) == n and len(f.job_queue._gpus) == n and f.next_arrival_s == future[0].arrival_s
    np.testing.assert_array_equal(f.gpus_req[arrived:], [j.gpus for j in other])
    run_to_end(f, "sect")
    assert f.done and not np.isnan(f.end).any()
    assert (f.first_start[arrived:] >= f.arrival[arrived:]).all() and (f.arrival[arrived:] >= now).all()
    # The original keeps its own.
    assert sim.num_jobs == 200 and sim.jobs[arrived] is not f.jobs[arrived]
    run_to_end(sim, "sect")
    reference = new_sim()
    run_to_end(reference, "sect")
    np.testing.assert_array_equal(sim.end, reference.end)


@needs_compiled()
def test_fork_future_jobs_errors():
    sim = to_decision(new_sim(), "sect", lambda s, step: step >= 30)
    arrived, now = sim._next_arrival, sim.now
    future = [dataclasses.replace(j, job_id=arrived + k, arrival_s=now + 10.0 * k) for k, j in enumerate(sim.jobs[:3])]
    sim.fork(future_jobs=future)  # fine
    with pytest.raises(ValueError, match=f"future job {arrived + 1}"):
        sim.fork(future_jobs=future[1:])
    with pytest.raises(ValueError, match=f"future job {arrived} arrives at"):
        sim.fork(future_jobs=[dataclasses.replace(future[0], arrival_s=now - 1.0)] + future[1:])
    with pytest.raises(ValueError, match=f"job {arrived + 2} arrives before job {arrived + 1}"):
        sim.fork(future_jobs=future[:2] + [dataclasses.replace(future[2], arrival_s=now + 5.0)])
    # the core's copy of such a world checks the same (ids are not read there)
    with pytest.raises(ValueError, match=f"future job {arrived} arrives at"):
        sim.native_world(future_jobs=[dataclasses.replace(future[0], arrival_s=now - 1.0)] + future[1:])
    with pytest.raises(ValueError, match=f"job {arrived + 2} arrives before job {arrived + 1}"):
        sim.native_world(future_jobs=future[:2] + [dataclasses.replace(future[2], arrival_s=now + 5.0)])
    done = sim.finished_order[0] if sim.finished_order else None
    with pytest.raises(ValueError, match=f"job {arrived}: it has not arrived"):
        sim.native_world(work={arrived: 100.0})
    if done is not None:
        with pytest.raises(ValueError, match=f"job {done}: it is done"):
            sim.native_world(work={done: 100.0})


@needs_compiled()
@pytest.mark.parametrize("as_slice", [False, True])
def test_a_world_made_in_the_core_is_the_fork_it_stands_for(as_slice):
    """`native_world(work, future_jobs)` rolls out exactly as the fork with that work and those
    future jobs does, other shapes among them, and leaves the simulator as it was."""
    from envs.sim.simulator import JobSlice
    sim = to_decision(new_sim(), "sect", lambda s, step: step >= 60 and len(s.running) > 2)
    arrived, now = sim._next_arrival, sim.now
    other = make_workload(load_workload_spec("llm-mix"), sim.cluster, 1)[:40]
    future = [dataclasses.replace(j, job_id=arrived + k, arrival_s=now + j.arrival_s,  # some of shapes this workload lacks
                                  mem_per_gpu_gb=j.mem_per_gpu_gb - 0.5 * (k % 3 == 0)) for k, j in enumerate(other)]
    shapes = {(j.gpus, j.tp_degree, j.mem_per_gpu_gb, j.priority) for j in sim.jobs}
    assert any((j.gpus, j.tp_degree, j.mem_per_gpu_gb, j.priority) not in shapes for j in future)
    running = [int(r) for r in sim.running]
    work = {running[0]: float(sim.work_done[running[0]]) + 50.0, running[1]: 3.0 * float(sim.work_total[running[1]])}
    drawn = JobSlice([dataclasses.replace(j, job_id=0) for j in [future[0]] + future], 1, 1 + len(future)) if as_slice \
        else [dataclasses.replace(j, job_id=0) for j in future]
    sim._shapes.columns()  # a memo the world reads: filled before the snapshot
    before = snapshot(sim)
    world = sim.native_world(work=work, future_jobs=drawn)
    for horizon in (now + 1800.0, now + 7200.0, math.inf):
        fork = sim.fork(work=work, future_jobs=future)
        fork.rollout_sect(8, horizon)
        got = world.rollout_sect(8, horizon)
        n = fork.num_arrived
        assert (got.now, got.jobs_in_system_s, got.energy_j, got.num_done, got.num_arrived) == \
            (fork.now, fork.jobs_in_system_s, fork.energy_j, fork.num_done, n)
        for name in ("end", "first_start", "work_left", "overhead_left"):
            assert getattr(got, name).tobytes() == getattr(fork, name)[:n].tobytes(), (horizon, name)
        assert got.work_total.tobytes() == fork.work_total.tobytes()
    caches = ("_state", "_state_arrived", "_scratch", "_events", "_placed_of", "_table", "job_slot", "_next_event",
              "_future_arrays")  # the memo of future jobs' arrays the world and the forks fill
    assert_same_values(sim, before, "the simulator a world was made from", skip=caches)


# ---------------------------------------------------------------- advance_until


def test_advance_until_stops_between_events():
    sim = to_decision(new_sim(seed=1), "priority", _in_flight)
    t_next = sim.next_event_s()
    before = snapshot(sim)
    version, records = sim.version, len(sim.timeline)
    with pytest.raises(ValueError, match="before now"):
        sim.advance_until(sim.now - 1.0)
    mid = sim.now + (t_next - sim.now) / 2
    dt = sim.advance_until(mid)
    assert dt == mid - before.now and sim.now == mid and sim.version == version + 1 and len(sim.timeline) == records + 1
    # No event: the same jobs in the same states, only time and its integrals moved.
    np.testing.assert_array_equal(sim.state, before.state)
    assert sim.queue == before.queue and sim.checkpointing == before.checkpointing and sim.reserved == before.reserved
    assert sim.jobs_in_system_s > before.jobs_in_system_s and sim.next_event_s() == pytest.approx(t_next, rel=1e-12)
    # At or past the next event it is advance().
    a, b = sim.fork(), sim.fork()
    assert a.advance() == b.advance_until(t_next + 1e6)
    assert_same_values(b, a, "fork")
    c = sim.fork()
    assert c.advance_until(c.next_event_s()) == sim.advance()
    assert_same_values(c, sim, "fork", skip=("_state", "_state_arrived", "_scratch", "_events", "timeline", "segments"))


def _drive_split(sim: Simulator, policy: str, split: bool) -> None:
    """Run `sim` to the end with `policy`, the decisions taken at the same events as `replay`
    does; with `split`, every jump between events stops half-way first (advance_until)."""
    rule = make_baseline(policy)

    def step():
        if split and math.isfinite(sim.next_event_s()):
            sim.advance_until(sim.now + (sim.next_event_s() - sim.now) / 2)
        sim.advance()

    while not sim.done:
        if sim.queue_len and len(feasible_queue(sim.decision_state())):
            cset = build_candidates(sim.decision_state(), Q)
            a = rule.select(cset.state, cset)
            if cset.candidates[a].rule == -1:  # WAIT
                step()
            else:
                apply_candidate(sim, cset, a)
        else:
            step()


def test_advance_until_split_matches_unsplit():
    """Stopping half-way between every two events and going on gives the same episode up to
    float rounding: the integration is split in two, so floats may differ in the last bits
    (compared to 1e-9 relative), never the decisions."""
    whole, split = new_sim(), new_sim()
    _drive_split(whole, "priority", split=False)
    _drive_split(split, "priority", split=True)
    assert split.num_preemptions == whole.num_preemptions > 0
    np.testing.assert_array_equal(split.preemptions, whole.preemptions)
    assert split.finished_order == whole.finished_order
    for name in ("end", "first_start", "wait_s", "work_done", "attained_gpu_s", "run_s"):
        np.testing.assert_allclose(getattr(split, name), getattr(whole, name), rtol=1e-9, atol=1e-9, err_msg=name)
    for name in ("jobs_in_system_s", "energy_j", "allocated_gpu_s", "useful_work_s"):
        assert getattr(split, name) == pytest.approx(getattr(whole, name), rel=1e-9), name
    # The unsplit drive is replay's episode.
    reference = new_sim()
    run_to_end(reference, "priority")
    np.testing.assert_array_equal(whole.end, reference.end)
