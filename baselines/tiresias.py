"""Tiresias-style least attained service (Gu et al., NSDI 2019): no runtime knowledge needed."""

from __future__ import annotations

from envs.state import ClusterState

from baselines.base import OrderedBaseline


class LeastAttainedService(OrderedBaseline):
    """Least attained GPU-seconds first (no runtime estimates); topology placement."""

    name = "tiresias"

    def order_key(self, state: ClusterState, job_id: int) -> float:
        return float(state.attained_gpu_s[job_id])
