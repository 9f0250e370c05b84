"""Slurm's scheduler on a block topology: EASY backfill with the topology/block plugin's rule that
a job never straddles a block of the level its size asks for.

Slurm's block plugin (`eval_nodes_block` in `src/plugins/topology/block/eval_nodes_block.c`)
groups the *base blocks* (here: the NVLink domains, GB200 NVL72 racks; on a cluster without them,
the leaf switches' nodes, as `envs.cluster.topology_import --blocks-as-leaves` reads a block file) into
levels of 2^k consecutive base blocks. A job's level is fixed by its node count alone: the
smallest k with 2^k base blocks holding that many nodes; the job is placed inside one block of
that level or waits, even when the cluster could hold it across blocks. A job larger than every
level may span the cluster. Inside its block Slurm takes the best fit; here the candidates'
placement rules offer where (the topology rule first: the tightest NVLink domain, then the
tightest switch subtree, which on the shipped block-shaped clusters are the block levels; then
binpack, then spread), and the first that stays inside one block of the job's level is taken.
Where Slurm breaks ties towards the highest block index, the rules break them towards the
lowest. TP groups larger than a tray sit on whole trays of one base block, which every
placement rule guarantees.

A job asking for segments (`Job.segment_gpus`, Slurm's `--segment`) is placed as Slurm places
one: segment after segment, each inside one base block, and no block of a higher level is asked
of the job as a whole (Slurm's documentation: "no requirement would be placed on all segments
for a job needing to be placed within the same higher-level block"); each segment goes to the
smallest fitting base block (`eval_nodes_block` evaluates each segment as a job of its size and
`_choose_best_bblock` takes the fitting base block with the fewest available nodes). That is the
binpack rule's placement of segments (`envs.decision.placement._smallest_fitting`), taken first; then the
topology rule's, then spread's (each keeps every segment inside one block).
"""

from __future__ import annotations

import math

import numpy as np

from envs.cluster.topology import Cluster
from envs.decision.candidates import CandidateSet
from envs.decision.placement import BINPACK, SPREAD, TOPOLOGY
from envs.decision.state import ClusterState

from baselines.easy import EasyBackfill

_RULE_ORDER = (TOPOLOGY, BINPACK, SPREAD)
_SEGMENT_RULE_ORDER = (BINPACK, TOPOLOGY, SPREAD)  # binpack places segments in the smallest fitting blocks first


def blocks_of(c: Cluster) -> tuple[np.ndarray, int, int, int]:
    """(each node's base block, the base block size in nodes (the smallest), the number of base
    blocks, the GPUs of the largest node): base blocks are the NVLink domains in order, then one
    per leaf switch (in switch order) for the nodes outside them."""
    block = c.node_block
    sizes = np.bincount(block)
    return block, int(sizes[sizes > 0].min()), c.num_domains + len(np.unique(c.node_leaf[c.node_domain < 0])), int(c.node_gpus.max())


def block_level(c: Cluster, gpus: int) -> int | None:
    """The block level (2^level consecutive base blocks) a gang of `gpus` GPUs asks for; None when
    no level short of the whole cluster holds its nodes (it may then span the cluster)."""
    block, base, count, per_node = blocks_of(c)
    nodes = -(-gpus // per_node)
    level = max(0, math.ceil(math.log2(-(-nodes // base))))
    return None if 2 ** level >= count else level


def inside_one_block(c: Cluster, gpus: np.ndarray, level: int | None) -> bool:
    """All of `gpus` are inside one block of `level` (None: anywhere)."""
    if level is None:
        return True
    block = blocks_of(c)[0][c.gpu_node[gpus]] >> level
    return bool((block == block[0]).all())


class SlurmBlock(EasyBackfill):
    """EASY backfill (as `easy`) where a job starts only on a placement inside one block of the
    level its size asks for, or, asking for segments, with each segment inside one base block,
    the smallest fitting first (Slurm's topology/block); it waits otherwise."""

    name = "block"

    def placement(self, state: ClusterState, cset: CandidateSet, slot: int) -> int | None:
        c = state.cluster
        j = cset.window[slot]
        if state.segment_gpus is not None and state.segment_of(j):  # each segment inside one base block, whatever the level
            for rule in _SEGMENT_RULE_ORDER:  # every rule's placement keeps each segment inside one block
                i = cset.index(slot, rule)
                if cset.mask[i]:
                    return i
            return None
        level = block_level(c, int(state.num_gpus[j]))
        for rule in _RULE_ORDER:
            i = cset.index(slot, rule)
            if cset.mask[i] and inside_one_block(c, cset.candidates[i].gpus, level):
                return i
        return None
