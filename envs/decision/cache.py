"""The candidate layer's caches, keyed on the decision state's versions.

A decision builds candidates, a mask and features from one `ClusterState`; much of that work
depends only on part of the state and recurs across decisions. The caches that hold it belong
here, in the layer above the state, never in the simulator or the cluster object:

* `per_state(state)`: views of this exact state; emptied whenever `state.version` changes.
* `per_alloc(state)`: views that depend only on which GPUs are owned or reserved (and so on the
  running set); emptied whenever `state.alloc_version` changes.
* `per_jobs(state)`: per-job tables fixed by what a job *is* (shape, priority, estimate), kept
  for the life of the state object and extended as jobs arrive (`job_table`).
* `per_cluster(cluster, name)`: what recurs across episodes on one cluster (GPU picks, placement
  geometries), dropped with the cluster; each table is emptied past `MEMO_LIMIT` entries.

They live in the state's `derived` slot, which nothing in envs.decision.state or the simulator reads. A
state from plain data starts with none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from envs.cluster.memo import MEMO_LIMIT, clear_cluster_memos, per_cluster
from envs.decision.state import ClusterState

__all__ = ["MEMO_LIMIT", "clear_cluster_memos", "job_table", "memo_of", "per_alloc", "per_cluster",
           "per_jobs", "per_state"]

class _Derived:
    __slots__ = ("versions", "views", "jobs")

    def __init__(self):
        self.versions: list = [None, None]  # what views[0] (the state) and views[1] (the allocation) were made for
        self.views: list[dict] = [{}, {}]
        self.jobs: dict = {}


def _derived(state: ClusterState) -> _Derived:
    d = state.derived
    if d is None:
        d = state.derived = _Derived()
    return d


def _views(state: ClusterState, which: int, version) -> dict:
    d = state.derived or _derived(state)
    if d.versions[which] != version:
        d.views[which] = {}
        d.versions[which] = version
    return d.views[which]


def per_state(state: ClusterState) -> dict:
    """A dict for views of this state; emptied whenever the state changes."""
    return _views(state, 0, state.version)


def per_alloc(state: ClusterState) -> dict:
    """A dict for views that depend only on GPU ownership and reservations."""
    return _views(state, 1, state.alloc_version)


def per_jobs(state: ClusterState) -> dict:
    """A dict for per-job tables of what jobs are (see `job_table`), and for what recurs
    across every decision on the state object (its cluster's memo tables)."""
    return (state.derived or _derived(state)).jobs


def job_table(state: ClusterState, name: str, build: Callable[[ClusterState, int, int], np.ndarray]) -> np.ndarray:
    """The per-job table `name`, one row per job of the state: `build(state, lo, hi)` makes the
    rows of jobs lo..hi-1, which never change once made. A simulator's state gains jobs as they
    arrive; their rows are appended (capacity doubles, so appends are amortised)."""
    tables = (state.derived or _derived(state)).jobs
    m = len(state.num_gpus)
    hit = tables.get(name)
    if hit is not None and hit[1] == m:  # the common case: no job arrived since the last call
        return hit[2]
    if hit is None:
        rows = build(state, 0, m)
        buf = np.empty((max(m, 16), *rows.shape[1:]), dtype=rows.dtype)
        buf[:m] = rows
        tables[name] = hit = [buf, m, buf[:m]]
        return hit[2]
    buf, have, _ = hit
    if len(buf) < m:
        grown = np.empty((max(m, 2 * len(buf)), *buf.shape[1:]), dtype=buf.dtype)
        grown[:have] = buf[:have]
        buf = hit[0] = grown
    buf[have:m] = build(state, have, m)
    hit[1], hit[2] = m, buf[:m]
    return hit[2]


def memo_of(state: ClusterState, name: Any) -> dict:
    """`per_cluster(state.cluster, name)`, looked up once per state object and again only when
    the table was emptied for its size."""
    tables = (state.derived or _derived(state)).jobs
    key = ("memo", name)
    table = tables.get(key)
    if table is None or len(table) > MEMO_LIMIT:
        table = tables[key] = per_cluster(state.cluster, name)
    return table
