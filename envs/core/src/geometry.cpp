#include "geometry.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gangsched {

namespace {

// envs.cluster.speed._group_tp_bandwidth: the bottleneck bandwidth of one TP group's links, and whether
// it crosses nodes.
double group_tp_bandwidth(const Cluster& c, const int64_t* g, int64_t size, const SpeedConstants& model, bool& cross) {
    const int64_t n0 = c.gpu_node[static_cast<size_t>(g[0])];
    bool spans = false;
    for (int64_t i = 1; i < size; ++i) spans |= c.gpu_node[static_cast<size_t>(g[i])] != n0;
    if (spans) {
        thread_local std::vector<int64_t> nodes;  // scratch
        nodes.resize(static_cast<size_t>(size));
        for (int64_t i = 0; i < size; ++i) nodes[static_cast<size_t>(i)] = c.gpu_node[static_cast<size_t>(g[i])];
        const bool nvlink = c.one_domain(nodes.begin(), nodes.end());  // one NVLink domain: NVLink, not the network
        const std::vector<double>& link = nvlink ? c.node_nvlink_GBps : c.node_net_GBps;
        double bw = std::numeric_limits<double>::infinity();
        for (int64_t n : nodes) bw = std::min(bw, link[static_cast<size_t>(n)]);
        cross = !nvlink;
        return bw;
    }
    cross = false;
    const auto n = static_cast<size_t>(n0);
    const int64_t intra = c.node_intra[n];
    if (intra == c.intra_nvswitch) return c.node_nvlink_GBps[n];
    if (intra == c.intra_nvlink_pairs && size == 2) {
        const int64_t a = c.gpu_local[static_cast<size_t>(g[0])], b = c.gpu_local[static_cast<size_t>(g[1])];
        if (std::min(a, b) / 2 == std::max(a, b) / 2) return c.node_nvlink_GBps[n];
    }
    const double bw = c.node_pcie_GBps[n];
    const int64_t s0 = c.gpu_socket[static_cast<size_t>(g[0])];
    for (int64_t i = 1; i < size; ++i)
        if (c.gpu_socket[static_cast<size_t>(g[i])] != s0) return bw * model.cross_socket_factor;
    return bw;
}

}  // namespace

void placement_geometry(const Cluster& c, const std::vector<int64_t>& gpus, int64_t tp, const SpeedConstants& model,
                        Geometry& out) {
    const auto size = static_cast<int64_t>(gpus.size());
    if (size < 1) throw BadInput("gpus: a placement needs at least one GPU");
    if (tp < 1 || size % tp != 0) throw BadInput("tp_degree: the GPUs must form whole TP groups");
    for (int64_t g : gpus)
        if (g < 0 || g >= c.num_gpus) throw BadInput("gpus: a GPU id out of range");
    // out = Geometry(), keeping its buffers
    out.min_speed = 0.0;
    out.min_speed_by_kind.clear();
    out.nodes.clear();
    out.gpus_on_node.clear();
    out.tp_stretch = 1.0;
    out.tp_cross_node = false;
    out.dp_bw_GBps = 0.0;
    out.tier = 0;
    out.uplinks.clear();
    out.uplink_demand_GBps.clear();
    // The nodes used, ascending, and the GPUs on each.
    const int64_t n0 = c.gpu_node[static_cast<size_t>(gpus[0])];
    bool one_node = true;
    for (int64_t g : gpus) one_node &= c.gpu_node[static_cast<size_t>(g)] == n0;
    if (one_node) {
        out.nodes.push_back(n0);
        out.gpus_on_node.push_back(size);
    } else {
        thread_local std::vector<int64_t> counts;  // scratch, all zero between calls
        counts.resize(static_cast<size_t>(c.num_nodes), 0);
        for (int64_t g : gpus) ++counts[static_cast<size_t>(c.gpu_node[static_cast<size_t>(g)])];
        for (int64_t n = 0; n < c.num_nodes; ++n)
            if (counts[static_cast<size_t>(n)]) {
                out.nodes.push_back(n);
                out.gpus_on_node.push_back(counts[static_cast<size_t>(n)]);
                counts[static_cast<size_t>(n)] = 0;
            }
    }
    if (tp > 1) {
        double worst = std::numeric_limits<double>::infinity();
        for (int64_t i = 0; i < size; i += tp) {
            bool cross = false;
            worst = std::min(worst, group_tp_bandwidth(c, gpus.data() + i, tp, model, cross));
            out.tp_cross_node |= cross;
        }
        out.tp_stretch = std::max(1.0, c.reference_nvlink_GBps / worst);
    }
    const size_t used = out.nodes.size();
    if (used > 1 && c.one_domain(out.nodes.begin(), out.nodes.end())) {
        // Inside one NVLink domain DP runs on NVLink, as inside one NVSwitch node; no uplink.
        out.dp_bw_GBps = std::numeric_limits<double>::infinity();
        for (int64_t n : out.nodes) out.dp_bw_GBps = std::min(out.dp_bw_GBps, c.node_nvlink_GBps[static_cast<size_t>(n)]);
    } else if (used > 1) {
        int64_t tier = 0;
        double net = std::numeric_limits<double>::infinity();
        for (int64_t a : out.nodes) {
            net = std::min(net, c.node_net_GBps[static_cast<size_t>(a)]);
            for (int64_t b : out.nodes) tier = std::max<int64_t>(tier, c.node_tier[static_cast<size_t>(a * c.num_nodes + b)]);
        }
        out.tier = tier;
        out.dp_bw_GBps = net * std::pow(model.cross_tier_efficiency, static_cast<double>(tier - 1));
        for (int64_t s = 0; s < c.num_switches; ++s) {
            if (!std::isfinite(c.switch_uplink_GBps[static_cast<size_t>(s)])) continue;
            int64_t inside = 0;
            for (size_t i = 0; i < used; ++i)
                if (c.node_under(out.nodes[i], s)) inside += out.gpus_on_node[i];
            if (inside == 0 || inside >= size) continue;
            double demand = 0.0;
            for (size_t i = 0; i < used; ++i)
                if (c.node_under(out.nodes[i], s))
                    demand += static_cast<double>(out.gpus_on_node[i]) * c.node_net_GBps[static_cast<size_t>(out.nodes[i])];
            out.uplinks.push_back(s);
            out.uplink_demand_GBps.push_back(demand);
        }
    } else {
        const auto n = static_cast<size_t>(n0);
        out.dp_bw_GBps = c.node_intra[n] == c.intra_nvswitch ? c.node_nvlink_GBps[n] : c.node_pcie_GBps[n];
    }
    out.min_speed = std::numeric_limits<double>::infinity();
    for (int64_t g : gpus) out.min_speed = std::min(out.min_speed, c.gpu_speed[static_cast<size_t>(g)]);
    if (c.speed_varies_by_kind) {
        out.min_speed_by_kind.assign(static_cast<size_t>(c.num_kinds), std::numeric_limits<double>::infinity());
        for (int64_t g : gpus)
            for (int64_t k = 0; k < c.num_kinds; ++k)
                out.min_speed_by_kind[static_cast<size_t>(k)] = std::min(
                    out.min_speed_by_kind[static_cast<size_t>(k)], c.gpu_speed_by_kind[static_cast<size_t>(g * c.num_kinds + k)]);
    } else {
        out.min_speed_by_kind.assign(static_cast<size_t>(c.num_kinds), out.min_speed);
    }
}

}  // namespace gangsched
