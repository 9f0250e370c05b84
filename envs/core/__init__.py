"""The native decision core: the scheduler's hot path as compiled C++17 over array state.

The core is built from `envs/core/src` by `pip install -e .` (scikit-build-core runs CMake; the
bindings are nanobind's) into `envs.core._core`. Its contract:

* It computes exactly what the plain-Python reference computes, bit for bit: the same per-node
  counts in the same order, the same GPUs. The reference stays in Python (`envs.core.jit.
  reference_path()` runs it) and tests/test_core.py compares the two on every shipped cluster.
* It reads the cluster once, as `ClusterArrays` (`cluster_arrays`), and never reads a
  simulator: its inputs are what the decision state holds.
* Bad input raises ValueError naming the argument; it never crashes the process. The fuzz
  driver (`envs/core/fuzz`, `make sanitize`) runs it under AddressSanitizer and
  UndefinedBehaviorSanitizer.

What is native so far: the placement rules' per-node counts (`node_take`) and the choice of GPUs
inside a node (`pick_in_node`), as envs/decision/placement.py states them; a placement's geometry
(`placement_geometry`), as envs/cluster/speed.py states it; `sect`'s choice among a decision's
candidates (`choose_sect`: each candidate's placement on the free GPUs, the rate its job would
get there now, as envs/decision/features.py's `rate_if_started` states it, and baselines/sect.py's key);
and a lookahead's whole rollout of `sect` over a simulator's arrays (`rollout_sect`, which
envs.sim.simulator.Simulator.rollout_sect calls: the decisions, the starts, the preemptions, the
checkpoints and the events), in place or on the core's own copy of a sampled world (`World`, made
by Simulator.native_world: a fork is a copy of arrays); and a whole replay of `sect`, `sjf` or a
FIFO rule to the workload's end (`replay`, which Simulator.replay_native calls), its segments and
timeline recorded; a decision's whole candidate set (`SimView.candidates` over a simulator's
arrays parsed once, which Simulator.native_candidates calls: the window with `preempt-las`'s
jobs, the mask, every valid candidate's placement and victims, as
envs.decision.candidates.build_candidates states them); and a decision's features (`candidate_features`:
the candidate and global columns of envs/decision/features.py's schema, which
envs.decision.features.native_candidate_features calls); and the env's whole episode
(`Episode`, which Simulator.native_episode makes and the Gymnasium env steps: each call carries
out a candidate, runs the events to the next decision and writes that decision's candidate set
and features, as envs.sim.replay.decide and candidates_now do, recording the segments and the
timeline for the simulator's records at the episode's end), and a batch of such episodes stepped
together (`EpisodeBatch`, which the batched vector envs hold: each episode's step on one of a pool of
threads, the GIL released, writing its row of the batch's arrays, the caller taking each finished
step while the others run); and the placements of a decision
state's valid candidates, for any `ClusterState` (`state_placements`, which
envs.decision.candidates.placed_natively calls: the scoring service's, on states rebuilt from plain data).

Beside the C++ core, this package holds the rest of the compiled hot path: `kernels`, the numba
twins of inner loops the core does not carry yet, and `jit`, the switch between the compiled path
and the plain-Python reference (`GANGSCHED_JIT=0`).
"""

from __future__ import annotations

import numpy as np

try:
    from envs.core import _core
except ImportError as e:  # pragma: no cover - only on a tree that was never installed
    raise ImportError("the native core envs.core._core is not built: run `pip install -e .` "
                      f"(or `make install`) in the repository ({e})") from None

ArrayMemo = _core.ArrayMemo
ClusterArrays = _core.ClusterArrays
RateModel = _core.RateModel
node_take = _core.node_take
pick_in_node = _core.pick_in_node
placement_geometry = _core.placement_geometry
rollout_sect = _core.rollout_sect
replay = _core.replay
SimView = _core.SimView
World = _core.World
Episode = _core.Episode
EpisodeBatch = _core.EpisodeBatch


