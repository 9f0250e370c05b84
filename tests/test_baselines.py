"""Heuristic baselines: each one's choice on a toy instance worked out by hand, the registry,
and full replays that respect the mask and are deterministic."""

import numpy as np
import pytest

from baselines import BASELINES, make_baseline
from envs.cluster.config import cluster_from_dict, load_cluster
from envs.decision.candidates import CandidateSet, build_candidates
from envs.decision.las import STARVATION_FACTOR, las_queue
from envs.decision.placement import PREEMPT, PREEMPT_LAS, RULES, choose_las_victims
from envs.decision.state import ClusterState
from envs.decision.window import can_place, las_fits
from envs.jobs import PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, Job, JobKind
from envs.sim.metrics import episode_metrics
from envs.sim.replay import advance_to_decision, replay
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload

Q = 8

# Four 8-GPU H100 nodes, two per leaf: n0, n1 under leaf0 (GPUs 0-15), n2, n3 under leaf1 (16-31).
TWO_LEAVES = cluster_from_dict(
    {
        "name": "toy-2leaf",
        "node_types": {"dgx": {"gpu_type": "H100-80GB", "gpus": 8}},
        "nodes": [{"names": "n[0-3]", "type": "dgx"}],
        "switches": [
            {"name": "leaf0", "nodes": "n[0-1]"},
            {"name": "leaf1", "nodes": "n[2-3]"},
            {"name": "spine", "switches": "leaf[0-1]"},
        ],
    },
    "toy-2leaf",
)


def job(job_id: int, gpus: int, *, arrival_s: float = 0.0, work_s: float = 3600.0, estimate_s: float | None = None,
        tp: int = 1, priority: int = PRIORITY_NORMAL, preemptible: bool = True) -> Job:
    return Job(
        job_id=job_id, arrival_s=arrival_s, kind=JobKind.FINETUNE, gpus=gpus, tp_degree=tp, mem_per_gpu_gb=40.0,
        work_s=work_s, estimate_s=work_s if estimate_s is None else estimate_s, comm_fraction=0.2,
        tp_comm_share=0.7 if tp > 1 else 0.0, priority=priority, preemptible=preemptible,
        checkpoint_s=10.0, restore_s=20.0,
    )


def choose(name: str, sim: Simulator) -> tuple[CandidateSet, int]:
    cset = advance_to_decision(sim, Q)
    i = make_baseline(name).select(cset.state, cset)
    assert cset.mask[i]
    return cset, i


def chosen(cset: CandidateSet, i: int) -> tuple[int, str, list[int]]:
    cd = cset.candidates[i]
    return cd.job_id, RULES[cd.rule] if cd.rule >= 0 else "wait", sorted(cd.gpus.tolist()) if cd.gpus is not None else []


