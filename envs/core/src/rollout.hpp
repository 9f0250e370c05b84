// A lookahead's rollout of `sect` in one call: the decisions (the queue window, each window
// job's placements and predicted rates, sect's choice), the starts, and the events between
// them, until a horizon or the workload's end, over a simulator's arrays (envs/sim/simulator.py and
// envs/core/kernels.py's run_events state them; agents/lookahead.py calls it).
#pragma once

#include <cstdint>
#include <vector>

#include "choice.hpp"
#include "cluster.hpp"

namespace gangsched {

template <typename T>
struct View {  // a caller's array: `size` entries, row-major for tables
    T* data = nullptr;
    size_t size = 0;
    T& operator[](size_t i) const { return data[i]; }
};

// envs.decision.state.fragmented_change's term: a node's free GPUs below its whole gang are fragmented.
inline int64_t fragmented_of(int64_t free, int64_t whole_gang) { return free < whole_gang ? free : 0; }

// The simulator's state the rollout reads and changes in place (a fork's own arrays).
struct SimArrays {
    // per job (n_jobs each)
    View<const double> arrival, estimate, restore_s, checkpoint_s, work_total, mem_req, comm_fraction, tp_comm_share;
    View<const int64_t> gpus_req, tp_degree, priority, kind, shape_id, segment_gpus;  // segment_gpus: 0 none
    View<const uint8_t> preemptible;
    View<double> work_done, queued_since, end, work_left, rate, overhead_left, attained_gpu_s, run_s,
        interference_loss_s, interference, wait_s, first_start, checkpoint_end;
    View<int64_t> preemptions;
    View<uint8_t> needs_restore;
    View<int8_t> state;
    // the queue (envs.sim.queue.JobQueue)
    View<int64_t> q_ids, q_sorted, q_seq, q_per_shape;
    View<double> q_remaining;
    // the load model: each job's record row, the records (PlacedTable), loads and dirty marks
    View<const int64_t> job_slot, rec_i, pool_i;
    View<const double> rec_f, pool_counts;
    View<double> node_pressure, uplink_demand;
    View<uint8_t> dirty_node, dirty_uplink;
    // the ledger
    View<int64_t> gpu_owner, gpu_reserved, node_owned, node_free, node_preemptible;  // node_preemptible: N x P
    View<uint8_t> free_mask;
    int64_t num_priorities = 0;
    // power
    View<double> node_power_w;
    View<uint8_t> node_on;
    View<const double> power_terms;  // N x 3: base W, busy W per GPU, idle W per GPU
    View<const int64_t> whole_gang;
    // shapes: (GPUs, TP degree, GB per GPU, priority, GPUs per segment) of each shape id
    View<const int64_t> shape_gpus, shape_tp, shape_priority, shape_segment;
    View<const double> shape_mem;
    std::vector<int64_t> running;  // in the simulator's order
    // preempted jobs still saving (holding their GPUs), and reserved jobs with the GPUs each
    // waits for, in the simulator's order
    std::vector<int64_t> checkpointing, reserved;
    std::vector<std::vector<int64_t>> reserved_gpus;
};

// The simulator's scalars, read at the call and written back after it.
struct SimScalars {
    double now = 0.0, jobs_in_system_s = 0.0, energy_j = 0.0, allocated_gpu_s = 0.0, useful_work_s = 0.0,
           power_w = 0.0, preemption_gpu_s = 0.0;
    int64_t num_free = 0, fragmented = 0, alloc_version = 0, num_done = 0, jobs_in_system = 0, next_arrival = 0,
            qlen = 0, enqueued = 0, queued_gpus = 0, queued_high = 0, num_needs_restore = 0, num_preemptions = 0;
};

struct RolloutResult {
    int64_t decisions = 0, starts = 0, events = 0;
    bool stuck = false;  // WAIT with nothing left to happen (the simulator's SchedulingError)
};

// What the rollout does first: `sect` decides (SECT_DECIDES), WAIT (FIRST_WAIT), or the
// lookahead's option for queued job `first_job` on `first_gpus` (a valid candidate): a start, or
// with `first_victims` a preemption of them and a reservation (Simulator.preempt_and_start).
constexpr int64_t SECT_DECIDES = -2, FIRST_WAIT = -1;

// From a decision state (a queued job can be placed; jobs may be checkpointing and reserved):
// the first action, then `sect` decides, each start runs the events to the next decision
// (checkpoint ends and the reserved jobs' launches among them), until `until` (a decision at or
// after it is still carried out, as the lookahead's loop does) or the workload's end. Without
// `track`, for a caller that reads only what a lookahead's cost reads, each job's run_s and
// interference_loss_s and the scalar useful_work_s are left as they were.
RolloutResult rollout_sect(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, int64_t queue_window,
                           int64_t priority_high, double until, int64_t first_job = SECT_DECIDES,
                           const std::vector<int64_t>& first_gpus = {}, const std::vector<int64_t>& first_victims = {},
                           bool track = true);

// What a replay records besides the arrays (Simulator.segments and Simulator.timeline): each
// run segment (job, start, end, preempted, its GPUs at seg_gpus[seg_gpu_end[i-1]:seg_gpu_end[i]])
// in the order the simulator closes them, and a timeline row of 6 (time, allocated GPUs, queued,
// running, fragmented free GPUs, power W) per event.
struct Recording {
    std::vector<int64_t> seg_job, seg_gpu_end, seg_gpus;
    std::vector<double> seg_start, seg_end;
    std::vector<uint8_t> seg_preempted;
    std::vector<double> timeline;
};

// The rules a native replay runs: `sect` (baselines/sect.py), FIFO order with one placement rule
// (baselines/fifo.py: binpack, spread, topology), or shortest remaining estimate first with the
// topology rule (baselines/sjf.py).
enum ReplayPolicy : int64_t {
    REPLAY_SECT = 0,
    REPLAY_FIFO_BINPACK = 1,
    REPLAY_FIFO_SPREAD = 2,
    REPLAY_FIFO_TOPOLOGY = 3,
    REPLAY_SJF = 4
};

// envs.sim.replay.replay of `policy` without `preempt-las` (the rule never takes it) from any state
// of a simulator to the workload's end: advance to a decision, the policy's choice, and so on;
// every segment and event recorded in `rec`.
RolloutResult replay(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, int64_t queue_window,
                     int64_t priority_high, int64_t policy, Recording& rec);

// envs.decision.candidates.WaitGuard: WAIT is invalid while a window job that could start without
// preempting has waited longer than max(overdue_factor x its estimate, min_wait_s).
struct WaitGuardSpec {
    bool on = false;
    double overdue_factor = 0.0, min_wait_s = 0.0;
};

// envs.decision.las: the LAS queue thresholds (attained GPU-s, ascending) and the starvation factor.
struct LasSpec {
    std::vector<double> thresholds;
    double starvation_factor = 4.0;
};

// envs.decision.candidates.build_candidates' result: the window (job ids, one per slot), the mask (Q x
// NUM_RULES + 1, WAIT last), and the placement of each valid candidate other than WAIT, in index
// order: its index, its GPUs (consecutive runs of the TP degree form the TP groups; empty where
// the reference finds none for a candidate valid by count) and its victims.
struct CandidateSet {
    std::vector<int64_t> window;
    std::vector<uint8_t> mask;
    std::vector<int64_t> index;
    std::vector<std::vector<int64_t>> gpus, victims;
};

// The candidate set of a decision state over a simulator's arrays (read, never changed): the
// window (envs.decision.window.candidate_window, or select_window without `preempt_las`), the mask (the
// rules' validity by GPU counts, WAIT by wait_valid with `guard`) and each valid candidate's
// placement (envs.decision.placement.place for binpack, spread and topology; choose_victims and
// choose_las_victims for the preempt rules), bit for bit the reference.
void build_candidates(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, int64_t queue_window,
                      int64_t priority_high, bool preempt_las, const WaitGuardSpec& guard, const LasSpec& las,
                      CandidateSet& out);

// A whole episode owned by the core (the Gymnasium env's decision loop, envs.gym.env): the
// simulator's arrays (changed in place, as a replay changes them), its scalars, and the records
// (segments and timeline rows) of everything that happens after it is made. At each decision:
// the candidate set (`candidates`: envs.decision.candidates.build_candidates with the episode's
// window, preempt-las and wait guard), one of them carried out (`apply`: envs.decision.candidates.
// apply_candidate), then the events to the next decision (`advance`: envs.sim.replay.
// advance_to_decision), bit for bit the Python decision loop.
class Episode {
  public:
    Episode(const Cluster& c, const RateModel& m, SimArrays a, SimScalars s, int64_t priority_high, int64_t queue_window,
            bool preempt_las, const WaitGuardSpec& guard, const LasSpec& las);
    ~Episode();
    Episode(const Episode&) = delete;
    Episode& operator=(const Episode&) = delete;

