"""The scenario leaderboard: every baseline, the lookahead and its oracle, every shipped model
(models/NAME as deployed, `learned=NAME`) and a model when given, on every scenario, paired
against that scenario's best heuristic on its objective.

    python -m benchmarks.leaderboard [--scenarios default,bursty] [--seeds 0-9] [--workers 2] \\
        [--model runs/ppo/model.zip] [--no-shipped] [--no-lookahead large,philly] [--out results/leaderboard] \\
        [--backend ray [--ray-address HOST:6379]]

Per scenario it writes OUT/NAME/results.json, results.md and report.html (evaluate.py's format,
paired on the objective against the best heuristic, no plots), and OUT/leaderboard.md,
OUT/leaderboard.json and OUT/report.html (one self-contained page) with one table per scenario:
each policy's objective (mean and 95% CI over the test seeds), its paired relative difference
against the best heuristic, its preemptions and GPU-hours lost, and for the lookaheads the
search cost per decision. The best heuristic is the baseline with the lowest
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
    with_wait_guards,
    workload_sha256,
)
from agents.evaluation.policies import SIMULATING_POLICIES
from agents.evaluation.report import REPORT_NAME, esc, html_table, page, paired_text, verdict, write_report
from agents.shipped import shipped_models
from agents.parallel import BackendError, ray_cpus, ray_session
from baselines import BASELINES
from envs.cluster.config import parse_seeds
from envs.scenario import load_scenario, scenario_names
from envs.workload.generator import make_workload
from evaluate import UsageError, add_backend_arguments, check_backend, report_missing, write_missing

HEADROOM_FINDING = 0.05  # below this the oracle's headroom is reported as small


def best_heuristic(runs: dict[str, list[dict]]) -> str:
    """The baseline with the lowest mean objective (random excluded)."""
    means = {label: sum(r["metrics"]["objective"] for r in rs) / len(rs) for label, rs in runs.items()
             if label in BASELINES and label != "random" and rs}
    if not means:  # every heuristic's episodes failed: the first policy that ran is the reference
        return next((label for label, rs in runs.items() if rs), next(iter(runs)))
    return min(means, key=means.get)


LEADERBOARD_HEADERS = ("policy", "objective", "vs best heuristic", "avg JCT h", "preemptions", "preempt GPU-h", "SLO misses", "s per decision")


def scenario_rows(doc: dict, best: str) -> list[tuple[str, list[str]]]:
    """One scenario's leaderboard: (label, cells in LEADERBOARD_HEADERS order) per policy that
    ran, lowest mean objective first; the first cell names the policy (the oracle as a bound)."""
    pol = doc["policies"]
    order = sorted((p for p in pol if pol[p]["runs"]), key=lambda p: pol[p]["summary"]["objective"]["mean"])
    rows = []
    for label in order:
        s = pol[label]["summary"]
        o = s["objective"]
        obj = f"{o['mean']:.3f}" + ("" if o["ci95_low"] is None else f" ± {o['ci95_high'] - o['mean']:.3f}")
        vs = "(best heuristic)" if label == best else paired_text(doc["paired_vs_reference"][label])
        runs = pol[label]["runs"]
        per_decision = sum(r["wall_s"] for r in runs) / max(sum(r["decisions"] for r in runs), 1)
        name = f"{label} (bound)" if label == "lookahead-oracle" else label
        rows.append((label, [name, obj, vs, f"{s['avg_jct_s']['mean'] / 3600:.3f}", f"{s['preemptions']['mean']:.1f}",
                             f"{s['preemption_gpu_hours']['mean']:.2f}", f"{s['slo_misses']['mean']:.1f}", f"{per_decision:.4f}"]))
    return rows


def scenario_table(doc: dict, best: str) -> list[str]:
    """Markdown rows of one scenario's leaderboard, the best heuristic in bold."""
    lines = ["| " + " | ".join(LEADERBOARD_HEADERS) + " |", "|---" * len(LEADERBOARD_HEADERS) + "|"]
    for label, cells in scenario_rows(doc, best):
        name = f"**{cells[0]}**" if label == best else cells[0]
        lines.append("| " + " | ".join([name, *cells[1:]]) + " |")
    return lines


def headroom_items(doc: dict, best: str) -> list[tuple[str, str]]:
    """(label, finding) for each simulating policy that ran: how much better or worse than the
    best heuristic, and how often its search left the base rule's choice."""
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
        finding = ""
        if label == "lookahead-oracle" and gain < HEADROOM_FINDING:
            finding = f" The oracle finds under {HEADROOM_FINDING:.0%} headroom over {best} here."
        better = f"{gain:.1%} better than" if gain >= 0 else f"{-gain:.1%} worse than"
        out.append((label, f"{better} {best} ({paired_text(d)} paired); it left the base rule's choice at "
                           f"{changed} of {decisions} decisions ({preempt} to preempt, {wait} to wait).{finding}"))
    return out


def headroom_lines(doc: dict, best: str) -> list[str]:
    """`headroom_items` as Markdown list items."""
    return [f"- `{label}`: {text}" for label, text in headroom_items(doc, best)]


def _intro(doc: dict, best: str, wall: float) -> tuple[str, str]:
    """A scenario section's line above its table: the text before and after the best heuristic's name."""
    return f"{len(doc['seeds'])} test seeds; best heuristic: ", f"; wall {wall:.0f} s with {doc['environment']['workers']} worker(s)."


