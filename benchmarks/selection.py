"""Model selection, measured: what a run's pick costs against the other models it kept.

    python -m benchmarks.selection RUN:RESULTS [RUN:RESULTS ...] [--second reselect-120-139.json]

Each RUN is a train.py run directory: `eval.json` holds every evaluated model's score on the
run's validation seeds (the first set), `--second` the same models scored on a second, disjoint
set of validation seeds (`python -m agents.reselect RUN --seeds 120-139 --out
reselect-120-139.json`). RESULTS is an evaluate.py output directory holding every one of those
models on the test seeds, paired against the scenario's best heuristic there
(`evaluate.py --policies REF,ppo=RUN/stages/00-...zip,ppo=RUN/stages/01-...zip,...`).

Prints, per run, each model's validation and test figures, then for each selection rule the
test figures of the models it picks, over all the runs:

* `first`: lowest score on the first validation set: train.py's own pick (model.zip);
* `second`: the same rule on the second set, as noisy as the first and independent of it;
* `both`: the lowest mean of the two scores (for a run of one setting, the mean objective over
  both sets' seeds);
* `last`: the last model, no selection;
* `student`: the distilled student with the lowest first-set score (no PPO model);
* `oracle`: the best model on the test seeds themselves. A bound on what selection could get,
  never a way to select: it sees the test seeds.

Rules are compared on the test seeds, which no rule but `oracle` reads. "bound" counts the runs
whose pick meets the learned-policy issue's never-worse bound (the 95% CI's upper end at most
+1% against the best heuristic), "ahead" those whose CI lies below 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

BOUND = 0.01  # the never-worse bound: the CI's upper end at most +1%


def _load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"error: {path}: no such file") from None
    except json.JSONDecodeError as e:
        raise SystemExit(f"error: {path}: not valid JSON ({e})") from None


def run_table(run: Path, results: Path, second: str) -> list[dict]:
    """One row per model the run evaluated, in training order: its stage, first- and second-set
    score and difference to the baseline, and its paired test figures."""
    history = _load_json(run / "eval.json")
    other = {e["model"]: e for e in _load_json(run / second)["stages"]}
    res = _load_json(results / "results.json")
    paired = {}
    for label, fig in res["paired_vs_reference"].items():
        if label.startswith("ppo="):
            paired[Path(label[len("ppo="):]).resolve()] = fig
    rows = []
    for h in history:
        m = h["model"]
        if m not in other:
            raise SystemExit(f"error: {run / second}: has no entry for {m} (score every model of {run / 'eval.json'})")
        fig = paired.get((run / m).resolve())
        if fig is None:
            raise SystemExit(f"error: {results / 'results.json'}: has no ppo={run / m} (evaluate every model the run kept)")
        rows.append({"model": m, "stage": f"{h['stage']}{'' if h['stage'] != 'ppo' else ' ' + str(h['timesteps'])}",
                     "first": h["score"], "first_rel": h["rel_diff"], "second": other[m]["score"],
                     "second_rel": other[m]["rel_diff"], "test": fig["rel_diff_mean"], "lo": fig["ci95_low"],
                     "hi": fig["ci95_high"]})
    return rows


def _argmin(rows: list[dict], key) -> int:
    vals = [key(r) for r in rows]
    return int(np.argmin(vals))  # the first of equals: the earlier model, as train.py picks


RULES = {
    "first": lambda rows: _argmin(rows, lambda r: r["first"]),
    "second": lambda rows: _argmin(rows, lambda r: r["second"]),
    "both": lambda rows: _argmin(rows, lambda r: (r["first"] + r["second"]) / 2),
    "last": lambda rows: len(rows) - 1,
    "student": lambda rows: min((i for i, r in enumerate(rows) if r["stage"].startswith("distill")),
                                key=lambda i: rows[i]["first"], default=len(rows) - 1),
    "oracle": lambda rows: _argmin(rows, lambda r: r["test"]),
}


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.selection", description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", nargs="+", metavar="RUN:RESULTS", help="a run directory and the evaluation of all its models")
    ap.add_argument("--second", default="reselect-120-139.json", help="the second validation set's file in each run")
    args = ap.parse_args(argv)
    tables = []
    for pair in args.pairs:
        run, sep, results = pair.partition(":")
        if not sep:
            print(f"error: {pair!r}: expected RUN:RESULTS", file=sys.stderr)
            return 2
        tables.append((run, run_table(Path(run), Path(results), args.second)))

    for run, rows in tables:
        picks = {name: rule(rows) for name, rule in RULES.items()}
        print(f"\n{run}")
        print("| model | first set | second set | test [95% CI] | picked by |")
        print("|---|---|---|---|---|")
        for i, r in enumerate(rows):
            by = ", ".join(n for n, p in picks.items() if p == i)
            print(f"| {r['stage']} | {_pct(r['first_rel'])} | {_pct(r['second_rel'])} | {_pct(r['test'])} "
                  f"[{_pct(r['lo'])}, {_pct(r['hi'])}] | {by} |")

    print(f"\n{len(tables)} runs; test figures of each rule's picks (paired against each scenario's best heuristic)")
    print("| rule | mean | bound | ahead | worst | mean regret vs oracle | same pick as first |")
    print("|---|---|---|---|---|---|---|")
    for name, rule in RULES.items():
        picked = [rows[rule(rows)] for _, rows in tables]
        best = [rows[RULES["oracle"](rows)] for _, rows in tables]
        same = sum(rule(rows) == RULES["first"](rows) for _, rows in tables)
        test = np.array([p["test"] for p in picked])
        print(f"| {name} | {_pct(test.mean())} | {sum(p['hi'] <= BOUND for p in picked)} | {sum(p['hi'] < 0 for p in picked)} | "
              f"{_pct(test.max())} | {100 * np.mean(test - [b['test'] for b in best]):.1f} points | {same} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
