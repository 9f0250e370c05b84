"""The scenario leaderboard: every baseline, the lookahead and its oracle (and a model when
given) on every scenario, paired against that scenario's best heuristic on its objective.

    python -m benchmarks.leaderboard [--scenarios default,bursty] [--seeds 0-9] [--workers 2] \\
        [--model runs/ppo/model.zip] [--no-lookahead large,philly] [--out results/leaderboard] \\
        [--backend ray [--ray-address HOST:6379]]

Per scenario it writes OUT/NAME/results.json and results.md (evaluate.py's format, paired on the
objective against the best heuristic), and OUT/leaderboard.md, OUT/leaderboard.json with one
table per scenario: each policy's objective (mean and 95% CI over the test seeds), its paired
relative difference against the best heuristic, its preemptions and GPU-hours lost, and for the
lookaheads the search cost per decision. The best heuristic is the baseline with the lowest
mean objective on the test seeds (`random` excluded). `lookahead-oracle` sees the true future:
it is a bound on what one changed decision could buy, never a policy.

Episodes run as evaluate.py runs them (`--backend local` processes or Ray tasks, docs/ray.md). A
failed episode is reported with its policy, scenario and seed and listed under "missing" in
that scenario's results.json; the other episodes and scenarios are kept, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
import time
from pathlib import Path

from agents.evaluation import (
    build_results,
    cluster_and_spec,
    environment_record,
    parse_policies,
    results_markdown,
    run_all,
    workload_sha256,
)
from agents.evaluation.policies import SIMULATING_POLICIES
from agents.parallel import BackendError, ray_cpus, ray_session
from baselines import BASELINES
from envs.config import parse_seeds
from envs.scenario import load_scenario, scenario_names
from envs.workload import make_workload
from evaluate import UsageError, add_backend_arguments, check_backend, report_missing, write_missing

HEADROOM_FINDING = 0.05  # below this the oracle's headroom is reported as small


def best_heuristic(runs: dict[str, list[dict]]) -> str:
    """The baseline with the lowest mean objective (random excluded)."""
    means = {label: sum(r["metrics"]["objective"] for r in rs) / len(rs) for label, rs in runs.items()
             if label in BASELINES and label != "random" and rs}
    if not means:  # every heuristic's episodes failed: the first policy that ran is the reference
        return next((label for label, rs in runs.items() if rs), next(iter(runs)))
    return min(means, key=means.get)


def _pct(d: dict) -> str:
    if d.get("rel_diff_mean") is None:
        return "n/a"
    ci = "" if d["ci95_low"] is None else f" [{d['ci95_low']:+.1%}, {d['ci95_high']:+.1%}]"
    return f"{d['rel_diff_mean']:+.1%}{ci}"


def scenario_table(doc: dict, best: str) -> list[str]:
    """Markdown rows of one scenario's leaderboard."""
    lines = ["| policy | objective | vs best heuristic | avg JCT h | preemptions | preempt GPU-h | SLO misses | s per decision |",
             "|---|---|---|---|---|---|---|---|"]
    pol = doc["policies"]
    order = sorted((p for p in pol if pol[p]["runs"]), key=lambda p: pol[p]["summary"]["objective"]["mean"])
    for label in order:
        s = pol[label]["summary"]
        o = s["objective"]
        obj = f"{o['mean']:.3f}" + ("" if o["ci95_low"] is None else f" ± {o['ci95_high'] - o['mean']:.3f}")
        vs = "(best heuristic)" if label == best else _pct(doc["paired_vs_reference"][label])
        runs = pol[label]["runs"]
        per_decision = sum(r["wall_s"] for r in runs) / max(sum(r["decisions"] for r in runs), 1)
        name = f"**{label}**" if label == best else (f"{label} (bound)" if label == "lookahead-oracle" else label)
        lines.append(f"| {name} | {obj} | {vs} | {s['avg_jct_s']['mean'] / 3600:.3f} | {s['preemptions']['mean']:.1f} | "
                     f"{s['preemption_gpu_hours']['mean']:.2f} | {s['slo_misses']['mean']:.1f} | {per_decision:.4f} |")
    return lines


def headroom_lines(doc: dict, best: str) -> list[str]:
    out = []
    for label in SIMULATING_POLICIES:
        d = doc["paired_vs_reference"].get(label)
        if d is None or d["rel_diff_mean"] is None:
            continue
        gain = -d["rel_diff_mean"]
        search = [r.get("search") or {} for r in doc["policies"][label]["runs"]]
        changed = sum(s.get("changed", 0) for s in search)
        decisions = sum(s.get("decisions", 0) for s in search)
        preempt = sum(s.get("changed_to_preempt", 0) for s in search)
        wait = sum(s.get("changed_to_wait", 0) for s in search)
        verdict = ""
        if label == "lookahead-oracle" and gain < HEADROOM_FINDING:
            verdict = f" The oracle finds under {HEADROOM_FINDING:.0%} headroom over {best} here."
        better = f"{gain:.1%} better than" if gain >= 0 else f"{-gain:.1%} worse than"
        out.append(f"- `{label}`: {better} {best} ({_pct(d)} paired); it left the base rule's choice at "
                   f"{changed} of {decisions} decisions ({preempt} to preempt, {wait} to wait).{verdict}")
    return out


def section(sc, doc: dict, best: str, wall: float) -> list[str]:
    """One scenario's part of leaderboard.md."""
    return [f"## {sc.name}: {sc.description}", "", f"{len(doc['seeds'])} test seeds; best heuristic: **{best}**; "
            f"wall {wall:.0f} s with {doc['environment']['workers']} worker(s).", "", *scenario_table(doc, best), "",
            *headroom_lines(doc, best), *missing_lines(doc), ""]


