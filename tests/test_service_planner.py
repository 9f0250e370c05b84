"""The honest lookahead planner served by `python -m service --policy lookahead`, against a real
process on 127.0.0.1: it decides from the request's state alone exactly as agents.lookahead does
on a simulator at the same moment, the extender verbs answer with its choice, its flags fail
clearly, and the futures it samples come from the state's past only."""

from __future__ import annotations

import numpy as np
import pytest

from agents.lookahead import Lookahead, StatePlanner, estimate_noise, simulator_from_state
from envs.cluster.config import load_cluster
from envs.decision.candidates import apply_candidate, build_candidates
from envs.decision.state import ClusterState
from envs.jobs import Job, JobKind
from envs.scenario import load_scenario
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload
from service.__main__ import main, make_planner, parse_args
from service.testing import ServiceProcess
from tests.helpers import needs_service

httpx = pytest.importorskip("httpx")  # the `test` extra

CLUSTER = "mixed-64gpu"
TRACE = "philly-busy-vc"  # a trace: the lookahead resamples the past arrivals, as the service's planner does
PLANNER_ARGS = ["--policy", "lookahead", "--cluster", CLUSTER, "--scenario", "default", "--lookahead-samples", "2",
                "--planner-seed", "3"]


def _planner(args: list[str] = PLANNER_ARGS) -> StatePlanner:
    """The planner the service builds from these flags (the same code path, in this process)."""
    return make_planner(parse_args(args))


def _episode(workload: str, seed: int, steps: int, num_jobs: int = 80):
    """(simulator, candidate set) at each of `steps` decisions of an episode driven by random
    valid actions (preemptions, so checkpointing and reserved jobs, included)."""
    cluster = load_cluster(CLUSTER)
    sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, seed, num_jobs=num_jobs))
    rng = np.random.default_rng(seed)
    cset = advance_to_decision(sim, 8)
    for _ in range(steps):
        if sim.done:
            return
        yield sim, cset
        valid = np.flatnonzero(cset.mask)
        apply_candidate(sim, cset, int(valid[rng.integers(len(valid))]))
        cset = advance_to_decision(sim, 8)


def _outcome(state: ClusterState, cset, i: int) -> tuple:
    cd = cset.candidates[i]
    if i == cset.wait_index:
        return ("wait",)
    return (state.name_of(cd.job_id), tuple(cd.gpus.tolist()), tuple(sorted(state.name_of(v) for v in cd.victims)))


def _answer(body: dict) -> tuple:
    """The rank-1 action of a /v1/score answer, as `_outcome` writes it."""
    if body["wait"]["rank"] == 1:
        return ("wait",)
    top = next(c for c in body["candidates"] if c["rank"] == 1)
    return (top["job_id"], tuple(top["gpus"]), tuple(sorted(top["victims"])))


@pytest.fixture(scope="module")
def svc():
    needs_service()
    with ServiceProcess(PLANNER_ARGS) as s:
        yield s


@pytest.fixture(scope="module")
def client(svc):
    with httpx.Client(base_url=svc.url, timeout=60) as c:
        yield c


def test_the_simulator_built_from_a_state_stands_where_the_state_stands():
    """Every live job's queue position, placement, work done, restore, checkpoint end, wait and
    preemptions survive the trip state -> simulator -> decision state, preemptions in flight too."""
    in_flight = 0
    for sim, _ in _episode(TRACE, 0, 80):
        later = sim.fork()  # and a moment later, a checkpoint or a restore under way
        later.advance_until(max(later.now, min(later.next_event_s(), later.now + 30.0) - 1e-3))
        for state in (sim.decision_state(), later.decision_state()):
            built, order = simulator_from_state(state)
            assert built.num_jobs == built.num_arrived == len(order)  # the live jobs, nothing after now
            want, got = state.to_dict(), built.decision_state().to_dict()
            for section in ("running", "checkpointing", "reserved", "queued"):
                assert [dict(j, id=None) for j in got[section]] == [dict(j, id=None) for j in want[section]], section
                assert [order[j["id"]] for j in got[section]] == [j["id"] for j in want[section]], section
            in_flight += bool(state.checkpointing) and state is later.decision_state()
    assert in_flight > 0, "no preemption in flight was rebuilt: this test could not catch a lost checkpoint"