def section(sc, doc: dict, best: str, wall: float) -> list[str]:
    """One scenario's part of leaderboard.md."""
    before, after = _intro(doc, best, wall)
    return [f"## {sc.name}: {sc.description}", "", f"{before}**{best}**{after}", "", *scenario_table(doc, best), "",
            *headroom_lines(doc, best), *missing_lines(doc), ""]


def html_section(sc, doc: dict, best: str, wall: float) -> list[str]:
    """One scenario's part of report.html: the table of `scenario_rows`, the best heuristic's
    row in bold, each paired cell marked (`verdict`) where its 95% interval excludes 0."""
    rows = scenario_rows(doc, best)
    marked = [[cells[0], cells[1], (cells[2], "" if label == best else verdict(doc["paired_vs_reference"][label])), *cells[3:]]
              for label, cells in rows]
    before, after = _intro(doc, best, wall)
    items = "".join(f"<li><code>{esc(label)}</code>: {esc(text)}</li>" for label, text in headroom_items(doc, best))
    missing = missing_text(doc)
    return [f"<h2>{esc(sc.name)}: {esc(sc.description)}</h2>", f"<p>{esc(before)}<strong>{esc(best)}</strong>{esc(after)}</p>",
            html_table(LEADERBOARD_HEADERS, marked, row_classes=["best" if label == best else "" for label, _ in rows], table_id=f"scenario-{sc.name}"),
            *([f"<ul>{items}</ul>"] if items else []), *([f"<p>{esc(missing)}</p>"] if missing else [])]


def missing_text(doc: dict) -> str | None:
    """The failed episodes of a scenario, when there were any."""
    missing = doc.get("missing") or []
    return "missing (failed) episodes, left out above: " + "; ".join(f"{m['policy']} seed {m['seed']}: {m['error']}" for m in missing) if missing else None


def missing_lines(doc: dict) -> list[str]:
    """`missing_text` as a Markdown list item, when there is one."""
    text = missing_text(doc)
    return [f"- {text}"] if text else []


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
    ap.add_argument("--no-shipped", action="store_true", help="leave out the shipped models (models/NAME, as learned=NAME rows)")
    ap.add_argument("--no-lookahead", default="", help="scenarios to run without the lookahead policies (e.g. for their cost)")
    ap.add_argument("--policies", default=None, help="override the policy list (comma list, as evaluate.py)")
    ap.add_argument("--out", type=Path, default=Path("results/leaderboard"))
    ap.add_argument("--report-only", action="store_true", help="rebuild leaderboard.md and the report pages from OUT/NAME/results.json, run nothing")
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
    body = ["<h1>Scenario leaderboard</h1>", '<p class="note">Per scenario, every policy\'s objective (mean ± 95% t-interval half-width '
            "over the test seeds, lower is better) and its paired relative difference against the best heuristic (green or red "
            "where the 95% interval excludes 0); <code>lookahead-oracle</code> sees the true future: a bound, not a policy.</p>"]
    all_missing: list[dict] = []
    episodes = 0
    for name in names:
        sc = load_scenario(name)
        if args.report_only:
            doc = json.loads((args.out / sc.name / "results.json").read_text())
            best, wall = doc["reference"], doc["environment"]["wall_s"]
            write_report(args.out / sc.name, doc)
            md += section(sc, doc, best, wall)
            body += html_section(sc, doc, best, wall)
            summary[sc.name] = summary_of(doc, best, wall)
            continue
        seeds = parse_seeds(args.seeds) if args.seeds else sc.test_seeds
        labels = args.policies.split(",") if args.policies else [*BASELINES, *(() if name in skip_lookahead else SIMULATING_POLICIES)]
        if args.model:
            labels.append(f"ppo={args.model}")
        if not args.policies and not args.no_shipped:
            labels += [f"learned={m}" for m in shipped_models()]
        policies = with_wait_guards(parse_policies(",".join(labels)))  # a loaded model's own bound on WAIT, as evaluate.py
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
        write_report(out, doc)
        md += section(sc, doc, best, wall)
        body += html_section(sc, doc, best, wall)
        summary[sc.name] = summary_of(doc, best, wall)
        print("\n".join(md[-(len(policies) + 6):]), flush=True)
    total = time.perf_counter() - t_all if not args.report_only else sum(v["wall_s"] for v in summary.values())
    command = f"python -m benchmarks.leaderboard {' '.join(argv if argv is not None else sys.argv[1:])}"
    md += [f"Total wall time {total:.0f} s. Command: `{command}`", ""]
    body += [f'<p class="note">Total wall time {total:.0f} s; {esc(started.isoformat(timespec="seconds"))}. Command: <code>{esc(command)}</code></p>']
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "leaderboard.md").write_text("\n".join(md))
    (args.out / REPORT_NAME).write_text(page("Scenario leaderboard", body), encoding="utf-8")
    (args.out / "leaderboard.json").write_text(json.dumps({"scenarios": summary, "wall_s": total}, indent=1, allow_nan=False) + "\n")
    print(f"wrote {args.out / 'leaderboard.md'} and {args.out / 'leaderboard.json'} ({total:.0f} s)")
    print(f"report: {args.out / REPORT_NAME}")
    report_missing("leaderboard", all_missing, episodes, args.out / "*" / "errors.log" if all_missing else None)
    return 1 if all_missing else 0


if __name__ == "__main__":
    sys.exit(main())
