#include "features.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "geometry.hpp"

namespace gangsched {

#define GANGSCHED_COLUMN_NAME(name) #name,
const char* const CANDIDATE_COLUMN_NAMES[NUM_CANDIDATE_COLUMNS] = {GANGSCHED_CANDIDATE_COLUMNS(GANGSCHED_COLUMN_NAME)};
const char* const GLOBAL_COLUMN_NAMES[NUM_GLOBAL_COLUMNS] = {GANGSCHED_GLOBAL_COLUMNS(GANGSCHED_COLUMN_NAME)};
#undef GANGSCHED_COLUMN_NAME

namespace {

constexpr double INF = std::numeric_limits<double>::infinity();
constexpr double ARRIVAL_WINDOWS_S[2] = {3600.0, 6 * 3600.0};  // envs.decision.features.ARRIVAL_WINDOWS_S

// Python's builtin min(a, b) on floats: a unless b < a.
inline double py_min(double a, double b) { return b < a ? b : a; }

// envs.decision.features.log_scale: log10(1 + max(x, 0)) / 6.
inline double log_scale(double x) { return std::log10(1.0 + py_max(x, 0.0)) / 6.0; }

// numpy's min / max of doubles: NaN if any is NaN.
struct NanMin {
    double v = INF;
    bool nan = false;
    void add(double x) {
        if (std::isnan(x)) nan = true;
        else if (x < v) v = x;
    }
    double get() const { return nan ? std::numeric_limits<double>::quiet_NaN() : v; }
};

// A placement's geometry, made once per (TP degree, GPUs) in one call (binpack, spread and
// topology often agree, and window jobs of one shape share placements).
struct Placed {
    int64_t tp;
    int64_t lo, hi;  // its GPUs in cs.gpus
    Geometry g;
};

class Features {
  public:
    Features(const Cluster& c, const RateModel& m, const SimArrays& a, const SimScalars& s, const PastArrivals& past,
             const CandidateArrays& cs)
        : c_(c), m_(m), a_(a), s_(s), past_(past), cs_(cs), R_(cs.num_rules),
          K_(static_cast<int64_t>(cs.mask.size)), nw_(static_cast<int64_t>(cs.window.size)) {}

