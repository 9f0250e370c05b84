#include "rollout.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "placement.hpp"

namespace gangsched {

namespace {

constexpr int8_t QUEUED = 1, RESERVED = 2, RUNNING = 3, CHECKPOINTING = 4, DONE = 5;  // envs.sim.simulator.JobState
constexpr double EPS = 1e-9;                         // envs.sim.simulator._EPS
constexpr double INF = std::numeric_limits<double>::infinity();
constexpr int64_t NUM_RULES = 5;                     // envs.decision.placement.RULES

double block_sum(const double* a, size_t lo, size_t n) {  // numpy's pairwise_sum for n <= 128
    if (n < 8) {
        double res = 0.0;
        for (size_t i = lo; i < lo + n; ++i) res += a[i];
        return res;
    }
    double r0 = a[lo], r1 = a[lo + 1], r2 = a[lo + 2], r3 = a[lo + 3];
    double r4 = a[lo + 4], r5 = a[lo + 5], r6 = a[lo + 6], r7 = a[lo + 7];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
        r0 += a[lo + i];
        r1 += a[lo + i + 1];
        r2 += a[lo + i + 2];
        r3 += a[lo + i + 3];
        r4 += a[lo + i + 4];
        r5 += a[lo + i + 5];
        r6 += a[lo + i + 6];
        r7 += a[lo + i + 7];
    }
    double res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
    for (; i < n; ++i) res += a[lo + i];
    return res;
}

double pairwise(const double* a, size_t lo, size_t n) {
    if (n <= 128) return block_sum(a, lo, n);
    size_t half = n / 2;
    half -= half % 8;
    return pairwise(a, lo, half) + pairwise(a, lo + half, n - half);
}

enum Event { PROCESSED, UNTIL, NO_EVENT };

// The rollout's simulator: the caller's arrays, plus its own copy of the running jobs' load
// records (PlacedTable rows) and the records of the jobs it starts.
class Rollout {
  public:
    Rollout(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, int64_t priority_high, Recording* rec = nullptr)
        : c_(c), m_(m), a_(a), s_(s), priority_high_(priority_high), n_jobs_(static_cast<int64_t>(a.arrival.size)), rec_(rec) {
        if (rec_) {  // a segment's start and GPUs, for the jobs this call starts (unknown for the others: NaN, none)
            seg_begin_.assign(static_cast<size_t>(n_jobs_), std::numeric_limits<double>::quiet_NaN());
            job_gpus_.assign(static_cast<size_t>(n_jobs_), {});
        }
        slot_.assign(static_cast<size_t>(n_jobs_), -1);
        for (int64_t j : a_.running) copy_record(j);
        for (int64_t j : a_.checkpointing) copy_record(j);  // placed: their GPUs go at their checkpoints' ends
        // the running jobs on each node and uplink, and the dirty marks already set (update_rates)
        on_node_.assign(static_cast<size_t>(c_.num_gpus), -1);
        on_node_n_.assign(static_cast<size_t>(c_.num_nodes), 0);
        on_uplink_.assign(a_.uplink_demand.size, {});
        stamp_.assign(static_cast<size_t>(n_jobs_), 0);
        for (int64_t j : a_.running) index_add(j, slot_[static_cast<size_t>(j)]);
        for (size_t n = 0; n < a_.dirty_node.size; ++n)
            if (a_.dirty_node[n]) dirty_nodes_.push_back(static_cast<int64_t>(n));
        for (size_t x = 0; x < a_.dirty_uplink.size; ++x)
            if (a_.dirty_uplink[x]) dirty_uplinks_.push_back(static_cast<int64_t>(x));
        // envs.decision.window's memory levels: the distinct GPU memory sizes, ascending
        levels_ = c_.node_memory_gb;
        std::sort(levels_.begin(), levels_.end());
        levels_.erase(std::unique(levels_.begin(), levels_.end()), levels_.end());
        // what fits depends on a shape's memory level, TP degree and priority only: one totals
        // entry per distinct triple, computed when first asked after an allocation change
        shape_key_.resize(a_.shape_gpus.size);
        for (size_t k = 0; k < a_.shape_gpus.size; ++k) {
            const int64_t tp = a_.shape_tp[k], segment = a_.shape_segment[k];
            const auto prio = static_cast<size_t>(a_.shape_priority[k]);
            const size_t at = static_cast<size_t>(std::lower_bound(levels_.begin(), levels_.end(), a_.shape_mem[k]) - levels_.begin());
            size_t key = 0;
            while (key < totals_.size() && !(totals_[key].at == at && totals_[key].tp == tp && totals_[key].prio == prio &&
                                             totals_[key].segment == segment))
                ++key;
            if (key == totals_.size()) totals_.push_back(Totals{at, tp, prio, segment, 0, 0, -1, false, 0, {}, {}});
            shape_key_[k] = key;
        }
    }

    bool done() const { return s_.num_done == n_jobs_; }

    // Some queued job fits now, or after preempting lower-priority preemptible jobs
    // (envs.decision.window.any_feasible, by shape).
    bool any_feasible() {
        if (!s_.qlen) return false;
        for (size_t k = 0; k < a_.q_per_shape.size; ++k)
            if (a_.q_per_shape[k] && fits_any(k)) return true;
        return false;
    }

    // One decision of `sect` (envs.decision.window.select_window, envs.decision.candidates.build_candidates'
    // mask for binpack, spread and topology, baselines/sect.py): the candidate index, or -1
    // (WAIT); the chosen job and its GPUs and geometry.
    int64_t decide(int64_t& job, std::vector<int64_t>& gpus, Geometry& geometry, int64_t queue_window) {
        window(queue_window);
        mask_.assign(static_cast<size_t>(queue_window * NUM_RULES + 1), 0);
        for (size_t slot = 0; slot < window_.size(); ++slot) {
            const uint8_t ok = fits_now(static_cast<size_t>(a_.shape_id[static_cast<size_t>(window_[slot])]));
            for (int64_t r = 0; r < 3; ++r) mask_[slot * NUM_RULES + static_cast<size_t>(r)] = ok;
        }
        Allocation alloc{a_.free_mask.data, a_.node_free.data, a_.node_pressure.data, a_.uplink_demand.data};
        Jobs jobs{n_jobs_, a_.gpus_req.data, a_.tp_degree.data, a_.mem_req.data, a_.kind.data, a_.comm_fraction.data,
                  a_.tp_comm_share.data, a_.estimate.data, a_.work_done.data, a_.restore_s.data, a_.needs_restore.data,
                  a_.q_seq.data, s_.num_needs_restore > 0, a_.segment_gpus.data};
        const int64_t best = choose_sect(c_, m_, alloc, jobs, window_, mask_.data(), static_cast<int64_t>(mask_.size()),
                                         NUM_RULES, &gpus, &geometry);
        job = best < 0 ? -1 : window_[static_cast<size_t>(best / NUM_RULES)];
        return best;
    }

    // One decision of an ordered rule (baselines/base.py's OrderedBaseline): the window's first
    // job whose class fits now, in FIFO order (baselines/fifo.py) or, with `shortest`, by
    // remaining estimate then FIFO (baselines/sjf.py), placed by `rule`; -1 (WAIT) when none fits.
    int64_t decide_ordered(int64_t rule, bool shortest, int64_t& job, std::vector<int64_t>& gpus, Geometry& geometry,
                           int64_t queue_window) {
        job = -1;
        window(queue_window);
        int64_t slot = -1;
        double best = 0.0;
        for (size_t k = 0; k < window_.size(); ++k) {
            const int64_t j = window_[k];
            const auto u = static_cast<size_t>(j);
            if (!fits_now(static_cast<size_t>(a_.shape_id[u]))) continue;
            const double key = shortest ? remaining_estimate(u) : 0.0;
            if (job < 0 || key < best || (key == best && a_.q_seq[u] < a_.q_seq[static_cast<size_t>(job)])) {
                job = j;
                best = key;
                slot = static_cast<int64_t>(k);
            }
        }
        if (job < 0) return -1;
        const auto u = static_cast<size_t>(job);
        Allocation alloc{a_.free_mask.data, a_.node_free.data, a_.node_pressure.data, a_.uplink_demand.data};
        if (!place_free(c_, alloc, a_.gpus_req[u], a_.tp_degree[u], a_.mem_req[u], rule, gpus, a_.segment_gpus[u]))
            throw BadInput("state: a job whose class fits has no placement");  // the mask's contract broken
        placement_geometry(c_, gpus, a_.tp_degree[u], m_.geometry, geometry);
        return slot * NUM_RULES + rule;
    }

    // envs.decision.candidates.build_candidates (rollout.hpp states it): the window, the mask, and each valid
    // candidate's placement.
    void candidates(int64_t queue_window, bool preempt_las, const WaitGuardSpec& guard, const LasSpec& las,
                    CandidateSet& out) {
        const auto Q = static_cast<size_t>(queue_window), R = static_cast<size_t>(NUM_RULES);
        las_ = &las;
        las_ready_ = false;  // the LAS counts belong to this state: made when first needed
        window(queue_window);
        out.window = window_;
        if (preempt_las && out.window.size() < Q) las_only(out.window, Q);
        const size_t nw = out.window.size();
        out.mask.assign(Q * R + 1, 0);
        aligned_.assign(nw, 0);
        for (size_t k = 0; k < nw; ++k) {
            const int64_t j = out.window[k];
            const auto shape = static_cast<size_t>(a_.shape_id[static_cast<size_t>(j)]);
            const Totals& t = totals_of(shape);
            const int64_t need = a_.shape_gpus[shape];
            const bool now = need <= t.now;
            aligned_[k] = now;
            for (size_t r = 0; r < 3; ++r) out.mask[k * R + r] = now;
            out.mask[k * R + 3] = !now && need <= t.after;
            if (preempt_las && !now) out.mask[k * R + 4] = las_fit(j) >= 0;
        }
        out.mask[Q * R] = wait_valid(out.window, guard);
        place_valid(out.window, out.mask.data(), out);
    }

