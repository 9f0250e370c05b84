"""How placement changes a job's speed: placement efficiency by interconnect tier, shared-uplink
congestion, and memory-bandwidth interference on a node.

rate = min GPU speed x placement efficiency x interference, in reference-seconds of work per
second, where a GPU's speed is its type's factor for the job's kind (`GpuType.speed_by_kind`,
the type's `speed` for kinds without one; see docs/speed.md). A step at ideal placement splits
into compute (1 - c), tensor-parallel communication c_tp and data-parallel communication c_dp;
each communication share stretches by ideal bandwidth / achieved bandwidth for the tier its
traffic crosses:

    efficiency = 1 / ((1 - c_tp - c_dp) + c_tp * stretch_tp + c_dp * stretch_dp)

TP traffic stays inside a TP group (ideal: NVSwitch, 900 GB/s); DP traffic flows between
groups (ideal: one leaf, the full NIC share of each GPU; each switch tier above the leaf keeps
`cross_tier_efficiency` of line rate). Traffic that leaves a switch shares that switch's uplink
with every job that crosses it (each gets capacity / total demand when the uplink is
oversubscribed), so rates are recomputed whenever the set of running jobs changes. Inference
replicas put memory-bandwidth pressure on their node and suffer from their neighbours'.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

import numpy as np

from envs import core as _core
from envs.core import jit as _jit
from envs.jobs import Job
from envs.cluster.topology import (
    INTRA_NVLINK_PAIRS,
    INTRA_NVSWITCH,
    NUM_JOB_KINDS,
    REFERENCE_NET_PER_GPU_GBPS,
    REFERENCE_NVLINK_GBPS,
    Cluster,
)


@dataclass(frozen=True)
class SpeedModel:
    """Tunable constants of the speed model."""

    cross_socket_factor: float = 0.5  # PCIe traffic between NUMA sockets crosses the CPU link
    # Achieved share of line rate per switch tier above the leaf (ECMP collisions, extra hops).
    cross_tier_efficiency: float = 0.85
    interference_coeff: float = 0.6  # slowdown per unit of neighbours' memory-bandwidth pressure
    # Memory-bandwidth pressure a job puts on its node per GPU, and how much it suffers from it.
    pressure_by_kind: tuple[float, ...] = (0.2, 0.2, 1.0, 0.1)  # indexed by JobKind
    sensitivity_by_kind: tuple[float, ...] = (0.3, 0.3, 1.0, 0.2)


@dataclass(frozen=True)
class PlacementGeometry:
    """What a set of GPUs and a TP degree fix, whichever job runs there.
    Shapes: n = nodes used, u = uplinks crossed."""

    min_speed: float  # slowest GPU's generic speed (where no job is known)
    min_speed_by_kind: tuple[float, ...]  # (NUM_JOB_KINDS,) slowest GPU's speed for each job kind
    nodes: np.ndarray  # (n,) node ids used
    gpus_on_node: np.ndarray  # (n,) GPUs of the placement on each
    tp_stretch: float  # ideal / achieved TP bandwidth at nominal bandwidth (1 when tp = 1)
    tp_cross_node: bool  # TP traffic uses the network, so congestion applies to it too
    dp_bw_GBps: float  # nominal per-GPU bandwidth between TP groups
    tier: int  # highest tier the placement spans
    uplinks: np.ndarray  # (u,) switch ids whose uplink the placement crosses
    uplink_demand_GBps: np.ndarray  # (u,) its traffic on each at full speed

    def congested(self, congestion: float) -> tuple[float, float]:
        """(the factor TP bandwidth is divided by, the DP bandwidth) under the worst congestion
        share (0, 1] of its uplinks: TP suffers only where it crosses nodes, DP only where it
        crosses uplinks."""
        return (congestion if self.tp_cross_node else 1.0), self.dp_bw_GBps * (congestion if len(self.uplinks) else 1.0)


@dataclass(frozen=True)
class PlacementProfile:
    """A job on a placement: the geometry plus the job's communication and memory profile.
    Congestion and interference are applied on top of it from the running set."""

    geometry: PlacementGeometry
    c_tp: float  # tensor-parallel share of step time at ideal placement
    c_dp: float  # data-parallel share
    pressure: float  # memory-bandwidth pressure per GPU
    sensitivity: float
    kind: int  # JobKind
    min_speed: float  # the slowest GPU's speed for the job's kind: geometry.min_speed_by_kind[kind]

    @property
    def nodes(self) -> np.ndarray:
        return self.geometry.nodes

    @property
    def gpus_on_node(self) -> np.ndarray:
        return self.geometry.gpus_on_node

    @property
    def uplinks(self) -> np.ndarray:
        return self.geometry.uplinks

    @property
    def uplink_demand_GBps(self) -> np.ndarray:
        return self.geometry.uplink_demand_GBps

    @property
    def tier(self) -> int:
        return self.geometry.tier

    def efficiency(self, congestion: float = 1.0) -> float:
        """Placement efficiency given the worst congestion share (0, 1] on its uplinks."""
        return efficiency_of(self.geometry.tp_stretch, *self.geometry.congested(congestion), self.c_tp, self.c_dp)


def efficiency_of(tp_stretch, tp_congestion, dp_bw_GBps, c_tp, c_dp):
    """The efficiency formula (floats or arrays): TP steps stretched by slow TP links and by
    congestion where TP crosses nodes; DP steps stretched where its bandwidth (after congestion)
    is below the reference network's."""
    tp = tp_stretch / tp_congestion
    larger = np.maximum if isinstance(dp_bw_GBps, np.ndarray) else max  # plain floats stay plain (the simulator's path)
    dp = larger(1.0, REFERENCE_NET_PER_GPU_GBPS / larger(dp_bw_GBps, 1e-12))  # finite: c_dp = 0 gives 0
    return 1.0 / ((1.0 - c_tp - c_dp) + c_tp * tp + c_dp * dp)