def test_the_planner_decides_as_the_lookahead_on_the_simulator():
    """At the same moment and seed, the planner on the decision state alone takes the choice of
    agents.lookahead's Lookahead forking the live simulator (trace workload: both resample the past;
    moments before any job finished, so both see the same jobs), and the same state sent as JSON
    gives the same choice."""
    sc = load_scenario("default")
    spec = load_workload_spec(TRACE)
    compared = 0
    for seed in range(3):
        for sim, cset in _episode(TRACE, seed, 30):
            if sim.num_done:
                break
            state = sim.decision_state()
            planner = StatePlanner(sc.lookahead, sc.objective, seed=seed, estimate_noise=estimate_noise(spec))
            mine = planner.choose(state, cset)
            live = Lookahead(sim, spec, sc.lookahead, sc.objective, 8, clairvoyant=False, seed=seed)
            assert mine == live.select(state, cset), f"seed {seed} t={sim.now}"
            if live.last_search is not None:  # the same futures: the same options at the same mean costs
                assert planner.last_search[0] == live.last_search[0]
                np.testing.assert_allclose(planner.last_search[1], live.last_search[1], rtol=1e-6, atol=1e-6)
            sent = ClusterState.from_dict(state.to_dict(), state.cluster)
            sent_cset = build_candidates(sent, 8)
            assert _outcome(sent, sent_cset, planner.choose(sent, sent_cset)) == _outcome(state, cset, mine)
            compared += planner.stats.searched > 0
    assert compared >= 5, f"only {compared} searched decisions compared"


def test_score_answers_with_the_planners_choice(client):
    """POST /v1/score ranks first what the planner (built from the same flags) chooses on the
    simulator's own view of that state: view vs JSON, process vs service, the same decision."""
    planner = _planner()
    compared = 0
    for sim, cset in _episode(TRACE, 1, 25, num_jobs=120):
        state = sim.decision_state()
        want = _outcome(state, cset, planner.choose(state, cset))
        r = client.post("/v1/score", json={"state": state.to_dict()})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["policy"] == "planner:lookahead" and body["fallback"] is False
        assert _answer(body) == want, f"t={sim.now}"
        compared += 1
    assert compared >= 20
    assert planner.stats.changed > 0, "the planner never left sect's choice: this test could not tell it from the baseline"
    info = client.get("/v1/info").json()
    assert info["torch_imported"] is False
    assert info["planner"]["search"]["samples"] == 2 and info["planner"]["scenario"] == "default"
    assert "gangsched_fallbacks_total{" not in client.get("/metrics").text


UNIX_CLOCK_S = 20_794 * 86_400.0  # 2026-12-07 00:00 UTC in Unix seconds: a Kubernetes watch's clock


def _on_unix_clock(data: dict) -> dict:
    """A state's plain data with every time (now, arrivals, queue entries, checkpoint ends, past
    arrivals) moved to a clock in Unix seconds."""
    out = dict(data, time_s=data["time_s"] + UNIX_CLOCK_S)
    for section in ("running", "checkpointing", "reserved", "queued"):
        out[section] = [{k: v + UNIX_CLOCK_S if k in ("arrival_s", "queued_since_s", "checkpoint_end_s") else v
                         for k, v in job.items()} for job in data.get(section, [])]
    out["recent_arrivals"] = [dict(a, time_s=a["time_s"] + UNIX_CLOCK_S) for a in data.get("recent_arrivals", [])]
    return out


def test_a_state_on_a_unix_clock_is_decided_as_on_its_own(client):
    """The same states with their times in Unix seconds (about 1.8e9 s, where one float step is
    2.4e-7 s) get the same answers, within the planner's budget: its simulator counts from the
    state's first day (agents.lookahead.time_origin). Without it a rollout's event loop never
    reached a job's end (the finish slack, 1e-7 s, below the clock's step) and the request hung."""
    compared = 0
    for sim, cset in _episode(TRACE, 1, 25, num_jobs=120):
        data = sim.decision_state().to_dict()
        answers = []
        for body in (data, _on_unix_clock(data)):
            r = client.post("/v1/score", json={"state": body})
            assert r.status_code == 200, r.text
            assert r.json()["fallback"] is False
            answers.append(_answer(r.json()))
        assert answers[1] == answers[0], f"t={sim.now}"
        compared += 1
    assert compared >= 20