    // The placements of a window's valid candidates other than WAIT (`mask`: the window's slots
    // x NUM_RULES, at least), in index order into out.index, out.gpus and out.victims: place_free
    // for binpack, spread and topology, place_over_victims for preempt and preempt-las (`las`).
    void placements(const std::vector<int64_t>& window, const uint8_t* mask, const LasSpec& las, CandidateSet& out) {
        las_ = &las;
        las_ready_ = false;
        place_valid(window, mask, out);
    }

  private:
    void place_valid(const std::vector<int64_t>& window, const uint8_t* mask, CandidateSet& out) {
        const auto R = static_cast<size_t>(NUM_RULES);
        const size_t nw = window.size();
        out.index.clear();
        out.gpus.clear();
        out.victims.clear();
        Allocation alloc{a_.free_mask.data, a_.node_free.data, a_.node_pressure.data, a_.uplink_demand.data};
        for (size_t i = 0; i < nw * R; ++i) {
            if (!mask[i]) continue;
            const int64_t j = window[i / R];
            const auto u = static_cast<size_t>(j);
            const auto rule = static_cast<int64_t>(i % R);
            out.index.push_back(static_cast<int64_t>(i));
            out.gpus.emplace_back();
            out.victims.emplace_back();
            if (rule < 3)
                place_free(c_, alloc, a_.gpus_req[u], a_.tp_degree[u], a_.mem_req[u], rule, out.gpus.back(), a_.segment_gpus[u]);
            else
                place_over_victims(j, rule == 4, out.gpus.back(), out.victims.back());
        }
    }

  public:
    // envs.decision.window.can_place (`preempt_las`) or any_feasible: some queued job has a valid placement.
    bool can_place(bool preempt_las, const LasSpec& las) {
        if (any_feasible()) return true;
        if (!preempt_las || !s_.qlen) return false;
        las_ = &las;
        las_ready_ = false;
        if (!las_state()) return false;
        for (int64_t i = 0; i < s_.qlen; ++i) {  // no queued job fits either way here: each is blocked
            const int64_t j = a_.q_ids[static_cast<size_t>(i)];
            if (las_fit(j) >= 0) return true;
        }
        return false;
    }

    // envs.decision.state.remaining_estimate_s: the estimate minus the work done, at least 0, plus the
    // restore owed (added only while some job owes one).
    double remaining_estimate(size_t u) const {
        double r = a_.estimate[u] - a_.work_done[u];
        if (r < 0.0) r = 0.0;
        if (s_.num_needs_restore > 0) r = r + a_.restore_s[u] * (a_.needs_restore[u] ? 1.0 : 0.0);
        return r;
    }

    // Simulator.start (its records, then envs.core.kernels._launch_job, the rates and the power).
    void start(int64_t j, const std::vector<int64_t>& gpus, const Geometry& g) {
        const auto u = static_cast<size_t>(j);
        a_.wait_s[u] += s_.now - a_.queued_since[u];
        slot_[u] = add_record(j, g);
        mark_launched(j);
        queue_remove(j);
        load(1.0, j, slot_[u]);
        claim(j, gpus, true);
        update_rates();
        s_.power_w = masked_power();
    }

    // Simulator.preempt_and_start: each victim stops and checkpoints, keeping its GPUs; `gpus`
    // are reserved for queued job `j`, which starts when the last of them is released.
    void preempt_and_start(int64_t j, const std::vector<int64_t>& gpus, const std::vector<int64_t>& victims) {
        for (int64_t v : victims) preempt(v);
        queue_remove(j);
        a_.state[static_cast<size_t>(j)] = RESERVED;
        a_.reserved.push_back(j);
        a_.reserved_gpus.push_back(gpus);
        ++s_.alloc_version;  // AllocationLedger.reserve: the free counts without the promised GPUs
        for (int64_t gpu : gpus) {
            const auto x = static_cast<size_t>(gpu);
            a_.gpu_reserved[x] = j;
            if (a_.free_mask[x]) {
                a_.free_mask[x] = 0;
                const auto n = static_cast<size_t>(c_.gpu_node[x]);
                const int64_t was = a_.node_free[n];
                a_.node_free[n] = was - 1;
                changed(n);
                --s_.num_free;
                s_.fragmented += fragmented_of(n, was - 1) - fragmented_of(n, was);
            }
        }
        update_rates();
        s_.power_w = masked_power();
    }

    // Simulator.advance, bounded by `until` (envs.core.kernels.run_events' event).
    Event event(double until) {
        auto& run = a_.running;
        const size_t nrun = run.size();
        bool restoring = false;
        const int64_t na = s_.next_arrival;
        double t = na < n_jobs_ ? a_.arrival[static_cast<size_t>(na)] : INF;
        if (nrun) {
            const double cmp = next_completion(restoring);
            if (cmp < t) t = cmp;
        }
        if (!a_.checkpointing.empty()) {
            double ck = INF;
            for (int64_t v : a_.checkpointing) ck = std::min(ck, a_.checkpoint_end[static_cast<size_t>(v)]);
            if (ck < t) t = ck;
        }
        if (t > until) return UNTIL;
        if (!(t < INF)) return NO_EVENT;
        const double dt = t - s_.now;
        integrals(dt);
        size_t found = 0;
        if (nrun) {
            const double useful = advance_running(dt, restoring, true, found);
            if (dt > 0) s_.useful_work_s += useful;
        }
        s_.now = t;
        bool changed = found > 0;
        if (changed) {
            for (size_t i = 0; i < found; ++i) {
                const int64_t j = order_[i];
                const auto u = static_cast<size_t>(j);
                a_.work_left[u] = 0.0;
                a_.work_done[u] = a_.work_total[u];
                a_.state[u] = DONE;
                a_.end[u] = s_.now;
                if (rec_) close_segment(j, false);
                load(-1.0, j, slot_[u]);
                release_job(j);
                ++s_.num_done;
                --s_.jobs_in_system;
            }
            run.clear();
            for (size_t i = nrun; i-- > found;) run.push_back(order_[i]);  // the others, in their order
        }
        if (!a_.checkpointing.empty() || !a_.reserved.empty()) changed |= finish_checkpoints();
        admit_arrivals();
        if (changed) {
            update_rates();
            s_.power_w = masked_power();
        }
        ++events_;
        if (rec_) record_row();
        return PROCESSED;
    }

    // Simulator.advance_until(t) when the next event is later than t: integrate, no event.
    void integrate_to(double t) {
        const double dt = t - s_.now;
        integrals(dt);
        if (!a_.running.empty() && dt > 0) {
            bool restoring = false;
            for (int64_t j : a_.running) restoring |= a_.overhead_left[static_cast<size_t>(j)] > 0;
            size_t found = 0;
            s_.useful_work_s += advance_running(dt, restoring, false, found);
        }
        s_.now = t;
        if (rec_) record_row();
    }

    int64_t events_ = 0;
    bool track_ = true;  // keep the run and interference times and the useful work (rollout_sect's `track`)

  private:
    void close_segment(int64_t j, bool preempted) {  // Simulator._close_segment
        const auto u = static_cast<size_t>(j);
        rec_->seg_job.push_back(j);
        rec_->seg_start.push_back(seg_begin_[u]);
        rec_->seg_end.push_back(s_.now);
        rec_->seg_preempted.push_back(preempted ? 1 : 0);
        rec_->seg_gpus.insert(rec_->seg_gpus.end(), job_gpus_[u].begin(), job_gpus_[u].end());
        rec_->seg_gpu_end.push_back(static_cast<int64_t>(rec_->seg_gpus.size()));
    }

    void record_row() {  // Simulator._record
        const double row[6] = {s_.now, static_cast<double>(c_.num_gpus - s_.num_free), static_cast<double>(s_.qlen),
                               static_cast<double>(a_.running.size()), static_cast<double>(s_.fragmented), s_.power_w};
        rec_->timeline.insert(rec_->timeline.end(), row, row + 6);
    }

    void integrals(double dt) {
        if (dt > 0) {
            s_.jobs_in_system_s += static_cast<double>(s_.jobs_in_system) * dt;
            s_.energy_j += s_.power_w * dt;
            s_.allocated_gpu_s += static_cast<double>(c_.num_gpus - s_.num_free) * dt;
        }
    }

    // envs.core.kernels.next_completion_s, and `restoring`: some running job owes a restore. Both
    // of its forms in one pass: now + min(work left / rate) when none owes one, else
    // min(now + restore left + work left / rate).
    double next_completion(bool& restoring) const {
        double mn = INF, t = INF;
        bool owed = false;
        const double now = s_.now;
        for (int64_t j : a_.running) {
            const auto u = static_cast<size_t>(j);
            const double over = a_.overhead_left[u];
            const double q = a_.work_left[u] / a_.rate[u];
            owed |= over > 0;
            if (q < mn) mn = q;
            const double x = now + over + q;
            if (x < t) t = x;
        }
        restoring = owed;
        return owed ? t : now + mn;
    }