    // To the next decision state (a queued job can be placed) or the workload's end; false when
    // nothing is left to happen before that (the simulator's SchedulingError).
    bool advance();
    // The candidate set of the decision state now, kept for `apply`.
    const CandidateSet& candidates();
    // Carry out candidate `action` of the last candidate set (WAIT: the next event); false when
    // WAIT has nothing left to wait for. BadInput for an action the mask does not allow.
    bool apply(int64_t action);
    bool done() const;
    int64_t events() const;

    SimArrays& arrays();
    SimScalars& scalars();
    Recording& recording();

  private:
    struct Impl;
    const Cluster& c_;
    const RateModel& m_;
    Impl* impl_;
};

// build_candidates' placements alone, for a window and mask worked out elsewhere (`mask`: at
// least the window's slots x NUM_RULES entries): each valid candidate's but WAIT's, in index order,
// into out.index, out.gpus and out.victims. It reads the per-job arrays, the allocation (free_mask,
// node_free, node_pressure, uplink_demand, gpu_owner), the running jobs and the records of the
// running and checkpointing jobs (job_slot, rec_i, pool_i, pool_counts), and `s.now` (the LAS
// queues' starvation); nothing else of `a` or `s`.
void place_candidates(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, const std::vector<int64_t>& window,
                      const uint8_t* mask, const LasSpec& las, CandidateSet& out);

// envs.decision.window.can_place (with `preempt_las`; else any_feasible) over a simulator's arrays (read).
bool can_place(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, int64_t priority_high, bool preempt_las,
               const LasSpec& las);

// numpy's float(a.sum()) of a float64 array (pairwise summation, blocks of 128, 8 accumulators).
double pairwise_sum(const double* a, size_t n);

}  // namespace gangsched
