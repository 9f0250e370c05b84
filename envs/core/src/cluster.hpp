// The cluster as the core sees it: the per-node, per-GPU and per-switch arrays of
// envs.topology.Cluster that the placement rules read, fixed for the cluster's life.
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
    std::vector<int64_t> node_first_gpu;  // (N) global id of the node's GPU 0
    std::vector<int64_t> node_gpus;       // (N)
    std::vector<int64_t> gpu_socket;      // (G) NUMA socket inside its node
    std::vector<int64_t> switch_level;    // (S) 1 = leaf
    std::vector<uint8_t> under;           // (N x S) row-major: node n is inside switch s's subtree

    bool node_under(int64_t n, int64_t s) const { return under[static_cast<size_t>(n * num_switches + s)] != 0; }

    // Checks the arrays' sizes and ranges; throws std::invalid_argument naming the field.
    void validate() const;
};

// Thrown for input that breaks a documented contract; the message names the argument.
struct BadInput : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

}  // namespace gangsched
