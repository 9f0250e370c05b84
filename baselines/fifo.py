"""FIFO order with one placement rule: the classic Kubernetes-style schedulers."""

from __future__ import annotations

from envs.decision.placement import BINPACK, SPREAD, TOPOLOGY

from baselines.base import OrderedBaseline


class BinpackFifo(OrderedBaseline):
    """FIFO order (first job that fits); tightest pack: fewest, fullest nodes, blind to switches."""

    name = native_replay = "binpack"
    rule = BINPACK


class SpreadFifo(OrderedBaseline):
    """FIFO order (first job that fits); spread: one GPU at a time on the least-loaded node."""

    name = native_replay = "spread"
    rule = SPREAD


class TopologyFifo(OrderedBaseline):
    """FIFO order (first job that fits); topology: smallest interconnect tier, best fit inside it."""

    name = native_replay = "topology"
    rule = TOPOLOGY
