"""Small builders shared by the tests: toy clusters and hand-made jobs."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sys

import numpy as np

from envs.cluster.config import cluster_from_dict, load_cluster
from envs.cluster.topology import Cluster
from envs.jobs import Job, JobKind


def toy_cluster(nodes: int = 2, gpus: int = 8, leaves: int = 1, oversubscription: float = 1.0, intra: str = "nvswitch") -> Cluster:
    """`nodes` H100 nodes split evenly under `leaves` leaves and one spine."""
    per_leaf = nodes // leaves
    switches = [
        {"name": f"leaf{l}", "nodes": f"n[{l * per_leaf}-{(l + 1) * per_leaf - 1}]", "oversubscription": oversubscription}
        for l in range(leaves)
    ]
    if leaves > 1:
        switches.append({"name": "spine0", "switches": f"leaf[0-{leaves - 1}]"})
    data = {
        "name": "toy",
        "node_types": {"box": {"gpu_type": "H100-80GB", "gpus": gpus, "intra_node": intra}},
        "nodes": [{"names": f"n[0-{nodes - 1}]", "type": "box"}],
        "switches": switches,
    }
    return cluster_from_dict(data, "<toy>")


def job(job_id: int, arrival_s: float, gpus: int, work_s: float, *, tp: int = 1, comm: float = 0.0, tp_share: float = 0.0,
        kind: JobKind = JobKind.FINETUNE, priority: int = 1, preemptible: bool = True, mem: float = 40.0,
        estimate_s: float | None = None, checkpoint_s: float = 10.0, restore_s: float = 20.0) -> Job:
    return Job(
        job_id=job_id, arrival_s=arrival_s, kind=kind, gpus=gpus, tp_degree=tp, mem_per_gpu_gb=mem, work_s=work_s,
        estimate_s=work_s if estimate_s is None else estimate_s, comm_fraction=comm, tp_comm_share=tp_share,
        priority=priority, preemptible=preemptible, checkpoint_s=checkpoint_s, restore_s=restore_s,
    )


def seen_until(jobs: list[Job], cut_s: float, other: list[Job], seed: int) -> list[Job]:
    """A workload that a scheduler cannot tell from `jobs` before `cut_s`: the same arrivals and
    estimates up to then, different true work for every job, and other jobs after it."""
    rng = np.random.default_rng(seed)
    kept = [dataclasses.replace(j, work_s=j.work_s * float(rng.uniform(1.2, 2.0))) for j in jobs if j.arrival_s <= cut_s]
    later = [j for j in other if j.arrival_s > cut_s]
    return [dataclasses.replace(j, job_id=i) for i, j in enumerate(kept + later)]


def history(sim) -> tuple:
    """What has happened so far: arrivals and completions with their times."""
    done = sorted((int(j), float(sim.end[j])) for j in sim.finished_order)
    return sim.now, sim.decision_state().num_jobs, tuple(sim.arrival[: sim.decision_state().num_jobs].tolist()), tuple(done)


@dataclasses.dataclass
class Ran:
    """What a command's `main(argv)` did, in the fields of `subprocess.CompletedProcess`."""

    returncode: int
    stdout: str
    stderr: str


def run_main(main, argv) -> Ran:
    """Call a command's entry function `main(argv)` in this process, as its script would with
    that command line: its exit code (an argparse `SystemExit` included) and what it printed.
    An exception escaping `main` propagates (where the script would print a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None  # a worker task may set 1 in this process
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
    finally:
        if threads is not None:
            torch.set_num_threads(threads)
    return Ran(int(code), out.getvalue(), err.getvalue())


def run_copy(run, tmp_path):
    """A test's own copy of a session's run folder (conftest.py's tiny runs): tests write into it."""
    import shutil
    from pathlib import Path

    return Path(shutil.copytree(run, Path(tmp_path) / "run"))


def evaluate_in_process(*args) -> Ran:
    """evaluate.py's `main` with this command line, in this process (tests/test_evaluate.py runs
    the real command). Its policies are loaded afresh, as a new evaluate.py process loads them
    (a test may rewrite a run's anchor.json between evaluations of the same `anchored=` path)."""
    from agents.evaluation import runners
    from evaluate import main

    runners._actor.cache_clear()
    return run_main(main, args)


def needs_compiled():
    """A skip mark for a test that compares the compiled path (the native core, numba's kernels)
    with the plain-Python reference: with `GANGSCHED_JIT=0` (or without numba) there is only the
    reference, and nothing to compare."""
    import pytest

    from envs.core import jit

    return pytest.mark.skipif(not jit.ENABLED, reason="compares the compiled path with the reference; GANGSCHED_JIT=0 runs the reference alone")


def needs_service() -> None:
    """Skip the calling test (or module) unless the `service` extra that a real service process
    runs on (FastAPI, uvicorn) is installed."""
    import pytest

    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")


def busy_state(cluster_name: str, nodes: list[str], priority: str = "high", preemptible: bool = False) -> dict:
    """A plain-data state (the service's PUT /v1/state) whose running jobs fill `nodes` (8 GPUs
    each) of the cluster `cluster_name`."""
    c = load_cluster(cluster_name)
    running = []
    for n in nodes:
        f = int(c.node_first_gpu[c.node_names.index(n)])
        running.append({"id": f"other/{n}", "num_gpus": 8, "tp_degree": 8, "estimate_s": 7200.0, "gpus": list(range(f, f + 8)),
                        "priority": priority, "preemptible": preemptible})
    return {"time_s": 1000.0, "running": running}


def trays(*ranges) -> list[int]:
    """The GPU ids of whole 4-GPU trays (tray n: GPUs 4n..4n+3, as on the GB200 NVL72 clusters), for
    each range of tray numbers in turn."""
    return [4 * n + k for r in ranges for n in r for k in range(4)]


def count_event_loop_stops(monkeypatch) -> dict[int, int]:
    """Count, by its stop reason (envs.core.kernels.EV_*), every call of the compiled event loop
    (Simulator._run_events) while `monkeypatch` holds: the returned dict fills as they run."""
    from envs.sim import simulator

    stops: dict[int, int] = {}
    run_events = simulator.Simulator._run_events

    def counted(self, *args):
        stop = run_events(self, *args)
        stops[stop] = stops.get(stop, 0) + 1
        return stop

    monkeypatch.setattr(simulator.Simulator, "_run_events", counted)
    return stops


def filter_and_bind(client, api, members: list[dict], node_names: list[str], namespace: str = "ml") -> list[str]:
    """Each member created in `api` (a service.testing.FakeAPIServer) unless it carries a UID,
    filtered by the service (`client`: an httpx.Client on it) on `node_names` and bound to the
    first node that passes, as kube-scheduler does; the nodes the API server then shows them on."""
    where = []
    for p in members:
        p = p if p["metadata"].get("uid") else api.add_pod(p)
        res = client.post("/scheduler/filter", json={"Pod": p, "Nodes": None, "NodeNames": node_names}).json()
        assert res["Error"] == "" and res["NodeNames"], res
        m = p["metadata"]
        bound = client.post("/scheduler/bind", json={"PodName": m["name"], "PodNamespace": namespace, "PodUID": m["uid"],
                                                     "Node": res["NodeNames"][0]}).json()
        assert bound == {"Error": ""}, bound
        where.append(api.node_of(namespace, m["name"]))
    return where
