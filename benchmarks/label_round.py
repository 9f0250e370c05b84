"""One distillation labelling round, timed: round 0 of a training config's DAgger rounds (the
teacher alone: the honest lookahead), over the config's labelling workers.

    python -m benchmarks.label_round configs/train/distill-generalist-s8.yaml
"""

from __future__ import annotations

import argparse
import time

from agents.config import load_train_config
from agents.distill import label_episode, label_tasks
from agents.parallel import run_tasks
from agents.selection import validations


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", help="a training config with a distill section")
    ap.add_argument("--workers", type=int, default=None, help="default: the config's distill.workers")
    args = ap.parse_args(argv)
    cfg = load_train_config(args.config)
    if not cfg.distill:
        ap.error(f"{args.config}: no distill section")
    workers = args.workers or cfg.distill["workers"]
    vals = validations(cfg)
    tasks = label_tasks(cfg, vals, ["lookahead"] * len(vals), 0, None)
    t0 = time.perf_counter()
    episodes = run_tasks(label_episode, tasks, workers=workers, backend="local", desc="round 0", progress=False)
    wall = time.perf_counter() - t0
    print(f"{args.config}: round 0, {len(tasks)} episodes, {sum(len(e['labels']) for e in episodes)} states, "
          f"{wall:.1f} s with {workers} workers")


if __name__ == "__main__":
    main()
