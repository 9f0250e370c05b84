// The base rules' choices over a decision state's arrays: the placement a rule gives a gang on
// the free GPUs, the rate a job would get if started there now, and `sect`'s choice among the
// candidates (baselines/sect.py, envs/decision/features.py's rate_if_started state them).
#pragma once

#include <cstdint>
#include <vector>

#include "cluster.hpp"
#include "geometry.hpp"

namespace gangsched {

struct RateModel {  // envs.cluster.speed.SpeedModel's fields and constants a rate reads
    SpeedConstants geometry;
    double interference_coeff = 0.6;
    double reference_net_per_gpu_GBps = 50.0;
    std::vector<double> sensitivity_by_kind;  // (K)
    std::vector<double> pressure_by_kind;     // (K) memory-bandwidth pressure per GPU
};

// What the decision state holds about the allocation (envs.decision.state.ClusterState's fields).
struct Allocation {
    const uint8_t* free_mask = nullptr;     // (G) neither owned nor reserved
    const int64_t* node_free = nullptr;     // (N)
    const double* node_pressure = nullptr;  // (N)
    const double* uplink_demand = nullptr;  // (S)
};

// The per-job arrays of a decision state the choices read (each at least `count` long).
struct Jobs {
    int64_t count = 0;
    const int64_t* num_gpus = nullptr;
    const int64_t* tp_degree = nullptr;
    const double* mem_per_gpu_gb = nullptr;
    const int64_t* kind = nullptr;
    const double* comm_fraction = nullptr;
    const double* tp_comm_share = nullptr;
    const double* estimate_s = nullptr;
    const double* work_done_s = nullptr;
    const double* restore_s = nullptr;
    const uint8_t* needs_restore = nullptr;
    const int64_t* enqueue_seq = nullptr;
    bool any_restore = false;  // some job owes a restore (ClusterState.num_restores_owed > 0)
    const int64_t* segment_gpus = nullptr;  // GPUs per segment (Job.segment_gpus); nullptr: no job asks for segments
};

// Python's builtin max(a, b) on floats: a unless b > a (NaN in a is kept).
inline double py_max(double a, double b) { return b > a ? b : a; }

// envs.cluster.speed.job_constants_of's communication shares of a gang of `gpus` in TP groups of `tp`.
inline void comm_shares(int64_t gpus, int64_t tp, double comm, double share, double& c_tp, double& c_dp) {
    c_tp = tp > 1 ? comm * share : 0.0;
    c_dp = gpus / tp > 1 ? comm * (1.0 - share) : 0.0;
}

// envs.cluster.speed.efficiency_of on floats, the same operations in the same order.
inline double efficiency_of(double tp_stretch, double tp_congestion, double dp_bw, double c_tp, double c_dp,
                            double reference_net_per_gpu_GBps) {
    const double dp = py_max(1.0, reference_net_per_gpu_GBps / py_max(dp_bw, 1e-12));
    return 1.0 / ((1.0 - c_tp - c_dp) + c_tp * (tp_stretch / tp_congestion) + c_dp * dp);
}

// envs.cluster.speed.interference_from with the coefficient times the sensitivity made first.
inline double interference_of(double coeff_sensitivity, double others) {
    return 1.0 / (1.0 + coeff_sensitivity * py_max(others, 0.0));
}

// envs.decision.placement.place over the free GPUs: the GPUs rule `rule` (BINPACK, SPREAD or TOPOLOGY)
// gives a gang, grouped by node in the rule's order. False: no placement.
bool place_free(const Cluster& c, const Allocation& a, int64_t need, int64_t tp, double mem, int64_t rule,
                std::vector<int64_t>& gpus, int64_t segment = 0);

// envs.decision.features.rate_if_started's four numbers: the rate (reference-seconds of work per second),
// the placement efficiency, the interference factor and the slowest GPU's speed for the job's kind.
struct RateParts {
    double rate = 0.0, efficiency = 0.0, interference = 0.0, min_speed = 0.0;
};
RateParts rate_parts(const Cluster& c, const RateModel& m, const Allocation& a, const Geometry& g, double c_tp, double c_dp,
                     double sensitivity, int64_t kind);

// envs.decision.features.rate_if_started's rate: reference-seconds of work per second of a job with
// these constants started on geometry `g` now.
inline double rate_if_started(const Cluster& c, const RateModel& m, const Allocation& a, const Geometry& g, double c_tp,
                              double c_dp, double sensitivity, int64_t kind) {
    return rate_parts(c, m, a, g, c_tp, c_dp, sensitivity, kind).rate;
}

// baselines/sect.py's choice: over the window's valid non-preempting candidates (`mask`, slot
// s's rule r at s * num_rules + r), the smallest estimated remaining runtime / predicted rate,
// FIFO rank on ties, the first index on equal keys. -1 when none is valid. With `gpus` and
// `geometry`, the chosen candidate's placement and its geometry are written there.
int64_t choose_sect(const Cluster& c, const RateModel& m, const Allocation& a, const Jobs& jobs,
                    const std::vector<int64_t>& window, const uint8_t* mask, int64_t mask_size, int64_t num_rules,
                    std::vector<int64_t>* gpus = nullptr, Geometry* geometry = nullptr);

}  // namespace gangsched