    void validate() const {
        const int64_t J = s_.next_arrival;
        const auto N = static_cast<size_t>(c_.num_nodes), S = static_cast<size_t>(c_.num_switches);
        if (static_cast<int64_t>(m_.sensitivity_by_kind.size()) < c_.num_kinds)
            throw BadInput("model: one sensitivity per job kind expected");
        if (J < 0) throw BadInput("scalars: a negative count of known jobs");
        const auto per_job = [&](size_t size, const char* name) {
            if (size < static_cast<size_t>(J)) throw BadInput(std::string(name) + ": shorter than the known jobs");
        };
        per_job(a_.estimate.size, "estimate");
        per_job(a_.work_done.size, "work_done");
        per_job(a_.restore_s.size, "restore_s");
        per_job(a_.needs_restore.size, "needs_restore");
        per_job(a_.checkpoint_s.size, "checkpoint_s");
        per_job(a_.gpus_req.size, "gpus_req");
        per_job(a_.tp_degree.size, "tp_degree");
        per_job(a_.kind.size, "kind");
        per_job(a_.priority.size, "priority");
        per_job(a_.preemptible.size, "preemptible");
        per_job(a_.comm_fraction.size, "comm_fraction");
        per_job(a_.tp_comm_share.size, "tp_comm_share");
        per_job(a_.mem_req.size, "mem_req");
        per_job(a_.queued_since.size, "queued_since");
        per_job(a_.wait_s.size, "wait_s");
        per_job(a_.attained_gpu_s.size, "attained_gpu_s");
        per_job(a_.overhead_left.size, "overhead_left");
        per_job(a_.checkpoint_end.size, "checkpoint_end");
        per_job(a_.rate.size, "rate");
        if (a_.node_free.size != N) throw BadInput("node_free: one count per node expected");
        if (a_.node_pressure.size != N) throw BadInput("node_pressure: one value per node expected");
        if (a_.whole_gang.size != N) throw BadInput("whole_gang: one count per node expected");
        if (a_.uplink_demand.size != S) throw BadInput("uplink_demand: one value per switch expected");
        for (size_t n = 0; n < N; ++n)
            if (a_.node_free[n] < 0 || a_.node_free[n] > c_.node_gpus[n])
                throw BadInput("node_free: a count outside 0..the node's GPUs");
        if (s_.qlen < 0 || static_cast<size_t>(s_.qlen) > a_.q_ids.size) throw BadInput("q_ids: shorter than the queue");
        const auto known = [&](int64_t j) { return j >= 0 && j < J; };
        for (int64_t i = 0; i < s_.qlen; ++i)
            if (!known(a_.q_ids[static_cast<size_t>(i)])) throw BadInput("q_ids: a queued job id out of range");
        for (int64_t j : a_.running)
            if (!known(j)) throw BadInput("running: a job id out of range");
        for (int64_t j : a_.checkpointing)
            if (!known(j)) throw BadInput("checkpointing: a job id out of range");
        if (past_.times.size != past_.requested.size) throw BadInput("arrival_requested: one value per past arrival expected");
        if (R_ != NUM_FEATURE_RULES) throw BadInput("num_rules: the schema's rule one-hot has 5 columns");
        if (K_ < 1 || (K_ - 1) % R_ != 0) throw BadInput("mask: slots x rules + 1 (WAIT) entries expected");
        if (nw_ * R_ > K_ - 1) throw BadInput("window: more jobs than the mask has slots");
        for (int64_t k = 0; k < nw_; ++k) {
            const int64_t j = cs_.window[static_cast<size_t>(k)];
            if (!known(j)) throw BadInput("window: a job id out of range");
            const auto u = static_cast<size_t>(j);
            if (a_.gpus_req[u] < 1 || a_.tp_degree[u] < 1 || a_.gpus_req[u] % a_.tp_degree[u])
                throw BadInput("tp_degree: a window job's gang is not whole TP groups");
            if (a_.kind[u] < 0 || a_.kind[u] >= std::min<int64_t>(c_.num_kinds, NUM_FEATURE_KINDS))
                throw BadInput("kind: a window job's kind out of range");
        }
        size_t v = 0;
        for (int64_t i = 0; i + 1 < K_; ++i) {
            if (!cs_.mask[static_cast<size_t>(i)]) continue;
            if (i >= nw_ * R_) throw BadInput("mask: a valid candidate in an empty window slot");
            if (v >= cs_.gpus_end.size) throw BadInput("gpus_end: fewer entries than valid candidates");
            if (v >= cs_.victims_end.size) throw BadInput("victims_end: fewer entries than valid candidates");
            const int64_t lo = v ? cs_.gpus_end[v - 1] : 0, hi = cs_.gpus_end[v];
            const int64_t j = cs_.window[static_cast<size_t>(i / R_)];
            if (lo < 0 || hi < lo || static_cast<size_t>(hi) > cs_.gpus.size)
                throw BadInput("gpus_end: not ascending ends inside gpus");
            if (hi - lo != a_.gpus_req[static_cast<size_t>(j)]) throw BadInput("gpus: a candidate's GPUs are not its job's gang");
            for (int64_t x = lo; x < hi; ++x) {
                const int64_t g = cs_.gpus[static_cast<size_t>(x)];
                if (g < 0 || g >= c_.num_gpus) throw BadInput("gpus: a GPU id out of range");
            }
            const int64_t vlo = v ? cs_.victims_end[v - 1] : 0, vhi = cs_.victims_end[v];
            if (vlo < 0 || vhi < vlo || static_cast<size_t>(vhi) > cs_.victims.size)
                throw BadInput("victims_end: not ascending ends inside victims");
            for (int64_t x = vlo; x < vhi; ++x)
                if (!known(cs_.victims[static_cast<size_t>(x)])) throw BadInput("victims: a job id out of range");
            ++v;
        }
        if (v != cs_.gpus_end.size) throw BadInput("gpus_end: more entries than valid candidates");
        if (v != cs_.victims_end.size) throw BadInput("victims_end: more entries than valid candidates");
    }

