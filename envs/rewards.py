"""Reward: minus the jobs in the system integrated over time (so an episode's return is minus
the sum of JCTs, as in Decima), plus configurable penalties. Each term reads the simulator's
integrals, so the reward of a step is the change of a potential between two decision points."""

from __future__ import annotations

from dataclasses import dataclass

from envs.metrics import slo_missed
from envs.simulator import Simulator


@dataclass(frozen=True)
class RewardConfig:
    time_scale_s: float = 3600.0  # one job in the system for this long costs 1
    priority_weighted: bool = False  # use SimConfig.priority_weights for the JCT term
    slo_miss: float = 0.0  # per inference job finishing past its SLO
    preemption_gpu_h: float = 0.0  # per GPU-hour lost to checkpoint and restore
    energy_kwh: float = 0.0  # per kWh drawn by powered-on nodes
    slo_slowdown: float = 3.0  # an inference job misses its SLO when JCT > this x work_s


class RewardTracker:
    """Turns the simulator's running integrals into per-step rewards."""

    def __init__(self, config: RewardConfig):
        self.config = config
        self._last = 0.0
        self._seen_finished = 0
        self._slo_count = 0

    def reset(self, sim: Simulator) -> None:
        self._seen_finished = 0
        self._slo_count = 0
        self._last = self._potential(sim)

    def _potential(self, sim: Simulator) -> float:
        cfg = self.config
        jobs_s = sim.weighted_jobs_s if cfg.priority_weighted else sim.jobs_in_system_s
        value = -jobs_s / cfg.time_scale_s
        if cfg.slo_miss:
            value -= cfg.slo_miss * self._count_new_slo_misses(sim)
        value -= cfg.preemption_gpu_h * sim.preemption_gpu_s / 3600.0
        value -= cfg.energy_kwh * sim.energy_j / 3.6e6
        return value

    def _count_new_slo_misses(self, sim: Simulator) -> int:
        finished = sim.finished_order
        for j in finished[self._seen_finished :]:
            self._slo_count += slo_missed(sim.jobs[j], sim.end[j] - sim.jobs[j].arrival_s, self.config.slo_slowdown)
        self._seen_finished = len(finished)
        return self._slo_count

    def step(self, sim: Simulator) -> float:
        now = self._potential(sim)
        reward, self._last = now - self._last, now
        return reward
