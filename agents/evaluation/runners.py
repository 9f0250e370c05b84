"""Episodes: baselines through the bare replay loop, actors (loaded models) through the
Gymnasium env, and every (policy, seed) episode of an evaluation through `agents.parallel`
(in this process, a process pool or Ray tasks).

Workload seed `s` is the same job list for every policy (`workload_sha256` fingerprints it),
so runs are paired per seed. Learned policies run to the end (`EPISODE_STEP_CAP`), no
truncation. Nothing here imports torch: a loaded policy's framework comes in with its loader's
`load`, inside the worker that runs it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from agents.evaluation.policies import POLICY_LOADERS, SIMULATING, Actor, PolicySpec
from baselines import make_baseline
from envs import ENV_ID
from envs.cluster.config import load_cluster
from envs.cluster.topology import Cluster
from envs.decision.candidates import WaitGuard
from envs.jobs import JOB_KIND_NAMES, Job
from envs.scenario import Scenario, load_scenario, lookahead_search
from envs.sim.metrics import episode_metrics
from envs.sim.objective import Objective
from envs.sim.replay import replay
from envs.sim.simulator import SimConfig, Simulator
from envs.workload.generator import WorkloadSpec, load_workload_spec, make_workload

EPISODE_STEP_CAP = 10_000_000  # learned policies run to the end; no truncation in evaluation


@dataclass(frozen=True)
class RunTask:
    policy: PolicySpec
    seed: int
    cluster: str
    workload: str
    num_jobs: int | None
    queue_window: int
    keep_trace: bool  # return the timeline and segments for plots
    scenario: str | None = None  # its objective scores the run; its lookahead settings drive lookaheads
    wait_guard: WaitGuard | None = None  # the policy's bound on WAIT (PolicySpec.wait_guard)
    lookahead: tuple = ()  # (field, value) pairs over the scenario's lookahead settings (a distillation's teacher check)


def workload_sha256(jobs: list[Job]) -> str:
    """Fingerprint of a job list: equal for every policy of one seed (the pairing property)."""
    text = json.dumps([j.to_dict() for j in jobs], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def cluster_and_spec(cluster: str, workload: str) -> tuple[Cluster, WorkloadSpec]:
    """The cluster and workload spec of two config names (or YAML paths), loaded once per process."""
    return load_cluster(cluster), load_workload_spec(workload)


@functools.lru_cache(maxsize=None)
def _actor(loader: str, arg: str) -> Actor:
    return POLICY_LOADERS[loader].load(arg)


@functools.lru_cache(maxsize=None)
def _scenario(name: str) -> Scenario:
    return load_scenario(name)


def run_baseline(name: str, cluster: Cluster, spec: WorkloadSpec, seed: int, num_jobs: int | None = None, queue_window: int = 8,
                 config: SimConfig | None = None, wait_guard: WaitGuard | None = None) -> tuple[Simulator, int]:
    """A baseline on workload `seed`, through the bare replay loop: the finished simulator and
    the number of decisions taken. `wait_guard`: the bound on WAIT of its masks (none by default)."""
    sim = Simulator(cluster, make_workload(spec, cluster, seed, num_jobs), config)
    rule = make_baseline(name, seed=seed)
    return sim, replay(sim, rule.select, queue_window, preempt_las=rule.preempt_las, wait_guard=wait_guard)


def run_actor(act: Actor, cluster: Cluster, spec: WorkloadSpec, seed: int, num_jobs: int | None = None, queue_window: int = 8,
              objective: Objective | None = None, max_checkpoint_s: float = 60.0, wait_guard: WaitGuard | None = None) -> tuple[Simulator, int]:
    """An actor (env, observation) -> action on workload `seed`, through the Gymnasium env
    (`wait_guard`: the env's bound on WAIT, none by default)."""
    import gymnasium as gym

    env = gym.make(ENV_ID, cluster=cluster, workload=spec, num_jobs=num_jobs, queue_window=queue_window, max_steps=EPISODE_STEP_CAP,
                   objective=objective, max_checkpoint_s=max_checkpoint_s, wait_guard=wait_guard)
    obs, _ = env.reset(seed=seed)
    steps, done = 0, env.unwrapped.done
    while not done:
        obs, _, terminated, truncated, _ = env.step(act(env, obs))
        steps += 1
        done = terminated or truncated
    sim = env.unwrapped.sim
    env.close()
    return sim, steps


def _run_episode(task: RunTask) -> tuple[Simulator, int, dict | None]:
    """The finished simulator, the number of decisions taken and, for a lookahead, its search
    statistics."""
    cluster, spec = cluster_and_spec(task.cluster, task.workload)
    sc = _scenario(task.scenario) if task.scenario else None
    objective = sc.objective if sc else Objective()
    max_ckpt = sc.max_checkpoint_s if sc else 60.0
    if task.policy.loader is None:
        return (*run_baseline(task.policy.arg, cluster, spec, task.seed, task.num_jobs, task.queue_window, SimConfig(max_checkpoint_s=max_ckpt),
                              task.wait_guard), None)
    if task.policy.loader == SIMULATING:
        from agents.lookahead import run_lookahead

        jobs = make_workload(spec, cluster, task.seed, task.num_jobs)
        search = lookahead_search(sc, dict(task.lookahead))
        sim, steps, stats = run_lookahead(task.policy.arg, cluster, spec, jobs, task.seed, search, objective, task.queue_window,
                                          max_ckpt, wait_guard=task.wait_guard)
        return sim, steps, dataclasses.asdict(stats)
    act = _actor(task.policy.loader, task.policy.arg)
    return (*run_actor(act, cluster, spec, task.seed, task.num_jobs, task.queue_window, objective, max_ckpt, task.wait_guard), None)


def run_one(task: RunTask) -> dict:
    """One (policy, seed) episode: its run record for results.json plus data for plots."""
    start = time.perf_counter()
    sim, decisions, search = _run_episode(task)
    done = ~np.isnan(sim.end)
    objective = _scenario(task.scenario).objective if task.scenario else None
    out: dict[str, Any] = {
        "run": {
            "seed": task.seed,
            "jobs_sha256": workload_sha256(sim.jobs),
            "decisions": decisions,
            "wall_s": time.perf_counter() - start,
            "metrics": episode_metrics(sim, objective),
        },
        "jct_s": (sim.end - sim.arrival)[done].tolist(),
    }
    if search is not None:
        out["run"]["search"] = search
    if task.keep_trace:
        out["timeline"] = [list(row) for row in sim.timeline]
        out["segments"] = [(s.job_id, s.gpus.tolist(), s.start_s, s.end_s, s.preempted) for s in sim.segments]
        out["job_kinds"] = [JOB_KIND_NAMES[j.kind] for j in sim.jobs]
    return out


class EvaluationRuns(NamedTuple):
    """What `run_all` returns: runs per policy label (sorted as the seeds), pooled JCTs per
    policy, the trace seed's episode output per policy (with its timeline and segments, for
    plots), and one record per episode that failed (`missing`, empty when every episode ran)."""

    runs: dict[str, list[dict]]
    jcts: dict[str, list[float]]
    traces: dict[str, dict]
    missing: list[dict]


def _shared_path(name_or_path: str) -> str:
    """An existing file as an absolute path, so that a worker whose working directory differs
    (a Ray worker) finds it; a config name unchanged."""
    p = Path(name_or_path)
    return str(p.resolve()) if p.is_file() else name_or_path


_EPISODE_COST_RANK = {SIMULATING: 0, None: 2}  # submission order by loader; a loaded model's: 1


def run_all(
    policies: list[PolicySpec],
    seeds: list[int],
    *,
    cluster: str,
    workload: str,
    num_jobs: int | None,
    queue_window: int,
    workers: int,
    workload_hashes: dict[int, str],
    trace_seed: int,
    scenario: str | None = None,
    backend: str = "local",
    ray_address: str | None = None,
    progress: bool = True,
) -> EvaluationRuns:
    """Every (policy, seed) episode through `agents.parallel.run_tasks` (`backend` "local": in
    this process or a pool of `workers` processes; "ray": Ray tasks, at most `workers` at a time
    when > 0, else as many as the cluster runs; see agents/parallel.py),
    with a progress bar on stderr. Model and config files reach the workers as absolute paths,
    which must exist on every worker's machine. `workload_hashes` (seed -> `workload_sha256`,
    drawn beforehand) must match every run's workload, else RuntimeError: the runs would not be
    paired. An episode that fails (its exception, its worker killed) is left out of the runs and
    listed in `missing` as {"policy", "scenario", "seed", "error", "traceback"}; the others are
    kept."""
    from agents.parallel import run_tasks, task_errors

    shared = [dataclasses.replace(p, arg=_shared_path(p.arg)) if p.loader not in (None, SIMULATING) else p for p in policies]
    scenario_file = _shared_path(scenario) if scenario else None
    tasks = [
        RunTask(p, s, _shared_path(cluster), _shared_path(workload), num_jobs, queue_window, keep_trace=s == trace_seed, scenario=scenario_file,
                wait_guard=p.wait_guard)
        for p in shared
        for s in seeds
    ]
    # The dearest episodes first (a simulating policy's, then a loaded model's, then a baseline's),
    # so that the workers finish together rather than one running the last lookahead alone.
    order = sorted(range(len(tasks)), key=lambda i: _EPISODE_COST_RANK.get(tasks[i].policy.loader, 1))
    submitted = run_tasks(run_one, [tasks[i] for i in order], workers=workers, backend=backend, desc="episodes",
                          progress=progress, on_error="keep", ray_address=ray_address, max_in_flight=workers or None)
    results = [None] * len(tasks)
    for k, i in enumerate(order):
        results[i] = submitted[k]
    failed = {order[e.index]: e for e in task_errors(submitted)}
    labels = [p.label for p in policies for _ in seeds]  # the task order; labels as given (paths as typed)
    scenario_name = _scenario(scenario_file).name if scenario_file else None
    missing = [{"policy": labels[i], "scenario": scenario_name, "seed": tasks[i].seed, "error": e.error, "traceback": e.details}
               for i, e in sorted(failed.items())]
    outputs = {(labels[i], t.seed): o for i, (t, o) in enumerate(zip(tasks, results)) if i not in failed}
    runs, jcts, traces = {}, {}, {}
    for p in policies:
        outs = [outputs[(p.label, s)] for s in seeds if (p.label, s) in outputs]
        for o in outs:
            if o["run"]["jobs_sha256"] != workload_hashes[o["run"]["seed"]]:
                raise RuntimeError(f"{p.label} saw a different workload for seed {o['run']['seed']}: runs are not paired")
        runs[p.label] = [o["run"] for o in outs]
        jcts[p.label] = [x for o in outs for x in o["jct_s"]]
        if (p.label, trace_seed) in outputs:
            traces[p.label] = outputs[(p.label, trace_seed)]
    return EvaluationRuns(runs, jcts, traces, missing)