    // `T` float: the features; double: the values they are cast from (a check on the arithmetic
    // finer than float32's).
    template <typename T>
    void write(T* feats, T* glob) {
        const auto F = static_cast<size_t>(NUM_CANDIDATE_COLUMNS);
        std::fill(feats, feats + static_cast<size_t>(K_) * F, T(0));
        // The job columns, the same on each rule's row of a window slot, and the rule one-hot.
        rem_.resize(static_cast<size_t>(nw_));
        for (int64_t k = 0; k < nw_; ++k) {
            const auto j = static_cast<size_t>(cs_.window[static_cast<size_t>(k)]);
            const double r = rem_[static_cast<size_t>(k)] = remaining(j);
            double row[COL_was_preempted + 1] = {};
            row[COL_gang_log2] = std::log2(static_cast<double>(a_.gpus_req[j])) / 7.0;
            row[COL_tp_log2] = std::log2(static_cast<double>(a_.tp_degree[j])) / 3.0;
            row[COL_kind_pretrain + a_.kind[j]] = 1.0;
            row[COL_priority] = static_cast<double>(a_.priority[j]) / 2.0;
            row[COL_preemptible] = a_.preemptible[j] ? 1.0 : 0.0;
            row[COL_comm_fraction] = a_.comm_fraction[j];
            row[COL_mem_per_gpu] = a_.mem_req[j] / 80.0;
            const double done = a_.work_done[j], wait = s_.now - a_.queued_since[j] + a_.wait_s[j];
            row[COL_est_remaining_log] = log_scale(r);
            row[COL_wait_log] = log_scale(wait);
            row[COL_progress] = done + r > 0 ? done / (done + r) : 0.0;
            row[COL_was_preempted] = a_.needs_restore[j] ? 1.0 : 0.0;
            for (int64_t rule = 0; rule < R_; ++rule) {
                T* out = feats + static_cast<size_t>(k * R_ + rule) * F;
                for (int col = 0; col <= COL_was_preempted; ++col) out[col] = static_cast<T>(row[col]);
                out[COL_rule_binpack + rule] = T(1);
            }
        }
        // The valid rows' placement columns, per placement (its geometry once), then per job.
        const Allocation alloc{nullptr, a_.node_free.data, a_.node_pressure.data, a_.uplink_demand.data};
        placed_.clear();
        size_t v = 0;
        for (int64_t i = 0; i + 1 < K_; ++i) {
            if (!cs_.mask[static_cast<size_t>(i)]) continue;
            const int64_t slot = i / R_, rule = i % R_;
            const auto j = static_cast<size_t>(cs_.window[static_cast<size_t>(slot)]);
            const Geometry& g = geometry(v ? cs_.gpus_end[v - 1] : 0, cs_.gpus_end[v], a_.tp_degree[j]);
            double c_tp, c_dp;
            comm_shares(a_.gpus_req[j], a_.tp_degree[j], a_.comm_fraction[j], a_.tp_comm_share[j], c_tp, c_dp);
            const int64_t kind = a_.kind[j];
            const RateParts rate = rate_parts(c_, m_, alloc, g, c_tp, c_dp, m_.sensitivity_by_kind[static_cast<size_t>(kind)], kind);
            double out[COL_victims_priority + 1] = {};
            out[COL_valid] = 1.0;
            out[COL_rule_binpack + rule] = 1.0;
            out[COL_predicted_rate] = rate.rate;
            out[COL_placement_efficiency] = rate.efficiency;
            out[COL_interference] = rate.interference;
            geometry_columns(g, out);
            victim_columns(v ? cs_.victims_end[v - 1] : 0, cs_.victims_end[v], out);
            out[COL_min_gpu_speed] = rate.min_speed;
            out[COL_est_runtime_here_log] = log_scale(rem_[static_cast<size_t>(slot)] / py_max(rate.rate, 1e-6));
            T* row = feats + static_cast<size_t>(i) * F;
            for (int col = COL_valid; col <= COL_victims_priority; ++col) row[col] = static_cast<T>(out[col]);
            ++v;
        }
        // The WAIT row.
        T* wait = feats + static_cast<size_t>(K_ - 1) * F;
        wait[COL_valid] = cs_.mask[static_cast<size_t>(K_ - 1)] ? T(1) : T(0);
        wait[COL_is_wait] = T(1);
        wait[COL_next_event_est_log] = static_cast<T>(next_event());
        wait[COL_head_fit_est_log] = static_cast<T>(nw_ ? head_fit(static_cast<size_t>(cs_.window[0])) : 1.0);
        global(glob);
    }

