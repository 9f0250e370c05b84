"""Choose the settings a model is deployed with (anchor margin, bound on WAIT) for safety on every
validation workload, not only on average.

    python -m agents.deploy runs/NAME [--model model.zip] [--scenarios default,bursty,...] [--seeds 100-119]
                            [--margins 0,1] [--wait-guards off,2,1,0.5] [--baseline sect] [--bound 0.10] [--workers 2]

A mean gain can hide a few workloads that go badly wrong (a student that waits with free GPUs in
states its training never visited). Each setting, the model anchored to `--baseline` at a margin
(agents.anchor) under a bound on WAIT (envs.decision.candidates.WaitGuard), runs on the validation seeds
of every scenario the run trained on (its config's `scenario` and `env_mix`; the scenarios' own
validation seeds, never their test seeds), beside `sect` and `sjf`, through evaluate.py. Per
scenario the reference is the better of the two heuristics on those seeds; per seed, the paired
relative difference of the scenario's objective against it.

The rule, per cluster (the scenarios that share one, such as default, bursty and slo-preempt on
mixed-64gpu, are judged together): a setting is deployed on a cluster when no validation seed of
its scenarios is more than `--bound` worse than that scenario's reference and no scenario's mean
difference is above 0. A setting's score is the mean over all scenarios of their mean
differences, counting 0 where its cluster keeps the heuristic; the lowest score wins (ties: the
listed order). The chosen clusters go into policy.json (`clusters`): on every other cluster,
trained on or not, the deployed policy is the anchor's heuristic alone. When no setting is
deployed anywhere the model is not deployed: margin inf, the baseline alone. The
default bound is the deployment promise itself: no workload more than 10% worse than the best
heuristic.

The bounds on WAIT offered by default are off and k = 2, 1, 0.5 (WAIT is invalid while a queued
job that fits without preempting has waited more than k x its estimate, and an hour). A bound
holds by construction where no validation seed reaches (it forbids the stall of a student that
waits with free GPUs in states its training never visited), but it also forbids the waits a
good student makes on purpose, so `off` is offered and measured like the rest
(docs/research/2026-12-06-shipped-generalist.md has what each cost the shipped model).

It writes RUN/deploy/ (an anchor file per setting and the runs per scenario, reused when there) and RUN/anchor-deploy.json in the anchor-file format (the model, baseline, margin and
`wait_guard` chosen, with every setting's figures), which `evaluate.py --policies
anchored=RUN/anchor-deploy.json`, `agents.export --anchor` and `agents.ship --anchor` take.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from agents.anchor import parse_margins, parse_wait_guards
from agents.anchor_rule import Anchor
from agents.evaluation.stats import paired_rel_diffs

HEURISTICS = ("sect", "sjf")
DEPLOY_FILE = "anchor-deploy.json"


def run_scenarios(run: Path) -> list[str]:
    """The scenarios a run trained on: its config's `scenario` and every `env_mix` entry's."""
    from envs.cluster.config import read_yaml

    data = read_yaml(run / "config.yaml")
    base = data.get("scenario")
    names = [base] if base else []
    for entry in data.get("env_mix") or []:
        name = (entry or {}).get("scenario", base)
        if name and name not in names:
            names.append(name)
    if not names:
        raise ValueError(f"{run / 'config.yaml'}: no scenario (and no env_mix scenario): name them with --scenarios")
    return names


def setting_files(run: Path, model: str, baseline: str, margins: list[float], guards: list) -> list[tuple[str, Path]]:
    """One anchor file per (bound on WAIT, margin) in RUN/deploy/, named by both."""
    out_dir = run / "deploy"
    out_dir.mkdir(exist_ok=True)
    files = []
    for g in guards:
        for m in margins:
            name = f"guard-{'off' if g is None else f'{g.overdue_factor:g}'}-margin-{m:g}"
            f = out_dir / f"{name}.json"
            f.write_text(json.dumps({"model": f"../{model}", **Anchor(baseline, m).to_dict(),
                                     "wait_guard": None if g is None else g.to_dict()}, indent=1))
            files.append((name, f))
    return files


def better_heuristic(runs: dict[str, list[dict]]) -> str:
    """The one of HEURISTICS with the lower mean objective over its runs ({policy label: runs})."""
    return min(HEURISTICS, key=lambda h: float(np.mean([r["metrics"]["objective"] for r in runs[h]])))


def choose(per_scenario: dict[str, dict[str, list[dict]]], names: list[str], bound: float,
           cluster_of: dict[str, str] | None = None) -> tuple[str | None, list[dict]]:
    """(the chosen setting or None, every setting's figures) from {scenario: {policy label: its
    runs}} whose labels are the heuristics and `anchored=FILE` per setting (FILE's stem the
    setting's name), in `names`' order. `cluster_of` maps each scenario to its cluster (default:
    one cluster for all). A setting is deployed on a cluster when every scenario of that cluster
    has no seed more than `bound` worse than its better heuristic and a mean at most 0; its score
    is the mean over all scenarios of their mean difference, 0 where the cluster keeps the
    heuristic."""
    cluster_of = cluster_of or {sc: "" for sc in per_scenario}
    ref = {scenario: better_heuristic(runs) for scenario, runs in per_scenario.items()}
    table = []
    for name in names:
        means, worst = {}, {}
        for scenario, runs in per_scenario.items():
            label = next(p for p in runs if p.startswith("anchored=") and Path(p.split("=", 1)[1]).stem == name)
            d = np.array(list(paired_rel_diffs(runs[label], runs[ref[scenario]], "objective").values()))
            means[scenario], worst[scenario] = float(d.mean()), float(d.max())
        clusters = sorted({c for c in cluster_of.values()
                           if all(worst[s] <= bound and means[s] <= 0 for s in per_scenario if cluster_of[s] == c)})
        score = float(np.mean([means[s] if cluster_of[s] in clusters else 0.0 for s in per_scenario]))
        table.append({"setting": name, "mean": score, "eligible": bool(clusters), "clusters": clusters,
                      "scenario_means": means, "scenario_worst": worst})
    ok = [t for t in table if t["eligible"]]
    best = min(ok, key=lambda t: t["mean"])["setting"] if ok else None
    return best, table


def evaluate_settings(scenario: str, seeds: str | None, files: list[tuple[str, Path]], workers: int,
                      heuristics: bool = True) -> dict[str, list[dict]]:
    """The heuristics (unless `heuristics` is False) and every setting on the scenario's
    validation seeds (or `seeds`, never its test seeds): {policy label: runs}, as evaluate.py
    runs them."""
    from agents.evaluation import cluster_and_spec, parse_policies, run_all, with_wait_guards, workload_sha256
    from envs.cluster.config import parse_seeds
    from envs.scenario import load_scenario
    from envs.workload.generator import make_workload

    spec = load_scenario(scenario)
    seed_list = parse_seeds(seeds) if seeds else list(spec.validation_seeds)
    clash = sorted(set(seed_list) & set(spec.test_seeds))
    if clash:
        raise ValueError(f"--seeds: {clash[0]} is a test seed of scenario {scenario}: choose on validation seeds only")
    cluster, wspec = cluster_and_spec(spec.cluster, spec.workload)
    hashes = {s: workload_sha256(make_workload(wspec, cluster, s, spec.num_jobs)) for s in seed_list}
    labels = [*(HEURISTICS if heuristics else ()), *(f"anchored={f}" for _, f in files)]
    policies = with_wait_guards(parse_policies(",".join(labels)))
    result = run_all(policies, seed_list, cluster=spec.cluster, workload=spec.workload, num_jobs=spec.num_jobs,
                     queue_window=spec.queue_window, workers=workers, workload_hashes=hashes, trace_seed=-1, scenario=spec.source)
    if result.missing:
        m = result.missing[0]
        raise RuntimeError(f"{scenario}: {m['policy']} seed {m['seed']} failed: {m['error']}")
    return result.runs


def deploy(run: Path, model: str = "model.zip", scenarios: list[str] | None = None, seeds: str | None = None,
           margins: list[float] = (0.0, 1.0), guards: list | None = None, baseline: str = "sect",
           bound: float = 0.10, workers: int = 2, log=print) -> dict:
    from envs.cluster.config import load_cluster, parse_seeds
    from envs.scenario import load_scenario

    if not (run / model).is_file():
        raise ValueError(f"{run / model}: not found")
    scenarios = scenarios or run_scenarios(run)
    guards = [None] if guards is None else guards
    files = setting_files(run, model, baseline, list(margins), guards)
    t0 = time.perf_counter()
    per_scenario, cluster_of = {}, {}
    for sc in scenarios:
        out = run / "deploy" / f"{load_scenario(sc).name}.json"  # the runs, reused when there (the same settings, the same seeds)
        cached = json.loads(out.read_text()) if out.is_file() else {}
        if cached and seeds and sorted(r["seed"] for r in cached["sect"]) != sorted(parse_seeds(seeds)):
            cached = {}  # other seeds: nothing to reuse
        have = {Path(p.split("=", 1)[1]).stem for p in cached if p.startswith("anchored=")}
        missing = [(n, f) for n, f in files if n not in have]
        if missing:
            cached.update(evaluate_settings(sc, seeds, missing, workers, heuristics=not cached))
            out.write_text(json.dumps(cached))
        per_scenario[sc] = cached
        cluster_of[sc] = load_cluster(load_scenario(sc).cluster).name
        log(f"{run}: {sc}: evaluated")
    best, table = choose(per_scenario, [n for n, _ in files], bound, cluster_of)
    chosen = json.loads((run / "deploy" / f"{best}.json").read_text()) if best else {"model": model, **Anchor(baseline, math.inf).to_dict(),
                                                                                    "wait_guard": None}
    chosen["model"] = model  # relative to RUN, where this file lives
    chosen["clusters"] = next((t["clusters"] for t in table if t["setting"] == best), [])
    doc = {**chosen, "setting": best, "rule": {"bound": bound, "heuristics": list(HEURISTICS)}, "scenarios": scenarios,
           "settings": table, "wall_s": time.perf_counter() - t0}
    (run / DEPLOY_FILE).write_text(json.dumps(doc, indent=1))
    for t in table:
        worst = max(t["scenario_worst"].values())
        log(f"  {t['setting']:<28} mean {t['mean']:+.2%}  worst seed {worst:+.1%}  deployed on {', '.join(t['clusters']) or '-'}"
            f"{'   <- chosen' if t['setting'] == best else ''}")
    if best is None:
        log(f"  no setting is eligible: deployed as '{baseline}' alone (margin inf)")
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agents.deploy", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a training run's directory")
    ap.add_argument("--model", default="model.zip")
    ap.add_argument("--scenarios", default=None, help="comma list (default: the run's scenario and env_mix)")
    ap.add_argument("--seeds", default=None, help="validation seeds (default: each scenario's)")
    ap.add_argument("--margins", default="0,1")
    ap.add_argument("--wait-guards", default="off,2,1,0.5")
    ap.add_argument("--baseline", default="sect")
    ap.add_argument("--bound", type=float, default=0.10, help="worst validation seed allowed, relative (0.10)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    try:
        doc = deploy(args.run, args.model, args.scenarios.split(",") if args.scenarios else None, args.seeds,
                     parse_margins(args.margins), parse_wait_guards(args.wait_guards), args.baseline, args.bound, args.workers)
    except (ValueError, OSError) as e:
        print(f"python -m agents.deploy: error: {e}", file=sys.stderr)
        return 2
    print(f"{args.run / DEPLOY_FILE}: margin {doc['margin']} over '{doc['baseline']}', wait guard {doc['wait_guard'] or 'off'}, "
          f"deployed on {', '.join(doc['clusters']) or 'no cluster'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
