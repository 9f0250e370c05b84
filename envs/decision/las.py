"""Tiresias' discretised two-dimensional least-attained-service queues (2D-LAS; Gu et al., NSDI 2019).

A job's service is its attained GPU-service, GPUs x seconds run (`ClusterState.attained_gpu_s`):
both of 2D-LAS's dimensions, space (gang size) and time, in one number. It is discretised into
queues, queue 0 the highest: a job is in queue k when its attained service has reached k of the
thresholds of `LAS_QUEUE_THRESHOLDS_GPU_S`. Every job enters in queue 0 and moves down as it
runs; a preempted job keeps its attained service, so it comes back in the queue it left (a job
just restored is never a victim of the job that displaced it for being "new" again).

Thresholds. Tiresias found two or three queues enough and tuned the thresholds per cluster from
its job mix; ours are set for this project's workloads (configs/workloads/llm-mix*.yaml):
inference and batch jobs of 1-4 GPUs x 0.5-1 h (0.5-4 GPU-h), fine-tunes of about 4 GPUs x
1.5 h (a few GPU-h), pre-training gangs of 8-32 GPUs x hours (tens of GPU-h and more). With
thresholds at 1 and 16 GPU-h, queue 0 holds every new job and the short ones, queue 1 the
fine-tunes and serving replicas that have run a while, queue 2 the pre-training gangs (a 32-GPU
gang gets there after 30 minutes, an 8-GPU one after 2 hours). Another cluster or job mix
should re-tune them, as the paper did.

Starvation. Tiresias' PROMOTEKNOB: a waiting job whose wait exceeds a multiple of its execution
time is promoted to the highest queue. Here, from decision-state fields only: a queued job whose
current wait (now - queued_since_s) is at least `STARVATION_FACTOR` times its executed time
(attained_gpu_s / num_gpus, wall seconds run) is in queue 0 while it waits. A job that never ran
is in queue 0 anyway. The promotion ends when the job starts (a running job's queue is its
attained service's), so a promoted job that runs again does not keep queue 0; its next wait
restarts the count against its (longer) executed time, so a job is starved at most about
STARVATION_FACTOR times as long as it has run.

Queues change with time (service accrues, waits grow) but are not events: they are read afresh
at each decision point. One implementation, used by the `preempt-las` placement rule
(envs.decision.placement), its validity (envs.decision.window) and the `tiresias` baseline.
"""

from __future__ import annotations

import numpy as np

from envs.decision.state import ClusterState

LAS_QUEUE_THRESHOLDS_GPU_S = (1 * 3600.0, 16 * 3600.0)  # attained GPU-s at which a job moves to the next queue
NUM_LAS_QUEUES = len(LAS_QUEUE_THRESHOLDS_GPU_S) + 1
STARVATION_FACTOR = 4.0  # a queued job that has waited this many times its executed time is promoted to queue 0
LAS_THRESHOLDS = np.array(LAS_QUEUE_THRESHOLDS_GPU_S)  # the same, as an array (searchsorted, the kernels)


def las_queue(state: ClusterState, job_ids, queued: bool = True) -> np.ndarray:
    """(n,) int64 the 2D-LAS queue (0 highest) of jobs `job_ids` (indices of the state): their
    attained GPU-service discretised by LAS_QUEUE_THRESHOLDS_GPU_S (a job at a threshold is in
    the lower queue). With `queued` (the jobs are waiting in the queue), the starvation guard
    applies: a job whose current wait is at least STARVATION_FACTOR x its executed time is in
    queue 0. Running jobs (victims) take `queued=False`."""
    ids = np.asarray(job_ids, dtype=np.int64)
    attained = state.attained_gpu_s[ids]
    queue = np.searchsorted(LAS_THRESHOLDS, attained, side="right")
    if queued and len(ids):
        executed_s = attained / state.num_gpus[ids]
        waited_s = state.now - state.queued_since_s[ids]
        queue[waited_s >= STARVATION_FACTOR * executed_s] = 0
    return queue
