#include "choice.hpp"

#include <cmath>
#include <limits>

#include "placement.hpp"

namespace gangsched {

namespace {

// numpy's minimum: NaN if either is NaN.
inline double np_minimum(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
    return a < b ? a : b;
}

// A placement and its geometry, made once per (rule, gang shape) inside one choice.
struct Placed {
    int64_t rule, need, tp, segment;
    double mem;
    bool ok;
    Geometry geometry;
    std::vector<int64_t> gpus;
};

}  // namespace

namespace {

// envs.decision.placement._eligible: the free GPUs of the nodes with the memory (node_take's check
// of them made here).
void eligible_counts(const Cluster& c, const Allocation& a, double mem, std::vector<int64_t>& free) {
    const auto N = static_cast<size_t>(c.num_nodes);
    free.resize(N);
    for (size_t n = 0; n < N; ++n) {
        const int64_t f = c.node_memory_gb[n] >= mem ? a.node_free[n] : 0;
        if (f < 0 || f > c.node_gpus[n]) throw BadInput("free: a count outside 0..the node's GPUs");
        free[n] = f;
    }
}

// place_free over the eligible counts `free` (eligible_counts').
bool place_counts(const Cluster& c, const Allocation& a, const std::vector<int64_t>& free, int64_t need, int64_t tp,
                  int64_t rule, std::vector<int64_t>& gpus, int64_t segment) {
    thread_local Take take;  // scratch
    gpus.clear();
    if (!node_take_checked(c, free, need, tp, rule, take, segment)) return false;
    for (const auto& [n, k] : take)
        if (k > 0 || take.size() == 1)
            pick_in_node(c, n, k, a.free_mask + c.node_first_gpu[static_cast<size_t>(n)], gpus);
    return true;
}

}  // namespace

bool place_free(const Cluster& c, const Allocation& a, int64_t need, int64_t tp, double mem, int64_t rule,
                std::vector<int64_t>& gpus, int64_t segment) {
    thread_local std::vector<int64_t> free;  // scratch
    check_gang(need, tp, segment);  // node_take's checks, in its order
    eligible_counts(c, a, mem, free);
    return place_counts(c, a, free, need, tp, rule, gpus, segment);
}

RateParts rate_parts(const Cluster& c, const RateModel& m, const Allocation& a, const Geometry& g, double c_tp, double c_dp,
                     double sensitivity, int64_t kind) {
    // The neighbours' pressure per GPU on the placement's worst node (envs.decision.features._neighbour_pressure).
    double others;
    const auto n0 = static_cast<size_t>(g.nodes[0]);
    if (g.nodes.size() == 1) {
        others = a.node_pressure[n0] / static_cast<double>(c.node_gpus[n0]);
    } else {  // numpy's max: NaN if any is NaN
        bool nan = false;
        others = -std::numeric_limits<double>::infinity();
        for (int64_t n : g.nodes) {
            const double x = a.node_pressure[n] / static_cast<double>(c.node_gpus[static_cast<size_t>(n)]);
            if (std::isnan(x)) nan = true;
            else if (x > others) others = x;
        }
        if (nan) others = std::numeric_limits<double>::quiet_NaN();
    }
    // The worst congestion share of its uplinks with its own demand added (_congestion_if_added).
    double congestion = 1.0;
    if (!g.uplinks.empty()) {
        congestion = std::numeric_limits<double>::infinity();
        for (size_t i = 0; i < g.uplinks.size(); ++i) {
            const auto s = static_cast<size_t>(g.uplinks[i]);
            const double share = np_minimum(1.0, c.switch_uplink_GBps[s] / (a.uplink_demand[s] + g.uplink_demand_GBps[i]));
            congestion = np_minimum(congestion, share);
        }
    }
    // PlacementGeometry.congested, then envs.cluster.speed.efficiency_of and interference_from.
    const double eff = efficiency_of(g.tp_stretch, g.tp_cross_node ? congestion : 1.0,
                                     g.dp_bw_GBps * (g.uplinks.empty() ? 1.0 : congestion), c_tp, c_dp,
                                     m.reference_net_per_gpu_GBps);
    const double interf = interference_of(m.interference_coeff * sensitivity, others);
    const double min_speed = g.min_speed_by_kind[static_cast<size_t>(kind)];
    return RateParts{min_speed * eff * interf, eff, interf, min_speed};
}

int64_t choose_sect(const Cluster& c, const RateModel& m, const Allocation& a, const Jobs& jobs,
                    const std::vector<int64_t>& window, const uint8_t* mask, int64_t mask_size, int64_t num_rules,
                    std::vector<int64_t>* best_gpus, Geometry* best_geometry) {
    const auto nw = static_cast<int64_t>(window.size());
    if (num_rules < 3) throw BadInput("num_rules: binpack, spread and topology come first");
    if (nw * num_rules > mask_size) throw BadInput("mask: shorter than the window's candidates");
    for (int64_t j : window)
        if (j < 0 || j >= jobs.count) throw BadInput("window: a job index out of range");
    // scratch kept between calls, its buffers reused: placed[:used] are this call's placements, all
    // on the eligible counts of memory `counted_mem` (made when first needed)
    thread_local std::vector<Placed> placed;
    thread_local std::vector<int64_t> counts;
    size_t used = 0;
    bool counted = false;
    double counted_mem = 0.0;
    placed.reserve(static_cast<size_t>(3 * nw));  // never grown past it below: pointers into it stay valid
    int64_t best = -1, best_pos = 0;
    const Placed* best_placed = nullptr;
    double best_key = 0.0;
    for (int64_t slot = 0; slot < nw; ++slot) {
        const auto j = static_cast<size_t>(window[static_cast<size_t>(slot)]);
        const int64_t need = jobs.num_gpus[j], tp = jobs.tp_degree[j], kind = jobs.kind[j];
        const double mem = jobs.mem_per_gpu_gb[j];
        const int64_t segment = jobs.segment_gpus != nullptr ? jobs.segment_gpus[j] : 0;
        if (need < 1 || tp < 1 || need % tp != 0) throw BadInput("tp_degree: a window job's gang is not whole TP groups");
        if (kind < 0 || kind >= c.num_kinds) throw BadInput("kind: a job kind out of range");
        // ClusterState.remaining_estimate_s
        double remaining = py_max(  // np.maximum: NaN stays
            jobs.estimate_s[j] - jobs.work_done_s[j], 0.0);
        if (jobs.any_restore) remaining = remaining + jobs.restore_s[j] * (jobs.needs_restore[j] ? 1.0 : 0.0);
        // envs.cluster.speed.job_constants_of
        const double comm = jobs.comm_fraction[j], share = jobs.tp_comm_share[j];
        double c_tp, c_dp;
        comm_shares(need, tp, comm, share, c_tp, c_dp);
        const double sensitivity = m.sensitivity_by_kind[static_cast<size_t>(kind)];
        for (int64_t rule = 0; rule < 3; ++rule) {
            const int64_t i = slot * num_rules + rule;
            if (!mask[i]) continue;
            const Placed* p = nullptr;
            for (size_t k = 0; k < used; ++k) {
                const Placed& q = placed[k];
                if (q.rule == rule && q.need == need && q.tp == tp && q.segment == segment && q.mem == mem) p = &q;
            }
            if (p == nullptr) {
                if (!counted || !(counted_mem == mem)) {  // place_free's counts, once per memory size
                    check_gang(need, tp, segment);  // node_take's checks, in its order
                    eligible_counts(c, a, mem, counts);
                    counted = true;
                    counted_mem = mem;
                }
                if (used == placed.size()) placed.emplace_back();
                Placed& q = placed[used++];
                q.rule = rule;
                q.need = need;
                q.tp = tp;
                q.segment = segment;
                q.mem = mem;
                q.ok = place_counts(c, a, counts, need, tp, rule, q.gpus, segment);
                if (q.ok) {  // the geometry of GPUs another rule chose already is that one's
                    const Placed* same = nullptr;
                    for (size_t k = 0; k + 1 < used && same == nullptr; ++k)
                        if (placed[k].ok && placed[k].tp == tp && placed[k].gpus == q.gpus) same = &placed[k];
                    if (same != nullptr)
                        q.geometry = same->geometry;
                    else
                        placement_geometry(c, q.gpus, tp, m.geometry, q.geometry);
                }
                p = &q;
            }
            if (!p->ok) throw BadInput("mask: a candidate valid by count found no placement");
            const double rate = rate_if_started(c, m, a, p->geometry, c_tp, c_dp, sensitivity, kind);
            const double key = remaining / py_max(rate, 1e-6);
            const int64_t pos = jobs.enqueue_seq[j];
            if (best < 0 || key < best_key || (key == best_key && pos < best_pos)) {
                best = i;
                best_key = key;
                best_pos = pos;
                best_placed = p;
            }
        }
    }
    if (best_placed != nullptr) {
        if (best_gpus != nullptr) *best_gpus = best_placed->gpus;
        if (best_geometry != nullptr) *best_geometry = best_placed->geometry;
    }
    return best;
}

}  // namespace gangsched