def _one_domain(cluster: Cluster, nodes: np.ndarray) -> bool:
    """All of `nodes` are in one multi-node NVLink domain."""
    domain = cluster.node_domain[nodes]
    return bool(domain[0] >= 0 and (domain == domain[0]).all())


def _group_tp_bandwidth(cluster: Cluster, gpus: np.ndarray, model: SpeedModel) -> tuple[float, bool]:
    """Bottleneck bandwidth (GB/s) of one TP group's links, and whether it crosses nodes."""
    nodes = cluster.gpu_node[gpus]
    n0 = nodes[0]
    if (nodes != n0).any():
        if _one_domain(cluster, nodes):  # NVLink, not the network
            return float(cluster.node_nvlink_GBps[nodes].min()), False
        return float(cluster.node_net_per_gpu_GBps[nodes].min()), True
    intra = cluster.node_intra[n0]
    if intra == INTRA_NVSWITCH:
        return float(cluster.node_nvlink_GBps[n0]), False
    local = cluster.gpu_local[gpus]
    if intra == INTRA_NVLINK_PAIRS and len(gpus) == 2 and local.min() // 2 == local.max() // 2:
        return float(cluster.node_nvlink_GBps[n0]), False
    sockets = cluster.gpu_socket[gpus]
    bw = float(cluster.node_pcie_GBps[n0])
    return (bw * model.cross_socket_factor if (sockets != sockets[0]).any() else bw), False