    // envs.core.kernels.advance_running: integrate the running jobs over dt; with `finish`, the
    // finished first in order_ (in run's order), the others after them reversed.
    // Without `track_` (a lookahead's costs: nothing reads them after the rollout), the run and
    // interference times and the useful work are not kept (0 is returned).
    double advance_running(double dt, bool restoring, bool finish, size_t& found) {
        const auto& run = a_.running;
        const size_t n = run.size();
        double total = 0.0;
        found = 0;
        if (finish) order_.resize(n);
        size_t back = n;
        if (dt > 0) {
            if (track_) useful_.resize(n);
            for (size_t i = 0; i < n; ++i) {
                const auto j = static_cast<size_t>(run[i]);
                const double rate = a_.rate[j];
                double progress, over = 0.0;
                if (restoring) {
                    const double left = a_.overhead_left[j];
                    const double overhead = std::min(left, dt);
                    over = left - overhead;
                    a_.overhead_left[j] = over;
                    progress = (dt - overhead) * rate;
                } else {
                    progress = dt * rate;
                    over = a_.overhead_left[j];
                }
                double left = a_.work_left[j];
                progress = std::min(progress, left);
                left = left - progress;
                a_.work_left[j] = left;
                a_.work_done[j] = a_.work_total[j] - left;
                const double gpus = static_cast<double>(a_.gpus_req[j]);
                a_.attained_gpu_s[j] += gpus * dt;
                if (track_) {
                    useful_[i] = progress * gpus;
                    a_.run_s[j] += dt;
                    a_.interference_loss_s[j] += (1.0 - a_.interference[j]) * dt;
                }
                if (finish) {  // finished: in front, in run's order; the others from the back
                    if (over + left / rate <= 1e-7)
                        order_[found++] = run[i];
                    else
                        order_[--back] = run[i];
                }
            }
            if (track_) total = 0.0 + pairwise(useful_.data(), 0, n);
        } else if (finish) {
            for (int64_t j : run) {
                const auto u = static_cast<size_t>(j);
                if (a_.overhead_left[u] + a_.work_left[u] / a_.rate[u] <= 1e-7)
                    order_[found++] = j;
                else
                    order_[--back] = j;
            }
        }
        return total;
    }

    void copy_record(int64_t j) {  // job j's load record (PlacedTable row) into the rollout's own
        const auto r = static_cast<size_t>(a_.job_slot[static_cast<size_t>(j)]);
        const int64_t lo = a_.rec_i[r * 4], hi = a_.rec_i[r * 4 + 1], uhi = a_.rec_i[r * 4 + 2];
        const auto row = static_cast<int64_t>(ri_.size() / 4);
        const auto k = static_cast<int64_t>(pi_.size());
        for (int64_t q = lo; q < uhi; ++q) {
            pi_.push_back(a_.pool_i[static_cast<size_t>(q)]);
            pc_.push_back(a_.pool_counts[static_cast<size_t>(q)]);
        }
        for (int x = 0; x < 8; ++x) rf_.push_back(a_.rec_f[r * 8 + static_cast<size_t>(x)]);
        ri_.insert(ri_.end(), {k, k + (hi - lo), k + (uhi - lo), a_.rec_i[r * 4 + 3]});
        slot_[static_cast<size_t>(j)] = row;
    }

    void mark_launched(int64_t j) {  // Simulator._mark_launched
        const auto u = static_cast<size_t>(j);
        a_.state[u] = RUNNING;
        double restore = 0.0;
        if (a_.needs_restore[u]) {
            restore = a_.restore_s[u];
            --s_.num_needs_restore;
        }
        a_.overhead_left[u] = restore;
        a_.needs_restore[u] = 0;
        if (std::isnan(a_.first_start[u])) a_.first_start[u] = s_.now;
        a_.running.push_back(j);
        if (rec_) seg_begin_[u] = s_.now;
    }

    // AllocationLedger.claim: job j takes `gpus` (`free`: they were free, else reserved for it),
    // then the per-node owned and free counts and the power of its record's nodes.
    void claim(int64_t j, const std::vector<int64_t>& gpus, bool free) {
        if (rec_) job_gpus_[static_cast<size_t>(j)] = gpus;
        for (int64_t gpu : gpus) {
            const auto x = static_cast<size_t>(gpu);
            a_.gpu_owner[x] = j;
            a_.gpu_reserved[x] = -1;
            a_.free_mask[x] = 0;
        }
        const auto r = static_cast<size_t>(slot_[static_cast<size_t>(j)]);
        const int64_t lo = ri_[r * 4], hi = ri_[r * 4 + 1];
        ++s_.alloc_version;
        for (int64_t q = lo; q < hi; ++q) {
            const auto n = static_cast<size_t>(pi_[static_cast<size_t>(q)]);
            const auto k = static_cast<int64_t>(pc_[static_cast<size_t>(q)]);
            a_.node_owned[n] += k;
            if (free) {
                const int64_t was = a_.node_free[n];
                a_.node_free[n] = was - k;
                changed(n);
                s_.num_free -= k;
                s_.fragmented += fragmented_of(n, was - k) - fragmented_of(n, was);
            }
        }
        for (int64_t q = lo; q < hi; ++q) node_power(static_cast<size_t>(pi_[static_cast<size_t>(q)]));
    }

    // Simulator._preempt: the victim stops running and loading its nodes, keeps its GPUs while it
    // saves its checkpoint, and owes a restore.
    void preempt(int64_t v) {
        const auto u = static_cast<size_t>(v);
        auto& run = a_.running;
        run.erase(std::remove(run.begin(), run.end(), v), run.end());
        if (rec_) close_segment(v, true);
        load(-1.0, v, slot_[u]);
        a_.state[u] = CHECKPOINTING;
        a_.checkpoint_end[u] = s_.now + a_.checkpoint_s[u];
        a_.checkpointing.push_back(v);
        a_.rate[u] = 0.0;
        ++a_.preemptions[u];
        ++s_.num_preemptions;
        a_.needs_restore[u] = 1;
        ++s_.num_needs_restore;
        s_.preemption_gpu_s += static_cast<double>(a_.gpus_req[u]) * (a_.checkpoint_s[u] + a_.restore_s[u]);
    }

    // Simulator._finish_checkpoints: the checkpoints ended by now release their GPUs and their
    // jobs queue again; each reserved job whose GPUs are all released launches on them. True
    // when a checkpoint ended.
    bool finish_checkpoints() {
        ended_.clear();
        auto& ck = a_.checkpointing;
        for (int64_t v : ck)
            if (a_.checkpoint_end[static_cast<size_t>(v)] <= s_.now + EPS) ended_.push_back(v);
        for (int64_t v : ended_) {
            const auto u = static_cast<size_t>(v);
            ck.erase(std::find(ck.begin(), ck.end(), v));
            a_.checkpoint_end[u] = INF;
            release_job(v);
            a_.state[u] = QUEUED;
            a_.queued_since[u] = s_.now;
            queue_push(v);
        }
        for (size_t i = 0; i < a_.reserved.size();) {
            const int64_t r = a_.reserved[i];
            bool released = true;
            for (int64_t gpu : a_.reserved_gpus[i]) released &= a_.gpu_owner[static_cast<size_t>(gpu)] < 0;
            if (!released) {
                ++i;
                continue;
            }
            const std::vector<int64_t> gpus = a_.reserved_gpus[i];
            a_.reserved.erase(a_.reserved.begin() + static_cast<std::ptrdiff_t>(i));
            a_.reserved_gpus.erase(a_.reserved_gpus.begin() + static_cast<std::ptrdiff_t>(i));
            const auto u = static_cast<size_t>(r);
            a_.wait_s[u] += s_.now - a_.queued_since[u];
            placement_geometry(c_, gpus, a_.tp_degree[u], m_.geometry, launch_geometry_);  // Simulator._launch
            slot_[u] = add_record(r, launch_geometry_);
            load(1.0, r, slot_[u]);
            mark_launched(r);
            claim(r, gpus, false);  // its GPUs were reserved: out of the free counts already
        }
        return !ended_.empty();
    }

    void admit_arrivals() {  // Simulator._admit_arrivals
        const double until = s_.now + EPS;
        int64_t j = s_.next_arrival;
        while (j < n_jobs_ && a_.arrival[static_cast<size_t>(j)] <= until) {
            const auto u = static_cast<size_t>(j);
            a_.state[u] = QUEUED;
            a_.queued_since[u] = s_.now;
            queue_push(j);
            ++s_.jobs_in_system;
            s_.next_arrival = ++j;
        }
    }

    void queue_push(int64_t j) {  // JobQueue.push with the job's remaining estimate now
        const auto u = static_cast<size_t>(j);
        {
            const double r = remaining_estimate(u);
            const int64_t length = s_.qlen, seq = s_.enqueued;
            a_.q_ids[static_cast<size_t>(length)] = j;
            a_.q_remaining[u] = r;
            a_.q_seq[u] = seq;
            int64_t lo = 0, hi = length;  // envs.core.kernels.sorted_insert_at
            while (lo < hi) {
                const int64_t mid = (lo + hi) / 2;
                if (r < a_.q_remaining[static_cast<size_t>(a_.q_sorted[static_cast<size_t>(mid)])])
                    hi = mid;
                else
                    lo = mid + 1;
            }
            for (int64_t x = length; x > lo; --x) a_.q_sorted[static_cast<size_t>(x)] = a_.q_sorted[static_cast<size_t>(x - 1)];
            a_.q_sorted[static_cast<size_t>(lo)] = j;
            s_.qlen = length + 1;
            s_.queued_gpus += a_.gpus_req[u];
            if (a_.priority[u] == priority_high_) ++s_.queued_high;
            s_.enqueued = seq + 1;
            ++a_.q_per_shape[static_cast<size_t>(a_.shape_id[u])];
        }
    }

