"""Heuristic baselines: each one's choice on a toy instance worked out by hand, the registry,
and full replays that respect the mask and are deterministic."""

import numpy as np
import pytest

from baselines import BASELINES, make_baseline
from envs.candidates import CandidateSet
from envs.placement import PREEMPT, RULES
from envs.config import cluster_from_dict, load_cluster
from envs.jobs import PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, Job, JobKind
from envs.metrics import episode_metrics
from envs.replay import advance_to_decision, replay
from envs.simulator import Simulator
from envs.workload import load_workload_spec, make_workload

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


def test_tiresias_prefers_least_attained_service() -> None:
    # Job 0 runs 100 s on 8 GPUs, is preempted by job 1 (high priority, the whole cluster) and
    # requeued at 110 s with 800 GPU-s attained; job 2 arrives at 200 s. When job 1 ends (after 610 s) both
    # fit: FIFO takes job 0 (requeued first), Tiresias takes job 2 (0 GPU-s attained).
    jobs = [job(0, 8, priority=PRIORITY_LOW, work_s=1e4), job(1, 32, arrival_s=100.0, priority=PRIORITY_HIGH, work_s=500.0), job(2, 8, arrival_s=200.0)]
    sim = Simulator(TWO_LEAVES, jobs)
    sim.start(0, np.arange(8))
    sim.advance()
    sim.preempt_and_start(1, np.arange(32), [0])
    cset, i = choose("tiresias", sim)
    assert sim.now > 610.0 and sim.attained_gpu_s[0] == pytest.approx(800.0)  # job 1 ran at most at speed 1
    assert sim.queue == [0, 2]
    assert chosen(cset, i)[:2] == (2, "topology")
    cset, i = choose("topology", sim)
    assert chosen(cset, i)[:2] == (0, "topology")


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