  private:
    // ClusterState.remaining_estimate_s: the estimate minus the work done, at least 0, plus the
    // restore owed (added only while some job owes one).
    double remaining(size_t j) const {
        double r = py_max(a_.estimate[j] - a_.work_done[j], 0.0);  // np.maximum: NaN stays
        if (s_.num_needs_restore > 0) r = r + a_.restore_s[j] * (a_.needs_restore[j] ? 1.0 : 0.0);
        return r;
    }

    // ClusterState.end_estimates_after_s of one running job.
    double end_after(size_t j) const {
        return a_.overhead_left[j] + py_max(a_.estimate[j] - a_.work_done[j], 0.0) / a_.rate[j];
    }

    const Geometry& geometry(int64_t lo, int64_t hi, int64_t tp) {
        const int64_t* gpus = cs_.gpus.data;
        for (const Placed& p : placed_)
            if (p.tp == tp && p.hi - p.lo == hi - lo && std::equal(gpus + lo, gpus + hi, gpus + p.lo)) return p.g;
        placed_.push_back(Placed{tp, lo, hi, Geometry()});
        gpus_.assign(gpus + lo, gpus + hi);
        placement_geometry(c_, gpus_, tp, m_.geometry, placed_.back().g);
        return placed_.back().g;
    }

    // envs.decision.features._geometry_columns: tier / 3, nodes per GPU, the share of its nodes wholly
    // free, the change in fragmented free GPUs in node units (summed in node order, clipped).
    void geometry_columns(const Geometry& g, double* out) const {
        int64_t whole = 0, gpus = 0;
        double frag_delta = 0.0;
        for (size_t i = 0; i < g.nodes.size(); ++i) {
            const auto n = static_cast<size_t>(g.nodes[i]);
            const int64_t f = a_.node_free[n], k = g.gpus_on_node[i], node_gpus = c_.node_gpus[n];
            whole += f == node_gpus;
            gpus += k;
            const int64_t change = fragmented_of(f - std::min(k, f), a_.whole_gang[n]) - fragmented_of(f, a_.whole_gang[n]);
            frag_delta += static_cast<double>(change) / static_cast<double>(node_gpus);
        }
        const auto used = static_cast<double>(g.nodes.size());
        out[COL_tier] = static_cast<double>(g.tier) / 3.0;
        out[COL_nodes_per_gpu] = used / static_cast<double>(gpus);
        out[COL_free_nodes_consumed] = static_cast<double>(whole) / used;
        out[COL_fragmentation_delta] = py_min(py_max(frag_delta, -1.0), 1.0);
    }

    // envs.decision.features._victim_columns over victims[lo:hi], in their order (0 without victims).
    void victim_columns(int64_t lo, int64_t hi, double* out) {
        if (hi == lo) return;
        cost_.clear();
        attained_.clear();
        NanMin remaining_min;
        int64_t gpus = 0, priority = 0;
        for (int64_t x = lo; x < hi; ++x) {
            const auto j = static_cast<size_t>(cs_.victims[static_cast<size_t>(x)]);
            const double gang = static_cast<double>(a_.gpus_req[j]);
            cost_.push_back(gang * (a_.checkpoint_s[j] + a_.restore_s[j]));  // ClusterState.preemption_cost_gpu_s
            attained_.push_back(a_.attained_gpu_s[j]);
            remaining_min.add(remaining(j));
            gpus += a_.gpus_req[j];
            priority = x == lo ? a_.priority[j] : std::max(priority, a_.priority[j]);
        }
        out[COL_preemption_cost_log] = log_scale(pairwise_sum(cost_.data(), cost_.size()));
        out[COL_victims] = py_min(static_cast<double>(hi - lo) / 4.0, 1.0);
        out[COL_victims_remaining_log] = log_scale(remaining_min.get());
        out[COL_victims_attained_log] = log_scale(pairwise_sum(attained_.data(), attained_.size()) / static_cast<double>(gpus));
        out[COL_victims_priority] = static_cast<double>(priority) / 2.0;
    }

