// The features a policy sees of a decision state (envs/decision/features.py states them): per candidate
// of a decision, the job's columns, what the row is, its placement's columns and what its
// victims give up; the WAIT row's times; and the queue's, the cluster's and the recent
// arrivals' global columns. Bit for bit `envs.decision.features.candidate_features` (float32, before the
// env's clip to [-1, 1], which `clip` applies here as the env does).
#pragma once

#include <cstdint>

#include "choice.hpp"
#include "cluster.hpp"
#include "rollout.hpp"

namespace gangsched {

// The columns of envs.decision.features.CANDIDATE_SCHEMA and GLOBAL_SCHEMA, in their order. The binding
// exposes the names and envs.decision.features checks them against the schema before the first call.
#define GANGSCHED_CANDIDATE_COLUMNS(X)                                                                                \
    X(gang_log2) X(tp_log2) X(kind_pretrain) X(kind_finetune) X(kind_inference) X(kind_batch) X(priority)             \
    X(preemptible) X(est_remaining_log) X(wait_log) X(progress) X(comm_fraction) X(mem_per_gpu) X(was_preempted)      \
    X(valid) X(rule_binpack) X(rule_spread) X(rule_topology) X(rule_preempt) X(rule_preempt_las) X(is_wait)          \
    X(predicted_rate) X(placement_efficiency) X(interference) X(tier) X(nodes_per_gpu) X(free_nodes_consumed)         \
    X(fragmentation_delta) X(preemption_cost_log) X(victims) X(min_gpu_speed) X(est_runtime_here_log)                 \
    X(victims_remaining_log) X(victims_attained_log) X(victims_priority) X(next_event_est_log) X(head_fit_est_log)
#define GANGSCHED_GLOBAL_COLUMNS(X)                                                                                   \
    X(queue_log) X(queued_gpu_demand) X(allocated) X(free) X(free_nodes) X(fragmentation) X(running_share)            \
    X(reserved_share) X(time_log) X(queued_high_priority) X(mean_wait_log) X(arrived_load_1h) X(arrived_load_6h)      \
    X(since_arrival_log)

#define GANGSCHED_COLUMN_ENUM(name) COL_##name,
enum CandidateColumn : int { GANGSCHED_CANDIDATE_COLUMNS(GANGSCHED_COLUMN_ENUM) NUM_CANDIDATE_COLUMNS };
enum GlobalColumn : int { GANGSCHED_GLOBAL_COLUMNS(GANGSCHED_COLUMN_ENUM) NUM_GLOBAL_COLUMNS };
#undef GANGSCHED_COLUMN_ENUM

extern const char* const CANDIDATE_COLUMN_NAMES[NUM_CANDIDATE_COLUMNS];
extern const char* const GLOBAL_COLUMN_NAMES[NUM_GLOBAL_COLUMNS];

constexpr int64_t NUM_FEATURE_RULES = 5;  // envs.decision.placement.RULES: the rule one-hot's columns
constexpr int64_t NUM_FEATURE_KINDS = 4;  // envs.jobs.JobKind: the kind one-hot's columns

// The decision state's past arrivals, oldest first (ClusterState.arrival_times_s and
// arrival_requested_gpu_s; a simulator's: its arrived jobs' arrival times and GPUs x estimate).
struct PastArrivals {
    View<const double> times, requested;
};

// A decision's candidate set (envs.decision.candidates.CandidateSet) as plain arrays: the window's jobs,
// the mask (K = slots x num_rules + 1 entries, the last one WAIT; candidate i is window slot
// i / num_rules's rule i % num_rules), and for each valid candidate other than WAIT, in index
// order, its GPUs (global ids, TP groups consecutive) gpus[gpus_end[v - 1]:gpus_end[v]] and its
// victims victims[victims_end[v - 1]:victims_end[v]] (none for a rule that does not preempt).
struct CandidateArrays {
    View<const int64_t> window;
    View<const uint8_t> mask;
    int64_t num_rules = NUM_FEATURE_RULES;
    View<const int64_t> gpus, gpus_end, victims, victims_end;
};

// envs.decision.features.candidate_features: writes the (K, NUM_CANDIDATE_COLUMNS) candidate features to
// `candidates` and the (NUM_GLOBAL_COLUMNS,) global features to `global` (row-major float32,
// every entry written), from the decision state: the cluster, the speed model, the simulator's
// arrays and scalars (what `a` and `s` hold of envs.sim.simulator.Simulator.decision_state(); jobs
// below s.next_arrival are the known ones) and the past arrivals. The arrays read: per job
// estimate, work_done, restore_s, needs_restore, checkpoint_s, gpus_req, tp_degree, kind,
// priority, preemptible, comm_fraction, tp_comm_share, mem_req, queued_since, wait_s,
// attained_gpu_s, overhead_left (the restore a running job owes), checkpoint_end, rate; q_ids
// (the queue, s.qlen long); node_free, node_pressure, uplink_demand, whole_gang; running,
// checkpointing, reserved. The scalars read: now, num_free, fragmented, next_arrival, qlen,
// queued_gpus, queued_high, num_needs_restore. With `clip`, each value is then clipped to
// [-1, 1] (NaN kept), as the env's observation is. Bad input throws BadInput naming it, before
// anything is written.
void candidate_features(const Cluster& c, const RateModel& m, const SimArrays& a, const SimScalars& s,
                        const PastArrivals& past, const CandidateArrays& cs, float* candidates, float* global,
                        bool clip = false);
// The same values as float64, before the cast to float32 (each float32 feature is the float32
// nearest its float64 value): a check on the arithmetic finer than float32's.
void candidate_features(const Cluster& c, const RateModel& m, const SimArrays& a, const SimScalars& s,
                        const PastArrivals& past, const CandidateArrays& cs, double* candidates, double* global,
                        bool clip = false);

// Python's math.fsum: the correctly rounded sum of n doubles (CPython's algorithm).
double exact_sum(const double* x, size_t n);

}  // namespace gangsched