def gpus_per_node(gpus: list[int]) -> list[int]:
    return np.bincount(np.array(gpus) // 8, minlength=4).tolist()


# ---------------------------------------------------------------- placement rules in FIFO order


@pytest.fixture
def one_tp8_gang() -> Simulator:
    """Job 0 holds GPUs 8-9 (n1); job 1, a 16-GPU TP-8 gang, is the only one queued.
    Free: n0 8, n1 6, n2 8, n3 8; leaf0 has 14 free, leaf1 16."""
    sim = Simulator(TWO_LEAVES, [job(0, 2, work_s=1e5), job(1, 16, tp=8)])
    sim.start(0, np.array([8, 9]))
    return sim


def test_binpack_fills_the_fullest_nodes_blind_to_switches(one_tp8_gang: Simulator) -> None:
    # No node fits 16: take the node with most free (n0, first of the ties), then best-fit the
    # remaining 8 (n2 and n3 tie; n2 first): the gang crosses the spine.
    cset, i = choose("binpack", one_tp8_gang)
    assert chosen(cset, i) == (1, "binpack", list(range(0, 8)) + list(range(16, 24)))


def test_topology_keeps_the_gang_under_one_leaf(one_tp8_gang: Simulator) -> None:
    cset, i = choose("topology", one_tp8_gang)
    assert chosen(cset, i) == (1, "topology", list(range(16, 32)))


def test_spread_puts_each_tp8_pod_on_the_emptiest_node(one_tp8_gang: Simulator) -> None:
    # A gang is one pod per TP group: two 8-GPU pods. Whole-pod room per node is (1, 0, 1, 1):
    # the first pod goes to n0 (ties to the lower id), the second to n2, across the spine.
    cset, i = choose("spread", one_tp8_gang)
    job_id, rule, gpus = chosen(cset, i)
    assert (job_id, rule) == (1, "spread")
    assert gpus_per_node(gpus) == [8, 0, 8, 0]


def test_spread_deals_one_gpu_pods_round_robin() -> None:
    # A 16-GPU data-parallel gang (TP 1: sixteen 1-GPU pods). Free (8, 6, 8, 8): one pod at a
    # time to the node with most free GPUs (ties to the lower id) -> (6, 6, 6, 6) after 6 pods,
    # then round-robin n0, n1, n2, n3 for the other 10, ending at (3, 3, 4, 4).
    sim = Simulator(TWO_LEAVES, [job(0, 2, work_s=1e5), job(1, 16)])
    sim.start(0, np.array([8, 9]))
    cset, i = choose("spread", sim)
    job_id, rule, gpus = chosen(cset, i)
    assert (job_id, rule) == (1, "spread")
    assert gpus_per_node(gpus) == [5, 3, 4, 4]


def test_fifo_takes_the_first_job_that_fits() -> None:
    # Job 1 (28 GPUs) does not fit the 24 free GPUs and cannot preempt (same class): it is not a
    # candidate, so FIFO takes job 2, the next in arrival order.
    sim = Simulator(TWO_LEAVES, [job(0, 8, work_s=1e5), job(1, 28), job(2, 4), job(3, 2)])
    sim.start(0, np.arange(8))
    for name in ("binpack", "spread", "topology"):
        cset, i = choose(name, sim)
        assert chosen(cset, i)[:2] == (2, name)


# ---------------------------------------------------------------- ordering rules


def test_sjf_orders_by_estimate_not_true_work() -> None:
    # Job 2 has the shortest estimate (1000 s) though its true work is the longest.
    sim = Simulator(TWO_LEAVES, [job(0, 2, work_s=1e5), job(1, 2, work_s=2000), job(2, 2, work_s=9000, estimate_s=1000), job(3, 2, work_s=3000)])
    sim.start(0, np.array([8, 9]))
    cset, i = choose("sjf", sim)
    # Topology placement of 2 GPUs: best-fit node n1 (6 free), best-fit socket (GPUs 10-11).
    assert chosen(cset, i) == (2, "topology", [10, 11])
    cset, i = choose("topology", sim)
    assert chosen(cset, i)[0] == 1


def _preempted_low_job(high_work_s: float) -> tuple[Simulator, CandidateSet, int]:
    """Job 0 (low priority) runs 500 s on 8 GPUs (4,000 GPU-s attained: LAS queue 1), is
    preempted by job 1 (high priority, the whole cluster, `high_work_s` of work) and requeued at
    510 s; job 2 (8 GPUs, queue 0) arrives at 600 s. When job 1 ends both fit."""
    jobs = [job(0, 8, priority=PRIORITY_LOW, work_s=1e5), job(1, 32, arrival_s=500.0, priority=PRIORITY_HIGH, work_s=high_work_s),
            job(2, 8, arrival_s=600.0)]
    sim = Simulator(TWO_LEAVES, jobs)
    sim.start(0, np.arange(8))
    sim.advance()
    sim.preempt_and_start(1, np.arange(32), [0])
    cset, i = choose("tiresias", sim)
    assert sim.attained_gpu_s[0] == pytest.approx(4000.0) and las_queue(cset.state, [0, 2]).tolist() in ([1, 0], [0, 0])
    assert sim.queue == [0, 2] and not sim.running.size
    return sim, cset, i


def test_tiresias_takes_the_higher_las_queue_first() -> None:
    # Job 1 ends after about 1,020 s: job 0 has waited about 510 s, under STARVATION_FACTOR x
    # its 500 s executed. FIFO takes job 0 (requeued first); Tiresias takes job 2 (queue 0).
    sim, cset, i = _preempted_low_job(500.0)
    assert las_queue(cset.state, [0, 2]).tolist() == [1, 0]
    assert chosen(cset, i)[:2] == (2, "topology")
    cset, i = choose("topology", sim)
    assert chosen(cset, i)[:2] == (0, "topology")


def test_tiresias_is_fifo_inside_a_queue_and_the_starvation_guard_promotes() -> None:
    # Job 1 runs 2,500 s: job 0 waits about 2,500 s >= STARVATION_FACTOR (4) x 500 s executed,
    # so it is promoted to queue 0, where FIFO puts it before job 2.
    assert STARVATION_FACTOR == 4.0
    _, cset, i = _preempted_low_job(2500.0)
    state = cset.state
    assert state.now - state.queued_since_s[0] >= STARVATION_FACTOR * state.attained_gpu_s[0] / 8
    assert las_queue(state, [0, 2]).tolist() == [0, 0]
    assert las_queue(state, [0], queued=False).tolist() == [1]  # once it runs, its queue is its service's again
    assert chosen(cset, i)[:2] == (0, "topology")


def _las_state(running: list[dict], queued: list[dict], now: float = 36_000.0):
    """A decision state on TWO_LEAVES from plain data (jobs: finetunes, normal priority,
    preemptible unless said otherwise)."""
    def full(d: dict) -> dict:
        return {"kind": "finetune", "estimate_s": 1e5, "mem_per_gpu_gb": 40.0, **d}
    return ClusterState.from_dict({"time_s": now, "running": [full(d) for d in running], "queued": [full(d) for d in queued]},
                                  TWO_LEAVES)


def _candidate(cset: CandidateSet, job_id, rule: int):
    j = cset.state.names.index(job_id)
    return cset.candidates[cset.index(cset.window.index(j), rule)], cset.mask[cset.index(cset.window.index(j), rule)]


def test_preempt_las_takes_a_same_class_job_with_more_service_and_tiresias_takes_it() -> None:
    # A long job of the same (normal) class holds all 32 GPUs, 64 GPU-h attained (queue 2); a
    # new 4-GPU job (queue 0) does not fit. `preempt` needs a lower class: invalid; preempt-las
    # is valid, takes the long job and places the new one by topology on its GPUs.
    state = _las_state([{"id": "long", "num_gpus": 32, "gpus": list(range(32)), "attained_gpu_s": 64 * 3600.0}],
                       [{"id": "new", "num_gpus": 4}])
    cset = build_candidates(state, Q)
    assert cset.window == [1]
    _, preempt_ok = _candidate(cset, "new", PREEMPT)
    cd, las_ok = _candidate(cset, "new", PREEMPT_LAS)
    assert not preempt_ok and las_ok
    assert cd.victims == (0,) and sorted(cd.gpus.tolist()) == [0, 1, 2, 3]
    i = make_baseline("tiresias").select(state, cset)
    assert i == cset.index(0, PREEMPT_LAS)
    for name in ("topology", "priority", "sect", "easy"):  # the other rules never preempt a job of the same class
        assert make_baseline(name).select(state, cset) == cset.wait_index


def test_preempt_las_in_a_simulation_preempts_and_the_victim_keeps_its_queue() -> None:
    # The same on a simulator: job 0 (32 GPUs) runs alone for 2 h; job 1 (4 GPUs) arrives. Only
    # preempt-las can place it: the decision point exists for it, Tiresias preempts job 0 (paying
    # its checkpoint and restore), job 1 runs, job 0 comes back in queue 2 and does not preempt
    # job 1 back (job 1 is in a higher queue, and job 0's wait is short next to its 2 h run).
    sim = Simulator(TWO_LEAVES, [job(0, 32, work_s=1e5), job(1, 4, arrival_s=7200.0, work_s=600.0)])
    sim.start(0, np.arange(32))
    cset, i = choose("tiresias", sim)
    assert sim.now == 7200.0 and cset.window == [1]
    assert chosen(cset, i)[:2] == (1, "preempt-las") and cset.candidates[i].victims == (0,)
    cset_topology, i_topology = choose("topology", sim)
    assert i_topology == cset_topology.wait_index  # the others wait here, as before the rule existed
    replay(sim, make_baseline("tiresias").select, Q)
    assert sim.done and sim.num_preemptions == 1 and sim.preemptions[0] == 1
    assert sim.end[1] < sim.end[0]


def test_preempt_las_never_takes_a_job_with_less_service() -> None:
    # The queued job has 5 GPU-h attained (queue 1); the running one 0.1 GPU-h (queue 0): no
    # victim, even when the starvation guard promotes the queued job to queue 0 (not strictly higher).
    running = [{"id": "young", "num_gpus": 32, "gpus": list(range(32)), "attained_gpu_s": 360.0}]
    for waited_s in (0.0, 30 * 3600.0):
        state = _las_state(running, [{"id": "old", "num_gpus": 4, "attained_gpu_s": 5 * 3600.0,
                                      "queued_since_s": 36_000.0 - waited_s, "arrival_s": 0.0}], now=36_000.0 + waited_s)
        assert las_queue(state, [1]).tolist() == [1 if waited_s == 0 else 0]
        assert not las_fits(state, [1]).any() and choose_las_victims(state, 1) is None
        assert not can_place(state)


def test_preempt_las_never_takes_a_higher_priority_job() -> None:
    # Two 16-GPU jobs with 64 GPU-h each (queue 2): the high-priority one on leaf 0, a normal
    # one on leaf 1. A new normal 16-GPU job may take only the normal one.
    running = [{"id": "high", "num_gpus": 16, "gpus": list(range(16)), "priority": "high", "attained_gpu_s": 64 * 3600.0},
               {"id": "normal", "num_gpus": 16, "gpus": list(range(16, 32)), "attained_gpu_s": 64 * 3600.0}]
    state = _las_state(running, [{"id": "new", "num_gpus": 16}])
    assert choose_las_victims(state, 2)[1] == (1,)
    running[1]["priority"] = "high"
    state = _las_state(running, [{"id": "new", "num_gpus": 16}])
    assert not las_fits(state, [2]).any() and choose_las_victims(state, 2) is None


def test_preempt_las_takes_the_most_served_victims_first() -> None:
    # Four 8-GPU jobs, one per node, 2, 40, 20 and 30 GPU-h attained (n0-n3): all in queues below
    # the new job's (queue 0). A 16-GPU job needs two of them: the most served, the 40 and the
    # 30 GPU-h jobs (n1, n3), though the 2 GPU-h one and the 20 GPU-h one would do as well.
    hours = [2, 40, 20, 30]
    running = [{"id": f"r{n}", "num_gpus": 8, "gpus": list(range(8 * n, 8 * n + 8)), "attained_gpu_s": h * 3600.0}
               for n, h in enumerate(hours)]
    state = _las_state(running, [{"id": "new", "num_gpus": 16}])
    gpus, victims = choose_las_victims(state, 4)
    assert victims == (1, 3) and sorted(gpus.tolist()) == list(range(8, 16)) + list(range(24, 32))


def test_priority_preempts_for_the_top_job_only_when_it_does_not_fit() -> None:
    # A low-priority preemptible job holds 24 GPUs; queued: a normal 4-GPU job, then a
    # high-priority 16-GPU job that only fits by preempting it.
    sim = Simulator(TWO_LEAVES, [job(0, 24, priority=PRIORITY_LOW, work_s=1e5), job(1, 4), job(2, 16, priority=PRIORITY_HIGH)])
    sim.start(0, np.arange(24))
    cset, i = choose("priority", sim)
    assert cset.candidates[i].rule == PREEMPT and cset.candidates[i].job_id == 2
    assert cset.candidates[i].victims == (0,)
    cset, i = choose("topology", sim)
    assert chosen(cset, i)[0] == 1


def test_priority_places_the_top_job_without_preempting_when_it_fits() -> None:
    sim = Simulator(TWO_LEAVES, [job(0, 24, priority=PRIORITY_LOW, work_s=1e5), job(1, 4), job(2, 8, priority=PRIORITY_HIGH)])
    sim.start(0, np.arange(24))
    cset, i = choose("priority", sim)
    assert chosen(cset, i) == (2, "topology", list(range(24, 32)))


# ---------------------------------------------------------------- EASY backfilling


def easy_instance(third: Job) -> Simulator:
    """Job 0 runs on 24 GPUs until 1000 s (its estimate); the head, job 1, needs 28: shadow time
    1000 s with 32 - 28 = 4 GPUs spare then. Job 2 (8 GPUs, 5000 s) may not backfill: it ends
    after the shadow time and uses more than the 4 spare GPUs."""
    sim = Simulator(TWO_LEAVES, [job(0, 24, work_s=1000.0), job(1, 28), job(2, 8, work_s=5000.0), third])
    sim.start(0, np.arange(24))
    return sim


def test_easy_backfills_a_job_that_uses_only_spare_gpus() -> None:
    sim = easy_instance(job(3, 4, work_s=5000.0))
    cset, i = choose("easy", sim)
    assert chosen(cset, i)[:2] == (3, "topology")
    cset, i = choose("topology", sim)  # plain FIFO would take job 2 and delay the head
    assert chosen(cset, i)[0] == 2


def test_easy_backfills_a_job_that_ends_by_the_shadow_time() -> None:
    sim = easy_instance(job(3, 8, work_s=900.0))
    cset, i = choose("easy", sim)
    assert chosen(cset, i)[:2] == (3, "topology")


def test_easy_waits_when_backfilling_would_delay_the_head() -> None:
    sim = easy_instance(job(3, 8, work_s=1100.0))
    cset, i = choose("easy", sim)
    assert i == cset.wait_index


def test_easy_starts_the_head_when_it_fits() -> None:
    sim = Simulator(TWO_LEAVES, [job(0, 16, work_s=1000.0), job(1, 16), job(2, 2)])
    sim.start(0, np.arange(16))
    cset, i = choose("easy", sim)
    assert chosen(cset, i) == (1, "topology", list(range(16, 32)))


# ---------------------------------------------------------------- registry and full replays


def test_unknown_baseline_lists_the_known_names() -> None:
    with pytest.raises(ValueError, match="unknown baseline 'fifo'.*binpack.*random"):
        make_baseline("fifo")


def test_every_baseline_has_a_name_and_a_one_line_docstring() -> None:
    for name, cls in BASELINES.items():
        assert cls.name == name and make_baseline(name).name == name
        assert cls.__doc__ and cls.__doc__.strip()


@pytest.fixture(scope="module")
def small_workload():
    cluster = load_cluster("mixed-64gpu")
    return cluster, make_workload(load_workload_spec("llm-mix"), cluster, seed=3, num_jobs=40)


@pytest.mark.parametrize("name", list(BASELINES))
def test_full_replay_finishes_every_job_deterministically(name: str, small_workload) -> None:
    cluster, jobs = small_workload
    results = []
    for _ in range(2):
        sim = Simulator(cluster, jobs)
        replay(sim, make_baseline(name, seed=7).select, Q)  # apply_candidate rejects masked choices
        assert sim.done
        results.append(episode_metrics(sim))
    assert results[0] == results[1]


def test_random_depends_on_its_seed(small_workload) -> None:
    cluster, jobs = small_workload
    jcts = []
    for seed in (0, 1):
        sim = Simulator(cluster, jobs)
        replay(sim, make_baseline("random", seed=seed).select, Q)
        jcts.append(episode_metrics(sim)["avg_jct_s"])
    assert jcts[0] != jcts[1]


def test_tiresias_differs_from_topology_on_the_default_setting() -> None:
    """Tiresias used to equal topology (attained service ordered nothing while only priority
    preemption existed); with preempt-las it preempts jobs of its own class and changes the
    schedule: mixed-64gpu + llm-mix, seed 0."""
    from agents.evaluation import run_baseline

    cluster, spec = load_cluster("mixed-64gpu"), load_workload_spec("llm-mix")
    runs = {name: episode_metrics(run_baseline(name, cluster, spec, 0)[0]) for name in ("topology", "tiresias")}
    assert runs["topology"]["preemptions"] == 0 and runs["tiresias"]["preemptions"] > 10
    assert runs["tiresias"]["avg_jct_s"] != runs["topology"]["avg_jct_s"]


def test_model_trade_offs_on_the_default_setting() -> None:
    """The trade-offs the speed model exists to show, on mixed-64gpu + llm-mix over 10 seeds:
    topology beats spread on TP-8 pretraining JCT, spread beats binpack on inference
    interference, binpack beats spread on energy."""
    cluster, spec = load_cluster("mixed-64gpu"), load_workload_spec("llm-mix")
    metrics: dict[str, list[dict]] = {}
    for name in ("binpack", "spread", "topology"):
        metrics[name] = []
        for seed in range(10):
            sim = Simulator(cluster, make_workload(spec, cluster, seed))
            replay(sim, make_baseline(name).select, Q)
            metrics[name].append(episode_metrics(sim))

    def mean(name: str, key: str) -> float:
        return float(np.mean([m[key] for m in metrics[name]]))

    assert mean("topology", "avg_jct_pretrain_s") < 0.8 * mean("spread", "avg_jct_pretrain_s")
    assert mean("spread", "inference_interference") < 0.8 * mean("binpack", "inference_interference")
    assert mean("binpack", "energy_kwh") < 0.95 * mean("spread", "energy_kwh")
