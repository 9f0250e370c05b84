// The placement rules over per-node counts of available GPUs (envs/decision/placement.py states them):
// which nodes a gang takes how many GPUs on, and which GPUs inside a node.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cluster.hpp"

namespace gangsched {

enum Rule : int64_t { BINPACK = 0, SPREAD = 1, TOPOLOGY = 2 };  // anything else places as TOPOLOGY

// Per node, how many GPUs the gang takes, in the order the reference's dict holds them.
using Take = std::vector<std::pair<int64_t, int64_t>>;

// The rule's per-node counts for a gang of `need` GPUs in TP groups of `tp` over the available
// GPUs `free` (N counts, memory eligibility already applied); with `segment` > 0, in segments of
// that many GPUs, each inside one block (envs.decision.placement._node_take_segments). False: no placement.
bool node_take(const Cluster& c, const std::vector<int64_t>& free, int64_t need, int64_t tp, int64_t rule, Take& take,
               int64_t segment = 0);
// node_take's checks of a gang: BadInput naming `gpus`, `tp` or `segment`.
void check_gang(int64_t need, int64_t tp, int64_t segment);
// node_take for counts the caller has checked (each within 0..its node's GPUs): the same take,
// without the pass that checks them.
bool node_take_checked(const Cluster& c, const std::vector<int64_t>& free, int64_t need, int64_t tp, int64_t rule, Take& take,
                       int64_t segment = 0);

// envs.decision.placement.segment_total: GPUs usable in whole segments of `segment`, each inside one
// block, for per-node usable GPUs (usable_per_node).
int64_t segment_total(const Cluster& c, const std::vector<int64_t>& usable, int64_t segment);

// envs.decision.placement.usable_per_node: per node, its available GPUs (`free`) usable in whole TP
// groups of `tp`; in a domain whose groups span trays, its first fully available trays in whole
// groups of trays.
void usable_per_node(const Cluster& c, const std::vector<int64_t>& free, int64_t tp, std::vector<int64_t>& out);

// `count` available GPUs of `node` (`avail`: the node's GPUs, nonzero = available), inside one
// NUMA socket when they fit in one (the best-fit socket), else from the fullest sockets first,
// ascending ids. Appends to `out`.
void pick_in_node(const Cluster& c, int64_t node, int64_t count, const uint8_t* avail, std::vector<int64_t>& out);

}  // namespace gangsched
