"""The Gymnasium face of the simulator: `gangsched/GpuCluster-v0`."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.cluster.config import load_cluster
from envs.cluster.speed import SpeedModel
from envs.cluster.topology import Cluster
from envs.core import jit as _jit
from envs.decision.candidates import CandidateSet, WaitGuard, num_candidates, wait_guard_of
from envs.decision.features import NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES, candidate_features
from envs.decision.state import ClusterState
from envs.jobs import Job
from envs.sim.metrics import episode_metrics
from envs.sim.objective import Objective, RewardTracker, objective_config
from envs.sim.replay import advance_to_decision, decide
from envs.sim.simulator import JobState, NativeEpisode, SimConfig, Simulator
from envs.workload.generator import WorkloadSpec, check_workload_fits, load_workload_spec, make_workload

TRAIN_SEEDS = (1_000_000, 2**31 - 1)  # resets without a seed draw workloads from here


def _dataclass_from(cls, value, name: str):
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict or {cls.__name__}, got {type(value).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"{name}: unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")
    return replace(cls(), **{k: tuple(v) if isinstance(v, list) else v for k, v in value.items()})


def observed_mask(mask: np.ndarray) -> np.ndarray:
    """The observation's `action_mask` of a (K,) bool mask: int8, and WAIT alone where nothing is
    valid (the terminal state), so that vectorised wrappers never see an empty mask."""
    out = mask.astype(np.int8)
    if not out.any():
        out[-1] = 1
    return out


class GpuClusterEnv(gym.Env):
    """Gang scheduling of LLM jobs on a GPU cluster with a tiered interconnect.

    ## Description
    Jobs arrive over time and each needs all its GPUs at once. At every decision point (an
    arrival, a completion or a checkpoint end, while some queued job can be placed) the agent
    picks one candidate: a (job, placement rule) pair from a window of up to `queue_window`
    queued jobs, or WAIT, which advances the simulation to the next event. Starting a job
    returns to the agent at the same instant, so several jobs can start at one time. Instants
    where only WAIT is possible are skipped without asking the agent.

    ## Action Space
    `Discrete(K)`, K = queue_window x 5 + 1. Candidate `slot * 5 + rule`, rule in (binpack,
    spread, topology, preempt, preempt-las); the last action is WAIT. The valid ones are in the observation's
    `action_mask` and from `action_masks()`. An invalid action changes nothing (reward 0,
    `info["invalid_action"] = True`).

    ## Observation Space
    `Dict`:
    | key | shape | content |
    |---|---|---|
    | candidates | (K, 37) float32 in [-1, 1] | per-candidate features, `envs.decision.features.CANDIDATE_SCHEMA` |
    | global | (14,) float32 in [-1, 1] | queue, cluster and past-arrival features, `envs.decision.features.GLOBAL_SCHEMA` |
    | action_mask | (K,) int8 in {0, 1} | 1 where the candidate is valid |
    Features are fractions, log-scaled durations and one-hots: none grows with cluster size.
    Everything comes from the decision state (`envs.decision.state.ClusterState`): runtime features
    use the jobs' *estimates*, arrival features the past; true durations and future arrivals
    never reach the observation, the mask or a baseline.

    ## Rewards
    Minus the increase of the objective (`envs.sim.objective`: a weighted sum of average JCT,
    priority-weighted JCT, SLO misses, GPU-hours lost to preemption and energy, per job) times
    the number of jobs, between two decisions, in units of `objective.time_scale_s`. With the
    default objective (average JCT) that is the number of jobs in the system integrated over the
    time between decisions, and an episode's return is minus the sum of JCTs / 3600.

    ## Starting State
    Time 0, an empty cluster, the workload drawn for the reset's seed (a reset with `seed=s`
    replays workload s; a reset without a seed draws one from `TRAIN_SEEDS`, which evaluation
    seeds never use), advanced to the first decision point.

    ## Episode End
    Terminated when every job of the workload has finished. Truncated after `max_steps`
    decisions.

    ## Arguments
    cluster: config name in configs/clusters/, YAML path, or a `Cluster` (default mixed-64gpu).
    workload: config name in configs/workloads/, YAML path, a `WorkloadSpec`, or a fixed list of
    `Job`s (default llm-mix). num_jobs: override the workload's job count. queue_window: Q.
    max_steps: truncation cap. objective: an `Objective` or its YAML form (a dict; see
    envs/sim/objective.py). speed_model: dict of `SpeedModel` fields. max_checkpoint_s: the bound on
    a graceful stop. scenario: a scenario name or YAML path (configs/scenarios/): its cluster,
    workload, job count, queue window, objective and checkpoint bound, for every argument not
    given explicitly. preempt_las: offer the `preempt-las` rule (Tiresias' preemption by
    attained service) and ask the agent also where it is the only valid placement (True, so that
    a learned policy can do what Tiresias does; False leaves the rule's candidates invalid and
    skips those moments: 1.2-2.5x fewer decisions). wait_guard: a starvation bound on WAIT
    (`envs.decision.candidates.WaitGuard`, its mapping {overdue_factor, min_wait_s} or the overdue factor
    alone; None, the default: no guard): WAIT is invalid while a window job that could start
    without preempting has waited longer than max(overdue_factor x its estimate, min_wait_s).
    render_mode: "ansi" (returns text) or "human" (prints it).

    ## Where it runs
    On the compiled path (envs.core) the whole episode runs in the native core, one call per
    decision (`Simulator.native_episode`): bit for bit the Python decision loop, which runs it on
    the reference path (`GANGSCHED_JIT=0`). Reading the env's Python state mid-episode (`sim`,
    `cset`, `state`, `render`; an invalid action, whose observation is the last one again) rebuilds
    it from the actions taken, and the episode goes on in the Python loop, unchanged; `mask`,
    `done` and `action_masks()` never need it.

    ## Version History
    v0: initial release.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        cluster: str | Path | Cluster | None = None,
        workload: str | Path | WorkloadSpec | list[Job] | None = None,
        num_jobs: int | None = None,
        queue_window: int | None = None,
        max_steps: int = 20_000,
        objective: dict | Objective | None = None,
        speed_model: dict | SpeedModel | None = None,
        max_checkpoint_s: float | None = None,
        scenario: str | Path | None = None,
        preempt_las: bool = True,
        wait_guard: WaitGuard | dict | float | None = None,
        render_mode: str | None = None,
    ):
        if scenario is not None:
            from envs.scenario import load_scenario

            sc = load_scenario(scenario)
            self.scenario = sc
            cluster = sc.cluster if cluster is None else cluster
            workload = sc.workload if workload is None else workload
            num_jobs = sc.num_jobs if num_jobs is None else num_jobs
            queue_window = sc.queue_window if queue_window is None else queue_window
            objective = sc.objective if objective is None else objective
            max_checkpoint_s = sc.max_checkpoint_s if max_checkpoint_s is None else max_checkpoint_s
        else:
            self.scenario = None
        cluster = "mixed-64gpu" if cluster is None else cluster
        workload = "llm-mix" if workload is None else workload
        queue_window = 8 if queue_window is None else queue_window
        max_checkpoint_s = 60.0 if max_checkpoint_s is None else max_checkpoint_s
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if queue_window < 1:
            raise ValueError(f"queue_window must be >= 1, got {queue_window}")
        self.cluster = load_cluster(cluster)
        if isinstance(workload, list):
            self.fixed_jobs: list[Job] | None = workload
            self.workload_spec = None
        else:
            self.fixed_jobs = None
            self.workload_spec = load_workload_spec(workload)
            check_workload_fits(self.workload_spec, self.cluster)
        self.num_jobs = num_jobs
        self.queue_window = queue_window
        self.max_steps = max_steps
        self.objective = objective_config(objective)
        self.sim_config = SimConfig(
            speed_model=_dataclass_from(SpeedModel, speed_model, "speed_model"),
            max_checkpoint_s=max_checkpoint_s,
        )
        self.render_mode = render_mode
        self.preempt_las = preempt_las
        self.wait_guard = wait_guard_of(wait_guard)
        K = num_candidates(queue_window)
        self.action_space = spaces.Discrete(K)
        self.observation_space = spaces.Dict(
            {
                "candidates": spaces.Box(-1.0, 1.0, (K, NUM_CANDIDATE_FEATURES), np.float32),
                "global": spaces.Box(-1.0, 1.0, (NUM_GLOBAL_FEATURES,), np.float32),
                "action_mask": spaces.MultiBinary(K),
            }
        )
        self._sim: Simulator | None = None
        self._cset: CandidateSet | None = None
        self._episode: NativeEpisode | None = None  # the episode carried on by the native core (envs.core)
        self._jobs: list[Job] = []
        self._actions: list[int] = []  # the valid actions taken this episode, to rebuild the Python state
        self._mask: np.ndarray | None = None
        self._features: tuple[np.ndarray, np.ndarray] | None = None  # the core's last observation arrays
        self.workload_seed: int | None = None
        self._tracker = RewardTracker(self.objective)
        self._steps = 0

    # ------------------------------------------------------------------ gym API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "workload_seed" in options:
            self.workload_seed = int(options["workload_seed"])
        elif seed is not None:
            self.workload_seed = int(seed)
        else:
            self.workload_seed = int(self.np_random.integers(*TRAIN_SEEDS))
        jobs = self.fixed_jobs if self.fixed_jobs is not None else make_workload(self.workload_spec, self.cluster, self.workload_seed, self.num_jobs)
        self._jobs, self._actions = jobs, []
        sim = self._sim = Simulator(self.cluster, jobs, self.sim_config)
        self._cset = self._episode = None
        self._tracker.reset(sim)
        self._steps = 0
        if _jit.ENABLED:  # the episode in the native core: one call per decision
            self._episode = sim.native_episode(self.queue_window, self.preempt_las, self.wait_guard)
            self._features = self._feature_arrays()
            self._mask = self._episode.step(-1, self._features)
        else:
            self._advance_to_decision()
        self._tracker.reset(sim)  # time before the first decision is no agent's doing
        return self._observation(), self._info()

    def step(self, action):
        sim = self._sim
        if sim is None:
            raise RuntimeError("call reset() before step()")
        if sim.done:
            raise RuntimeError("the episode has ended; call reset()")
        action = int(action)
        self._steps += 1
        invalid = not (0 <= action < len(self._mask) and self._mask[action])
        if not invalid:
            self._actions.append(action)
            if self._episode is not None:  # apply, the events to the next decision, its candidates and features: one native call
                self._features = self._feature_arrays()
                self._mask = self._episode.step(action, self._features)
            else:  # apply, then on to the next decision
                self._cset = decide(sim, self._cset, action, self.queue_window, preempt_las=self.preempt_las,
                                    wait_guard=self.wait_guard, features=self._feature_arrays())
                self._took_cset()
        reward, terminated, truncated, info = self._outcome(invalid)
        return self._observation(), reward, terminated, truncated, info

    def _took_step(self, action: int, mask: np.ndarray, floats: list, ints: list) -> tuple[float, bool, bool, dict]:
        """A valid `action` whose step the batched envs' native batch took (`envs.core.EpisodeBatch`:
        its features are in the batch's arrays, `mask` its row of the batch's mask, `floats` and
        `ints` its scalars): what `step` returns but the observation."""
        self._steps += 1
        self._actions.append(action)
        self._episode.took(floats, ints)
        self._mask = mask
        return self._outcome(False)

    def _outcome(self, invalid: bool) -> tuple[float, bool, bool, dict]:
        """A step's reward, end flags and info, once its action is carried out."""
        sim = self._sim
        reward = self._tracker.step(sim)
        terminated = sim.done
        truncated = not terminated and self._steps >= self.max_steps
        info = self._info()
        if invalid:
            info["invalid_action"] = True
        if terminated or truncated:
            info["metrics"] = episode_metrics(self.sim, self.objective)
        if self.render_mode == "human":
            print(self.render_text())
        return float(reward), terminated, truncated, info

    @property
    def sim(self) -> Simulator | None:
        """The episode's simulator. While the native core carries the episode on, reading it
        first rebuilds the simulator's Python state (the same episode replayed through the Python
        decision loop, from the actions taken), and the episode goes on there."""
        if self._episode is not None and not self._episode.finished:
            self._to_python()
        return self._sim

    @property
    def cset(self) -> CandidateSet | None:
        """The current decision's candidate set (see `sim` for the native episode's case)."""
        if self._episode is not None:
            self._to_python()
        return self._cset

    @property
    def state(self) -> ClusterState:
        """The decision state the current candidates were built from (what the scheduler knows)."""
        return self.cset.state

    @property
    def done(self) -> bool:
        """Every job of the episode's workload has finished (the simulator's `done`, read without
        rebuilding a native episode's Python state)."""
        return self._sim.done

    @property
    def mask(self) -> np.ndarray:
        """(K,) bool mask of the valid actions now (read-only; `action_masks()` gives a copy)."""
        return self._mask

    def action_masks(self) -> np.ndarray:
        """(K,) bool mask of valid actions (sb3-contrib's MaskablePPO reads this)."""
        return self._mask.copy()

    def render(self):
        text = self.render_text()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    # ------------------------------------------------------------------ internals

    def _advance_to_decision(self) -> None:
        self._cset = advance_to_decision(self._sim, self.queue_window, preempt_las=self.preempt_las, wait_guard=self.wait_guard,
                                         features=self._feature_arrays())
        self._took_cset()

    def _took_cset(self) -> None:
        """The Python loop's new candidate set: its mask, and its features where the core wrote them."""
        cset = self._cset
        self._mask = cset.mask
        self._features, cset.observed = cset.observed, None

    def _to_python(self) -> None:
        """The native episode's state rebuilt in a Python simulator: the same workload, the
        actions taken replayed through the Python decision loop (bit for bit the core's episode),
        which then carries the episode on. The reward tracker's integrals are the same floats."""
        self._episode = None
        sim = self._sim = Simulator(self.cluster, self._jobs, self.sim_config)
        cset = advance_to_decision(sim, self.queue_window, preempt_las=self.preempt_las, wait_guard=self.wait_guard)
        for action in self._actions:
            cset = decide(sim, cset, action, self.queue_window, preempt_las=self.preempt_las, wait_guard=self.wait_guard)
        self._cset = cset
        self._mask = cset.mask
        self._features = None  # the observation handed out is the core's, the same values

    def _feature_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """New arrays for the next observation's features (the native core writes them with the
        candidates; an observation handed out is never written again)."""
        return (np.empty((self.action_space.n, NUM_CANDIDATE_FEATURES), dtype=np.float32),
                np.empty(NUM_GLOBAL_FEATURES, dtype=np.float32))

    def _observation(self) -> dict[str, np.ndarray]:
        if self._features is not None:  # written by the core with the candidates, clipped: handed out once
            (feats, glob), self._features = self._features, None
        else:
            feats, glob = candidate_features(self.cset)
            for x in (feats, glob):  # clip to [-1, 1] in place (np.clip's dispatch costs more than these two calls)
                np.minimum(np.maximum(x, -1.0, out=x), 1.0, out=x)
        return {"candidates": feats, "global": glob, "action_mask": observed_mask(self._mask)}

    def _info(self) -> dict[str, Any]:
        sim, episode = self._sim, self._episode
        queued, running = (episode.queued, episode.running) if episode is not None else (sim.queue_len, len(sim.running))
        return {"time_s": sim.now, "queued": queued, "running": running, "finished": sim.num_done, "workload_seed": self.workload_seed}

    def render_text(self) -> str:
        """Node occupancy as text: one row per node, one cell per GPU.
        `.` free, a letter/digit per running job, `~` checkpointing, `r` reserved."""
        sim = self.sim
        c = self.cluster
        symbols = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        lines = [f"t={sim.now / 3600:8.2f} h  queued={sim.queue_len}  running={len(sim.running)}  done={sim.num_done}/{sim.num_jobs}"]
        width = max(len(n) for n in c.node_names)
        for n in range(c.num_nodes):
            lo = c.node_first_gpu[n]
            cells = []
            for g in range(lo, lo + c.node_gpus[n]):
                owner, res = sim.gpu_owner[g], sim.gpu_reserved[g]
                if owner >= 0:
                    cells.append("~" if sim.state[owner] == JobState.CHECKPOINTING else symbols[owner % len(symbols)])
                else:
                    cells.append("r" if res >= 0 else ".")
            leaf = c.switch_names[c.node_leaf[n]] if c.node_leaf[n] >= 0 else "-"
            gtype = c.gpu_types[c.node_gpu_type[n]].name
            lines.append(f"{c.node_names[n]:>{width}} [{''.join(cells)}] {leaf} {gtype}")
        return "\n".join(lines)
