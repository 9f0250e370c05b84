"""The decision loop without Gymnasium: drive a simulator with any rule that picks candidates.

The env and every replay share `advance_to_decision`, so a baseline run through the env and
through `replay` sees the same decision points and the same candidates. A rule is called as
`select(state, cset)` with the simulator's decision state: it never sees the simulator.
"""

from __future__ import annotations

from collections.abc import Callable

from envs.core import jit as _jit
from envs.core.kernels import EV_FEASIBLE, EV_NO_EVENT, EV_UNTIL
from envs.decision.candidates import CandidateSet, WaitGuard, apply_candidate, build_candidates
from envs.decision.state import ClusterState
from envs.decision.window import any_feasible, can_place, job_classes, las_stop_args, shape_classes
from envs.sim.simulator import Simulator

Select = Callable[[ClusterState, CandidateSet], int]


def candidates_now(sim: Simulator, queue_window: int, preempt_las: bool = True, wait_guard: WaitGuard | None = None,
                   features: tuple | None = None) -> CandidateSet:
    """`build_candidates` of the simulator's decision state: on the compiled path in one native
    call (Simulator.native_candidates: the same window, mask and placements, every valid
    candidate placed at once), else by the reference. `features`: two float32 arrays for the
    set's observation features, written in the same native call (the set's `observed` then
    holds them; the reference path leaves `observed` None)."""
    if _jit.ENABLED:
        cset = sim.native_candidates(queue_window, preempt_las, wait_guard, features)
        job_classes(cset.state)  # the arrived jobs' classes registered, as the compiled event loop reads them
        return cset
    return build_candidates(sim.decision_state(), queue_window, preempt_las, wait_guard)


def advance_to_decision(sim: Simulator, queue_window: int, until: float | None = None, preempt_las: bool = True,
                        wait_guard: WaitGuard | None = None, features: tuple | None = None) -> CandidateSet | None:
    """Advance until some queued job can be placed (a real choice) or the workload is done;
    return the candidates there. With `until`, stop at that time instead when the next event
    comes later (None returned; the simulator stands at `until`).

    `preempt_las=False` leaves the `preempt-las` rule (Tiresias' preemption by attained service)
    out of the candidates and skips the moments where it would be the only valid placement: a
    scheduler that never takes that rule would only WAIT there, so its schedule is the same, for
    1.2-2.5x fewer decisions on the default setting and no work on the rule's validity.
    `wait_guard` (envs.decision.candidates.WaitGuard, None: none) goes to `build_candidates`; it changes
    the mask, never which moments are decisions. `features`: see `candidates_now`.

    On the compiled path the events between decisions run in one compiled call
    (Simulator.run_events) while no job checkpoints or is reserved and no job of the workload
    asks for segments (the compiled event loop does not count them; the native core does)."""
    compiled = _jit.ENABLED
    while not sim.done:
        if sim.queue_len:
            if compiled:
                placeable = sim.native_can_place(preempt_las)
            else:
                state = sim.decision_state()
                placeable = can_place(state) if preempt_las else any_feasible(state)
            if placeable:
                return candidates_now(sim, queue_window, preempt_las, wait_guard, features)
        if compiled and not sim.checkpointing and not sim.reserved and not sim.has_segments:
            state = sim.decision_state()
            job_classes(state)  # arrivals since the last decision registered: else their shapes stop run_events each time
            classes = shape_classes(state, sim.job_shapes()[1])
            if classes is not None:
                stop = sim.run_events(*classes, until, las=las_stop_args(state) if preempt_las else None)
                if stop == EV_FEASIBLE:
                    return candidates_now(sim, queue_window, preempt_las, wait_guard, features)
                if stop != EV_UNTIL and stop != EV_NO_EVENT:
                    continue
        if until is not None and sim.next_event_s() > until:
            sim.advance_until(until)
            return None
        sim.advance()
    return candidates_now(sim, queue_window, preempt_las, wait_guard, features)


def decide(sim: Simulator, cset: CandidateSet, action: int, queue_window: int, until: float | None = None,
           preempt_las: bool = True, wait_guard: WaitGuard | None = None, features: tuple | None = None) -> CandidateSet | None:
    """`apply_candidate(sim, cset, action)`, then `advance_to_decision` (the same arguments): the
    next decision's candidates. Where the compiled event loop serves (see `advance_to_decision`)
    and the action starts a job without preempting, the start and the events that follow it are
    one compiled call (Simulator.start_and_run); so are a WAIT without `until` (its event is
    the first the call processes) and the events after it (Simulator.run_events)."""
    if _jit.ENABLED and not sim.checkpointing and not sim.reserved and not sim.has_segments \
            and 0 <= action < len(cset.candidates) and cset.mask[action]:
        cd = cset.candidates[action]
        wait = cd.rule == -1
        if (not wait or until is None) and not cd.victims:
            classes = shape_classes(cset.state, sim.job_shapes()[1])
            if classes is not None:
                las = las_stop_args(cset.state) if preempt_las else None
                if wait:
                    stop = sim.run_events(*classes, las=las)
                    if stop == EV_NO_EVENT:  # nothing to wait for: advance() raises, as apply_candidate's would
                        sim.advance()
                else:
                    stop = sim.start_and_run(cd.job_id, cd.gpus, cd.profile, *classes, until, las)
                if stop == EV_FEASIBLE:
                    return candidates_now(sim, queue_window, preempt_las, wait_guard, features)
                return advance_to_decision(sim, queue_window, until, preempt_las, wait_guard, features)
    apply_candidate(sim, cset, action)
    return advance_to_decision(sim, queue_window, until, preempt_las, wait_guard, features)


def replay(sim: Simulator, select: Select, queue_window: int, max_steps: int | None = None, preempt_las: bool = True,
           wait_guard: WaitGuard | None = None) -> int:
    """Run `sim` to the end (or `max_steps` decisions) letting `select` pick each candidate
    (`preempt_las`, `wait_guard`: see `advance_to_decision`). Returns the number of decisions made.

    On the compiled path, a whole replay of a rule the native core carries out (a select whose
    object names it in `native_replay`: `sect`, `sjf` and the FIFO rules, see
    `Simulator.replay_native`) without `preempt-las`, a step limit or a wait guard is one native
    call, with the same schedule, metrics and timeline; the simulator is then spent (it can no
    longer be stepped or forked)."""
    native = getattr(getattr(select, "__self__", None), "native_replay", None)
    if native is not None and _jit.ENABLED and not preempt_las and max_steps is None and wait_guard is None:
        return sim.replay_native(native, queue_window)
    steps = 0
    cset = advance_to_decision(sim, queue_window, preempt_las=preempt_las, wait_guard=wait_guard)
    while not sim.done and (max_steps is None or steps < max_steps):
        cset = decide(sim, cset, select(cset.state, cset), queue_window, preempt_las=preempt_las, wait_guard=wait_guard)
        steps += 1
    return steps
