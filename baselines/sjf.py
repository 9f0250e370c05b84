"""Shortest job first on the scheduler's runtime estimates."""

from __future__ import annotations

from envs.simulator import Simulator

from baselines.base import OrderedBaseline


class ShortestJobFirst(OrderedBaseline):
    """Shortest estimated remaining runtime first (reference-GPU seconds); topology placement."""

    name = "sjf"

    def order_key(self, sim: Simulator, job_id: int) -> float:
        return sim.remaining_estimate_s(job_id)