    // envs.decision.features.next_event_feature: the next estimated end of a running job (as
    // envs.core.kernels.next_end_estimate_s finds it) or checkpoint end, log-scaled; 1 when none.
    double next_event() const {
        double t = INF;
        if (!a_.running.empty()) {
            double first = INF;
            for (int64_t j : a_.running) {
                const double x = end_after(static_cast<size_t>(j));
                if (x < first) first = x;
            }
            t = s_.now + first;
        }
        if (!a_.checkpointing.empty()) {
            NanMin ends;
            for (int64_t j : a_.checkpointing) ends.add(a_.checkpoint_end[static_cast<size_t>(j)]);
            t = py_min(t, ends.get());
        }
        return t < INF ? log_scale(t - s_.now) : 1.0;
    }

    // envs.decision.features.head_fit_feature: the time until `job`'s GPU count is free, by the running
    // jobs' estimated ends and the checkpoints' ends in time order (a stable sort, NaN last).
    double head_fit(size_t job) {
        const int64_t need = a_.gpus_req[job];
        if (s_.num_free >= need) return 0.0;
        after_.clear();
        freed_.clear();
        for (int64_t j : a_.running) {
            after_.push_back(end_after(static_cast<size_t>(j)));
            freed_.push_back(a_.gpus_req[static_cast<size_t>(j)]);
        }
        for (int64_t j : a_.checkpointing) {
            after_.push_back(a_.checkpoint_end[static_cast<size_t>(j)] - s_.now);
            freed_.push_back(a_.gpus_req[static_cast<size_t>(j)]);
        }
        order_.resize(after_.size());
        for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
        std::stable_sort(order_.begin(), order_.end(), [&](size_t x, size_t y) {
            const double a = after_[x], b = after_[y];
            return a < b || (!std::isnan(a) && std::isnan(b));
        });
        int64_t free = s_.num_free;
        for (size_t i : order_) {
            free += freed_[i];
            if (free >= need) return log_scale(after_[i]);
        }
        return 1.0;
    }

    template <typename T>
    void global(T* glob) {
        const auto N = static_cast<size_t>(c_.num_nodes);
        int64_t free = 0, whole = 0;
        for (size_t n = 0; n < N; ++n) {
            free += a_.node_free[n];
            whole += a_.node_free[n] == c_.node_gpus[n];
        }
        const auto n_gpus = static_cast<double>(c_.num_gpus);
        const int64_t nq = s_.qlen, running = static_cast<int64_t>(a_.running.size());
        const auto dq = static_cast<double>(nq);
        double g[NUM_GLOBAL_COLUMNS];
        g[COL_queue_log] = std::log10(1.0 + dq) / 3.0;
        g[COL_queued_gpu_demand] = py_min(static_cast<double>(s_.queued_gpus) / n_gpus, 4.0) / 4.0;
        g[COL_allocated] = static_cast<double>(c_.num_gpus - free) / n_gpus;
        g[COL_free] = static_cast<double>(free) / n_gpus;
        g[COL_free_nodes] = static_cast<double>(whole) / static_cast<double>(c_.num_nodes);
        g[COL_fragmentation] = free ? static_cast<double>(s_.fragmented) / static_cast<double>(free) : 0.0;
        g[COL_running_share] = static_cast<double>(running) / (static_cast<double>(running + nq) + 1.0);
        g[COL_reserved_share] =
            py_min(static_cast<double>(a_.reserved.size() + a_.checkpointing.size()) / (dq + 1.0), 1.0);
        g[COL_time_log] = std::log10(1.0 + s_.now) / 7.0;
        g[COL_queued_high_priority] = nq ? static_cast<double>(s_.queued_high) / dq : 0.0;
        g[COL_mean_wait_log] = 0.0;
        if (nq) {
            waits_.resize(static_cast<size_t>(nq));
            for (int64_t i = 0; i < nq; ++i)
                waits_[static_cast<size_t>(i)] = s_.now - a_.queued_since[static_cast<size_t>(a_.q_ids[static_cast<size_t>(i)])];
            g[COL_mean_wait_log] = log_scale(pairwise_sum(waits_.data(), waits_.size()) / dq);
        }
        // envs.decision.features._arrived_loads: exact sums of the GPU-s the window's arrivals requested
        const double* times = past_.times.data;
        const size_t count = past_.times.size;
        for (int w = 0; w < 2; ++w) {
            const double window_s = ARRIVAL_WINDOWS_S[w];
            const auto first = static_cast<size_t>(std::upper_bound(times, times + count, s_.now - window_s) - times);
            const double total = exact_sum(past_.requested.data + first, count - first);
            g[COL_arrived_load_1h + w] = py_min(total / (window_s * n_gpus), 4.0) / 4.0;
        }
        g[COL_since_arrival_log] = count ? log_scale(s_.now - times[count - 1]) : 1.0;
        for (int i = 0; i < NUM_GLOBAL_COLUMNS; ++i) glob[i] = static_cast<T>(g[i]);
    }

