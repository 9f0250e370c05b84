"""One way to run many independent tasks: in this process, or in a pool of worker processes.

Evaluation episodes (`agents.evaluation.run_all`) and teacher labelling (`agents.distill`) both
go through `run_tasks`, so a backend added here serves both. Results come back in task order
whatever order the workers finish in, so a run is the same with 1 or N workers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

BACKENDS = ("local",)


def _worker_init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per worker, also for torch (read at its import)


def run_tasks(fn: Callable[[Any], Any], tasks: Sequence[Any], *, workers: int = 1, backend: str = "local",
              desc: str = "tasks", progress: bool = True) -> list[Any]:
    """`[fn(t) for t in tasks]`, in `workers` spawned processes when workers > 1 (`fn` and the
    tasks must pickle), with a progress bar on stderr."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend '{backend}' (known: {', '.join(BACKENDS)})")
    from tqdm import tqdm

    out: list[Any] = [None] * len(tasks)
    with tqdm(total=len(tasks), desc=desc, unit="task", file=sys.stderr, disable=not progress) as bar:
        if workers <= 1 or len(tasks) <= 1:
            for i, t in enumerate(tasks):
                out[i] = fn(t)
                bar.update()
            return out
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # torch and fork do not mix
        with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=ctx, initializer=_worker_init) as pool:
            futures = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
            for f in as_completed(futures):
                out[futures[f]] = f.result()
                bar.update()
    return out