def missing_lines(doc: dict) -> list[str]:
    """The failed episodes of a scenario, when there were any."""
    missing = doc.get("missing") or []
    return ["- missing (failed) episodes, left out above: " + "; ".join(f"{m['policy']} seed {m['seed']}: {m['error']}" for m in missing)] if missing else []


def summary_of(doc: dict, best: str, wall: float) -> dict:
    """One scenario's entry of leaderboard.json."""
    return {"best_heuristic": best, "wall_s": wall, "seeds": doc["seeds"],
            "objective": {label: p["summary"]["objective"] for label, p in doc["policies"].items()},
            "vs_best": doc["paired_vs_reference"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(scenario_names()))
    ap.add_argument("--seeds", default=None, help="workload seeds (default: each scenario's test seeds)")
    ap.add_argument("--workers", type=int, default=None, help="local: worker processes (2); ray: most episodes in flight (default: the cluster's CPUs)")
    ap.add_argument("--model", default=None, help="a MaskablePPO zip to rank beside the heuristics")
    ap.add_argument("--no-lookahead", default="", help="scenarios to run without the lookahead policies (e.g. for their cost)")
    ap.add_argument("--policies", default=None, help="override the policy list (comma list, as evaluate.py)")
    ap.add_argument("--out", type=Path, default=Path("results/leaderboard"))
    ap.add_argument("--report-only", action="store_true", help="rebuild leaderboard.md from OUT/NAME/results.json, run nothing")
    add_backend_arguments(ap)
    args = ap.parse_args(argv)
    try:
        if args.workers is not None and args.workers < 1:
            raise UsageError(f"--workers must be >= 1, got {args.workers}")
        check_backend(args.backend, args.ray_address)
    except UsageError as e:
        print(f"leaderboard: error: {e}", file=sys.stderr)
        return 2
    if args.workers is None and args.backend == "local":
        args.workers = 2
    try:
        with ray_session(args.ray_address) if args.backend == "ray" and not args.report_only else contextlib.nullcontext():
            return _run(args, argv)
    except BackendError as e:
        print(f"leaderboard: error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    skip_lookahead = {s.strip() for s in args.no_lookahead.split(",") if s.strip()}
    started = datetime.datetime.now(datetime.timezone.utc)
    t_all = time.perf_counter()
    summary: dict[str, dict] = {}
    md = ["# Scenario leaderboard", ""]
    all_missing: list[dict] = []
    episodes = 0
    for name in names:
        sc = load_scenario(name)
        if args.report_only:
            doc = json.loads((args.out / sc.name / "results.json").read_text())
            best, wall = doc["reference"], doc["environment"]["wall_s"]
            md += section(sc, doc, best, wall)
            summary[sc.name] = summary_of(doc, best, wall)
            continue
        seeds = parse_seeds(args.seeds) if args.seeds else sc.test_seeds
        labels = args.policies.split(",") if args.policies else [*BASELINES, *(() if name in skip_lookahead else SIMULATING_POLICIES)]
        if args.model:
            labels.append(f"ppo={args.model}")
        policies = parse_policies(",".join(labels))
        cluster, spec = cluster_and_spec(sc.cluster, sc.workload)
        hashes = {s: workload_sha256(make_workload(spec, cluster, s, sc.num_jobs)) for s in seeds}
        t0 = time.perf_counter()
        print(f"[{name}] {len(policies)} policies x {len(seeds)} seeds", file=sys.stderr, flush=True)
        runs, _, _, missing = run_all(policies, seeds, cluster=sc.cluster, workload=sc.workload, num_jobs=sc.num_jobs,
                                      queue_window=sc.queue_window, workers=args.workers or 0, workload_hashes=hashes,
                                      trace_seed=seeds[0], scenario=sc.source, backend=args.backend, ray_address=args.ray_address)
        wall = time.perf_counter() - t0
        out = args.out / sc.name
        all_missing += missing
        missing = write_missing(out, missing)
        episodes += len(policies) * len(seeds)
        best = best_heuristic(runs)
        command = " ".join(["python -m benchmarks.leaderboard", *(argv if argv is not None else sys.argv[1:])])
        workers = args.workers if args.backend == "local" else min(args.workers or ray_cpus(), ray_cpus())
        doc = build_results(runs, cluster=sc.cluster, workload=sc.workload, num_jobs=sc.num_jobs, queue_window=sc.queue_window,
                            seeds=seeds, reference=best, environment=environment_record(workers, wall, started, command, args.backend),
                            scenario=sc.name, objective=sc.objective.to_dict(), missing=missing)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
        (out / "results.md").write_text(results_markdown(doc))
        md += section(sc, doc, best, wall)
        summary[sc.name] = summary_of(doc, best, wall)
        print("\n".join(md[-(len(policies) + 6):]), flush=True)
    total = time.perf_counter() - t_all if not args.report_only else sum(v["wall_s"] for v in summary.values())
    md += [f"Total wall time {total:.0f} s. Command: `python -m benchmarks.leaderboard {' '.join(argv if argv is not None else sys.argv[1:])}`", ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "leaderboard.md").write_text("\n".join(md))
    (args.out / "leaderboard.json").write_text(json.dumps({"scenarios": summary, "wall_s": total}, indent=1, allow_nan=False) + "\n")
    print(f"wrote {args.out / 'leaderboard.md'} and {args.out / 'leaderboard.json'} ({total:.0f} s)")
    report_missing("leaderboard", all_missing, episodes, args.out / "*" / "errors.log" if all_missing else None)
    return 1 if all_missing else 0


if __name__ == "__main__":
    sys.exit(main())
