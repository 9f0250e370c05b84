// A sampled world of the lookahead as the core's own copy of a simulator's arrays: made once per
// sampled future, then each option's rollout of `sect` runs on a fresh copy of its changing
// arrays (a fork is a copy of arrays), leaving the world as it was.
#pragma once

#include <cstdint>
#include <vector>

#include "rollout.hpp"

namespace gangsched {

// The arrays a rollout reads and never changes (SimArrays' const views), and those it changes.
#define GANGSCHED_FIXED_ARRAYS(X)                                                                                     \
    X(double, arrival) X(double, estimate) X(double, restore_s) X(double, checkpoint_s) X(double, work_total)         \
    X(double, mem_req) X(double, comm_fraction) X(double, tp_comm_share) X(int64_t, gpus_req) X(int64_t, tp_degree)   \
    X(int64_t, priority) X(int64_t, kind) X(int64_t, shape_id) X(uint8_t, preemptible) X(int64_t, job_slot)           \
    X(int64_t, rec_i) X(int64_t, pool_i) X(double, rec_f) X(double, pool_counts) X(double, power_terms)               \
    X(int64_t, whole_gang) X(int64_t, shape_gpus) X(int64_t, shape_tp) X(int64_t, shape_priority) X(double, shape_mem)  \
    X(int64_t, segment_gpus) X(int64_t, shape_segment)
#define GANGSCHED_CHANGED_ARRAYS(X)                                                                                   \
    X(double, work_done) X(double, queued_since) X(double, end) X(double, work_left) X(double, rate)                  \
    X(double, overhead_left) X(double, attained_gpu_s) X(double, run_s) X(double, interference_loss_s)                \
    X(double, interference) X(double, wait_s) X(double, first_start) X(double, checkpoint_end) X(int64_t, preemptions) \
    X(uint8_t, needs_restore) X(int8_t, state) X(int64_t, q_ids) X(int64_t, q_sorted) X(int64_t, q_seq)               \
    X(int64_t, q_per_shape) X(double, q_remaining) X(double, node_pressure) X(double, uplink_demand)                  \
    X(uint8_t, dirty_node) X(uint8_t, dirty_uplink) X(int64_t, gpu_owner) X(int64_t, gpu_reserved)                    \
    X(int64_t, node_owned) X(int64_t, node_free) X(int64_t, node_preemptible) X(uint8_t, free_mask)                  \
    X(double, node_power_w) X(uint8_t, node_on)

struct FixedArrays {
#define GANGSCHED_MEMBER(T, name) std::vector<T> name;
    GANGSCHED_FIXED_ARRAYS(GANGSCHED_MEMBER)
};
struct ChangedArrays {
    GANGSCHED_CHANGED_ARRAYS(GANGSCHED_MEMBER)
#undef GANGSCHED_MEMBER
};

// What a world's rollout leaves behind: the scalars, and per arrived job what the objective and
// the terminal cost read (arrays of the arrived count).
struct WorldOutcome {
    SimScalars s;
    RolloutResult r;
    std::vector<double> end, first_start, work_left, overhead_left;
};

// envs.sim.objective.Objective as a lookahead's costs read it: the weights of OBJECTIVE_TERMS, the
// weight per priority, and the SLO bounds per job kind.
struct ObjectiveSpec {
    double avg_jct = 1.0, weighted_jct = 0.0, slo_misses = 0.0, preemption_gpu_h = 0.0, energy_kwh = 0.0;
    std::vector<double> priority_weights, slo_start_s, slo_finish_slowdown;
};

// A lookahead option's first action (rollout_sect's first_job, first_gpus, first_victims).
struct FirstAction {
    int64_t job = SECT_DECIDES;
    std::vector<int64_t> gpus, victims;
};

// What World::costs leaves: each option's cost and counts, and the first option that found
// nothing left to wait for (-1: none; the costs after it are not computed).
struct OptionCosts {
    std::vector<double> costs;
    int64_t decisions = 0, starts = 0, events = 0, stuck = -1;
};

class World {
  public:
    // A copy of everything `a` views and of `s`; the cluster and model must outlive the world.
    World(const Cluster& c, const RateModel& m, const SimArrays& a, const SimScalars& s);

    // rollout_sect on a fresh copy of the world's changing arrays (the world is left unchanged).
    WorldOutcome rollout_sect(int64_t queue_window, int64_t priority_high, double until, int64_t first_job,
                              const std::vector<int64_t>& first_gpus, const std::vector<int64_t>& first_victims) const;

    // agents.lookahead.Lookahead._cost of each option's rollout_sect to `until` (objective_total,
    // plus terminal_cost at a finite horizon short of the workload's end), the rollouts run one
    // after the other on one reused copy of the changing arrays.
    OptionCosts costs(int64_t queue_window, int64_t priority_high, double until, const std::vector<FirstAction>& options,
                      const ObjectiveSpec& objective) const;

    int64_t num_jobs() const { return static_cast<int64_t>(fixed_.arrival.size()); }

  private:
    SimArrays views(ChangedArrays& work) const;  // the world's fixed arrays and `work` as a rollout reads them
    double cost(const ObjectiveSpec& o, const ChangedArrays& work, const SimScalars& s, double until) const;

    const Cluster& c_;
    const RateModel& m_;
    FixedArrays fixed_;
    ChangedArrays changed_;
    int64_t num_priorities_ = 0;
    std::vector<int64_t> running_, checkpointing_, reserved_;
    std::vector<std::vector<int64_t>> reserved_gpus_;
    SimScalars s_;
};

}  // namespace gangsched
