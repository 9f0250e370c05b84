// What a set of GPUs and a TP degree fix for any job placed there (envs.cluster.speed.placement_geometry).
#pragma once

#include <cstdint>
#include <vector>

#include "cluster.hpp"

namespace gangsched {

struct SpeedConstants {  // envs.cluster.speed.SpeedModel's fields the geometry reads
    double cross_socket_factor = 0.5;
    double cross_tier_efficiency = 0.85;
};

struct Geometry {
    double min_speed = 0.0;
    std::vector<double> min_speed_by_kind;  // (K)
    std::vector<int64_t> nodes;             // ascending
    std::vector<int64_t> gpus_on_node;
    double tp_stretch = 1.0;
    bool tp_cross_node = false;
    double dp_bw_GBps = 0.0;
    int64_t tier = 0;
    std::vector<int64_t> uplinks;     // switches whose uplink the placement crosses, ascending
    std::vector<double> uplink_demand_GBps;  // its traffic on each at full speed, summed in node order
};

// `gpus`: distinct global ids, consecutive runs of `tp` form the TP groups.
void placement_geometry(const Cluster& c, const std::vector<int64_t>& gpus, int64_t tp, const SpeedConstants& model,
                        Geometry& out);

}  // namespace gangsched
