"""`python -m service.example_state`: a `/v1/score` request body to try the service with.

    python -m service.example_state [--cluster mixed-64gpu] [--workload llm-mix] [--jobs 200]
                                    [--seed 0] [--busy 0.75] [--out FILE]

A simulated episode of the workload on the cluster (`sect` placing jobs) is run until `--busy` of
the GPUs are allocated (or to its busiest decision), and its decision state, in the plain-data
form of docs/state.md, is written with its queue replaced by one pending 8-GPU job:
`{"state": {...}, "queue_window": 8}`, to `--out` or standard output. The same cluster, workload
and seed give the same body.

    python -m service --cluster mixed-64gpu &
    python -m service.example_state --cluster mixed-64gpu > state.json
    curl -s localhost:8080/v1/score -d @state.json -H 'content-type: application/json'
"""

from __future__ import annotations

import argparse
import json
import sys


def loaded_state(cluster_name: str, workload: str, num_jobs: int, busy: float = 0.75, seed: int = 0) -> dict:
    """A plain-data state with at least `busy` of the GPUs allocated (or the busiest seen),
    its queue replaced by one pending 8-GPU job."""
    from baselines import make_baseline
    from envs.cluster.config import load_cluster
    from envs.decision.candidates import apply_candidate
    from envs.sim.replay import advance_to_decision
    from envs.sim.simulator import Simulator
    from envs.workload.generator import load_workload_spec, make_workload

    cluster = load_cluster(cluster_name)
    sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, seed, num_jobs=num_jobs))
    sect = make_baseline("sect")
    cset = advance_to_decision(sim, 8)
    best, best_alloc = None, -1
    for _ in range(5000):
        if sim.done:
            break
        state = sim.decision_state()
        if state.allocated_gpus > best_alloc:
            best, best_alloc = state.to_dict(), state.allocated_gpus
        if state.allocated_gpus >= busy * cluster.num_gpus:
            break
        apply_candidate(sim, cset, sect.select(state, cset))
        cset = advance_to_decision(sim, 8)
    best["queued"] = [{"id": "bench-job", "num_gpus": 8, "tp_degree": 8, "mem_per_gpu_gb": 40.0, "kind": "pretrain",
                       "priority": "normal", "comm_fraction": 0.3, "tp_comm_share": 0.7, "estimate_s": 7200.0,
                       "arrival_s": best["time_s"], "queued_since_s": best["time_s"]}]
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m service.example_state", description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="mixed-64gpu", help="cluster config name (configs/clusters/) or YAML path")
    p.add_argument("--workload", default="llm-mix", help="workload config name (configs/workloads/) or YAML path")
    p.add_argument("--jobs", type=int, default=200, help="jobs of the simulated episode")
    p.add_argument("--seed", type=int, default=0, help="the workload's seed")
    p.add_argument("--busy", type=float, default=0.75, help="share of the GPUs allocated at the state taken (0..1)")
    p.add_argument("--out", help="file to write (default: standard output)")
    args = p.parse_args(argv)
    from envs.cluster.config import ConfigError

    if not 0.0 <= args.busy <= 1.0 or args.jobs < 1:
        print("python -m service.example_state: error: --busy must be in 0..1 and --jobs at least 1", file=sys.stderr)
        return 2
    try:
        body = {"state": loaded_state(args.cluster, args.workload, args.jobs, args.busy, args.seed), "queue_window": 8}
    except (ConfigError, OSError) as e:
        print(f"python -m service.example_state: error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(body, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
