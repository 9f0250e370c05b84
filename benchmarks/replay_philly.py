"""Replay the shipped Philly trace.

For now: load the whole trace and print how long that takes (the replay under the topology
baseline is added once the simulator exists).

    python -m benchmarks.replay_philly [--seed 0]     (from the repository root)
"""

from __future__ import annotations

import argparse
import time

from envs.jobs import Job
from envs.traces import TraceReport, read_philly


def load_philly(seed: int = 0) -> tuple[list[Job], TraceReport, float]:
    """The full shipped Philly trace, its report, and the load time in seconds."""
    start_s = time.perf_counter()
    jobs, report = read_philly(seed=seed)
    return jobs, report, time.perf_counter() - start_s


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    jobs, report, load_s = load_philly(args.seed)
    print(report.summary())
    print(f"loaded {len(jobs)} jobs in {load_s:.2f} s ({len(jobs) / load_s:,.0f} jobs/s)")


if __name__ == "__main__":
    main()
