"""One distillation labelling round, timed: round 0 of a training config's DAgger rounds (the
teacher alone), over the config's labelling workers.

    python -m benchmarks.label_round configs/train/distill-generalist-s8.yaml
"""

import sys, time
from agents.config import load_train_config
from agents.selection import validations
from agents.distill import label_tasks, label_episode
from agents.parallel import run_tasks

def main():
    cfg = load_train_config(sys.argv[1])
    vals = validations(cfg)
    teachers = ["lookahead"] * len(vals)
    tasks = label_tasks(cfg, vals, teachers, 0, None)
    t = time.perf_counter()
    new = run_tasks(label_episode, tasks, workers=cfg.distill["workers"], backend="local", desc="round 0", progress=False)
    wall = time.perf_counter() - t
    print(f"{sys.argv[1]}: round 0, {len(tasks)} episodes, {sum(len(e['labels']) for e in new)} states, {wall:.1f} s with {cfg.distill['workers']} workers")


if __name__ == "__main__":
    main()
