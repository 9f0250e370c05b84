"""The decision loop without Gymnasium: drive a simulator with any rule that picks candidates.

The env and every replay share `advance_to_decision`, so a baseline run through the env and
through `replay` sees the same decision points and the same candidates. A rule is called as
`select(state, cset)` with the simulator's decision state: it never sees the simulator.
"""

from __future__ import annotations

from collections.abc import Callable

from envs.candidates import CandidateSet, apply_candidate, build_candidates
from envs.simulator import Simulator
from envs.state import ClusterState
from envs.window import feasible_queue

Select = Callable[[ClusterState, CandidateSet], int]


def advance_to_decision(sim: Simulator, queue_window: int) -> CandidateSet:
    """Advance until some queued job can be placed (a real choice) or the workload is done;
    return the candidates there."""
    while not sim.done:
        if sim.queue_len:
            state = sim.decision_state()
            if len(feasible_queue(state)):
                return build_candidates(state, queue_window)
        sim.advance()
    return build_candidates(sim.decision_state(), queue_window)


def replay(sim: Simulator, select: Select, queue_window: int, max_steps: int | None = None) -> int:
    """Run `sim` to the end (or `max_steps` decisions) letting `select` pick each candidate.
    Returns the number of decisions made."""
    steps = 0
    cset = advance_to_decision(sim, queue_window)
    while not sim.done and (max_steps is None or steps < max_steps):
        apply_candidate(sim, cset, select(cset.state, cset))
        steps += 1
        cset = advance_to_decision(sim, queue_window)
    return steps