def placement_geometry(cluster: Cluster, gpus: np.ndarray, tp_degree: int, model: SpeedModel) -> PlacementGeometry:
    """Geometry of `gpus` (global ids, ordered: consecutive runs of tp_degree GPUs form the TP
    groups). The uplink demands are summed in node order. On the compiled path the native core
    computes it (envs.core), bit for bit this reference."""
    if _jit.ENABLED:
        return PlacementGeometry(*_core.placement_geometry(_core.cluster_arrays(cluster), np.asarray(gpus, dtype=np.int64),
                                                           tp_degree, model.cross_socket_factor, model.cross_tier_efficiency))
    gpus = np.asarray(gpus)
    node_of = cluster.gpu_node[gpus]
    if (node_of == node_of[0]).all():
        nodes, gpus_on_node = node_of[:1], np.array([len(gpus)])
    else:
        counts = np.bincount(node_of, minlength=cluster.num_nodes)
        nodes = np.flatnonzero(counts)
        gpus_on_node = counts[nodes]

    tp_stretch, tp_cross = 1.0, False
    if tp_degree > 1:
        worst_bw = np.inf
        for g in range(0, len(gpus), tp_degree):
            bw, cross = _group_tp_bandwidth(cluster, gpus[g : g + tp_degree], model)
            worst_bw = min(worst_bw, bw)
            tp_cross |= cross
        tp_stretch = max(1.0, REFERENCE_NVLINK_GBPS / worst_bw)

    if len(nodes) > 1 and _one_domain(cluster, nodes):
        # Inside one NVLink domain DP runs on NVLink, as inside one NVSwitch node; no uplink.
        tier, uplinks, demand = 0, np.zeros(0, dtype=np.int64), np.zeros(0)
        dp_bw = float(cluster.node_nvlink_GBps[nodes].min())
    elif len(nodes) > 1:
        tier = int(cluster.node_tier[np.ix_(nodes, nodes)].max())
        dp_bw = float(cluster.node_net_per_gpu_GBps[nodes].min()) * model.cross_tier_efficiency ** (tier - 1)
        under = cluster.node_under_switch[nodes]  # (n, S)
        inside = gpus_on_node @ under  # GPUs of the placement under each switch
        crossing = (inside > 0) & (inside < len(gpus)) & np.isfinite(cluster.switch_uplink_GBps)
        uplinks = np.flatnonzero(crossing)
        # add.accumulate: sequential, in node order (a matrix product's order is the BLAS library's)
        demand = np.add.accumulate((gpus_on_node * cluster.node_net_per_gpu_GBps[nodes])[:, None] * under[:, uplinks], axis=0)[-1]
    else:
        # DP between groups inside one node runs on its intra-node links: never worse than ideal
        # on NVSwitch; on PCIe it is the PCIe bandwidth.
        n0 = nodes[0]
        dp_bw = float(cluster.node_nvlink_GBps[n0]) if cluster.node_intra[n0] == INTRA_NVSWITCH else float(cluster.node_pcie_GBps[n0])
        tier, uplinks, demand = 0, np.zeros(0, dtype=np.int64), np.zeros(0)
    min_speed = float(cluster.gpu_speed[gpus].min())
    if cluster.speed_varies_by_kind:
        min_speed_by_kind = tuple(cluster.gpu_speed_by_kind[gpus].min(axis=0).tolist())
    else:
        min_speed_by_kind = (min_speed,) * NUM_JOB_KINDS
    return PlacementGeometry(
        min_speed=min_speed,
        min_speed_by_kind=min_speed_by_kind,
        nodes=nodes,
        gpus_on_node=gpus_on_node,
        tp_stretch=tp_stretch,
        tp_cross_node=tp_cross,
        dp_bw_GBps=dp_bw,
        tier=tier,
        uplinks=uplinks,
        uplink_demand_GBps=demand,
    )


def job_constants(job: Job, model: SpeedModel) -> tuple[float, float, float, float, int]:
    """What a job brings to any placement: (TP share c_tp, DP share c_dp of its step time at
    ideal placement, memory-bandwidth pressure per GPU, sensitivity to neighbours' pressure,
    job kind, which picks the GPUs' speed)."""
    return job_constants_of(job.gpus, job.tp_degree, job.kind, job.comm_fraction, job.tp_comm_share, model)


def job_constants_of(gpus: int, tp_degree: int, kind: int, comm_fraction: float, tp_comm_share: float,
                     model: SpeedModel) -> tuple[float, float, float, float, int]:
    """`job_constants` from a job's shape and communication profile (what a decision state holds)."""
    c = comm_fraction
    return (
        c * tp_comm_share if tp_degree > 1 else 0.0,
        c * (1.0 - tp_comm_share) if gpus // tp_degree > 1 else 0.0,
        model.pressure_by_kind[kind],
        model.sensitivity_by_kind[kind],
        int(kind),
    )


def job_profile(job: Job, geometry: PlacementGeometry, model: SpeedModel) -> PlacementProfile:
    return job_profile_of(job_constants(job, model), geometry)


def job_profile_of(constants: tuple[float, float, float, float, int], geometry: PlacementGeometry) -> PlacementProfile:
    """A job with these `job_constants` on a placement of this geometry."""
    c_tp, c_dp, pressure, sensitivity, kind = constants
    return PlacementProfile(geometry=geometry, c_tp=c_tp, c_dp=c_dp, pressure=pressure, sensitivity=sensitivity,
                            kind=kind, min_speed=geometry.min_speed_by_kind[kind])


def placement_profile(cluster: Cluster, job: Job, gpus: np.ndarray, model: SpeedModel) -> PlacementProfile:
    """Profile of `job` on `gpus`."""
    return job_profile(job, placement_geometry(cluster, gpus, job.tp_degree, model), model)


