"""The simulator's allocation ledger: who holds or is promised each GPU, and the counts derived.

`AllocationLedger` records GPU ownership and reservations for one `Simulator` and keeps up to date
with every change the counts that schedulers read:

* `gpu_owner`, `gpu_reserved`: the job holding each GPU and the job it is promised to (-1: none),
* `free_mask`, `node_free`, `num_free`: GPUs neither owned nor reserved, per GPU, per node, total,
* `node_owned`: GPUs held per node,
* `fragmented`: free GPUs on nodes that cannot host a whole gang alone (Cluster.node_whole_gang),
* `node_preemptible`: GPUs held by running preemptible jobs per node and priority class,
* `alloc_version`: bumped on every change of ownership or reservations, for callers' caches.

Contract with readers: `gpu_owner`, `gpu_reserved` and `node_preemptible` are changed in place
and never replaced (views of them stay live); `node_owned` and `node_free` are replaced on every
change, never changed in place (a caller may hold the old ones), and `free_mask` is replaced by a
recount: re-read those after a change. The simulator decides what changes hands (claim, release,
reserve) and tells the power meter when `node_owned` has changed; the ledger knows nothing of
jobs beyond their ids and the GPUs they have on each node.
"""

from __future__ import annotations

import numpy as np

from envs.cluster.topology import Cluster
from envs.decision.state import fragmented_change
from envs.jobs import PRIORITY_NAMES


class AllocationLedger:
    """GPU ownership and reservations on `cluster`, and the per-node counts derived from them."""

    def __init__(self, cluster: Cluster):
        c = self.cluster = cluster
        self.gpu_owner = np.full(c.num_gpus, -1, dtype=np.int64)  # (G,) job holding the GPU, -1 none
        self.gpu_reserved = np.full(c.num_gpus, -1, dtype=np.int64)  # (G,) job it is promised to, -1 none
        # Per-node counts are replaced, never changed in place (callers may hold the old ones).
        self.node_free = c.node_gpus.copy()  # (N,) GPUs neither owned nor reserved
        self.node_owned = np.zeros(c.num_nodes, dtype=np.int64)  # (N,) GPUs held
        # Kept up to date with node_free (see move; recount recounts them all).
        self.free_mask = np.ones(c.num_gpus, dtype=bool)  # (G,) neither owned nor reserved
        self.num_free = c.num_gpus  # GPUs neither owned nor reserved
        self.fragmented = 0  # fragmented_free_gpus(): none while every GPU is free
        # GPUs held by running preemptible jobs, per node and priority: what preemption could free.
        self.node_preemptible = np.zeros((c.num_nodes, max(PRIORITY_NAMES) + 1), dtype=np.int64)  # (N, priorities)
        self.alloc_version = 0  # bumped when GPU ownership or reservations change

    def copy(self) -> AllocationLedger:
        """An independent copy (for `Simulator.fork`): the cluster is shared, every array copied."""
        led = AllocationLedger.__new__(AllocationLedger)
        led.cluster = self.cluster
        led.gpu_owner = self.gpu_owner.copy()
        led.gpu_reserved = self.gpu_reserved.copy()
        led.node_free = self.node_free.copy()
        led.node_owned = self.node_owned.copy()
        led.free_mask = self.free_mask.copy()
        led.num_free = self.num_free
        led.fragmented = self.fragmented
        led.node_preemptible = self.node_preemptible.copy()
        led.alloc_version = self.alloc_version
        return led

    @property
    def allocated_gpus(self) -> int:
        """GPUs owned or reserved."""
        return self.cluster.num_gpus - self.num_free

    def free_gpu_mask(self) -> np.ndarray:
        """(G,) GPUs neither owned nor reserved (a copy: callers may change it)."""
        return self.free_mask.copy()

    def fragmented_free_gpus(self, node_free: np.ndarray | None = None) -> int:
        """Free GPUs on nodes that cannot host an 8-GPU gang (a whole node, if smaller) alone, now
        (a kept count) or with `node_free` GPUs free per node."""
        if node_free is None:
            return self.fragmented
        return int(node_free[node_free < self.cluster.node_whole_gang].sum())

    def claim(self, job_id: int, gpus: np.ndarray, nodes: list[int], counts: list[int], reserved: bool) -> None:
        """`job_id` takes `gpus` (`counts[i]` of them on node `nodes[i]`): free ones, or with
        `reserved` the ones reserved for it."""
        self.gpu_owner[gpus] = job_id
        self.gpu_reserved[gpus] = -1
        self.free_mask[gpus] = False
        self.move(nodes, counts, owned=1, free=0 if reserved else -1)

    def release(self, gpus: np.ndarray, nodes: list[int], counts: list[int], recount: bool) -> None:
        """The job holding `gpus` lets them go. With `recount` (some may be promised to a
        reserved job, which keeps them out of the free counts) the counts are recounted whole."""
        self.gpu_owner[gpus] = -1
        if recount:
            self.recount()
        else:
            self.free_mask[gpus] = True
            self.move(nodes, counts, owned=-1, free=1)

    def reserve(self, job_id: int, gpus: np.ndarray) -> None:
        """Promise `gpus` to `job_id` (some may still be held by its victims)."""
        self.gpu_reserved[gpus] = job_id
        self.recount()

    def move(self, nodes: list[int], counts: list[int], owned: int, free: int) -> None:
        """A job's GPUs change hands: on each of its nodes the owned count changes by `owned`
        and the free count by `free` (+1, -1 or 0) times its GPUs there. Updates the derived
        counts (free GPUs, fragmented free GPUs) with them."""
        self.alloc_version += 1
        node_owned = self.node_owned.copy()
        node_free = self.node_free.copy()
        whole_gang = self.cluster.node_lists.whole_gang
        for n, k in zip(nodes, counts):
            if owned:
                node_owned[n] += owned * k
            if free:
                was = int(node_free[n])
                node_free[n] = was + free * k
                self.num_free += free * k
                self.fragmented += fragmented_change(was, was + free * k, whole_gang[n])
        self.node_owned, self.node_free = node_owned, node_free

    def recount(self) -> None:
        """Per-node owned and free GPU counts, and everything derived from them, recounted
        whole from GPU ownership and reservations (after preemptions: the rare case)."""
        self.alloc_version += 1
        first = self.cluster.node_first_gpu
        free = (self.gpu_owner < 0) & (self.gpu_reserved < 0)
        self.free_mask = free
        self.node_owned = np.add.reduceat((self.gpu_owner >= 0).view(np.int8), first).astype(np.int64)
        self.node_free = np.add.reduceat(free.view(np.int8), first).astype(np.int64)
        self.num_free = int(self.node_free.sum())
        self.fragmented = self.fragmented_free_gpus(self.node_free)

    def count_preemptible(self, nodes: list[int], counts: list[int], priority: int, sign: int) -> None:
        """A running preemptible job of class `priority` with `counts[i]` GPUs on node `nodes[i]`
        starts (+1) or stops (-1) counting as what preemption could free."""
        node_preemptible = self.node_preemptible
        for n, k in zip(nodes, counts):
            node_preemptible[n, priority] += sign * k
