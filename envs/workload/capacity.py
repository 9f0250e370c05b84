"""How a job list weighs on a cluster: capacity in reference GPUs, offered load, ever-fits.

Shared by the synthetic generator (envs.workload.generator, which scales its arrivals to a target load)
and the trace replay (envs.workload.traces, which drops jobs that can never fit and can rescale
arrivals to a target load); it imports neither, so they need not import each other.
"""

from __future__ import annotations

from envs.cluster.topology import Cluster
from envs.decision.placement import segment_total, usable_per_node
from envs.jobs import Job


def capacity_ref_gpus(cluster: Cluster) -> float:
    """Cluster capacity in reference-GPU equivalents (sum of relative speeds)."""
    return float(cluster.gpu_speed.sum())


def offered_load(jobs: list[Job], cluster: Cluster) -> float:
    """Offered load: GPU-work per second of arrivals over the cluster's capacity.

    sum(gpus * work_s) / (arrival span * capacity), with the span stretched by n/(n-1) so a
    Poisson stream's expected load is what this returns.
    """
    if len(jobs) < 2:
        return 0.0
    arrivals = [j.arrival_s for j in jobs]
    span = (max(arrivals) - min(arrivals)) * len(jobs) / (len(jobs) - 1)
    if span <= 0:
        return float("inf")
    return sum(j.gpus * j.work_s for j in jobs) / (span * capacity_ref_gpus(cluster))


def job_fits_cluster(job: Job, cluster: Cluster) -> bool:
    """Whether the job could ever run on the empty cluster (enough GPUs with enough memory; for
    a job asking for segments, enough whole segments inside blocks, `segment_capacity`)."""
    eligible = cluster.gpu_memory_gb >= job.mem_per_gpu_gb
    if job.segment_gpus:
        return segment_capacity(cluster, job.tp_degree, job.segment_gpus, job.mem_per_gpu_gb) >= job.gpus
    return int(eligible.sum()) >= job.gpus


def segment_capacity(cluster: Cluster, tp_degree: int, segment_gpus: int, mem_per_gpu_gb: float) -> int:
    """GPUs of the empty cluster usable in whole segments of `segment_gpus` (each inside one
    block, in whole TP groups of `tp_degree`) by a job needing `mem_per_gpu_gb` per GPU."""
    free = [g if m >= mem_per_gpu_gb else 0 for g, m in zip(cluster.node_lists.gpus, cluster.node_lists.memory_gb)]
    return segment_total(cluster, usable_per_node(cluster, free, tp_degree), segment_gpus)