def cluster_arrays(cluster) -> ClusterArrays:
    """The core's view of an `envs.cluster.topology.Cluster`, built once per cluster object."""
    arrays = cluster.__dict__.get("_core_arrays")
    if arrays is None:
        from envs.cluster.topology import INTRA_NVLINK_PAIRS, INTRA_NVSWITCH, NUM_JOB_KINDS, REFERENCE_NVLINK_GBPS

        def i64(a):
            return np.ascontiguousarray(a, dtype=np.int64)

        def f64(a):
            return np.ascontiguousarray(a, dtype=np.float64)

        c = cluster
        arrays = ClusterArrays({
            "num_types": len(c.gpu_types), "num_kinds": NUM_JOB_KINDS, "speed_varies_by_kind": bool(c.speed_varies_by_kind),
            "intra_nvswitch": INTRA_NVSWITCH, "intra_nvlink_pairs": INTRA_NVLINK_PAIRS,
            "reference_nvlink_GBps": float(REFERENCE_NVLINK_GBPS),
            "node_gpu_type": i64(c.node_gpu_type), "node_speed": f64(c.node_speed), "node_memory_gb": f64(c.node_memory_gb), "node_first_gpu": i64(c.node_first_gpu),
            "node_gpus": i64(c.node_gpus), "node_intra": i64(c.node_intra), "node_nvlink_GBps": f64(c.node_nvlink_GBps),
            "node_pcie_GBps": f64(c.node_pcie_GBps), "node_net_per_gpu_GBps": f64(c.node_net_per_gpu_GBps),
            "gpu_socket": i64(c.gpu_socket), "gpu_node": i64(c.gpu_node), "gpu_local": i64(c.gpu_local),
            "gpu_speed": f64(c.gpu_speed), "switch_level": i64(c.switch_level), "switch_uplink_GBps": f64(c.switch_uplink_GBps),
            "node_under_switch": np.ascontiguousarray(c.node_under_switch, dtype=bool),
            "node_tier": np.ascontiguousarray(c.node_tier, dtype=np.int8),
            "gpu_speed_by_kind": f64(c.gpu_speed_by_kind),
            "node_domain": i64(c.node_domain), "num_domains": int(c.num_domains), "node_block": i64(c.node_block),
        })
        cluster.__dict__["_core_arrays"] = arrays
    return arrays


_RATE_MODELS: dict = {}


def rate_model(model) -> RateModel:
    """The core's view of an `envs.cluster.speed.SpeedModel` (frozen, so kept per model)."""
    hit = _RATE_MODELS.get(model)
    if hit is None:
        from envs.cluster.topology import REFERENCE_NET_PER_GPU_GBPS

        if len(_RATE_MODELS) > 64:
            _RATE_MODELS.clear()
        hit = _RATE_MODELS[model] = RateModel(float(model.cross_socket_factor), float(model.cross_tier_efficiency),
                                              float(model.interference_coeff), float(REFERENCE_NET_PER_GPU_GBPS),
                                              [float(x) for x in model.sensitivity_by_kind],
                                              [float(x) for x in model.pressure_by_kind])
    return hit


def choose_sect(state, window: list[int], mask: np.ndarray, num_rules: int) -> int:
    """baselines/sect.py's choice on a decision state (`ClusterState`) and its candidates' window
    and mask: the candidate index, or -1 when no non-preempting candidate is valid."""
    return _core.choose_sect(
        cluster_arrays(state.cluster), rate_model(state.speed_model), state.free_mask, state.node_free,
        state.node_pressure, state.uplink_demand, state.num_gpus, state.tp_degree, state.mem_per_gpu_gb, state.kind,
        state.comm_fraction, state.tp_comm_share, state.estimate_s, state.work_done_s, state.restore_s,
        state.needs_restore, state.enqueue_seq, state.num_restores_owed > 0, window, mask, num_rules,
        _NO_SEGMENTS if state.segment_gpus is None else state.segment_gpus)


_NO_SEGMENTS = np.zeros(0, dtype=np.int64)  # choose_sect's segment_gpus where no job asks for segments


def whole_gang(cluster) -> np.ndarray:
    """The cluster's node_whole_gang as the core reads it (int64), once per cluster object."""
    hit = cluster.__dict__.get("_core_whole_gang")
    if hit is None:
        hit = cluster.__dict__["_core_whole_gang"] = np.ascontiguousarray(cluster.node_whole_gang, dtype=np.int64)
    return hit


