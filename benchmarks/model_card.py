"""The measured tables of a shipped model's card: each scenario's best heuristic against the model
as deployed, per seed.

    python -m benchmarks.model_card --model generalist --seeds 0-29 --out results/card/test-0-29 --workers 2
    python -m benchmarks.model_card --model generalist --seeds 0-9 --scenarios philly,large --out results/card/untrained --workers 2
    python -m benchmarks.model_card --model generalist --seeds 0-29 --out DIR --extra ppo=runs/gen-s8/seed-0/model.zip

For every scenario it runs evaluate.py (`sect`, `sjf`, `learned=MODEL` and any `--extra` policies
on the same seeds; a scenario whose DIR/SCENARIO/results.json exists is read, not run again) and
prints one markdown row per policy: the best heuristic on those seeds (the lower mean objective of
`sect` and `sjf`), the policy's mean paired difference against it with its 95% CI, the median,
90th-percentile and worst seed, how many seeds are more than 10% worse, and the GPU utilisation
of both. Lower objective is better, so a negative difference is a gain.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from agents.deploy import HEURISTICS, better_heuristic
from agents.evaluation.stats import paired_rel_diff, paired_rel_diffs

TRAINED = ("default", "bursty", "slo-preempt", "topology-stress", "hetero")
BOUND = 0.10  # a seed more than this much worse than the best heuristic counts as unsafe


def evaluate_scenario(scenario: str, seeds: str, policies: list[str], out: Path, workers: int) -> dict:
    from evaluate import main as evaluate_main

    path = out / "results.json"
    if not path.is_file():
        code = evaluate_main(["--scenario", scenario, "--seeds", seeds, "--policies", ",".join(policies),
                              "--reference", "sect", "--workers", str(workers), "--out", str(out)])
        if code != 0:
            raise SystemExit(f"evaluate.py failed on {scenario} (exit {code})")
    return json.loads(path.read_text())


def rows(doc: dict, policies: list[str]) -> list[dict]:
    """One record per non-heuristic policy of an evaluation: its per-seed distribution against
    the best heuristic on those seeds."""
    pol = doc["policies"]
    best = better_heuristic({h: pol[h]["runs"] for h in HEURISTICS})
    ref_runs = pol[best]["runs"]
    out = []
    for p in policies:
        if p in HEURISTICS:
            continue
        runs = pol[p]["runs"]
        diffs = np.array(list(paired_rel_diffs(runs, ref_runs, "objective").values()))
        paired = paired_rel_diff(runs, ref_runs, "objective")
        out.append({
            "policy": p, "best": best, "best_objective": pol[best]["summary"]["objective"]["mean"],
            "objective": pol[p]["summary"]["objective"]["mean"], "mean": paired["rel_diff_mean"],
            "ci": (paired["ci95_low"], paired["ci95_high"]), "median": float(np.median(diffs)),
            "p90": float(np.percentile(diffs, 90)), "worst": float(diffs.max()),
            "worst_seed": int(doc["seeds"][int(diffs.argmax())]), "over_bound": int((diffs > BOUND).sum()), "n": len(diffs),
            "util": pol[p]["summary"]["gpu_utilisation"]["mean"], "best_util": pol[best]["summary"]["gpu_utilisation"]["mean"],
        })
    return out


def markdown(table: list[tuple[str, dict]]) -> str:
    lines = ["| scenario | best heuristic: objective | policy | vs best heuristic [95% CI] | median | p90 | worst seed | seeds > +10% | GPU util (heuristic) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for scenario, r in table:
        lo, hi = r["ci"]
        lines.append(f"| {scenario} | {r['best']}: {r['best_objective']:.3f} | {r['policy']} | {r['mean']:+.1%} [{lo:+.1%}, {hi:+.1%}] | "
                     f"{r['median']:+.1%} | {r['p90']:+.1%} | {r['worst']:+.1%} (seed {r['worst_seed']}) | {r['over_bound']} of {r['n']} | "
                     f"{r['util']:.2f} ({r['best_util']:.2f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.model_card", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="generalist", help="a shipped model's name (models/NAME) or a model folder")
    ap.add_argument("--seeds", required=True, help="workload seeds, e.g. 0-29")
    ap.add_argument("--scenarios", default=",".join(TRAINED), help="comma list (default: the five trained scenarios)")
    ap.add_argument("--extra", default="", help="more policies to evaluate beside it, comma list (e.g. ppo=runs/X/model.zip)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    policies = [*HEURISTICS, f"learned={args.model}", *[p for p in args.extra.split(",") if p]]
    table = []
    for scenario in [s for s in args.scenarios.split(",") if s]:
        doc = evaluate_scenario(scenario, args.seeds, policies, args.out / scenario, args.workers)
        table += [(scenario, r) for r in rows(doc, policies)]
    text = markdown(table)
    (args.out / "card.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
