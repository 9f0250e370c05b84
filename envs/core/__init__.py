"""The native decision core: the scheduler's hot path as compiled C++17 over array state.

The core is built from `envs/core/src` by `pip install -e .` (scikit-build-core runs CMake; the
bindings are nanobind's) into `envs.core._core`. Its contract:

* It computes exactly what the plain-Python reference computes, bit for bit: the same per-node
  counts in the same order, the same GPUs. The reference stays in Python (`envs.jit.
  reference_path()` runs it) and tests/test_core.py compares the two on every shipped cluster.
* It reads the cluster once, as `ClusterArrays` (`cluster_arrays`), and never reads a
  simulator: its inputs are what the decision state holds.
* Bad input raises ValueError naming the argument; it never crashes the process. The fuzz
  driver (`envs/core/fuzz`, `make sanitize`) runs it under AddressSanitizer and
  UndefinedBehaviorSanitizer.

What is native so far: the placement rules' per-node counts (`node_take`) and the choice of GPUs
inside a node (`pick_in_node`), as envs/placement.py states them.
"""

from __future__ import annotations

import numpy as np

try:
    from envs.core import _core
except ImportError as e:  # pragma: no cover - only on a tree that was never installed
    raise ImportError("the native core envs.core._core is not built: run `pip install -e .` "
                      f"(or `make install`) in the repository ({e})") from None

ClusterArrays = _core.ClusterArrays
node_take = _core.node_take
pick_in_node = _core.pick_in_node


def cluster_arrays(cluster) -> ClusterArrays:
    """The core's view of an `envs.topology.Cluster`, built once per cluster object."""
    arrays = cluster.__dict__.get("_core_arrays")
    if arrays is None:
        def i64(a):
            return np.ascontiguousarray(a, dtype=np.int64)
        arrays = ClusterArrays(
            len(cluster.gpu_types), i64(cluster.node_gpu_type), np.ascontiguousarray(cluster.node_speed, dtype=np.float64),
            i64(cluster.node_first_gpu), i64(cluster.node_gpus), i64(cluster.gpu_socket), i64(cluster.switch_level),
            np.ascontiguousarray(cluster.node_under_switch, dtype=bool))
        cluster.__dict__["_core_arrays"] = arrays
    return arrays


__all__ = ["ClusterArrays", "cluster_arrays", "node_take", "pick_in_node"]
