#include "world.hpp"

#include <cmath>

namespace gangsched {

World::World(const Cluster& c, const RateModel& m, const SimArrays& a, const SimScalars& s)
    : c_(c), m_(m), num_priorities_(a.num_priorities), running_(a.running), checkpointing_(a.checkpointing),
      reserved_(a.reserved), reserved_gpus_(a.reserved_gpus), s_(s) {
#define GANGSCHED_COPY_FIXED(T, name) fixed_.name.assign(a.name.data, a.name.data + a.name.size);
#define GANGSCHED_COPY_CHANGED(T, name) changed_.name.assign(a.name.data, a.name.data + a.name.size);
    GANGSCHED_FIXED_ARRAYS(GANGSCHED_COPY_FIXED)
    GANGSCHED_CHANGED_ARRAYS(GANGSCHED_COPY_CHANGED)
#undef GANGSCHED_COPY_FIXED
#undef GANGSCHED_COPY_CHANGED
}

SimArrays World::views(ChangedArrays& work) const {
    SimArrays a;
#define GANGSCHED_VIEW_FIXED(T, name) a.name = View<const T>{fixed_.name.data(), fixed_.name.size()};
#define GANGSCHED_VIEW_CHANGED(T, name) a.name = View<T>{work.name.data(), work.name.size()};
    GANGSCHED_FIXED_ARRAYS(GANGSCHED_VIEW_FIXED)
    GANGSCHED_CHANGED_ARRAYS(GANGSCHED_VIEW_CHANGED)
#undef GANGSCHED_VIEW_FIXED
#undef GANGSCHED_VIEW_CHANGED
    a.num_priorities = num_priorities_;
    a.running = running_;
    a.checkpointing = checkpointing_;
    a.reserved = reserved_;
    a.reserved_gpus = reserved_gpus_;
    return a;
}

WorldOutcome World::rollout_sect(int64_t queue_window, int64_t priority_high, double until, int64_t first_job,
                                 const std::vector<int64_t>& first_gpus, const std::vector<int64_t>& first_victims) const {
    ChangedArrays work = changed_;  // the fork: a copy of the arrays the rollout changes
    SimArrays a = views(work);
    WorldOutcome out;
    out.s = s_;
    out.r = gangsched::rollout_sect(c_, m_, a, out.s, queue_window, priority_high, until, first_job, first_gpus,
                                    first_victims);
    const auto n = static_cast<size_t>(out.s.next_arrival);
    out.end.assign(work.end.begin(), work.end.begin() + static_cast<std::ptrdiff_t>(n));
    out.first_start.assign(work.first_start.begin(), work.first_start.begin() + static_cast<std::ptrdiff_t>(n));
    out.work_left.assign(work.work_left.begin(), work.work_left.begin() + static_cast<std::ptrdiff_t>(n));
    out.overhead_left.assign(work.overhead_left.begin(), work.overhead_left.begin() + static_cast<std::ptrdiff_t>(n));
    return out;
}

OptionCosts World::costs(int64_t queue_window, int64_t priority_high, double until, const std::vector<FirstAction>& options,
                         const ObjectiveSpec& objective) const {
    const auto P = static_cast<size_t>(num_priorities_);
    if (objective.priority_weights.size() < P) throw BadInput("objective: one weight per priority expected");
    if (static_cast<int64_t>(objective.slo_start_s.size()) < c_.num_kinds ||
        static_cast<int64_t>(objective.slo_finish_slowdown.size()) < c_.num_kinds)
        throw BadInput("objective: SLO bounds for every job kind expected");
    OptionCosts out;
    ChangedArrays work;
    for (size_t i = 0; i < options.size(); ++i) {
        work = changed_;  // the fork, in the same storage from the second option on
        SimArrays a = views(work);
        SimScalars s = s_;
        const FirstAction& f = options[i];
        const RolloutResult r =
            gangsched::rollout_sect(c_, m_, a, s, queue_window, priority_high, until, f.job, f.gpus, f.victims, false);
        out.decisions += r.decisions;
        out.starts += r.starts;
        out.events += r.events;
        if (r.stuck) {
            out.stuck = static_cast<int64_t>(i);
            break;
        }
        out.costs.push_back(cost(objective, work, s, until));
    }
    return out;
}

double World::cost(const ObjectiveSpec& o, const ChangedArrays& work, const SimScalars& s, double until) const {
    const auto n = static_cast<size_t>(s.next_arrival);  // the arrived jobs
    std::vector<double> terms;
    // envs.sim.objective.weighted_total(objective_sums(...)): the weighted terms added in
    // OBJECTIVE_TERMS' order, those of weight 0 left out
    double total = 0.0;
    if (o.avg_jct != 0.0) total += o.avg_jct * (s.jobs_in_system_s / 3600.0);
    if (o.weighted_jct != 0.0) {  // weighted_jct_s: w(priority) x time in the system so far
        terms.resize(n);
        for (size_t j = 0; j < n; ++j) {
            const double ended = std::isnan(work.end[j]) ? s.now : work.end[j];
            terms[j] = o.priority_weights[static_cast<size_t>(fixed_.priority[j])] * (ended - fixed_.arrival[j]);
        }
        total += o.weighted_jct * (pairwise_sum(terms.data(), n) / 3600.0);
    }
    if (o.slo_misses != 0.0) {  // slo_miss_flags: a late start or a late finish, certain now
        int64_t misses = 0;
        for (size_t j = 0; j < n; ++j) {
            const auto k = static_cast<size_t>(fixed_.kind[j]);
            const double started = std::isnan(work.first_start[j]) ? s.now : work.first_start[j];
            const double ended = std::isnan(work.end[j]) ? s.now : work.end[j];
            misses += (started - fixed_.arrival[j] > o.slo_start_s[k]) ||
                      (ended - fixed_.arrival[j] > o.slo_finish_slowdown[k] * fixed_.work_total[j]);
        }
        total += o.slo_misses * static_cast<double>(misses);
    }
    if (o.preemption_gpu_h != 0.0) total += o.preemption_gpu_h * (s.preemption_gpu_s / 3600.0);
    if (o.energy_kwh != 0.0) total += o.energy_kwh * (s.energy_j / 3.6e6);
    if (!std::isfinite(until) || s.num_done == num_jobs()) return total;
    // agents.lookahead.terminal_cost: the open jobs' work and overhead left at reference speed
    if (!(o.avg_jct != 0.0 || o.weighted_jct != 0.0)) return total + 0.0;
    terms.clear();
    for (size_t j = 0; j < n; ++j) {
        if (!std::isnan(work.end[j])) continue;
        const double w = o.avg_jct + o.weighted_jct * o.priority_weights[static_cast<size_t>(fixed_.priority[j])];
        terms.push_back(w * (work.work_left[j] + work.overhead_left[j]));
    }
    return total + pairwise_sum(terms.data(), terms.size()) / 3600.0;
}

}  // namespace gangsched
