"""Shortest job first on the scheduler's runtime estimates."""

from __future__ import annotations

from envs.decision.state import ClusterState

from baselines.base import OrderedBaseline


class ShortestJobFirst(OrderedBaseline):
    """Shortest estimated remaining runtime first (reference-GPU seconds); topology placement."""

    name = native_replay = "sjf"

    def order_key(self, state: ClusterState, job_id: int) -> float:
        return state.remaining_estimate_s(job_id)
