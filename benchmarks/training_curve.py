"""Objective against wall time: each evaluated model of a training run, at the minute it was ready.

    python -m benchmarks.training_curve RUN [RUN ...] [--plot curves.png]

For each run (a train.py run directory) prints every evaluated model (each distillation round's
student, the PPO models) with the minutes since the run started when its validation finished
and its validation score against the best heuristic (eval.json), then the run's total. With
`--plot` it draws one panel per folder of runs (runs/NAME/seed-K: one panel per NAME, as
train.py's --seeds lays them out), one line per run, with the issue's 30-minute budget marked.

The minutes come from eval.json's `run_wall_s` (train.py records it since 2026-12-03). For a run
made before, they are read from its TensorBoard events (each validation score is logged with the
wall-clock time it was written, PPO's at the logger's next write, seconds later) less the time
version.json was written, which train.py does as the run starts; the last evaluation, which only
eval.json records, and the run's end are summary.json's mtime. Those runs' minutes are as good as
the files' times.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CLIP_PCT = 15.0  # the plot's upper edge: worse models are drawn there, labelled with their figure
BUDGET_MIN = 30.0  # the learned-policy issue's training budget per scenario, on the 2 cores
_TB_TAGS = ("distill/validation_rel_diff", "eval/rel_diff_vs_baseline")


def _tb_times(run: Path) -> list[float]:
    """Wall-clock times (s since the epoch) of the run's logged validation scores, in order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    times = []
    for f in sorted(run.glob("tb/**/events.out.tfevents*")):
        ea = EventAccumulator(str(f), size_guidance={"scalars": 0})
        ea.Reload()
        for tag in _TB_TAGS:
            if tag in ea.Tags()["scalars"]:
                times += [e.wall_time for e in ea.Scalars(tag)]
    return sorted(times)


def curve(run: Path) -> tuple[list[dict], float | None]:
    """The run's evaluated models as {stage, minutes, rel_diff}, and its total minutes (None when
    unknown). SystemExit naming the file when the run's records do not tell."""
    try:
        history = json.loads((run / "eval.json").read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {run / 'eval.json'}: {e}") from None
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
    if history and all("run_wall_s" in h for h in history):
        minutes = [h["run_wall_s"] / 60 for h in history]
        total = summary["run_wall_s"] / 60 if "run_wall_s" in summary else None
    else:
        start = (run / "version.json").stat().st_mtime if (run / "version.json").is_file() else None
        times = _tb_times(run)
        end = (run / "summary.json").stat().st_mtime if (run / "summary.json").is_file() else None
        if len(times) == len(history) - 1 and end is not None:
            times.append(end)  # the evaluation after PPO's last update is logged to eval.json only, just before summary.json
        if start is None or len(times) < len(history):
            raise SystemExit(f"error: {run}: eval.json has no run_wall_s, and its version.json and TensorBoard events "
                             f"({len(times)} validation scores for {len(history)} models) do not give the times")
        # A resumed run logs some scores twice; the last len(history) are this history's.
        minutes = [(t - start) / 60 for t in times[-len(history):]]
        total = (end - start) / 60 if end is not None else None
    rows = [{"stage": h["stage"] if h["stage"] != "ppo" else f"ppo {h['timesteps']}", "minutes": m, "rel_diff": h["rel_diff"]}
            for h, m in zip(history, minutes)]
    return rows, total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.training_curve", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="train.py run directories")
    ap.add_argument("--plot", type=Path, default=None, help="write the curves as a PNG here")
    args = ap.parse_args(argv)
    curves = []
    for run in args.runs:
        rows, total = curve(run)
        curves.append((run, rows, total))
        points = ", ".join(f"{r['stage']} {r['minutes']:.1f} min {100 * r['rel_diff']:+.1f}%" for r in rows)
        print(f"{run}: {points}; run {'?' if total is None else f'{total:.1f}'} min")
    if args.plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        groups: dict[str, list] = {}
        for run, rows, total in curves:
            groups.setdefault(run.parent.name, []).append((run, rows))
        cols = min(3, len(groups))
        rows_n = -(-len(groups) // cols)
        fig, axes = plt.subplots(rows_n, cols, figsize=(4.6 * cols, 3.6 * rows_n), squeeze=False)
        for ax in axes.flat[len(groups):]:
            ax.set_visible(False)
        for ax, (name, members) in zip(axes.flat, groups.items()):
            for run, rows in members:
                ys = [100 * r["rel_diff"] for r in rows]
                line, = ax.plot([r["minutes"] for r in rows], [min(y, CLIP_PCT) for y in ys], marker="o", label=run.name)
                for r, y in zip(rows, ys):
                    if y > CLIP_PCT:  # off the scale: drawn at its edge, with the figure
                        ax.annotate(f"{y:+.0f}%", (r["minutes"], CLIP_PCT), fontsize=6, color=line.get_color(),
                                    textcoords="offset points", xytext=(2, -8))
            ax.axhline(0, color="grey", lw=0.8)
            ax.axvline(BUDGET_MIN, color="red", lw=0.8, ls="--")
            ax.set_title(name, fontsize=8)
            ax.set_xlabel("minutes since the run started")
            ax.set_ylabel("validation: % vs best heuristic", fontsize=8)
            ax.legend(fontsize=7)
        fig.tight_layout()
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