    const Cluster& c_;
    const RateModel& m_;
    const SimArrays& a_;
    const SimScalars& s_;
    const PastArrivals& past_;
    const CandidateArrays& cs_;
    const int64_t R_, K_, nw_;
    std::vector<double> rem_, cost_, attained_, after_, waits_;
    std::vector<int64_t> freed_, gpus_;
    std::vector<size_t> order_;
    std::vector<Placed> placed_;
};

// np.minimum(np.maximum(x, -1), 1): NaN kept.
template <typename T>
void clip_unit(T* x, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        if (x[i] < T(-1)) x[i] = T(-1);
        if (x[i] > T(1)) x[i] = T(1);
    }
}

template <typename T>
void features_of(const Cluster& c, const RateModel& m, const SimArrays& a, const SimScalars& s, const PastArrivals& past,
                 const CandidateArrays& cs, T* candidates, T* global, bool clip) {
    Features f(c, m, a, s, past, cs);
    f.validate();
    f.write(candidates, global);
    if (clip) {
        clip_unit(candidates, cs.mask.size * static_cast<size_t>(NUM_CANDIDATE_COLUMNS));
        clip_unit(global, static_cast<size_t>(NUM_GLOBAL_COLUMNS));
    }
}

}  // namespace

double exact_sum(const double* x, size_t n) {
    // CPython's math_fsum (Shewchuk's exact partials, then the correctly rounded total); the
    // partials' buffer kept from call to call.
    thread_local std::vector<double> p;
    p.clear();
    double special_sum = 0.0, inf_sum = 0.0;
    for (size_t k = 0; k < n; ++k) {
        double v = x[k];
        const double vsave = v;
        size_t i = 0;
        for (size_t j = 0; j < p.size(); ++j) {
            double y = p[j];
            if (std::fabs(v) < std::fabs(y)) std::swap(v, y);
            const double hi = v + y, yr = hi - v, lo = y - yr;
            if (lo != 0.0) p[i++] = lo;
            v = hi;
        }
        p.resize(i);
        if (v != 0.0) {
            if (!std::isfinite(v)) {
                // an infinity or NaN among the terms; or an intermediate overflow of finite terms,
                // where Python raises OverflowError: the overflowed sum is then carried as an infinity
                const double term = std::isfinite(vsave) ? v : vsave;
                if (std::isinf(term)) inf_sum += term;
                special_sum += term;
                p.clear();
            } else {
                p.push_back(v);
            }
        }
    }
    if (special_sum != 0.0) {
        if (std::isnan(inf_sum)) return std::numeric_limits<double>::quiet_NaN();
        return special_sum;
    }
    double hi = 0.0;
    size_t m = p.size();
    if (m > 0) {
        hi = p[--m];
        double lo = 0.0;
        while (m > 0) {
            const double v = hi, y = p[--m];
            hi = v + y;
            const double yr = hi - v;
            lo = y - yr;
            if (lo != 0.0) break;
        }
        // round half to even on the last partials' sign
        if (m > 0 && ((lo < 0.0 && p[m - 1] < 0.0) || (lo > 0.0 && p[m - 1] > 0.0))) {
            const double y = lo * 2.0, v = hi + y, yr = v - hi;
            if (y == yr) hi = v;
        }
    }
    return hi;
}

void candidate_features(const Cluster& c, const RateModel& m, const SimArrays& a, const SimScalars& s,
                        const PastArrivals& past, const CandidateArrays& cs, float* candidates, float* global, bool clip) {
    features_of(c, m, a, s, past, cs, candidates, global, clip);
}

void candidate_features(const Cluster& c, const RateModel& m, const SimArrays& a, const SimScalars& s,
                        const PastArrivals& past, const CandidateArrays& cs, double* candidates, double* global, bool clip) {
    features_of(c, m, a, s, past, cs, candidates, global, clip);
}

}  // namespace gangsched