def uplink_demand(cluster: Cluster, profiles: list[PlacementProfile]) -> np.ndarray:
    """(S,) traffic (GB/s) the jobs would put on each switch uplink at full speed."""
    demand = np.zeros(len(cluster.switch_names))
    for p in profiles:
        if len(p.uplinks):
            demand[p.uplinks] += p.uplink_demand_GBps
    return demand


def congestion_shares(cluster: Cluster, demand: np.ndarray) -> np.ndarray:
    """(S,) share of its demand each uplink can carry: min(1, capacity / demand)."""
    cap = cluster.switch_uplink_GBps
    over = demand > cap  # divides only there (demand > 0): no error state to silence, which costs more than the division
    shares = np.ones(len(demand))
    shares[over] = cap[over] / demand[over]
    return shares


def node_pressure(cluster: Cluster, profiles: list[PlacementProfile]) -> np.ndarray:
    """(N,) memory-bandwidth pressure on each node: sum of pressure x GPUs of its jobs."""
    pressure = np.zeros(cluster.num_nodes)
    for p in profiles:
        pressure[p.nodes] += p.pressure * p.gpus_on_node
    return pressure


def interference_factor(cluster: Cluster, p: PlacementProfile, pressure: np.ndarray, model: SpeedModel) -> float:
    """Slowdown from neighbours' memory-bandwidth pressure, worst node of the job."""
    nodes = p.nodes
    if len(nodes) == 1:  # the common case, in plain floats
        n = nodes[0]
        others = (pressure[n] - p.pressure * p.gpus_on_node[0]) / cluster.node_gpus[n]
    else:
        others = float(((pressure[nodes] - p.pressure * p.gpus_on_node) / cluster.node_gpus[nodes]).max())
    return interference_from(others, p.sensitivity, model)


def interference_from(others_pressure_per_gpu: float, sensitivity: float, model: SpeedModel) -> float:
    """Speed factor (0, 1] of a job with `sensitivity` next to that much neighbours' pressure
    (floats or arrays)."""
    larger = np.maximum if isinstance(others_pressure_per_gpu, np.ndarray) else max  # plain floats stay plain
    return 1.0 / (1.0 + model.interference_coeff * sensitivity * larger(others_pressure_per_gpu, 0.0))


# GANGSCHED_RATES_VECTOR=0 makes running_rates run the per-job loop (running_rates_reference) alone.
_RATES_VECTOR = os.environ.get("GANGSCHED_RATES_VECTOR", "1") != "0"
_RATES_VECTOR_MIN_JOBS = 16  # below it the loop is faster (h100-1024gpu, 12 jobs: 45 vs 54 us; 16: 63 vs 58; 72: 295 vs 129)
_GEOMETRY = attrgetter("geometry")


def running_rates(
    cluster: Cluster, profiles: list[PlacementProfile], demand: np.ndarray, pressure: np.ndarray, model: SpeedModel
) -> tuple[np.ndarray, np.ndarray]:
    """Rates and interference factors of every running job (in order), given the uplink
    demand and node pressure of all of them: bit for bit those of `running_rates_reference`.
    From `_RATES_VECTOR_MIN_JOBS` jobs on they are computed for all jobs at once
    (`_running_rates_vector`), which hands the inputs it cannot answer exactly like the loop (a
    zero divisor, a NaN rate) back to the loop."""
    if _RATES_VECTOR and len(profiles) >= _RATES_VECTOR_MIN_JOBS:
        out = _running_rates_vector(cluster, profiles, demand, pressure, model)
        if out is not None:
            return out
    return running_rates_reference(cluster, profiles, demand, pressure, model)


