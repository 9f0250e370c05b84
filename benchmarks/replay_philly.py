"""Replay the shipped Philly trace: load all 82,247 jobs, then replay them on the
philly-sized cluster under the `topology` baseline (bare simulator, no Gymnasium layer).

    python -m benchmarks.replay_philly [--seed 0] [--max-jobs N] [--digest]     (from the repository root)

`--digest` prints, as the last line, a digest of the schedule (every job's end, work done,
attained service, interference loss and last rate, every run segment with its GPUs, the energy
and useful work), so `python -m benchmarks.ab --same-output -- python -m benchmarks.replay_philly
--digest` fails when a speed-up changes any result.
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np

from baselines import make_baseline
from envs.cluster.config import load_cluster
from envs.jobs import Job
from envs.sim.metrics import episode_metrics
from envs.sim.replay import replay
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload
from envs.workload.traces import TraceReport, read_philly


def load_philly(seed: int = 0) -> tuple[list[Job], TraceReport, float]:
    """The full shipped Philly trace, its report, and the load time in seconds."""
    start_s = time.perf_counter()
    jobs, report = read_philly(seed=seed)
    return jobs, report, time.perf_counter() - start_s


def schedule_digest(sim: Simulator) -> str:
    """A digest of what a replay did, bit for bit (see the module's docstring)."""
    h = hashlib.sha256()
    for name in ("end", "work_done", "attained_gpu_s", "interference_loss_s", "rate"):
        h.update(getattr(sim, name).tobytes())
    for seg in sim.segments:
        h.update(np.array([seg.job_id, seg.preempted], dtype=np.int64).tobytes())
        h.update(np.array([seg.start_s, seg.end_s]).tobytes())
        h.update(np.asarray(seg.gpus, dtype=np.int64).tobytes())
    h.update(np.array([sim.energy_j, sim.useful_work_s]).tobytes())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-jobs", type=int, default=None, help="replay only the first N jobs")
    parser.add_argument("--digest", action="store_true", help="print a digest of the schedule as the last line")
    args = parser.parse_args(argv)
    jobs, report, load_s = load_philly(args.seed)
    print(report.summary())
    print(f"loaded {len(jobs)} jobs in {load_s:.2f} s ({len(jobs) / load_s:,.0f} jobs/s)")

    cluster = load_cluster("philly-sized")
    workload = make_workload(load_workload_spec("philly-full"), cluster, args.seed, args.max_jobs)
    sim = Simulator(cluster, workload)
    start_s = time.perf_counter()
    decisions = replay(sim, make_baseline("topology").select, queue_window=8, preempt_las=False)
    wall_s = time.perf_counter() - start_s
    m = episode_metrics(sim)
    print(
        f"replayed {len(workload)} jobs on {cluster.describe()} under topology in {wall_s:.1f} s "
        f"({decisions} decisions, {sim.now / 86400:.1f} simulated days): avg JCT {m['avg_jct_s'] / 3600:.2f} h, "
        f"p99 {m['p99_jct_s'] / 3600:.1f} h, utilisation {m['gpu_utilisation']:.2f}"
    )
    if args.digest:
        print(f"schedule digest {schedule_digest(sim)}")


if __name__ == "__main__":
    main()
