// The cluster as the core sees it: the per-node, per-GPU and per-switch arrays of
// envs.cluster.topology.Cluster that the placement rules read, fixed for the cluster's life.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gangsched {

struct Cluster {
    int64_t num_nodes = 0;
    int64_t num_gpus = 0;
    int64_t num_switches = 0;
    int64_t num_types = 0;
    int64_t max_level = 0;                // the highest switch level (1 = leaf); 0 without switches
    std::vector<int64_t> node_type;       // (N) GPU type index
    std::vector<double> node_speed;       // (N) relative speed of the node's GPU type
    std::vector<double> node_memory_gb;   // (N) memory of each of the node's GPUs
    std::vector<int64_t> node_first_gpu;  // (N) global id of the node's GPU 0
    std::vector<int64_t> node_gpus;       // (N)
    std::vector<int64_t> gpu_socket;      // (G) NUMA socket inside its node
    std::vector<int64_t> switch_level;    // (S) 1 = leaf
    std::vector<uint8_t> under;           // (N x S) row-major: node n is inside switch s's subtree
    int64_t num_domains = 0;
    std::vector<int64_t> node_domain;     // (N) the multi-node NVLink domain holding the node, -1 for none
    std::vector<int64_t> domain_tray;     // (D) the GPUs of each node of the domain when all alike, else 0 (set_derived)
    std::vector<std::vector<int64_t>> domain_nodes;  // (D) the domain's nodes in node order (set_derived)
    std::vector<std::vector<int64_t>> level_switches;  // (max_level + 1) the switches of each level, by id (set_derived)
    std::vector<std::vector<int64_t>> switch_nodes;    // (S) the nodes under each switch, in node order (set_derived)
    std::vector<int64_t> node_block;      // (N) envs.cluster.topology.Cluster.node_block: the block holding a segment whole
    std::vector<std::vector<int64_t>> block_nodes;     // each block's nodes in node order (set_derived)
    // The speed model's view (envs/cluster/speed.py).
    int64_t num_kinds = 0;
    bool speed_varies_by_kind = false;
    int64_t intra_nvswitch = 0, intra_nvlink_pairs = 1;  // envs.cluster.topology's INTRA_* codes
    double reference_nvlink_GBps = 900.0;                 // envs.cluster.topology.REFERENCE_NVLINK_GBPS
    std::vector<int64_t> node_intra;      // (N) INTRA_* code
    std::vector<double> node_nvlink_GBps; // (N)
    std::vector<double> node_pcie_GBps;   // (N)
    std::vector<double> node_net_GBps;    // (N) network bandwidth per GPU
    std::vector<int8_t> node_tier;        // (N x N) row-major: the tier joining two nodes
    std::vector<double> switch_uplink_GBps;  // (S) inf for top-level switches
    std::vector<int64_t> gpu_node;        // (G)
    std::vector<int64_t> gpu_local;       // (G) index inside the node
    std::vector<double> gpu_speed;        // (G) generic relative speed
    std::vector<double> gpu_speed_by_kind;  // (G x K) row-major

    bool node_under(int64_t n, int64_t s) const { return under[static_cast<size_t>(n * num_switches + s)] != 0; }
    // All of `nodes` (at least two) in one NVLink domain.
    template <typename It>
    bool one_domain(It first, It last) const {
        const int64_t d = node_domain[static_cast<size_t>(*first)];
        if (d < 0) return false;
        for (It i = first; i != last; ++i)
            if (node_domain[static_cast<size_t>(*i)] != d) return false;
        return true;
    }

    // Checks the arrays' sizes and ranges; throws std::invalid_argument naming the field.
    void validate() const;
    // Fills domain_tray and domain_nodes from node_domain and node_gpus (after validate).
    // The tables derived from the fields above (domain_tray, domain_nodes, level_switches,
    // switch_nodes): called once the fields are set.
    void set_derived();
    // envs.cluster.topology.Cluster.spanning_domains: domain d places TP groups of `tp` on whole trays
    // (its nodes' GPU count is one value, below tp, dividing it).
    bool spanning(int64_t d, int64_t tp) const {
        const int64_t g = domain_tray[static_cast<size_t>(d)];
        return g > 0 && g < tp && tp % g == 0;
    }
    bool spans(int64_t tp) const {
        for (int64_t d = 0; d < num_domains; ++d)
            if (spanning(d, tp)) return true;
        return false;
    }
};

// Thrown for input that breaks a documented contract; the message names the argument.
struct BadInput : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

}  // namespace gangsched