def feature_inputs(state) -> tuple:
    """A decision state's (`ClusterState`) arrays by name, running, checkpointing and reserved
    jobs, time and counts, as `candidate_features` reads them."""
    s = state
    arrays = {
        "estimate": s.estimate_s, "work_done": s.work_done_s, "restore_s": s.restore_s, "needs_restore": s.needs_restore,
        "checkpoint_s": s.checkpoint_s, "gpus_req": s.num_gpus, "tp_degree": s.tp_degree, "kind": s.kind,
        "priority": s.priority, "preemptible": s.preemptible, "comm_fraction": s.comm_fraction,
        "tp_comm_share": s.tp_comm_share, "mem_req": s.mem_per_gpu_gb, "queued_since": s.queued_since_s,
        "wait_s": s.wait_s, "attained_gpu_s": s.attained_gpu_s, "overhead_left": s.restore_left_s,
        "checkpoint_end": s.checkpoint_end_s, "rate": s.rate, "q_ids": s.queue, "node_free": s.node_free,
        "node_pressure": s.node_pressure, "uplink_demand": s.uplink_demand, "whole_gang": whole_gang(s.cluster),
        "arrival_times": s.arrival_times_s, "arrival_requested": s.arrival_requested_gpu_s,
    }
    counts = [s.num_free, s.fragmented_free, len(s.num_gpus), len(s.queue), len(s.arrival_times_s), s.queued_gpus,
              s.queued_high_priority, s.num_restores_owed]
    return arrays, s.running, s.checkpointing, s.reserved, float(s.now), counts


def candidate_features(state, window, mask: np.ndarray, gpus: np.ndarray, gpus_end: np.ndarray, victims: np.ndarray,
                       victims_end: np.ndarray, clip: bool = False, out: tuple | None = None,
                       memo: ArrayMemo | None = None) -> tuple[np.ndarray, np.ndarray]:
    """envs.decision.features.candidate_features' (K, candidate columns) and (global columns,) float32 of
    a decision state (`ClusterState`) and its candidate set as plain arrays: the window's jobs,
    the mask (K entries, WAIT last), and for each valid candidate other than WAIT, in index order,
    its GPUs `gpus[gpus_end[v - 1]:gpus_end[v]]` and victims `victims[victims_end[v - 1]:
    victims_end[v]]` (int64). With `clip`, clipped to [-1, 1] as the env's observation. `out`:
    the two float32 arrays to write (every entry is written; float64 ones get the values before
    the cast to float32); new ones otherwise. `memo`: an `ArrayMemo` kept with the state, so that
    arrays that are the same objects as at its last call are not imported again."""
    if out is None:
        out = (np.empty((len(mask), len(_core.CANDIDATE_COLUMNS)), dtype=np.float32),
               np.empty(len(_core.GLOBAL_COLUMNS), dtype=np.float32))
    arrays, running, checkpointing, reserved, now, counts = feature_inputs(state)
    _core.candidate_features(cluster_arrays(state.cluster), rate_model(state.speed_model), arrays, running, checkpointing,
                             reserved, now, counts, window, mask, gpus, gpus_end, victims, victims_end, out[0], out[1], clip,
                             memo)
    return out


def state_placements(state, window, mask: np.ndarray, las_thresholds: list[float],
                     starvation_factor: float) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """The placements of a decision state's (`ClusterState`) valid candidates other than WAIT, for
    the window and (K,) bool mask `envs.decision.candidates.build_candidates` gave it: (their indices, their
    GPUs, their victims), in index order, as `SimView.candidates` gives them (an empty GPU list
    where the reference finds no placement). One call for all of them. `las_thresholds` and
    `starvation_factor`: envs.decision.las's LAS_QUEUE_THRESHOLDS_GPU_S and STARVATION_FACTOR."""
    s = state
    arrays = {
        "arrival": s.arrival_s, "gpus_req": s.num_gpus, "tp_degree": s.tp_degree, "mem_req": s.mem_per_gpu_gb,
        "priority": s.priority, "preemptible": s.preemptible, "attained_gpu_s": s.attained_gpu_s,
        "checkpoint_s": s.checkpoint_s, "restore_s": s.restore_s, "queued_since": s.queued_since_s,
        "free_mask": s.free_mask, "gpu_owner": s.gpu_owner, "node_free": s.node_free, "node_pressure": s.node_pressure,
        "uplink_demand": s.uplink_demand,
        "segment_gpus": s.segment_gpus if s.segment_gpus is not None else np.zeros(len(s.num_gpus), dtype=np.int64),
    }
    return _core.state_placements(cluster_arrays(s.cluster), rate_model(s.speed_model), arrays, s.running, s.checkpointing,
                                  float(s.now), window, mask, las_thresholds, starvation_factor)


__all__ = ["ArrayMemo", "ClusterArrays", "RateModel", "candidate_features", "choose_sect", "cluster_arrays",
           "feature_inputs", "node_take", "pick_in_node", "placement_geometry", "rate_model", "replay", "rollout_sect",
           "state_placements", "whole_gang"]
