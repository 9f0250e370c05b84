"""The decision loop without Gymnasium: drive a simulator with any rule that picks candidates.

The env and every replay share `advance_to_decision`, so a baseline run through the env and
through `replay` sees the same decision points and the same candidates.
"""

from __future__ import annotations

from collections.abc import Callable

from envs.candidates import CandidateSet, apply_candidate, build_candidates, feasible_queue
from envs.simulator import Simulator

Select = Callable[[Simulator, CandidateSet], int]


def advance_to_decision(sim: Simulator, queue_window: int) -> CandidateSet:
    """Advance until some queued job can be placed (a real choice) or the workload is done;
    return the candidates there."""
    while not sim.done:
        if sim.queue_len and len(feasible_queue(sim)):
            return build_candidates(sim, queue_window)
        sim.advance()
    return build_candidates(sim, queue_window)


def replay(sim: Simulator, select: Select, queue_window: int, max_steps: int | None = None) -> int:
    """Run `sim` to the end (or `max_steps` decisions) letting `select` pick each candidate.
    Returns the number of decisions made."""
    steps = 0
    cset = advance_to_decision(sim, queue_window)
    while not sim.done and (max_steps is None or steps < max_steps):
        apply_candidate(sim, cset, select(sim, cset))
        steps += 1
        cset = advance_to_decision(sim, queue_window)
    return steps