    void queue_remove(int64_t j) {  // JobQueue.remove (envs.core.kernels.queue_positions)
        const auto u = static_cast<size_t>(j);
        const double key = a_.q_remaining[u];
        const int64_t seq = a_.q_seq[u], length = s_.qlen;
        int64_t lo = 0, hi = length;
        while (lo < hi) {
            const int64_t mid = (lo + hi) / 2;
            const auto x = static_cast<size_t>(a_.q_sorted[static_cast<size_t>(mid)]);
            if (a_.q_remaining[x] < key || (a_.q_remaining[x] == key && a_.q_seq[x] < seq))
                lo = mid + 1;
            else
                hi = mid;
        }
        const int64_t at = lo;
        lo = 0;
        hi = length;
        while (lo < hi) {
            const int64_t mid = (lo + hi) / 2;
            if (a_.q_seq[static_cast<size_t>(a_.q_ids[static_cast<size_t>(mid)])] < seq)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (a_.q_sorted[static_cast<size_t>(at)] != j || a_.q_ids[static_cast<size_t>(lo)] != j)
            throw BadInput("queue: a started job is not where the queue's order puts it");
        for (int64_t x = at; x < length - 1; ++x) a_.q_sorted[static_cast<size_t>(x)] = a_.q_sorted[static_cast<size_t>(x + 1)];
        for (int64_t x = lo; x < length - 1; ++x) a_.q_ids[static_cast<size_t>(x)] = a_.q_ids[static_cast<size_t>(x + 1)];
        s_.qlen = length - 1;
        s_.queued_gpus -= a_.gpus_req[u];
        if (a_.priority[u] == priority_high_) --s_.queued_high;
        --a_.q_per_shape[static_cast<size_t>(a_.shape_id[u])];
    }

    // envs.sim.load.Placed and PlacedTable.add for job j on geometry g.
    int64_t add_record(int64_t j, const Geometry& g) {
        const auto u = static_cast<size_t>(j);
        const int64_t kind = a_.kind[u], need = a_.gpus_req[u], tp = a_.tp_degree[u];
        const double comm = a_.comm_fraction[u], share = a_.tp_comm_share[u];
        double c_tp, c_dp;
        comm_shares(need, tp, comm, share, c_tp, c_dp);
        const auto k = static_cast<size_t>(kind);
        const double min_speed = g.min_speed_by_kind[k];
        // the rate before interference: PlacementProfile.efficiency(1.0)
        const double eff = efficiency_of(g.tp_stretch, 1.0, g.dp_bw_GBps * 1.0, c_tp, c_dp, m_.reference_net_per_gpu_GBps);
        const auto row = static_cast<int64_t>(ri_.size() / 4);
        const auto at = static_cast<int64_t>(pi_.size());
        for (size_t i = 0; i < g.nodes.size(); ++i) {
            pi_.push_back(g.nodes[i]);
            pc_.push_back(static_cast<double>(g.gpus_on_node[i]));
        }
        for (size_t i = 0; i < g.uplinks.size(); ++i) {
            pi_.push_back(g.uplinks[i]);
            pc_.push_back(g.uplink_demand_GBps[i]);
        }
        const auto n = static_cast<int64_t>(g.nodes.size()), nu = static_cast<int64_t>(g.uplinks.size());
        rf_.insert(rf_.end(), {m_.pressure_by_kind[k], m_.interference_coeff * m_.sensitivity_by_kind[k],
                               min_speed * eff, min_speed, g.tp_stretch, g.dp_bw_GBps, c_tp, c_dp});
        ri_.insert(ri_.end(), {at, at + n, at + n + nu, g.tp_cross_node ? 1 : 0});
        return row;
    }

    // LoadModel._add_load and AllocationLedger.count_preemptible: job j starts (+1) or stops (-1)
    // loading its nodes and uplinks and counting as preemptible
    void load(double sign, int64_t j, int64_t row) {
        const auto r = static_cast<size_t>(row);
        const int64_t lo = ri_[r * 4], hi = ri_[r * 4 + 1], uhi = ri_[r * 4 + 2];
        const double pressure = sign * rf_[r * 8];
        for (int64_t q = lo; q < hi; ++q) {
            const auto n = static_cast<size_t>(pi_[static_cast<size_t>(q)]);
            a_.node_pressure[n] += pressure * pc_[static_cast<size_t>(q)];
            if (!a_.dirty_node[n]) {
                a_.dirty_node[n] = 1;
                dirty_nodes_.push_back(static_cast<int64_t>(n));
            }
        }
        for (int64_t q = hi; q < uhi; ++q) {
            const auto x = static_cast<size_t>(pi_[static_cast<size_t>(q)]);
            a_.uplink_demand[x] += sign * pc_[static_cast<size_t>(q)];
            if (!a_.dirty_uplink[x]) {
                a_.dirty_uplink[x] = 1;
                dirty_uplinks_.push_back(static_cast<int64_t>(x));
            }
        }
        if (sign > 0)
            index_add(j, row);
        else
            index_remove(j, row);
        const auto step = static_cast<int64_t>(sign);
        const auto P = static_cast<size_t>(a_.num_priorities);
        if (a_.preemptible[static_cast<size_t>(j)]) {
            const auto p = static_cast<size_t>(a_.priority[static_cast<size_t>(j)]);
            for (int64_t q = lo; q < hi; ++q) {
                const auto n = static_cast<size_t>(pi_[static_cast<size_t>(q)]);
                a_.node_preemptible[n * P + p] += step * static_cast<int64_t>(pc_[static_cast<size_t>(q)]);
                changed(n);
            }
        }
    }

    int64_t fragmented_of(size_t n, int64_t free) const { return gangsched::fragmented_of(free, a_.whole_gang[n]); }

    void node_power(size_t n) {  // PowerMeter.nodes_changed
        const int64_t o = a_.node_owned[n];
        a_.node_power_w[n] = a_.power_terms[n * 3] + static_cast<double>(o) * a_.power_terms[n * 3 + 1] +
                             static_cast<double>(c_.node_gpus[n] - o) * a_.power_terms[n * 3 + 2];
        a_.node_on[n] = o > 0;
    }

    // Simulator._release (AllocationLedger.release): a stopped job lets its GPUs go; those promised
    // to a reserved job stay out of the free counts.
    void release_job(int64_t j) {
        const auto u = static_cast<size_t>(j);
        a_.rate[u] = 0.0;
        const auto r = static_cast<size_t>(slot_[u]);
        ++s_.alloc_version;
        for (int64_t q = ri_[r * 4]; q < ri_[r * 4 + 1]; ++q) {
            const auto n = static_cast<size_t>(pi_[static_cast<size_t>(q)]);
            int64_t freed = 0;
            for (int64_t g = c_.node_first_gpu[n]; g < c_.node_first_gpu[n] + c_.node_gpus[n]; ++g)
                if (a_.gpu_owner[static_cast<size_t>(g)] == j) {
                    a_.gpu_owner[static_cast<size_t>(g)] = -1;
                    if (a_.gpu_reserved[static_cast<size_t>(g)] < 0) {
                        a_.free_mask[static_cast<size_t>(g)] = 1;
                        ++freed;
                    }
                }
            a_.node_owned[n] -= static_cast<int64_t>(pc_[static_cast<size_t>(q)]);
            const int64_t was = a_.node_free[n];
            a_.node_free[n] = was + freed;
            changed(n);
            s_.num_free += freed;
            s_.fragmented += fragmented_of(n, was + freed) - fragmented_of(n, was);
            node_power(n);
        }
    }

    double masked_power() {  // envs.core.kernels.masked_sum(node_power_w, node_on)
        picked_.clear();
        for (size_t n = 0; n < a_.node_power_w.size; ++n)
            if (a_.node_on[n]) picked_.push_back(a_.node_power_w[n]);
        return 0.0 + pairwise(picked_.data(), 0, picked_.size());
    }

    // The running jobs' records on each node and uplink (a node's at on_node_[node_first_gpu[n]:
    // + on_node_n_[n]]: a job there holds one of its GPUs at least, so they fit); a job is added
    // when it starts loading, removed when it stops.
    void index_add(int64_t j, int64_t row) {
        const auto r = static_cast<size_t>(row);
        const int64_t lo = ri_[r * 4], hi = ri_[r * 4 + 1], uhi = ri_[r * 4 + 2];
        for (int64_t q = lo; q < hi; ++q) {
            const auto n = static_cast<size_t>(pi_[static_cast<size_t>(q)]);
            int64_t& count = on_node_n_[n];
            if (count >= c_.node_gpus[n]) indexed_ = false;  // more jobs than GPUs: not a real state; every job tested
            else on_node_[static_cast<size_t>(c_.node_first_gpu[n] + count++)] = j;
        }
        for (int64_t q = hi; q < uhi; ++q) on_uplink_[static_cast<size_t>(pi_[static_cast<size_t>(q)])].push_back(j);
    }

    void index_remove(int64_t j, int64_t row) {
        const auto r = static_cast<size_t>(row);
        const int64_t lo = ri_[r * 4], hi = ri_[r * 4 + 1], uhi = ri_[r * 4 + 2];
        for (int64_t q = lo; q < hi; ++q) {
            const auto n = static_cast<size_t>(pi_[static_cast<size_t>(q)]);
            int64_t* at = on_node_.data() + c_.node_first_gpu[n];
            int64_t& count = on_node_n_[n];
            for (int64_t k = 0; k < count; ++k)
                if (at[k] == j) {
                    at[k] = at[--count];
                    break;
                }
        }
        for (int64_t q = hi; q < uhi; ++q) {
            auto& jobs = on_uplink_[static_cast<size_t>(pi_[static_cast<size_t>(q)])];
            const auto it = std::find(jobs.begin(), jobs.end(), j);
            if (it != jobs.end()) {
                *it = jobs.back();
                jobs.pop_back();
            }
        }
    }

    // envs.core.kernels.update_rates over the rollout's records: the running jobs on a dirty node
    // or (with some dirty uplink) a dirty uplink get their rates anew. Each job's rate reads only
    // the loads and its record, so it does not matter in which order they are taken: those of the
    // dirty nodes' and uplinks' lists (or, should a list have overflowed, of every running job).
    void update_rates() {
        const bool any_uplink = !dirty_uplinks_.empty();
        ++epoch_;
        stale_.clear();
        if (indexed_) {
            const auto take = [&](int64_t j) {
                int64_t& mark = stamp_[static_cast<size_t>(j)];
                if (mark != epoch_) {
                    mark = epoch_;
                    stale_.push_back(j);
                }
            };
            for (int64_t v : dirty_nodes_) {
                const auto n = static_cast<size_t>(v);
                const int64_t* at = on_node_.data() + c_.node_first_gpu[n];
                for (int64_t k = 0; k < on_node_n_[n]; ++k) take(at[k]);
            }
            for (int64_t x : dirty_uplinks_)
                for (int64_t j : on_uplink_[static_cast<size_t>(x)]) take(j);
        } else {
            for (int64_t j : a_.running) {
                const auto s = static_cast<size_t>(slot_[static_cast<size_t>(j)]);
                const int64_t lo = ri_[s * 4], hi = ri_[s * 4 + 1], uhi = ri_[s * 4 + 2];
                bool stale = false;
                for (int64_t q = lo; q < hi && !stale; ++q) stale = a_.dirty_node[static_cast<size_t>(pi_[static_cast<size_t>(q)])] != 0;
                if (!stale && any_uplink)
                    for (int64_t q = hi; q < uhi && !stale; ++q)
                        stale = a_.dirty_uplink[static_cast<size_t>(pi_[static_cast<size_t>(q)])] != 0;
                if (stale) stale_.push_back(j);
            }
        }
        bool have_shares = false;
        for (int64_t j : stale_) {
            const auto u = static_cast<size_t>(j);
            const auto s = static_cast<size_t>(slot_[u]);
            const int64_t lo = ri_[s * 4], hi = ri_[s * 4 + 1], uhi = ri_[s * 4 + 2];
            const double pressure = rf_[s * 8];
            auto n = static_cast<size_t>(pi_[static_cast<size_t>(lo)]);
            double others = (a_.node_pressure[n] - pressure * pc_[static_cast<size_t>(lo)]) / static_cast<double>(c_.node_gpus[n]);
            for (int64_t q = lo + 1; q < hi; ++q) {
                n = static_cast<size_t>(pi_[static_cast<size_t>(q)]);
                const double x = (a_.node_pressure[n] - pressure * pc_[static_cast<size_t>(q)]) / static_cast<double>(c_.node_gpus[n]);
                if (x > others) others = x;
            }
            const double interf = interference_of(rf_[s * 8 + 1], others);
            a_.interference[u] = interf;
            if (uhi > hi) {
                if (!have_shares) {
                    shares_.assign(a_.uplink_demand.size, 1.0);
                    for (size_t x = 0; x < shares_.size(); ++x)
                        if (a_.uplink_demand[x] > c_.switch_uplink_GBps[x]) shares_[x] = c_.switch_uplink_GBps[x] / a_.uplink_demand[x];
                    have_shares = true;
                }
                double congestion = shares_[static_cast<size_t>(pi_[static_cast<size_t>(hi)])];
                for (int64_t q = hi + 1; q < uhi; ++q) {
                    const double x = shares_[static_cast<size_t>(pi_[static_cast<size_t>(q)])];
                    if (x < congestion) congestion = x;
                }
                a_.rate[u] = rf_[s * 8 + 3] *
                             efficiency_of(rf_[s * 8 + 4], ri_[s * 4 + 3] ? congestion : 1.0, rf_[s * 8 + 5] * congestion,
                                           rf_[s * 8 + 6], rf_[s * 8 + 7], m_.reference_net_per_gpu_GBps) *
                             interf;
            } else {
                a_.rate[u] = rf_[s * 8 + 2] * interf;
            }
        }
        for (int64_t n : dirty_nodes_) a_.dirty_node[static_cast<size_t>(n)] = 0;
        for (int64_t x : dirty_uplinks_) a_.dirty_uplink[static_cast<size_t>(x)] = 0;
        dirty_nodes_.clear();
        dirty_uplinks_.clear();
    }

    // envs.decision.window.class_fits per shape: fits now in whole TP groups, or after preempting the
    // preemptible jobs of lower priority (memory as the smallest level that holds it).
    bool fits_now(size_t k) { return a_.shape_gpus[k] <= totals_of(k).now; }
    bool fits_any(size_t k) {
        const Totals& t = totals_of(k);
        return a_.shape_gpus[k] <= t.now || a_.shape_gpus[k] <= t.after;
    }

    struct Totals {
        size_t at;
        int64_t tp;
        size_t prio;
        int64_t segment;     // GPUs per segment, 0 none
        int64_t now, after;  // GPUs in whole TP groups free now, and after preempting lower priorities
        int64_t version;     // the allocation version they were counted at
        // Where there are no segments and no spanning domains, the sums are per node: each node's
        // terms (node_now, node_after) are kept, and `changed_` from `seen` on lists the nodes
        // whose counts changed since, so only those are counted again.
        bool per_node = false;
        size_t seen = 0;
        std::vector<int64_t> node_now, node_after;
    };

    const Totals& totals_of(size_t k) {
        Totals& t = totals_[shape_key_[k]];
        if (t.version != s_.alloc_version) {
            if (t.version >= 0 && t.per_node && changed_.size() - t.seen <= static_cast<size_t>(c_.num_nodes))
                totals_changed(t);
            else
                totals(t);
            t.seen = changed_.size();
            t.version = s_.alloc_version;
        }
        return t;
    }

    // A node whose free or preemptible counts change (the totals count it again).
    void changed(size_t n) {
        if (changed_.size() >= 64 * static_cast<size_t>(c_.num_nodes) + 64) {  // a long episode: start the list again
            changed_.clear();
            for (Totals& t : totals_) t.version = -1;  // counted whole when next asked
        }
        changed_.push_back(static_cast<int64_t>(n));
    }

    // `totals` for a per-node entry, from its last count: the nodes changed since, again.
    void totals_changed(Totals& t) {
        const size_t prio = t.prio, P = static_cast<size_t>(a_.num_priorities);
        const int64_t tp = t.tp;
        const double level = t.at < levels_.size() ? levels_[t.at] : INF;
        const bool pow2 = (tp & (tp - 1)) == 0;
        const auto whole = [&](int64_t x) { return pow2 ? (x & -tp) : x / tp * tp; };  // x >= 0
        for (size_t i = t.seen; i < changed_.size(); ++i) {
            const auto n = static_cast<size_t>(changed_[i]);
            if (!(c_.node_memory_gb[n] >= level)) continue;
            const int64_t f = a_.node_free[n];
            int64_t held = 0;
            for (size_t p = 0; p < prio && p < P; ++p) held += a_.node_preemptible[n * P + p];
            const int64_t now = whole(f), after = whole(f + held);
            t.now += now - t.node_now[n];
            t.after += after - t.node_after[n];
            t.node_now[n] = now;
            t.node_after[n] = after;
        }
    }

    // envs.decision.window.class_fits' totals for a memory level, TP degree and priority: in whole TP groups
    // on nodes with the memory, plus whole groups of fully available trays per spanning domain.
    void totals(Totals& out) {
        const size_t at = out.at, prio = out.prio;
        const int64_t tp = out.tp;
        const auto N = static_cast<size_t>(c_.num_nodes), P = static_cast<size_t>(a_.num_priorities);
        const double level = at < levels_.size() ? levels_[at] : INF;  // above every level: no node has it
        if (out.segment > 0) {  // envs.decision.window._segment_totals: per block, whole segments of the level's usable GPUs
            counts_.assign(N, 0);
            seg_after_.assign(N, 0);
            for (size_t n = 0; n < N; ++n) {
                if (!(c_.node_memory_gb[n] >= level)) continue;
                int64_t held = 0;
                for (size_t p = 0; p < prio && p < P; ++p) held += a_.node_preemptible[n * P + p];
                counts_[n] = a_.node_free[n];
                seg_after_[n] = a_.node_free[n] + held;
            }
            usable_per_node(c_, counts_, tp, usable_);
            out.now = segment_total(c_, usable_, out.segment);
            usable_per_node(c_, seg_after_, tp, usable_);
            out.after = segment_total(c_, usable_, out.segment);
            return;
        }
        const bool pow2 = (tp & (tp - 1)) == 0;
        const auto whole = [&](int64_t x) { return pow2 ? (x & -tp) : x / tp * tp; };  // x >= 0
        const bool spanning = c_.num_domains > 0 && c_.spans(tp);
        out.per_node = !spanning;
        if (out.per_node) {
            out.node_now.assign(N, 0);
            out.node_after.assign(N, 0);
        }
        int64_t now = 0, after = 0;
        for (size_t n = 0; n < N; ++n) {
            if (!(c_.node_memory_gb[n] >= level)) continue;
            const int64_t f = a_.node_free[n];
            int64_t held = 0;
            for (size_t p = 0; p < prio && p < P; ++p) held += a_.node_preemptible[n * P + p];
            const int64_t node_now = whole(f), node_after = whole(f + held);
            now += node_now;
            after += node_after;
            if (out.per_node) {
                out.node_now[n] = node_now;
                out.node_after[n] = node_after;
            }
        }
        if (spanning) {  // whole groups of fully available trays per domain
            for (int64_t d = 0; d < c_.num_domains; ++d) {
                if (!c_.spanning(d, tp)) continue;
                const auto& nodes = c_.domain_nodes[static_cast<size_t>(d)];
                if (!(c_.node_memory_gb[static_cast<size_t>(nodes[0])] >= level)) continue;
                const int64_t trays = tp / c_.domain_tray[static_cast<size_t>(d)];
                int64_t whole_now = 0, whole_after = 0;
                for (int64_t v : nodes) {
                    const auto n = static_cast<size_t>(v);
                    const int64_t f = a_.node_free[n];
                    int64_t held = 0;
                    for (size_t p = 0; p < prio && p < P; ++p) held += a_.node_preemptible[n * P + p];
                    whole_now += f == c_.node_gpus[n];
                    whole_after += f + held == c_.node_gpus[n];
                }
                now += whole_now / trays * tp;
                after += whole_after / trays * tp;
            }
        }
        out.now = now;
        out.after = after;
    }

    // envs.decision.window.select_window: up to Q feasible queued jobs, round-robin from the heads of
    // the orders arrival (FIFO), shortest remaining estimate, highest priority, least attained.
    // No order is walked further than its first 2Q jobs (at most Q picks and Q skips in each), so
    // each is kept as that head alone: the first 2Q by (key, queue position), in one pass.
    void window(int64_t queue_window) {
        const auto Q = static_cast<size_t>(queue_window), H = 2 * Q;
        fifo_.clear();
        by_priority_.clear();
        by_attained_.clear();
        size_t feasible = 0;
        const double top = static_cast<double>(s_.queued_high ? priority_high_ : priority_high_ - 1);  // high or normal
        for (int64_t i = 0; i < s_.qlen; ++i) {
            const int64_t j = a_.q_ids[static_cast<size_t>(i)];
            const auto u = static_cast<size_t>(j);
            if (!fits_any(static_cast<size_t>(a_.shape_id[u]))) continue;
            ++feasible;
            if (fifo_.size() < H) fifo_.push_back(j);
            keep_head(by_priority_, H, -static_cast<double>(a_.priority[u]), i, j);
            keep_head(by_attained_, H, a_.attained_gpu_s[u], i, j);
            // envs.core.kernels.queue_window's early stop: both heads full of the smallest key a queued
            // job can have (the top queued priority, no service): a later job only ties them
            if (feasible >= H && by_priority_.size() == H && by_priority_.back().key <= -top && by_attained_.size() == H &&
                by_attained_.back().key <= 0.0)
                break;
        }
        window_.clear();
        if (feasible <= Q) {
            window_ = fifo_;
            return;
        }
        shortest_.clear();
        for (int64_t i = 0; i < s_.qlen && shortest_.size() < H; ++i) {
            const int64_t j = a_.q_sorted[static_cast<size_t>(i)];
            if (fits_any(static_cast<size_t>(a_.shape_id[static_cast<size_t>(j)]))) shortest_.push_back(j);
        }
        const std::vector<int64_t>* orders[4] = {&fifo_, &shortest_, nullptr, nullptr};
        priority_ids_.clear();
        for (const Keyed& x : by_priority_) priority_ids_.push_back(x.job);
        attained_ids_.clear();
        for (const Keyed& x : by_attained_) attained_ids_.push_back(x.job);
        orders[2] = &priority_ids_;
        orders[3] = &attained_ids_;
        size_t heads[4] = {0, 0, 0, 0};
        const auto seen = [&](int64_t j) { return std::find(window_.begin(), window_.end(), j) != window_.end(); };
        while (window_.size() < Q) {
            for (int k = 0; k < 4; ++k) {
                const auto& order = *orders[k];
                while (heads[k] < order.size() && seen(order[heads[k]])) ++heads[k];
                if (heads[k] < order.size() && window_.size() < Q) window_.push_back(order[heads[k]]);
            }
        }
    }

    // envs.decision.las.las_queue of attained GPU-service `a` (no starvation promotion): the thresholds reached.
    int64_t las_queue_of(double attained) const {
        int64_t q = 0;
        for (double t : las_->thresholds) q += t <= attained;
        return q;
    }

    // envs.decision.las.las_queue of queued job u: with the starvation promotion to queue 0.
    int64_t las_queue_queued(size_t u) const {
        const double att = a_.attained_gpu_s[u];
        const double executed_s = att / static_cast<double>(a_.gpus_req[u]);
        const double waited_s = s_.now - a_.queued_since[u];
        return waited_s >= las_->starvation_factor * executed_s ? 0 : las_queue_of(att);
    }

    // The GPUs of running preemptible jobs per (priority, LAS queue) and node (envs.decision.window._las_totals'
    // held_by), once per state; false when none of those jobs is below queue 0 (no job then has
    // a preempt-las victim).
    bool las_state() {
        if (las_ready_) return las_below_;
        las_ready_ = true;
        las_below_ = false;
        las_totals_.clear();
        const auto N = static_cast<size_t>(c_.num_nodes), NQ = las_->thresholds.size() + 1;
        held_.assign(static_cast<size_t>(a_.num_priorities) * NQ * N, 0);
        for (int64_t j : a_.running) {
            const auto u = static_cast<size_t>(j);
            if (!a_.preemptible[u]) continue;
            const auto q = static_cast<size_t>(las_queue_of(a_.attained_gpu_s[u]));
            las_below_ |= q > 0;
            const size_t row = static_cast<size_t>(a_.priority[u]) * NQ + q;
            const auto r = static_cast<size_t>(slot_[u]);
            for (int64_t x = ri_[r * 4]; x < ri_[r * 4 + 1]; ++x)
                held_[row * N + static_cast<size_t>(pi_[static_cast<size_t>(x)])] += static_cast<int64_t>(pc_[static_cast<size_t>(x)]);
        }
        return las_below_;
    }

    // envs.core.kernels._las_fit: queued job j's LAS queue when preempting the running preemptible jobs of
    // its priority or lower in strictly lower LAS queues would make room for it (by GPU counts),
    // else -1.
    int64_t las_fit(int64_t j) {
        if (!las_state()) return -1;
        const auto u = static_cast<size_t>(j);
        const auto lower = static_cast<int64_t>(las_->thresholds.size());  // queues that have a lower one
        const int64_t q = las_queue_queued(u);
        if (q >= lower) return -1;
        const int64_t row = a_.priority[u] * lower + std::min(q, lower - 1);
        const auto shape = static_cast<size_t>(a_.shape_id[u]);
        const Totals& t = totals_[shape_key_[shape]];
        return a_.shape_gpus[shape] <= las_total(row, t.at, t.tp, t.segment) ? q : -1;
    }

    // envs.decision.window._las_totals' row `row` (priority p, LAS queue q) for a memory level and TP degree:
    // the GPUs usable in whole TP groups counting each node's free GPUs and those held by running
    // preemptible jobs of priority <= p in a LAS queue > q.
    int64_t las_total(int64_t row, size_t at, int64_t tp, int64_t segment) {
        for (const LasTotal& x : las_totals_)
            if (x.row == row && x.at == at && x.tp == tp && x.segment == segment) return x.total;
        const auto N = static_cast<size_t>(c_.num_nodes), NQ = las_->thresholds.size() + 1;
        const auto lower = static_cast<int64_t>(NQ - 1);
        const auto p = static_cast<size_t>(row / lower), q = static_cast<size_t>(row % lower);
        counts_.assign(a_.node_free.data, a_.node_free.data + N);
        for (size_t p2 = 0; p2 <= p; ++p2)
            for (size_t k = q + 1; k < NQ; ++k) {
                const int64_t* h = held_.data() + (p2 * NQ + k) * N;
                for (size_t n = 0; n < N; ++n) counts_[n] += h[n];
            }
        const int64_t total = usable_total(counts_.data(), at, tp, segment);
        las_totals_.push_back(LasTotal{row, at, tp, segment, total});
        return total;
    }

    // envs.decision.window's per-(memory level, TP degree) total over per-node available counts: whole TP
    // groups on the nodes with the level's memory, plus whole groups of fully available trays per
    // domain where the groups span trays (the `totals` above over any counts).
    int64_t usable_total(const int64_t* counts, size_t at, int64_t tp, int64_t segment) {
        const double level = at < levels_.size() ? levels_[at] : INF;
        if (segment > 0) {  // in whole segments per block (envs.decision.window._segment_totals)
            const auto N = static_cast<size_t>(c_.num_nodes);
            seg_after_.assign(N, 0);
            for (size_t n = 0; n < N; ++n)
                if (c_.node_memory_gb[n] >= level) seg_after_[n] = counts[n];
            usable_per_node(c_, seg_after_, tp, usable_);
            return segment_total(c_, usable_, segment);
        }
        int64_t total = 0;
        for (size_t n = 0; n < static_cast<size_t>(c_.num_nodes); ++n)
            if (c_.node_memory_gb[n] >= level) total += counts[n] / tp * tp;
        if (c_.num_domains > 0 && c_.spans(tp)) {
            for (int64_t d = 0; d < c_.num_domains; ++d) {
                if (!c_.spanning(d, tp)) continue;
                const auto& nodes = c_.domain_nodes[static_cast<size_t>(d)];
                if (!(c_.node_memory_gb[static_cast<size_t>(nodes[0])] >= level)) continue;
                int64_t whole = 0;
                for (int64_t v : nodes) whole += counts[static_cast<size_t>(v)] == c_.node_gpus[static_cast<size_t>(v)];
                total += whole / (tp / c_.domain_tray[static_cast<size_t>(d)]) * tp;
            }
        }
        return total;
    }

    // envs.decision.window.las_only_queue into the window's free slots: the queued jobs whose class fits
    // neither now nor after preempting lower priorities but which preempt-las places, in LAS queue
    // order, FIFO inside each.
    void las_only(std::vector<int64_t>& window, size_t Q) {
        bool blocked = false;
        for (size_t k = 0; k < a_.q_per_shape.size && !blocked; ++k) blocked = a_.q_per_shape[k] && !fits_any(k);
        if (!blocked || !las_state()) return;
        extra_.clear();
        for (int64_t i = 0; i < s_.qlen; ++i) {
            const int64_t j = a_.q_ids[static_cast<size_t>(i)];
            if (fits_any(static_cast<size_t>(a_.shape_id[static_cast<size_t>(j)]))) continue;
            const int64_t q = las_fit(j);
            if (q >= 0) extra_.push_back({j, q});
        }
        for (int64_t level = 0; level < static_cast<int64_t>(las_->thresholds.size()) && window.size() < Q; ++level)
            for (const auto& [j, q] : extra_)
                if (q == level && window.size() < Q) window.push_back(j);
    }

    // envs.decision.candidates.wait_valid: something the scheduler knows will happen (a running job, a
    // checkpoint), and with the guard, no window job that could start without preempting overdue.
    bool wait_valid(const std::vector<int64_t>& window, const WaitGuardSpec& g) const {
        if (a_.running.empty() && a_.checkpointing.empty()) return false;
        if (!g.on) return true;
        for (size_t k = 0; k < window.size(); ++k) {
            if (!aligned_[k]) continue;
            const auto u = static_cast<size_t>(window[k]);
            const double waited = a_.wait_s[u] + s_.now - a_.queued_since[u];
            if (waited > py_max(g.overdue_factor * a_.estimate[u], g.min_wait_s)) return false;
        }
        return true;
    }

    // envs.decision.placement._aligned_total: GPUs usable in whole TP groups over per-node available counts.
    int64_t aligned_total(const std::vector<int64_t>& counts, int64_t tp, int64_t segment) {
        int64_t total = 0;
        if (segment > 0) {  // in whole segments per block
            usable_per_node(c_, counts, tp, usable_);
            return segment_total(c_, usable_, segment);
        }
        if (c_.num_domains > 0 && c_.spans(tp)) {
            usable_per_node(c_, counts, tp, usable_);
            for (int64_t x : usable_) total += x;
        } else {
            for (int64_t f : counts) total += f / tp * tp;
        }
        return total;
    }

    // envs.decision.placement.choose_victims (`las` false) and choose_las_victims: the victims from the pool
    // in the rule's order until the free GPUs and theirs hold the gang in whole TP groups, then the
    // topology rule over those GPUs, keeping the victims whose GPUs it uses. Nothing (`gpus` empty)
    // where the reference gives None.
    void place_over_victims(int64_t j, bool las, std::vector<int64_t>& gpus, std::vector<int64_t>& victims) {
        gpus.clear();
        victims.clear();
        const auto u = static_cast<size_t>(j);
        const auto N = static_cast<size_t>(c_.num_nodes);
        const int64_t need = a_.gpus_req[u], tp = a_.tp_degree[u], segment = a_.segment_gpus[u];
        const double mem = a_.mem_req[u];
        vcounts_.resize(N);
        for (size_t n = 0; n < N; ++n) vcounts_[n] = c_.node_memory_gb[n] >= mem ? a_.node_free[n] : 0;
        if (aligned_total(vcounts_, tp, segment) >= need) return;
        const int64_t prio = a_.priority[u];
        const int64_t qj = las ? las_queue_queued(u) : 0;
        pool_.clear();
        for (int64_t v : a_.running) {
            const auto x = static_cast<size_t>(v);
            if (!a_.preemptible[x]) continue;
            if (las ? (a_.priority[x] <= prio && las_queue_of(a_.attained_gpu_s[x]) > qj) : a_.priority[x] < prio)
                pool_.push_back(v);
        }
        if (pool_.empty()) return;
        const bool every_node = levels_.empty() || mem <= levels_.front();  // a victim's GPUs are all useful
        useful_gpus_.assign(pool_.size(), 0);
        for (size_t i = 0; i < pool_.size(); ++i) {
            const auto x = static_cast<size_t>(pool_[i]);
            if (every_node) {
                useful_gpus_[i] = a_.gpus_req[x];
                continue;
            }
            const auto r = static_cast<size_t>(slot_[x]);
            for (int64_t q = ri_[r * 4]; q < ri_[r * 4 + 1]; ++q)
                if (c_.node_memory_gb[static_cast<size_t>(pi_[static_cast<size_t>(q)])] >= mem)
                    useful_gpus_[i] += static_cast<int64_t>(pc_[static_cast<size_t>(q)]);
        }
        // np.lexsort((-useful, key)): by key, then the most useful GPUs, then pool order; the key is
        // the preemption cost (checkpoint plus restore GPU-s), or for preempt-las minus the attained
        // service
        ranked_.resize(pool_.size());
        keys_.resize(pool_.size());
        for (size_t i = 0; i < pool_.size(); ++i) {
            const auto x = static_cast<size_t>(pool_[i]);
            ranked_[i] = i;
            keys_[i] = las ? -a_.attained_gpu_s[x] : static_cast<double>(a_.gpus_req[x]) * (a_.checkpoint_s[x] + a_.restore_s[x]);
        }
        std::stable_sort(ranked_.begin(), ranked_.end(), [&](size_t p, size_t q) {
            if (keys_[p] != keys_[q]) return keys_[p] < keys_[q];
            return -useful_gpus_[p] < -useful_gpus_[q];
        });
        chosen_.clear();
        for (size_t i : ranked_) {
            if (aligned_total(vcounts_, tp, segment) >= need) break;
            if (useful_gpus_[i] <= 0) continue;
            const int64_t v = pool_[i];
            chosen_.push_back(v);
            const auto r = static_cast<size_t>(slot_[static_cast<size_t>(v)]);
            for (int64_t q = ri_[r * 4]; q < ri_[r * 4 + 1]; ++q) {
                const auto n = static_cast<size_t>(pi_[static_cast<size_t>(q)]);
                if (c_.node_memory_gb[n] >= mem) vcounts_[n] += static_cast<int64_t>(pc_[static_cast<size_t>(q)]);
            }
        }
        if (aligned_total(vcounts_, tp, segment) < need) return;
        // envs.decision.placement.place over the free GPUs and the chosen victims'
        avail_.assign(a_.free_mask.data, a_.free_mask.data + a_.free_mask.size);
        for (int64_t v : chosen_) for_gpus(v, [&](size_t g) { avail_[g] = 1; });
        for (size_t n = 0; n < N; ++n) {
            int64_t k = 0;
            if (c_.node_memory_gb[n] >= mem)
                for (int64_t g = c_.node_first_gpu[n]; g < c_.node_first_gpu[n] + c_.node_gpus[n]; ++g) k += avail_[static_cast<size_t>(g)] != 0;
            vcounts_[n] = k;
        }
        Take take;
        if (!node_take(c_, vcounts_, need, tp, TOPOLOGY, take, segment)) return;
        for (const auto& [n, k] : take)
            if (k > 0 || take.size() == 1) pick_in_node(c_, n, k, avail_.data() + c_.node_first_gpu[static_cast<size_t>(n)], gpus);
        used_.assign(static_cast<size_t>(c_.num_gpus), 0);
        for (int64_t g : gpus) used_[static_cast<size_t>(g)] = 1;
        for (int64_t v : chosen_) {
            bool uses = false;
            for_gpus(v, [&](size_t g) { uses |= used_[g] != 0; });
            if (uses) victims.push_back(v);
        }
        if (victims.empty()) gpus.clear();
    }

    // f(g) for each GPU running job v holds (on the nodes of its record).
    template <typename F>
    void for_gpus(int64_t v, F f) const {
        const auto r = static_cast<size_t>(slot_[static_cast<size_t>(v)]);
        for (int64_t q = ri_[r * 4]; q < ri_[r * 4 + 1]; ++q) {
            const auto n = static_cast<size_t>(pi_[static_cast<size_t>(q)]);
            for (int64_t g = c_.node_first_gpu[n]; g < c_.node_first_gpu[n] + c_.node_gpus[n]; ++g)
                if (a_.gpu_owner[static_cast<size_t>(g)] == v) f(static_cast<size_t>(g));
        }
    }

    struct LasTotal {
        int64_t row;
        size_t at;
        int64_t tp, segment, total;
    };
    const LasSpec* las_ = nullptr;
    bool las_ready_ = false, las_below_ = false;
    std::vector<int64_t> held_, counts_, seg_after_, vcounts_, usable_, pool_, useful_gpus_, chosen_;
    std::vector<LasTotal> las_totals_;
    std::vector<std::pair<int64_t, int64_t>> extra_;
    std::vector<uint8_t> aligned_, avail_, used_;
    std::vector<size_t> ranked_;
    std::vector<double> keys_;

    struct Keyed {
        double key;
        int64_t pos, job;
    };

    // Keep `head` the first `h` of the (key, queue position) order seen so far, sorted.
    static void keep_head(std::vector<Keyed>& head, size_t h, double key, int64_t pos, int64_t job) {
        if (head.size() == h && !(key < head.back().key)) return;  // positions only grow: a tie comes later
        auto at = head.end();
        while (at != head.begin() && key < (at - 1)->key) --at;
        head.insert(at, Keyed{key, pos, job});
        if (head.size() > h) head.pop_back();
    }

    const Cluster& c_;
    const RateModel& m_;
    SimArrays& a_;
    SimScalars& s_;
    const int64_t priority_high_;
    const int64_t n_jobs_;
    std::vector<double> rf_, pc_;
    std::vector<int64_t> ri_, pi_, slot_;
    std::vector<double> levels_, useful_, picked_, shares_;
    std::vector<int64_t> order_, fifo_, shortest_, priority_ids_, attained_ids_, window_;
    std::vector<Keyed> by_priority_, by_attained_;
    std::vector<uint8_t> mask_;
    std::vector<int64_t> on_node_, on_node_n_, dirty_nodes_, dirty_uplinks_, stale_, stamp_;
    std::vector<std::vector<int64_t>> on_uplink_;
    int64_t epoch_ = 0;
    bool indexed_ = true;
    std::vector<size_t> shape_key_;
    std::vector<int64_t> ended_;
    std::vector<Totals> totals_;
    std::vector<int64_t> changed_;  // nodes whose free or preemptible counts changed, in order (changed())
    Geometry launch_geometry_;
    Recording* rec_;
    std::vector<double> seg_begin_;
    std::vector<std::vector<int64_t>> job_gpus_;
};

}  // namespace

double pairwise_sum(const double* a, size_t n) { return 0.0 + pairwise(a, 0, n); }

namespace {

constexpr int64_t ADVANCE_FIRST = -3;  // run(): advance to the first decision before deciding

// The decision loop of a rollout and a replay (envs.sim.replay.replay / agents.lookahead's rollout):
// the first action (`first_job`: a start, WAIT, the policy's choice, or ADVANCE_FIRST: none, the
// events to a decision first), then at each decision the policy's choice, carried out, and the
// events to the next decision, until `until` or the workload's end.
RolloutResult run(const Cluster& c, const RateModel& m, Rollout& sim, SimArrays& a, SimScalars& s, int64_t queue_window,
                  double until, int64_t policy, int64_t first_job, const std::vector<int64_t>& first_gpus,
                  const std::vector<int64_t>& first_victims) {
    RolloutResult res;
    std::vector<int64_t> gpus;
    Geometry geometry;
    // envs.sim.replay.advance_to_decision(until): true at a decision state
    const auto advance = [&]() {
        while (!sim.done()) {
            if (sim.any_feasible()) return true;
            const Event e = sim.event(until);
            if (e == UNTIL) {
                sim.integrate_to(until);
                return false;
            }
            if (e == NO_EVENT) {
                res.stuck = true;
                return false;
            }
        }
        return false;
    };
    bool first = first_job != SECT_DECIDES;
    if (first_job == ADVANCE_FIRST) {
        first = false;
        if (!advance()) {
            res.events = sim.events_;
            return res;
        }
    }
    while (true) {
        // a decision state: the first action, then the policy's choices (envs.sim.replay.decide / apply_candidate)
        int64_t job = -1, best = -1;
        bool preempting = false;
        if (first) {
            job = first_job;
            preempting = job >= 0 && !first_victims.empty();
            if (job >= 0) {
                gpus = first_gpus;
                if (first_victims.empty()) placement_geometry(c, gpus, a.tp_degree[static_cast<size_t>(job)], m.geometry, geometry);
                best = 0;
            }
            first = false;
        } else {
            if (policy == REPLAY_SECT)
                best = sim.decide(job, gpus, geometry, queue_window);
            else if (policy == REPLAY_SJF)
                best = sim.decide_ordered(TOPOLOGY, true, job, gpus, geometry, queue_window);
            else
                best = sim.decide_ordered(policy - 1, false, job, gpus, geometry, queue_window);
            ++res.decisions;
            if (best < 0 && a.running.empty() && a.checkpointing.empty())
                throw BadInput("state: no valid candidate and nothing running (not a decision state)");
        }
        if (preempting) {
            sim.preempt_and_start(job, gpus, first_victims);
            ++res.starts;
            if (!(s.now < until)) break;
        } else if (best >= 0) {
            sim.start(job, gpus, geometry);
            ++res.starts;
            if (!(s.now < until)) break;  // a decision at the horizon is carried out, then the rollout stops
        } else {
            if (sim.event(INF) == NO_EVENT) {  // WAIT: Simulator.advance
                res.stuck = true;
                break;
            }
            if (sim.done() || !(s.now < until)) break;
        }
        if (!advance() || res.stuck) break;
    }
    res.events = sim.events_;
    return res;
}

}  // namespace

RolloutResult rollout_sect(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, int64_t queue_window,
                           int64_t priority_high, double until, int64_t first_job, const std::vector<int64_t>& first_gpus,
                           const std::vector<int64_t>& first_victims, bool track) {
    if (queue_window < 1) throw BadInput("queue_window: at least 1");
    if (first_job >= 0) {  // Simulator._check_placement's and preempt_and_start's rules for the first action
        const auto j = static_cast<size_t>(first_job);
        if (j >= a.arrival.size || a.state[j] != QUEUED) throw BadInput("first_job: not a queued job");
        if (static_cast<int64_t>(first_gpus.size()) != a.gpus_req[j]) throw BadInput("first_gpus: not the job's gang size");
        std::vector<uint8_t> allowed(static_cast<size_t>(c.num_gpus), 0), taken(allowed);
        for (size_t g = 0; g < allowed.size(); ++g) allowed[g] = a.free_mask[g];
        for (int64_t v : first_victims) {
            const auto u = static_cast<size_t>(v);
            if (v < 0 || u >= a.arrival.size || a.state[u] != RUNNING || !a.preemptible[u] || a.priority[u] > a.priority[j] ||
                std::find(a.running.begin(), a.running.end(), v) == a.running.end())
                throw BadInput("first_victims: a job that cannot be preempted for first_job");
            for (size_t g = 0; g < allowed.size(); ++g)
                if (a.gpu_owner[g] == v) allowed[g] = 2;  // a victim's
        }
        bool victim_gpu = false;
        for (int64_t g : first_gpus) {
            if (g < 0 || g >= c.num_gpus || !allowed[static_cast<size_t>(g)] || taken[static_cast<size_t>(g)])
                throw BadInput("first_gpus: a GPU out of range, busy or repeated");
            victim_gpu |= allowed[static_cast<size_t>(g)] == 2;
            taken[static_cast<size_t>(g)] = 1;
        }
        if (!first_victims.empty() && !victim_gpu) throw BadInput("first_gpus: none of the victims' GPUs");
    } else if (first_job != SECT_DECIDES && first_job != FIRST_WAIT) {
        throw BadInput("first_job: a job id, -1 (WAIT) or -2 (sect decides)");
    } else if (!first_victims.empty()) {
        throw BadInput("first_victims: only with a first_job");
    }
    Rollout sim(c, m, a, s, priority_high);
    sim.track_ = track;
    return run(c, m, sim, a, s, queue_window, until, REPLAY_SECT, first_job, first_gpus, first_victims);
}

RolloutResult replay(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, int64_t queue_window,
                     int64_t priority_high, int64_t policy, Recording& rec) {
    if (queue_window < 1) throw BadInput("queue_window: at least 1");
    if (policy < REPLAY_SECT || policy > REPLAY_SJF) throw BadInput("policy: sect (0), a FIFO rule (1-3) or sjf (4)");
    Rollout sim(c, m, a, s, priority_high, &rec);
    return run(c, m, sim, a, s, queue_window, INF, policy, ADVANCE_FIRST, {}, {});
}

namespace {

void check_las(const LasSpec& las) {
    if (las.thresholds.empty()) throw BadInput("las_thresholds: at least one");
    for (size_t i = 1; i < las.thresholds.size(); ++i)
        if (!(las.thresholds[i - 1] < las.thresholds[i])) throw BadInput("las_thresholds: strictly increasing");
}

}  // namespace

struct Episode::Impl {
    SimArrays a;
    SimScalars s;
    Recording rec;
    Rollout sim;
    int64_t queue_window;
    bool preempt_las;
    WaitGuardSpec guard;
    LasSpec las;
    CandidateSet cs;

