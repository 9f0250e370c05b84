"""Memo tables per cluster: pure functions of a cluster that recur across decisions, episodes
and requests (concrete GPU picks, placement geometries).

The tables live here, keyed on the cluster object's identity and dropped with it, not on the
cluster object: `per_cluster(cluster, name)` gives table `name`, emptied once it holds more than
`MEMO_LIMIT` entries. Callers key their entries by everything the value depends on.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from envs.cluster.speed import PlacementGeometry, SpeedModel, placement_geometry
from envs.cluster.topology import Cluster

MEMO_LIMIT = 200_000  # entries per memo table before it is emptied

_CLUSTER_MEMOS: dict[int, tuple[weakref.ref, dict]] = {}


def per_cluster(cluster: Cluster, name: Any) -> dict:
    """The memo table `name` of this cluster object (dropped when the cluster is), emptied once
    it holds more than MEMO_LIMIT entries."""
    key = id(cluster)
    hit = _CLUSTER_MEMOS.get(key)
    if hit is None or hit[0]() is not cluster:
        hit = _CLUSTER_MEMOS[key] = (weakref.ref(cluster, lambda _, k=key: _CLUSTER_MEMOS.pop(k, None)), {})
    tables = hit[1]
    table = tables.get(name)
    if table is None or len(table) > MEMO_LIMIT:
        table = tables[name] = {}
    return table


def clear_cluster_memos(cluster: Cluster) -> None:
    """Forget every memo of `cluster` (tests use it to compare memoised and fresh results)."""
    hit = _CLUSTER_MEMOS.get(id(cluster))
    if hit is not None:
        hit[1].clear()


def geometry(cluster: Cluster, gpus: np.ndarray, tp_degree: int, model: SpeedModel,
             table: dict | None = None) -> PlacementGeometry:
    """`placement_geometry`, memoised in the cluster's ("geometry", model) table (pass `table`
    when the caller holds it already)."""
    memo = per_cluster(cluster, ("geometry", model)) if table is None else table
    key = (gpus.tobytes(), tp_degree)
    g = memo.get(key)
    if g is None:
        g = memo[key] = placement_geometry(cluster, gpus, tp_degree, model)
    return g
