"""Compare schedulers on the same workloads and write results.json, results.md, plots and report.html.

    python evaluate.py --cluster mixed-64gpu --workload llm-mix \
        --policies binpack,spread,topology,easy,ppo=runs/model.zip --seeds 0-9 --out results/
    python evaluate.py --scenario slo-preempt --policies priority,tiresias,lookahead --out results/slo
    python evaluate.py --backend ray [--ray-address HOST:6379] --out results/ray   (docs/ray.md)

A scenario (configs/scenarios/) fixes the cluster, workload, objective and test seeds; its
objective is reported first and the paired comparison is on it. `lookahead` and
`lookahead-oracle` (agents.lookahead; the oracle is a bound that sees the true future) run
with the scenario's lookahead settings.

Every policy runs on exactly the same workloads (workload seed s is the same job list for
every policy), so comparisons are paired per seed. A policy is a baseline name (see
`baselines.BASELINES`) or `PREFIX=ARG` for a policy loaded by
`agents.evaluation.POLICY_LOADERS[PREFIX]` (`ppo=PATH`: a MaskablePPO zip; `anchored=PATH`: the
same model anchored to a heuristic by its run's anchor.json, agents.anchor). Bad input gives a
one-line error and exit code 2 before any episode runs.

`--wait-guard K` (or `overdue_factor=K,min_wait_s=S`; `off` for none) bounds WAIT in the masks
of every policy of the run (envs.decision.candidates.WaitGuard: WAIT is invalid while a window job that
could start without preempting has waited longer than max(K x its estimate, S), S = 3600 by
default). Without it a `ppo=` model gets the guard of its training config (`env: wait_guard:`)
and the others none. The results.json schema is
`agents.evaluation.RESULTS_SCHEMA` (documented in docs/evaluate.md).

Episodes run in this process, in `--workers` processes, or as Ray tasks (`--backend ray`: on
this machine, or on the cluster at `--ray-address`; docs/ray.md), with identical results. An
episode that fails is reported with its policy, scenario and seed; results.json keeps the others
and lists it under "missing", and the exit code is 1.

This script is the command line only (arguments, checks, output files); the episodes,
statistics, results document and plots are the library `agents.evaluation`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agents.evaluation import (
    POLICY_LOADERS,
    PolicySpec,
    UsageError,
    build_results,
    cluster_and_spec,
    environment_record,
    parse_policies,
    results_markdown,
    run_all,
    with_wait_guards,
    workload_sha256,
    write_plots,
)
from agents.evaluation.report import write_report
from agents.parallel import BACKENDS, BackendError, import_ray, ray_cpus, ray_session
from baselines import BASELINES
from envs.cluster.config import ConfigError
from envs.cluster.config import parse_seeds as envs_parse_seeds
from envs.decision.candidates import wait_guard_of
from envs.scenario import Scenario, load_scenario
from envs.workload.generator import make_workload

PLOT_SEED_INDEX = 0  # timelines and the Gantt chart show the first seed


def parse_seeds(text: str) -> list[int]:
    """`0-9`, `0,3,5`, `0-4,10`: distinct non-negative integers, in the order given."""
    try:
        return envs_parse_seeds(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


@dataclass(frozen=True)
class EvalConfig:
    cluster: str
    workload: str
    scenario: Scenario | None
    cluster_name: str
    workload_name: str
    policies: list[PolicySpec]
    seeds: list[int]
    reference: str
    out: Path
    workers: int | None  # local: processes (1 when not given); ray: cap on tasks in flight (None: the cluster's CPUs)
    num_jobs: int | None
    queue_window: int
    workload_hashes: dict[int, str]  # seed -> workload_sha256, drawn once before any episode
    backend: str = "local"
    ray_address: str | None = None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="evaluate.py", description="Compare schedulers on the same (paired) workloads.")
    p.add_argument("--scenario", default=None, help="config name in configs/scenarios/ or a YAML path: cluster, workload, objective and test seeds")
    p.add_argument("--cluster", default=None, help="config name in configs/clusters/ or a YAML path (mixed-64gpu)")
    p.add_argument("--workload", default=None, help="config name in configs/workloads/ or a YAML path (llm-mix)")
    p.add_argument("--policies", default=",".join(BASELINES), help=f"comma list of baselines ({', '.join(BASELINES)}), lookahead, lookahead-oracle and PREFIX=PATH ({', '.join(POLICY_LOADERS)})")
    p.add_argument("--seeds", default=None, help="workload seeds: 0-9, 0,3,5 or 0-4,10 (0-9, or the scenario's test seeds)")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--reference", default=None, help="policy for paired comparisons and the Gantt chart (default topology if listed, else the first)")
    p.add_argument("--workers", type=int, default=None, help="local: worker processes (1); ray: most episodes in flight (default: the cluster's CPUs)")
    p.add_argument("--num-jobs", type=int, default=None, help="override the workload's job count")
    p.add_argument("--queue-window", type=int, default=None, help="jobs per decision (Q, 8)")
    p.add_argument("--wait-guard", default=None, metavar="K|overdue_factor=K,min_wait_s=S|off",
                   help="bound WAIT for every policy: invalid while a job that fits without preempting has waited > max(K x estimate, S); "
                        "default: a ppo model's training config's, none for the others")
    add_backend_arguments(p)
    return p


def add_backend_arguments(p: argparse.ArgumentParser) -> None:
    """--backend and --ray-address, shared with benchmarks.leaderboard."""
    p.add_argument("--backend", choices=BACKENDS, default="local", help="local: this process or --workers processes; ray: one Ray task per episode (docs/ray.md)")
    p.add_argument("--ray-address", default=None, metavar="ADDRESS", help="with --backend ray: join this Ray cluster (auto, HOST:6379, ray://HOST:10001); default: start Ray on this machine")


def check_backend(backend: str, ray_address: str | None) -> None:
    """--ray-address only with --backend ray, and Ray installed for it; UsageError otherwise."""
    if ray_address is not None and backend != "ray":
        raise UsageError("--ray-address needs --backend ray")
    if ray_address is not None and not ray_address.strip():
        raise UsageError("--ray-address is empty")
    if backend == "ray":
        try:
            import_ray()
        except BackendError as e:
            raise UsageError(str(e)) from None


def write_missing(out: Path, missing: list[dict]) -> list[dict]:
    """The failed episodes' tracebacks into OUT/errors.log (when there are any); returns the
    records for results.json, without them."""
    if missing:
        out.mkdir(parents=True, exist_ok=True)
        (out / "errors.log").write_text("".join(f"== policy {m['policy']}, scenario {m['scenario']}, seed {m['seed']}\n{m['traceback']}\n" for m in missing))
    return [{k: v for k, v in m.items() if k != "traceback"} for m in missing]


def report_missing(prog: str, missing: list[dict], total: int, log: Path | None = None) -> None:
    """One stderr line per failed episode, then which are missing (and where the tracebacks are)."""
    for m in missing:
        where = f", scenario {m['scenario']}" if m["scenario"] else ""
        print(f"{prog}: episode failed: policy {m['policy']}{where}, seed {m['seed']}: {m['error']}", file=sys.stderr)
    if missing:
        names = ", ".join(f"{m['policy']} seed {m['seed']}" for m in missing)
        where = f"; tracebacks in {log}" if log else ""
        print(f"{prog}: {len(missing)} of {total} episodes missing ({names}); the others' results are kept{where}", file=sys.stderr)


def parse_config(argv: list[str]) -> EvalConfig:
    """Validate everything (policies, seeds, model files, configs, workload generation) before
    any episode runs. Raises UsageError or ConfigError."""
    args = _parser().parse_args(argv)
    policies = parse_policies(args.policies)
    if args.wait_guard is not None:
        try:
            policies = with_wait_guards(policies, wait_guard_of(args.wait_guard, "--wait-guard"))
        except ValueError as e:
            raise UsageError(str(e)) from None
    else:
        policies = with_wait_guards(policies)
    scenario = None
    if args.scenario is not None:
        given = [f for f, v in (("--cluster", args.cluster), ("--workload", args.workload), ("--queue-window", args.queue_window)) if v is not None]
        if given:
            raise UsageError(f"{given[0]} conflicts with --scenario (the scenario fixes it)")
        scenario = load_scenario(args.scenario)
        args.cluster, args.workload, args.queue_window = scenario.cluster, scenario.workload, scenario.queue_window
        args.num_jobs = args.num_jobs if args.num_jobs is not None else scenario.num_jobs
        args.seeds = args.seeds or ",".join(map(str, scenario.test_seeds))
    args.cluster = args.cluster or "mixed-64gpu"
    args.workload = args.workload or "llm-mix"
    args.queue_window = args.queue_window if args.queue_window is not None else 8
    seeds = parse_seeds(args.seeds or "0-9")
    labels = [p.label for p in policies]
    reference = args.reference or ("topology" if "topology" in labels else labels[0])
    if reference not in labels:
        raise UsageError(f"--reference '{reference}' is not among --policies ({', '.join(labels)})")
    for flag, value in (("--workers", args.workers), ("--num-jobs", args.num_jobs), ("--queue-window", args.queue_window)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    check_backend(args.backend, args.ray_address)
    workers = args.workers if args.workers is not None or args.backend == "ray" else 1
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out} exists and is not a directory")
    cluster, spec = cluster_and_spec(args.cluster, args.workload)
    hashes = {s: workload_sha256(make_workload(spec, cluster, s, args.num_jobs)) for s in seeds}
    return EvalConfig(
        args.cluster, args.workload, scenario, cluster.name, spec.name, policies, seeds, reference, args.out,
        workers, args.num_jobs, args.queue_window, hashes, args.backend, args.ray_address,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_config(argv)
    except (UsageError, ConfigError) as e:
        print(f"evaluate.py: error: {e}", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    plot_seed = cfg.seeds[PLOT_SEED_INDEX]
    try:
        with ray_session(cfg.ray_address) if cfg.backend == "ray" else contextlib.nullcontext():
            workers = cfg.workers if cfg.backend == "local" else min(cfg.workers or ray_cpus(), ray_cpus())
            runs, jcts, traces, missing = run_all(
                cfg.policies, cfg.seeds, cluster=cfg.cluster, workload=cfg.workload, num_jobs=cfg.num_jobs,
                queue_window=cfg.queue_window, workers=cfg.workers or 0, workload_hashes=cfg.workload_hashes, trace_seed=plot_seed,
                scenario=cfg.scenario.source if cfg.scenario else None, backend=cfg.backend, ray_address=cfg.ray_address,
            )
    except BackendError as e:
        print(f"evaluate.py: error: {e}", file=sys.stderr)
        return 2
    cfg.out.mkdir(parents=True, exist_ok=True)
    missing_records = write_missing(cfg.out, missing)
    environment = environment_record(workers, time.perf_counter() - t0, started, " ".join(["python", "evaluate.py", *argv]), cfg.backend)
    doc = build_results(
        runs, cluster=cfg.cluster_name, workload=cfg.workload_name, num_jobs=cfg.num_jobs,
        queue_window=cfg.queue_window, seeds=cfg.seeds, reference=cfg.reference, environment=environment,
        scenario=cfg.scenario.name if cfg.scenario else None,
        objective=cfg.scenario.objective.to_dict() if cfg.scenario else None, missing=missing_records,
    )
    (cfg.out / "results.json").write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    (cfg.out / "results.md").write_text(results_markdown(doc))
    cluster, _ = cluster_and_spec(cfg.cluster, cfg.workload)
    plots = []
    if cfg.reference in traces:  # the Gantt chart needs the reference's plot-seed episode
        plots = write_plots(cfg.out, cluster, cfg.reference, plot_seed, {k: v for k, v in jcts.items() if v}, traces)
    report = write_report(cfg.out, doc, plots)
    print(results_markdown(doc))
    print(f"wrote {cfg.out / 'results.json'}, {cfg.out / 'results.md'}" + "".join(f", {p}" for p in plots))
    print(f"report: {report}")
    report_missing("evaluate.py", missing, len(cfg.policies) * len(cfg.seeds), cfg.out / "errors.log" if missing else None)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