    Impl(const Cluster& c, const RateModel& m, SimArrays&& a0, const SimScalars& s0, int64_t priority_high, int64_t q,
         bool pl, const WaitGuardSpec& g, const LasSpec& l)
        : a(std::move(a0)), s(s0), sim(c, m, a, s, priority_high, &rec), queue_window(q), preempt_las(pl), guard(g), las(l) {}
};

Episode::Episode(const Cluster& c, const RateModel& m, SimArrays a, SimScalars s, int64_t priority_high, int64_t queue_window,
                 bool preempt_las, const WaitGuardSpec& guard, const LasSpec& las)
    : c_(c), m_(m), impl_(nullptr) {
    if (queue_window < 1) throw BadInput("queue_window: at least 1");
    check_las(las);
    impl_ = new Impl(c, m, std::move(a), s, priority_high, queue_window, preempt_las, guard, las);
}

Episode::~Episode() { delete impl_; }

bool Episode::advance() {  // envs.sim.replay.advance_to_decision without `until`
    Impl& e = *impl_;
    while (!e.sim.done()) {
        if (e.s.qlen && e.sim.can_place(e.preempt_las, e.las)) return true;
        if (e.sim.event(INF) == NO_EVENT) return false;  // Simulator.advance: nothing left to wait for
    }
    return true;
}

const CandidateSet& Episode::candidates() {
    Impl& e = *impl_;
    e.sim.candidates(e.queue_window, e.preempt_las, e.guard, e.las, e.cs);
    return e.cs;
}

bool Episode::apply(int64_t action) {  // envs.decision.candidates.apply_candidate
    Impl& e = *impl_;
    const CandidateSet& cs = e.cs;
    const auto K = static_cast<int64_t>(cs.mask.size());
    if (action < 0 || action >= K || !cs.mask[static_cast<size_t>(action)]) throw BadInput("action: not a valid candidate");
    if (action == K - 1) return e.sim.event(INF) != NO_EVENT;  // WAIT: Simulator.advance
    const auto at = std::lower_bound(cs.index.begin(), cs.index.end(), action);
    const auto p = static_cast<size_t>(at - cs.index.begin());
    const int64_t j = cs.window[static_cast<size_t>(action / NUM_RULES)];
    const std::vector<int64_t>& gpus = cs.gpus[p];
    if (gpus.empty())  // the reference's Candidate raises the same for a candidate valid by count without a placement
        throw std::runtime_error("candidate " + std::to_string(action) + " is valid by GPU counts but has no placement");
    if (!cs.victims[p].empty()) {
        e.sim.preempt_and_start(j, gpus, cs.victims[p]);
    } else {
        Geometry g;
        placement_geometry(c_, gpus, e.a.tp_degree[static_cast<size_t>(j)], m_.geometry, g);
        e.sim.start(j, gpus, g);
    }
    return true;
}

bool Episode::done() const { return impl_->sim.done(); }
int64_t Episode::events() const { return impl_->sim.events_; }
SimArrays& Episode::arrays() { return impl_->a; }
SimScalars& Episode::scalars() { return impl_->s; }
Recording& Episode::recording() { return impl_->rec; }

bool can_place(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, int64_t priority_high, bool preempt_las,
               const LasSpec& las) {
    check_las(las);
    Rollout sim(c, m, a, s, priority_high);
    return sim.can_place(preempt_las, las);
}

void place_candidates(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, const std::vector<int64_t>& window,
                      const uint8_t* mask, const LasSpec& las, CandidateSet& out) {
    check_las(las);
    Rollout sim(c, m, a, s, 0);  // the priority class counts of the queue are not read here
    sim.placements(window, mask, las, out);
}

void build_candidates(const Cluster& c, const RateModel& m, SimArrays& a, SimScalars& s, int64_t queue_window,
                      int64_t priority_high, bool preempt_las, const WaitGuardSpec& guard, const LasSpec& las,
                      CandidateSet& out) {
    if (queue_window < 1) throw BadInput("queue_window: at least 1");
    check_las(las);
    Rollout sim(c, m, a, s, priority_high);
    sim.candidates(queue_window, preempt_las, guard, las, out);
}

}  // namespace gangsched
