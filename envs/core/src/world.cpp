#include "world.hpp"

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

WorldOutcome World::rollout_sect(int64_t queue_window, int64_t priority_high, double until, int64_t first_job,
                                 const std::vector<int64_t>& first_gpus, const std::vector<int64_t>& first_victims) const {
    ChangedArrays work = changed_;  // the fork: a copy of the arrays the rollout changes
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

}  // namespace gangsched