def _running_rates_vector(
    cluster: Cluster, profiles: list[PlacementProfile], demand: np.ndarray, pressure: np.ndarray, model: SpeedModel
) -> tuple[np.ndarray, np.ndarray] | None:
    """`running_rates_reference` for all jobs at once, or None where it could differ. Each job's
    numbers go through the loop's operations in the loop's order, elementwise on float64 arrays
    (the same IEEE results as the scalar operations); `max(a, b)` of Python floats (a unless
    b > a, so max(1.0, nan) is 1.0) is `np.where(b > a, b, a)`; the only reductions are a
    minimum over a job's uplinks and a maximum over its nodes (`reduceat`), whose results do not
    depend on their order. None (the loop answers) for a zero divisor (the loop's Python floats
    raise ZeroDivisionError there, its numpy scalars give inf) and for a NaN rate: where two NaNs
    meet in one operation, which one comes out (its sign and payload) depends on the operand
    order the compiled code picked, in the loop's scalar operations as in numpy's array loops."""
    geoms = list(map(_GEOMETRY, profiles))
    n = len(profiles)
    try:
        table = np.fromiter(chain.from_iterable([(p.min_speed, g.tp_stretch, g.dp_bw_GBps, p.c_tp, p.c_dp, p.pressure, p.sensitivity,
                                                  g.tp_cross_node, len(g.nodes), len(g.uplinks)) for p, g in zip(profiles, geoms)]),
                            np.float64, count=10 * n).reshape(n, 10)
    except (TypeError, ValueError):  # not all numbers: the loop says what is wrong
        return None
    min_speed, tp_stretch, dp_bw, c_tp, c_dp, job_pressure, sensitivity, tp_cross, per_job, up_count = table.T
    per_job = per_job.astype(np.int64)
    with np.errstate(all="ignore"):  # the loop's numpy scalars warn where its Python floats do not: neither
        # interference_factor: neighbours' pressure per GPU on the job's worst node
        nodes = np.concatenate([g.nodes for g in geoms])
        terms = (pressure[nodes] - job_pressure.repeat(per_job) * np.concatenate([g.gpus_on_node for g in geoms])) \
            / cluster.node_gpus[nodes]
        if (per_job != 1).any():  # a job on several nodes: the maximum of its nodes' terms
            if (per_job < 1).any():
                return None
            starts = np.zeros(n, dtype=np.int64)
            np.cumsum(per_job[:-1], out=starts[1:])
            others = np.maximum.reduceat(terms, starts)
        else:
            others = terms
        # interference_from: 1 / (1 + coeff x sensitivity x max(others, 0.0))
        divisor = 1.0 + model.interference_coeff * sensitivity * np.where(0.0 > others, 0.0, others)
        # efficiency_of on geometry.congested(congestion); congestion: the worst share over the
        # job's uplinks, 1.0 without uplinks
        has_up = up_count > 0
        if has_up.any():
            congestion = np.ones(n)
            shares = congestion_shares(cluster, demand)
            counts = up_count[has_up].astype(np.int64)
            starts = np.zeros(len(counts), dtype=np.int64)
            np.cumsum(counts[:-1], out=starts[1:])
            congestion[has_up] = np.minimum.reduceat(shares[np.concatenate([g.uplinks for g in geoms if len(g.uplinks)])], starts)
            tp_congestion = np.where(tp_cross > 0.0, congestion, 1.0)
            dp_now = dp_bw * np.where(has_up, congestion, 1.0)
        else:
            tp_congestion = np.ones(n)
            dp_now = dp_bw * 1.0
        dp_ratio = REFERENCE_NET_PER_GPU_GBPS / np.where(1e-12 > dp_now, 1e-12, dp_now)
        dp = np.where(dp_ratio > 1.0, dp_ratio, 1.0)
        step = (1.0 - c_tp - c_dp) + c_tp * (tp_stretch / tp_congestion) + c_dp * dp
        if not (divisor.all() and tp_congestion.all() and step.all()):  # a zero divisor
            return None
        interference = 1.0 / divisor
        rates = min_speed * (1.0 / step) * interference
    if np.isnan(rates).any():  # which NaN (sign, payload) comes out where two meet is the compiler's choice
        return None
    return rates, interference


def running_rates_reference(
    cluster: Cluster, profiles: list[PlacementProfile], demand: np.ndarray, pressure: np.ndarray, model: SpeedModel
) -> tuple[np.ndarray, np.ndarray]:
    """`running_rates` one job at a time: the reference its vectorised path is held to."""
    shares = congestion_shares(cluster, demand)
    rates = np.empty(len(profiles))
    interference = np.empty(len(profiles))
    for i, p in enumerate(profiles):
        congestion = float(shares[p.uplinks].min()) if len(p.uplinks) else 1.0
        interference[i] = interference_factor(cluster, p, pressure, model)
        rates[i] = p.min_speed * p.efficiency(congestion) * interference[i]
    return rates, interference


def rates_of(cluster: Cluster, profiles: list[PlacementProfile], model: SpeedModel) -> np.ndarray:
    """Rates of a set of jobs running together (convenience for analysis and tests)."""
    return running_rates(cluster, profiles, uplink_demand(cluster, profiles), node_pressure(cluster, profiles), model)[0]