def test_extender_verbs_answer_with_the_planners_choice(client):
    """filter and prioritize decide through the planner: the service answers as an in-process
    Extender over a Scorer with the same planner, and the planner's decisions are counted."""
    from service.k8s import Extender
    from service.scoring import Scorer
    from tests.test_service_k8s import cluster_nodes, extender_args, pod

    sim, _ = next((s, c) for s, c in _episode(TRACE, 2, 40, num_jobs=120) if s.ledger.allocated_gpus >= 40)
    state = dict(sim.decision_state().to_dict(), recent_arrivals=[])  # no arrival rate: nothing depends on the clock
    assert state["queued"], "no other job queued: a planner blind to the pod's restriction would pass"
    local = Extender(load_cluster(CLUSTER), Scorer("sect", planner=_planner()), 8, clock=lambda: 0.0)
    local.put_state(state)
    assert client.put("/v1/state", json=state).status_code == 200
    before = client.get("/v1/info").json()["planner"]["stats"]["decisions"]
    nodes = cluster_nodes(CLUSTER)
    for name, gpus in (("p1", 1), ("p4", 4)):
        long = {"gangsched.io/estimate-s": "500000"}  # the queued jobs are shorter: unrestricted, the planner would pick one
        args = extender_args(pod(name, gpus, annotations=long), nodes, cache=True)
        r = client.post("/scheduler/filter", json=args)
        assert r.status_code == 200 and r.json() == local.filter(args), r.text
        r = client.post("/scheduler/prioritize", json=args)
        assert r.status_code == 200, r.text
        want = local.prioritize(args)
        assert r.json() == want
        assert max(h["Score"] for h in want) > 0
    after = client.get("/v1/info").json()["planner"]
    assert after["stats"]["decisions"] >= before + 2
    assert "gangsched_fallbacks_total{" not in client.get("/metrics").text


def test_a_search_past_its_budget_falls_back_to_the_baseline_and_is_counted():
    needs_service()
    sim, cset = next((s, c) for s, c in _episode(TRACE, 1, 25, num_jobs=120) if len(c.state.queue) > 1)
    with ServiceProcess(["--cluster", CLUSTER, "--policy", "lookahead", "--planner-budget-ms", "0.001"]) as s, \
            httpx.Client(base_url=s.url, timeout=60) as c:
        body = c.post("/v1/score", json={"state": sim.decision_state().to_dict()}).json()
        assert body["policy"] == "baseline:sect" and body["fallback"] is True
        assert 'gangsched_fallbacks_total{reason="SearchTimeout"}' in c.get("/metrics").text


@pytest.mark.parametrize("argv, message", [
    (["--policy", "lookahead", "--model", "generalist"], "--policy lookahead and --model generalist: serve a model or a policy, not both"),
    (["--policy", "lookahead-oracle"], "--policy 'lookahead-oracle': unknown (known: lookahead, "),
    (["--policy", "lookahead", "--scenario", "no-such-scenario"], "no-such-scenario"),
    (["--policy", "lookahead", "--lookahead-samples", "0"], "--lookahead-samples 0: must be >= 1"),
    (["--policy", "lookahead", "--lookahead-horizon-s", "0"], "--lookahead-horizon-s 0.0: must be > 0"),
    (["--policy", "lookahead", "--planner-budget-ms", "-1"], "--planner-budget-ms -1.0: must be > 0"),
    (["--scenario", "default"], "--scenario applies to --policy lookahead only"),
    (["--model", "no-such-model"], "--model: 'no-such-model' is neither a shipped model"),
])
def test_bad_flags_are_refused_with_a_clear_message(argv, message, capsys):
    assert main(["--cluster", CLUSTER, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m service: error: ") and message in err, err


def _job(job_id: int, arrival_s: float, gpus: int, work_s: float) -> Job:
    return Job(job_id=job_id, arrival_s=arrival_s, kind=JobKind.FINETUNE, gpus=gpus, tp_degree=1, mem_per_gpu_gb=10.0,
               work_s=work_s, estimate_s=work_s, comm_fraction=0.1, tp_comm_share=0.5)


def test_the_planners_futures_come_from_the_past_only():
    """A state whose past holds only 1- and 2-GPU jobs: however often the planner samples its
    future, no arrival is larger, though the true workload brings a 32-GPU job soon after now;
    the simulator it forks holds the state's jobs only."""
    cluster = load_cluster(CLUSTER)
    jobs = [_job(i, 60.0 * i, 1 + i % 2, 3600.0) for i in range(30)]
    jobs.append(_job(30, 60.0 * 30 + 5.0, 32, 3600.0))
    sim = Simulator(cluster, jobs)
    while sim.num_arrived < 30:
        sim.advance()
    state = sim.decision_state()
    planner = _planner()
    built, _ = simulator_from_state(state)
    assert built.num_jobs == 30
    sampler, own = planner.sampler(state), built.decision_state()
    rng = np.random.default_rng(0)
    sizes = [f.gpus for s in range(200) for f in sampler.future(own, s, state.now + 3 * 3600.0, rng)]
    assert len(sizes) > 1000  # about one arrival a minute, as seen
    assert set(sizes) == {1, 2}
    cset = build_candidates(state, 8)
    assert cset.mask[planner.choose(state, cset)]
