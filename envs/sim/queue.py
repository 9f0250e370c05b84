"""The simulator's job queue: which jobs wait, in which order, and what they ask for.

`JobQueue` is the bookkeeping of the queued jobs of one `Simulator`, nothing else: the simulator
decides when a job enters (it arrives, or its checkpoint after a preemption ends) and leaves (it
starts or is reserved) and calls `push` and `remove`; the queue keeps up to date with them

* the queued ids in (re)arrival order, FIFO (`ids[:length]`; a job is queued once at most),
* the same jobs sorted by their remaining estimate as of entering the queue, ties in queue order
  (their ids in that order, `sorted_ids[:length]`),
* each job's queue rank (`enqueue_seq`) and remaining estimate when it entered
  (`queued_remaining_s`), which stay fixed while it waits,
* the GPUs the queued jobs ask for (`queued_gpus`) and how many are of the high priority class
  (`queued_high_priority`),
* how many queued jobs have each shape (`per_shape`, when the caller gives each job's shape id:
  the simulator's compiled event loop tests feasibility per shape, not per queued job).

The caller computes the remaining estimate (envs.decision.state.remaining_estimate_s); the queue only
files it. The arrays are changed in place and never replaced, so views taken of them stay live.
"""

from __future__ import annotations

import bisect

import numpy as np

from envs.core import jit as _jit
from envs.core import kernels as _kernels
from envs.jobs import PRIORITY_HIGH


class JobQueue:
    """The queued jobs of a workload of `len(gpus)` jobs (ids 0..n-1), kept as they come and go."""

    def __init__(self, gpus: list[int], priority: list[int], shape: np.ndarray | None = None, num_shapes: int = 0):
        n = len(gpus)
        self._gpus, self._priority = gpus, priority  # (n,) per job as Python ints: GPUs asked for, priority class
        self.shape = np.zeros(n, dtype=np.int64) if shape is None else shape  # (n,) each job's shape id (never changed in place)
        self.per_shape = np.zeros(max(num_shapes, 1), dtype=np.int64)  # queued jobs of each shape
        self.ids = np.empty(max(n, 1), dtype=np.int64)  # queued job ids in (re)arrival order in [:length]
        self.length = 0  # jobs queued
        self.queued_remaining_s = np.zeros(n)  # (n,) s, remaining estimate as of entering the queue; fixed while queued
        self.enqueue_seq = np.zeros(n, dtype=np.int64)  # (n,) order of (re)entering the queue: FIFO rank
        self._enqueued = 0  # ranks handed out so far
        self.sorted_ids = np.empty(max(n, 1), dtype=np.int64)  # the queued ids by (queued_remaining_s, enqueue_seq), in [:length]
        self.queued_gpus = 0  # GPUs the queued jobs ask for
        self.queued_high_priority = 0  # queued jobs of the high priority class

    def copy(self, gpus: list[int] | None = None, priority: list[int] | None = None, shape: np.ndarray | None = None,
             num_shapes: int = 0) -> JobQueue:
        """An independent copy (for `Simulator.fork`): the same queue, nothing mutable shared.
        With `gpus`, `priority` and `shape` (per job, as in `__init__`) it serves a workload of
        `len(gpus)` jobs instead, with `num_shapes` shapes: the queued jobs and every job's fields
        kept in the first min(n, new n) rows must be the same jobs (the simulator replaces only
        jobs that have not arrived, which were never queued and whose rows are still zero)."""
        q = JobQueue.__new__(JobQueue)
        if gpus is None:
            q.shape = self.shape  # never changed in place
            q.per_shape = self.per_shape.copy()
        else:
            q.shape = shape
            q.per_shape = np.zeros(max(num_shapes, len(self.per_shape)), dtype=np.int64)
            q.per_shape[: len(self.per_shape)] = self.per_shape
        if gpus is None:
            q._gpus, q._priority = self._gpus.copy(), self._priority.copy()
            q.ids = self.ids.copy()
            q.sorted_ids = self.sorted_ids.copy()
            q.queued_remaining_s = self.queued_remaining_s.copy()
            q.enqueue_seq = self.enqueue_seq.copy()
        else:
            n, keep = len(gpus), min(len(gpus), len(self._gpus))
            q._gpus, q._priority = gpus, priority
            q.ids = np.empty(max(n, 1), dtype=np.int64)
            q.ids[: self.length] = self.ids[: self.length]
            q.sorted_ids = np.empty(max(n, 1), dtype=np.int64)
            q.sorted_ids[: self.length] = self.sorted_ids[: self.length]
            q.queued_remaining_s = np.zeros(n)
            q.queued_remaining_s[:keep] = self.queued_remaining_s[:keep]
            q.enqueue_seq = np.zeros(n, dtype=np.int64)
            q.enqueue_seq[:keep] = self.enqueue_seq[:keep]
        q.length = self.length
        q._enqueued = self._enqueued
        q.queued_gpus = self.queued_gpus
        q.queued_high_priority = self.queued_high_priority
        return q

    def jobs(self) -> list[int]:
        """Queued job ids in (re)arrival order, as a list."""
        return self.ids[: self.length].tolist()

    def by_remaining(self) -> list[tuple[float, int, int]]:
        """The queue sorted as `sorted_ids`, as (remaining s as of entering, enqueue rank, job id)."""
        ids = self.sorted_ids[: self.length]
        return list(zip(self.queued_remaining_s[ids].tolist(), self.enqueue_seq[ids].tolist(), ids.tolist()))

    def push(self, job_id: int, remaining_s: float) -> None:
        """`job_id` (not queued) enters at the back, with `remaining_s` its remaining estimate now."""
        length, seq = self.length, self._enqueued
        self.ids[length] = job_id
        self.queued_remaining_s[job_id] = remaining_s
        self.enqueue_seq[job_id] = seq
        sorted_ids = self.sorted_ids
        if _jit.ENABLED:
            at = _kernels.sorted_insert_at(sorted_ids, length, remaining_s, self.queued_remaining_s)
        else:  # its rank is the largest yet, so it goes after every job of the same estimate
            at = bisect.bisect_right(sorted_ids, remaining_s, 0, length, key=self.queued_remaining_s.__getitem__)
        if at < length:
            sorted_ids[at + 1 : length + 1] = sorted_ids[at:length]  # numpy copies overlapping slices safely
        sorted_ids[at] = job_id
        self.length = length + 1
        self.queued_gpus += self._gpus[job_id]
        self.queued_high_priority += self._priority[job_id] == PRIORITY_HIGH
        self.per_shape[self.shape[job_id]] += 1
        self._enqueued = seq + 1

    def remove(self, job_id: int) -> None:
        """`job_id` (queued) leaves; the jobs behind it move up."""
        length = self.length
        ids, sorted_ids = self.ids, self.sorted_ids
        if _jit.ENABLED:
            at, i = divmod(_kernels.queue_positions(ids, sorted_ids, length, job_id, self.queued_remaining_s,
                                                    self.enqueue_seq), length)
        else:  # its positions (it is queued)
            at, i = int((sorted_ids[:length] == job_id).argmax()), int((ids[:length] == job_id).argmax())
        sorted_ids[at : length - 1] = sorted_ids[at + 1 : length]  # numpy copies overlapping slices safely
        ids[i : length - 1] = ids[i + 1 : length]
        self.length = length - 1
        self.queued_gpus -= self._gpus[job_id]
        self.queued_high_priority -= self._priority[job_id] == PRIORITY_HIGH
        self.per_shape[self.shape[job_id]] -= 1
