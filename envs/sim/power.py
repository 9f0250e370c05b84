"""The simulator's power meter: what the cluster draws, from how many GPUs each node holds.

`PowerMeter` turns per-node GPU ownership (AllocationLedger.node_owned) into power: a node with
any GPU held is powered on and draws its base power plus busy power per held GPU and idle power
per other GPU; a node with none is powered down and draws nothing. It keeps

* `node_power_w`: what each node would draw powered on,
* `node_on`: which nodes are powered on,
* `power_w`: the cluster's draw, summed again by `update` only when a node changed since.

The simulator tells it which nodes' ownership changed (`nodes_changed`) or that all may have
(`recount`), and calls `update` before it reads `power_w`. Per-node values are computed by the
same operations whether kept one node at a time or recounted whole, so they are the same floats.
"""

from __future__ import annotations

import numpy as np

from envs.cluster.topology import Cluster
from envs.core import jit as _jit
from envs.core import kernels as _kernels


class PowerMeter:
    """Power drawn by `cluster` with `node_owned` GPUs held per node (kept up to date by the caller)."""

    def __init__(self, cluster: Cluster, node_owned: np.ndarray):
        c = self.cluster = cluster
        self.node_busy_w = np.array([t.power_busy_w for t in c.gpu_types])[c.node_gpu_type]  # (N,) W per held GPU
        self.node_idle_w = np.array([t.power_idle_w for t in c.gpu_types])[c.node_gpu_type]  # (N,) W per other GPU
        # (base W, busy W per GPU, idle W per GPU, GPUs) per node, as Python floats and ints.
        self._terms = list(zip(c.node_power_base_w.tolist(), self.node_busy_w.tolist(), self.node_idle_w.tolist(), c.node_lists.gpus))
        self.node_power_w = self.per_node_power(node_owned)  # (N,) W each node draws when powered on
        self.node_on = np.zeros(c.num_nodes, dtype=bool)  # (N,) any GPU held
        self.stale = True  # node ownership changed since power_w was summed
        self.power_w = 0.0  # W the cluster draws
        self.update()

    def copy(self) -> PowerMeter:
        """An independent copy (for `Simulator.fork`): the cluster is shared, the rest copied."""
        m = PowerMeter.__new__(PowerMeter)
        m.cluster = self.cluster
        m.node_busy_w = self.node_busy_w.copy()
        m.node_idle_w = self.node_idle_w.copy()
        m._terms = self._terms.copy()  # of tuples of numbers
        m.node_power_w = self.node_power_w.copy()
        m.node_on = self.node_on.copy()
        m.stale = self.stale
        m.power_w = self.power_w
        return m

    def per_node_power(self, node_owned: np.ndarray) -> np.ndarray:
        """(N,) W what each node draws when powered on: base power plus busy and idle GPU power."""
        c = self.cluster
        return c.node_power_base_w + node_owned * self.node_busy_w + (c.node_gpus - node_owned) * self.node_idle_w

    def nodes_changed(self, nodes: list[int], node_owned: np.ndarray) -> None:
        """The GPUs held on `nodes` are now `node_owned` there."""
        terms, node_power_w, node_on = self._terms, self.node_power_w, self.node_on
        for n in nodes:
            o = int(node_owned[n])
            base, busy, idle, size = terms[n]
            node_power_w[n] = base + o * busy + (size - o) * idle  # as per_node_power
            node_on[n] = o > 0
        self.stale = True

    def recount(self, node_owned: np.ndarray) -> None:
        """Any node's GPUs held may have changed: recompute every node from `node_owned`."""
        self.node_power_w = self.per_node_power(node_owned)
        self.node_on = node_owned > 0
        self.stale = True

    def update(self) -> None:
        """Sum `power_w` again if a node changed since: powered-on nodes (any GPU held) draw their
        base power plus busy and idle GPU power; empty nodes are powered down."""
        if self.stale:
            if _jit.ENABLED:
                self.power_w = _kernels.masked_sum(self.node_power_w, self.node_on)
            else:
                self.power_w = float(self.node_power_w[self.node_on].sum())
            self.stale = False
