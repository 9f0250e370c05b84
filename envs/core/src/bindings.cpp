// envs.core._core: the Python face of the native core (nanobind). Arguments are checked here
// or in the core; a bad one raises ValueError naming it, never a crash.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <type_traits>

#include "choice.hpp"
#include "cluster.hpp"
#include "features.hpp"
#include "geometry.hpp"
#include "placement.hpp"
#include "pool.hpp"
#include "rollout.hpp"
#include "world.hpp"

namespace nb = nanobind;
using namespace gangsched;

namespace {

template <typename T>
using Array1 = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename T>
std::vector<T> to_vector(const Array1<T>& a) {
    return std::vector<T>(a.data(), a.data() + a.shape(0));
}

template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> as_numpy(std::vector<T>&& v) {
    auto* heap = new std::vector<T>(std::move(v));
    nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
    return nb::ndarray<nb::numpy, T, nb::ndim<1>>(heap->data(), {heap->size()}, owner);
}

nb::handle field(const nb::dict& f, const char* name) {
    if (!f.contains(name)) throw BadInput(std::string(name) + ": missing");
    return f[name];
}

template <typename T>
T scalar(const nb::dict& f, const char* name) {
    try {
        return nb::cast<T>(field(f, name));
    } catch (const nb::cast_error&) {
        throw BadInput(std::string(name) + ": a scalar of the wrong type");
    }
}

template <typename T>
std::vector<T> column(const nb::dict& f, const char* name) {
    Array1<T> a;
    if (!nb::try_cast(field(f, name), a, false))
        throw BadInput(std::string(name) + ": a contiguous 1-D array of the right dtype expected");
    return to_vector(a);
}

template <typename In, typename Out>
std::vector<Out> table(const nb::dict& f, const char* name, int64_t rows, int64_t cols) {
    nb::ndarray<const In, nb::ndim<2>, nb::c_contig, nb::device::cpu> a;
    if (!nb::try_cast(field(f, name), a, false))
        throw BadInput(std::string(name) + ": a contiguous 2-D array of the right dtype expected");
    if (a.shape(0) != static_cast<size_t>(rows) || a.shape(1) != static_cast<size_t>(cols))
        throw BadInput(std::string(name) + ": a table of the wrong shape");
    const In* d = a.data();
    std::vector<Out> out(a.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<Out>(d[i]);
    return out;
}

template <typename T>
const T* sized(const Array1<T>& a, size_t at_least, const char* name) {
    if (a.shape(0) < at_least) throw BadInput(std::string(name) + ": shorter than expected");
    return a.data();
}

// A named array of the rollout's dict (any shape, C-contiguous, this dtype), as a view.
template <typename T, typename Py = T>
View<T> view(const nb::dict& f, const char* name, size_t size) {
    nb::ndarray<std::remove_const_t<Py>, nb::c_contig, nb::device::cpu> a;
    if (!nb::try_cast(field(f, name), a, false))
        throw BadInput(std::string(name) + ": a contiguous writable array of the right dtype expected");
    if (size != static_cast<size_t>(-1) && a.size() != size)
        throw BadInput(std::string(name) + ": " + std::to_string(a.size()) + " entries, expected " + std::to_string(size));
    return View<T>{reinterpret_cast<T*>(a.data()), a.size()};
}

constexpr size_t ANY = static_cast<size_t>(-1);

// A copy of n doubles as a numpy array that owns it.
nb::ndarray<nb::numpy, double, nb::ndim<1>> to_numpy(const std::vector<double>& v) {
    auto* data = new double[v.size() ? v.size() : 1];
    std::copy(v.begin(), v.end(), data);
    nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<double*>(p); });
    return nb::ndarray<nb::numpy, double, nb::ndim<1>>(data, {v.size()}, owner);
}

// A simulator's arrays and scalars as the rollout reads them (views of the caller's arrays), every
// index the rollout follows checked once: a bad one is a BadInput naming its argument.
// A simulator's arrays by name as views (parse_sim's first half): their sizes, and the fixed
// per-job fields' ranges.
void parse_arrays(const Cluster& c, const RateModel& model, const nb::dict& f, SimArrays& a) {
    if (static_cast<int64_t>(model.sensitivity_by_kind.size()) < c.num_kinds)
        throw BadInput("model: one sensitivity per job kind expected");
    const size_t J = view<const double, double>(f, "arrival", ANY).size;
    const auto N = static_cast<size_t>(c.num_nodes), G = static_cast<size_t>(c.num_gpus),
               S = static_cast<size_t>(c.num_switches);
    a.arrival = view<const double, double>(f, "arrival", J);
    a.estimate = view<const double, double>(f, "estimate", J);
    a.restore_s = view<const double, double>(f, "restore_s", J);
    a.checkpoint_s = view<const double, double>(f, "checkpoint_s", J);
    a.checkpoint_end = view<double>(f, "checkpoint_end", J);
    a.preemptions = view<int64_t>(f, "preemptions", J);
    a.work_total = view<const double, double>(f, "work_total", J);
    a.mem_req = view<const double, double>(f, "mem_req", J);
    a.comm_fraction = view<const double, double>(f, "comm_fraction", J);
    a.tp_comm_share = view<const double, double>(f, "tp_comm_share", J);
    a.gpus_req = view<const int64_t, int64_t>(f, "gpus_req", J);
    a.tp_degree = view<const int64_t, int64_t>(f, "tp_degree", J);
    a.priority = view<const int64_t, int64_t>(f, "priority", J);
    a.kind = view<const int64_t, int64_t>(f, "kind", J);
    a.shape_id = view<const int64_t, int64_t>(f, "shape_id", J);
    a.segment_gpus = view<const int64_t, int64_t>(f, "segment_gpus", J);
    a.preemptible = view<const uint8_t, bool>(f, "preemptible", J);
    a.work_done = view<double>(f, "work_done", J);
    a.queued_since = view<double>(f, "queued_since", J);
    a.end = view<double>(f, "end", J);
    a.work_left = view<double>(f, "work_left", J);
    a.rate = view<double>(f, "rate", J);
    a.overhead_left = view<double>(f, "overhead_left", J);
    a.attained_gpu_s = view<double>(f, "attained_gpu_s", J);
    a.run_s = view<double>(f, "run_s", J);
    a.interference_loss_s = view<double>(f, "interference_loss_s", J);
    a.interference = view<double>(f, "interference", J);
    a.wait_s = view<double>(f, "wait_s", J);
    a.first_start = view<double>(f, "first_start", J);
    a.needs_restore = view<uint8_t, bool>(f, "needs_restore", J);
    a.state = view<int8_t>(f, "state", J);
    a.q_ids = view<int64_t>(f, "q_ids", ANY);
    a.q_sorted = view<int64_t>(f, "q_sorted", a.q_ids.size);
    a.q_seq = view<int64_t>(f, "q_seq", J);
    a.q_remaining = view<double>(f, "q_remaining", J);
    a.q_per_shape = view<int64_t>(f, "q_per_shape", ANY);
    a.shape_gpus = view<const int64_t, int64_t>(f, "shape_gpus", ANY);
    a.shape_tp = view<const int64_t, int64_t>(f, "shape_tp", a.shape_gpus.size);
    a.shape_priority = view<const int64_t, int64_t>(f, "shape_priority", a.shape_gpus.size);
    a.shape_mem = view<const double, double>(f, "shape_mem", a.shape_gpus.size);
    a.shape_segment = view<const int64_t, int64_t>(f, "shape_segment", a.shape_gpus.size);
    a.job_slot = view<const int64_t, int64_t>(f, "job_slot", ANY);
    a.rec_i = view<const int64_t, int64_t>(f, "rec_i", ANY);
    a.rec_f = view<const double, double>(f, "rec_f", a.rec_i.size * 2);
    a.pool_i = view<const int64_t, int64_t>(f, "pool_i", ANY);
    a.pool_counts = view<const double, double>(f, "pool_counts", a.pool_i.size);
    a.node_pressure = view<double>(f, "node_pressure", N);
    a.uplink_demand = view<double>(f, "uplink_demand", S);
    a.dirty_node = view<uint8_t, bool>(f, "dirty_node", N);
    a.dirty_uplink = view<uint8_t, bool>(f, "dirty_uplink", S);
    a.gpu_owner = view<int64_t>(f, "gpu_owner", G);
    a.gpu_reserved = view<int64_t>(f, "gpu_reserved", G);
    a.free_mask = view<uint8_t, bool>(f, "free_mask", G);
    a.node_owned = view<int64_t>(f, "node_owned", N);
    a.node_free = view<int64_t>(f, "node_free", N);
    a.node_preemptible = view<int64_t>(f, "node_preemptible", ANY);
    a.num_priorities = N ? static_cast<int64_t>(a.node_preemptible.size / N) : 0;
    if (a.node_preemptible.size != N * static_cast<size_t>(a.num_priorities))
        throw BadInput("node_preemptible: a nodes x priorities table expected");
    a.node_power_w = view<double>(f, "node_power_w", N);
    a.node_on = view<uint8_t, bool>(f, "node_on", N);
    a.power_terms = view<const double, double>(f, "power_terms", 3 * N);
    a.whole_gang = view<const int64_t, int64_t>(f, "whole_gang", N);
    if (a.q_ids.size < J) throw BadInput("q_ids: room for every job expected");
    if (a.rec_i.size % 4) throw BadInput("rec_i: rows of 4 expected");
    // every index the rollout follows, checked once
    for (size_t j = 0; j < J; ++j) {
        const int64_t k = a.shape_id[j];
        if (k < 0 || static_cast<size_t>(k) >= a.shape_gpus.size || static_cast<size_t>(k) >= a.q_per_shape.size)
            throw BadInput("shape_id: a shape outside shape_gpus or q_per_shape");
        if (a.kind[j] < 0 || a.kind[j] >= c.num_kinds) throw BadInput("kind: a job kind out of range");
        if (a.priority[j] < 0 || a.priority[j] >= std::max<int64_t>(a.num_priorities, 1))
            throw BadInput("priority: outside node_preemptible's columns");
        if (a.gpus_req[j] < 1 || a.tp_degree[j] < 1 || a.gpus_req[j] % a.tp_degree[j])
            throw BadInput("tp_degree: a gang that is not whole TP groups");
        const int64_t seg = a.segment_gpus[j];
        if (seg < 0 || (seg > 0 && (seg % a.tp_degree[j] != 0 || a.gpus_req[j] % seg != 0)))
            throw BadInput("segment_gpus: 0 (none) or whole TP groups dividing the gang expected");
        if (a.shape_segment[static_cast<size_t>(k)] != seg) throw BadInput("shape_segment: not the segment of a job of the shape");
    }
    for (size_t k = 0; k < a.shape_gpus.size; ++k)
        if (a.shape_tp[k] < 1) throw BadInput("shape_tp: at least 1");
}

// The simulator's changing lists and scalars over arrays parsed by parse_arrays (parse_sim's
// second half): every index the core follows from them checked.
void parse_state(const Cluster& c, const std::vector<int64_t>& running, const std::vector<int64_t>& checkpointing,
                 const std::vector<int64_t>& reserved, const std::vector<std::vector<int64_t>>& reserved_gpus,
                 const std::vector<double>& fscal, const std::vector<int64_t>& iscal, SimArrays& a, SimScalars& s) {
    if (fscal.size() != 7 || iscal.size() != 12) throw BadInput("scalars: 7 floats and 12 integers expected");
    const size_t J = a.arrival.size;
    const auto N = static_cast<size_t>(c.num_nodes), G = static_cast<size_t>(c.num_gpus),
               S = static_cast<size_t>(c.num_switches);
    const size_t rows = a.rec_i.size / 4;
    std::vector<int64_t> placed(running);
    placed.insert(placed.end(), checkpointing.begin(), checkpointing.end());
    for (int64_t j : placed) {
        if (j < 0 || static_cast<size_t>(j) >= J || static_cast<size_t>(j) >= a.job_slot.size)
            throw BadInput("running: a job id out of range (or checkpointing)");
        const int64_t r = a.job_slot[static_cast<size_t>(j)];
        if (r < 0 || static_cast<size_t>(r) >= rows) throw BadInput("job_slot: a running job's row out of range");
        const int64_t lo = a.rec_i[static_cast<size_t>(r) * 4], hi = a.rec_i[static_cast<size_t>(r) * 4 + 1],
                      uhi = a.rec_i[static_cast<size_t>(r) * 4 + 2];
        if (!(0 <= lo && lo < hi && hi <= uhi && static_cast<size_t>(uhi) <= a.pool_i.size))
            throw BadInput("rec_i: a running job's pool range out of range");
        for (int64_t q = lo; q < uhi; ++q) {
            const int64_t x = a.pool_i[static_cast<size_t>(q)];
            if (x < 0 || static_cast<size_t>(x) >= (q < hi ? N : S)) throw BadInput("pool_i: a node or uplink out of range");
        }
    }
    for (size_t g = 0; g < G; ++g)
        if (a.gpu_owner[g] < -1 || a.gpu_owner[g] >= static_cast<int64_t>(J)) throw BadInput("gpu_owner: a job id out of range");
    a.running = running;
    a.checkpointing = checkpointing;
    a.reserved = reserved;
    a.reserved_gpus = reserved_gpus;
    s = SimScalars{fscal[0], fscal[1], fscal[2], fscal[3], fscal[4], fscal[5], fscal[6],
                 iscal[0], iscal[1], iscal[2], iscal[3], iscal[4], iscal[5], iscal[6], iscal[7], iscal[8], iscal[9], iscal[10],
                 iscal[11]};
    if (s.qlen < 0 || static_cast<size_t>(s.qlen) > J || s.next_arrival < 0 || static_cast<size_t>(s.next_arrival) > J)
        throw BadInput("scalars: a queue length or next arrival out of range");
    for (int64_t i = 0; i < s.qlen; ++i) {
        const int64_t x = a.q_ids[static_cast<size_t>(i)], y = a.q_sorted[static_cast<size_t>(i)];
        if (x < 0 || static_cast<size_t>(x) >= J || y < 0 || static_cast<size_t>(y) >= J)
            throw BadInput("q_ids: a queued job id out of range");
    }
    for (int64_t j : running)
        if (a.state[static_cast<size_t>(j)] != 3) throw BadInput("running: a job that is not running");
    for (int64_t j : checkpointing)
        if (a.state[static_cast<size_t>(j)] != 4) throw BadInput("checkpointing: a job that is not checkpointing");
    if (reserved.size() != reserved_gpus.size()) throw BadInput("reserved_gpus: one GPU list per reserved job expected");
    for (size_t i = 0; i < reserved.size(); ++i) {
        const int64_t j = reserved[i];
        if (j < 0 || static_cast<size_t>(j) >= J || a.state[static_cast<size_t>(j)] != 2)
            throw BadInput("reserved: a job id out of range or not reserved");
        if (static_cast<int64_t>(reserved_gpus[i].size()) != a.gpus_req[static_cast<size_t>(j)])
            throw BadInput("reserved_gpus: not the reserved job's gang size");
        for (int64_t g : reserved_gpus[i])
            if (g < 0 || static_cast<size_t>(g) >= G || a.gpu_reserved[static_cast<size_t>(g)] != j)
                throw BadInput("reserved_gpus: a GPU out of range or not reserved for its job");
    }
}

void parse_sim(const Cluster& c, const RateModel& model, const nb::dict& f, const std::vector<int64_t>& running,
               const std::vector<int64_t>& checkpointing, const std::vector<int64_t>& reserved,
               const std::vector<std::vector<int64_t>>& reserved_gpus, const std::vector<double>& fscal,
               const std::vector<int64_t>& iscal, SimArrays& a, SimScalars& s) {
    parse_arrays(c, model, f, a);
    parse_state(c, running, checkpointing, reserved, reserved_gpus, fscal, iscal, a, s);
}

// The allocation's arrays a simulator replaces as they change (its ledger copies them on write):
// (free_mask, node_owned, node_free, node_power_w, node_on), passed at each call over a SimView.
void set_allocation(const Cluster& c, const nb::tuple& t, SimArrays& a) {
    if (t.size() != 5) throw BadInput("allocation: (free_mask, node_owned, node_free, node_power_w, node_on) expected");
    const auto N = static_cast<size_t>(c.num_nodes), G = static_cast<size_t>(c.num_gpus);
    const auto one = [&](size_t i, auto& out, size_t size, const char* name) {
        using T = std::remove_reference_t<decltype(out[0])>;
        using Py = std::conditional_t<std::is_same_v<T, uint8_t>, bool, T>;
        nb::ndarray<Py, nb::ndim<1>, nb::c_contig, nb::device::cpu> x;
        if (!nb::try_cast(t[i], x, false)) throw BadInput(std::string("allocation: ") + name + ": a contiguous 1-D array of the right dtype expected");
        if (x.shape(0) != size) throw BadInput(std::string("allocation: ") + name + ": the wrong size");
        out.data = reinterpret_cast<T*>(x.data());
        out.size = size;
    };
    one(0, a.free_mask, G, "free_mask");
    one(1, a.node_owned, N, "node_owned");
    one(2, a.node_free, N, "node_free");
    one(3, a.node_power_w, N, "node_power_w");
    one(4, a.node_on, N, "node_on");
}

// A simulator's arrays parsed once (views; the dict holding them kept alive), for the calls
// that read its state at every decision: each passes only the lists and scalars.
struct SimView {
    const Cluster* c;
    const RateModel* model;
    nb::object arrays;
    SimArrays a;
    View<const double> requested;  // per job: GPUs x estimate (the past arrivals' requested GPU-s)
};

// What a call over a SimView works on: the view's arrays with this call's allocation, lists and
// scalars set (parse_state's checks), the wait guard and the LAS spec, each checked.
struct ViewCall {
    SimArrays a;
    SimScalars s;
    WaitGuardSpec guard;
    LasSpec las;
};

ViewCall view_call(const SimView& v, const nb::tuple& allocation, const std::vector<int64_t>& running,
                   const std::vector<int64_t>& checkpointing, const std::vector<int64_t>& reserved,
                   const std::vector<std::vector<int64_t>>& reserved_gpus, const std::vector<double>& fscal,
                   const std::vector<int64_t>& iscal, const std::vector<double>& wait_guard,
                   const std::vector<double>& las_thresholds, double starvation_factor) {
    ViewCall call{v.a, {}, {}, {las_thresholds, starvation_factor}};
    set_allocation(*v.c, allocation, call.a);
    parse_state(*v.c, running, checkpointing, reserved, reserved_gpus, fscal, iscal, call.a, call.s);
    if (!wait_guard.empty()) {
        if (wait_guard.size() != 2) throw BadInput("wait_guard: (overdue_factor, min_wait_s) or empty");
        call.guard = WaitGuardSpec{true, wait_guard[0], wait_guard[1]};
    }
    return call;
}


// A candidate set's features (envs.decision.features.candidate_features; with `clip`, clipped to
// [-1, 1] as the env's observation) into a K x CANDIDATE_COLUMNS and a GLOBAL_COLUMNS float32 array.
void write_features(const Cluster& c, const RateModel& model, SimArrays& a, SimScalars& s, View<const double> requested,
                    const CandidateSet& out, float* feats, float* glob, bool clip) {
    std::vector<int64_t> gpus, gpus_end, victims, victims_end;
    for (size_t k = 0; k < out.index.size(); ++k) {
        gpus.insert(gpus.end(), out.gpus[k].begin(), out.gpus[k].end());
        gpus_end.push_back(static_cast<int64_t>(gpus.size()));
        victims.insert(victims.end(), out.victims[k].begin(), out.victims[k].end());
        victims_end.push_back(static_cast<int64_t>(victims.size()));
    }
    CandidateArrays cs;
    cs.window = View<const int64_t>{out.window.data(), out.window.size()};
    cs.mask = View<const uint8_t>{out.mask.data(), out.mask.size()};
    cs.gpus = View<const int64_t>{gpus.data(), gpus.size()};
    cs.gpus_end = View<const int64_t>{gpus_end.data(), gpus_end.size()};
    cs.victims = View<const int64_t>{victims.data(), victims.size()};
    cs.victims_end = View<const int64_t>{victims_end.data(), victims_end.size()};
    const auto known = static_cast<size_t>(s.next_arrival);
    const PastArrivals past{View<const double>{a.arrival.data, known}, View<const double>{requested.data, known}};
    candidate_features(c, model, a, s, past, cs, feats, glob, clip);
}

// A core-owned episode (Episode) with what its features read besides its arrays, and the dict of
// the simulator's arrays it works on in place (held, so none of them goes away).
struct EpisodeBox {
    std::unique_ptr<Episode> ep;
    const Cluster* c;
    const RateModel* model;
    nb::object arrays;
    View<const double> requested;
    size_t K;
};

// One decision step of a core-owned episode (the GIL released by the caller): candidate `action` of
// the last candidate set carried out (-1: none), the events to the next decision, its candidate set
// built (returned) and its features, clipped, written to feats (K x CANDIDATE_COLUMNS) and glob. `ok`:
// false when nothing was left to happen.
const CandidateSet& step_episode(EpisodeBox& b, int64_t action, float* feats, float* glob, bool& ok) {
    Episode& e = *b.ep;
    ok = true;
    if (action >= 0) ok = e.apply(action);
    if (ok) ok = e.advance();
    const CandidateSet& cs = e.candidates();
    write_features(*b.c, *b.model, e.arrays(), e.scalars(), b.requested, cs, feats, glob, true);
    return cs;
}

// A writable C-contiguous array of the batch (`shape` exactly), its data.
template <typename T, size_t Dims>
T* batch_arg(nb::handle h, const char* name, const char* dtype, const size_t (&shape)[Dims]) {
    nb::ndarray<T, nb::ndim<Dims>, nb::c_contig, nb::device::cpu> a;
    std::string want;
    for (size_t d = 0; d < Dims; ++d) want += (d ? " x " : "") + std::to_string(shape[d]);
    if (!nb::try_cast(h, a, false))
        throw BadInput(std::string(name) + ": a writable C-contiguous " + dtype + " array of " + want + " expected");
    for (size_t d = 0; d < Dims; ++d)
        if (a.shape(d) != shape[d]) throw BadInput(std::string(name) + ": " + want + " entries expected");
    return a.data();
}

// Episodes stepped together on a pool of threads (envs.gym.vec's batched envs): the batch of the
// last `start`, its episodes and arrays held until every step has been handed out.
struct EpisodeBatch {
    TaskPool pool;
    std::vector<EpisodeBox*> boxes;
    std::vector<nb::object> held;
    const int64_t* actions = nullptr;
    float* cand = nullptr;
    float* glob = nullptr;
    bool* mask = nullptr;
    double* fl = nullptr;
    int64_t* it = nullptr;
    size_t K = 0;
    std::vector<std::string> errors;

    explicit EpisodeBatch(int threads) : pool(threads < 1 ? throw BadInput("threads: at least 1") : threads) {}

    void task(size_t i) {  // on any thread, the GIL released
        if (actions[i] < -1) return;
        try {
            EpisodeBox& b = *boxes[i];
            bool ok;
            const std::vector<uint8_t>& m =
                step_episode(b, actions[i], cand + i * K * NUM_CANDIDATE_COLUMNS, glob + i * NUM_GLOBAL_COLUMNS, ok).mask;
            if (m.size() != K) throw BadInput("the candidate set's mask has " + std::to_string(m.size()) + " entries");
            for (size_t k = 0; k < K; ++k) mask[i * K + k] = m[k] != 0;
            const SimScalars& s = b.ep->scalars();
            double* f = fl + i * 4;
            f[0] = s.now, f[1] = s.jobs_in_system_s, f[2] = s.energy_j, f[3] = s.preemption_gpu_s;
            int64_t* v = it + i * 6;
            v[0] = ok, v[1] = s.num_done, v[2] = s.next_arrival, v[3] = s.qlen;
            v[4] = static_cast<int64_t>(b.ep->arrays().running.size()), v[5] = b.ep->done();
        } catch (const std::exception& e) {
            errors[i] = e.what();
        }
    }

    void start(const nb::list& episodes, nb::handle actions_h, nb::handle candidates_h, nb::handle global_h,
               nb::handle mask_h, nb::handle floats_h, nb::handle ints_h) {
        {
            nb::gil_scoped_release release;
            while (!pool.next().empty()) {  // the last batch's steps, if its caller stopped taking them
            }
        }
        const size_t n = episodes.size();
        std::vector<EpisodeBox*> bx(n, nullptr);
        size_t k_all = 0;
        for (size_t i = 0; i < n; ++i) {
            if (episodes[i].is_none()) continue;
            EpisodeBox* b = nullptr;
            if (!nb::try_cast(episodes[i], b) || b == nullptr || !b->ep)
                throw BadInput("episodes[" + std::to_string(i) + "]: an Episode or None expected");
            if (k_all != 0 && b->K != k_all)
                throw BadInput("episodes[" + std::to_string(i) + "]: " + std::to_string(b->K) + " candidates, the batch's " +
                               std::to_string(k_all));
            k_all = b->K;
            bx[i] = b;
        }
        const int64_t* acts = batch_arg<const int64_t, 1>(actions_h, "actions", "int64", {n});
        for (size_t i = 0; i < n; ++i)
            if (acts[i] >= -1 && bx[i] == nullptr)
                throw BadInput("actions[" + std::to_string(i) + "]: a step for no episode (None); -2 skips it");
        const size_t k = k_all;
        float *c = nullptr, *g = nullptr;
        bool* mk = nullptr;
        double* f = nullptr;
        int64_t* v = nullptr;
        if (k != 0) {  // else every episode is skipped: nothing is written
            c = batch_arg<float, 3>(candidates_h, "candidates", "float32", {n, k, NUM_CANDIDATE_COLUMNS});
            g = batch_arg<float, 2>(global_h, "global_", "float32", {n, NUM_GLOBAL_COLUMNS});
            mk = batch_arg<bool, 2>(mask_h, "mask", "bool", {n, k});
            f = batch_arg<double, 2>(floats_h, "floats", "float64", {n, 4});
            v = batch_arg<int64_t, 2>(ints_h, "ints", "int64", {n, 6});
        }
        held.clear();
        for (nb::handle h : {nb::handle(episodes), actions_h, candidates_h, global_h, mask_h, floats_h, ints_h})
            held.push_back(nb::borrow(h));
        boxes = std::move(bx);
        actions = acts, cand = c, glob = g, mask = mk, fl = f, it = v, K = k;
        errors.assign(n, std::string());
        pool.start(n, [this](size_t i) { task(i); });
    }

    std::vector<size_t> next() {
        std::vector<size_t> done;
        {
            nb::gil_scoped_release release;
            done = pool.next();
        }
        for (size_t i : done) {
            if (errors[i].empty()) continue;
            std::string what = "episodes[" + std::to_string(i) + "]: " + errors[i];
            {
                nb::gil_scoped_release release;
                while (!pool.next().empty()) {
                }
            }
            throw BadInput(what);
        }
        return done;
    }
};

// What one call's arrays were, for the next call on the same state (envs.core.ArrayMemo): each
// named array held (so its data stay where they are) with its view. An array that is the same
// object as last time is not imported again; numpy arrays do not move or resize their data while
// another reference holds them.
struct ArrayMemo {
    struct Entry {
        nb::object held;
        void* data = nullptr;
        size_t size = 0;
    };
    static constexpr int SLOTS = 32;
    Entry entries[SLOTS];
};

// A named 1-D array of a dict (C-contiguous, this dtype; read-only accepted), as a view the core
// only reads; with a memo, that of `slot` when it is the same object.
template <typename T, typename Py = std::remove_const_t<T>>
View<T> read_view(const nb::dict& f, const char* name, ArrayMemo* memo = nullptr, int slot = 0) {
    // the key interned once per name (its hash kept), as the ArrayMemo's slot: no string made per call
    static PyObject* keys[ArrayMemo::SLOTS] = {};
    PyObject*& key = keys[slot];
    if (key == nullptr || PyUnicode_CompareWithASCIIString(key, name) != 0) {
        Py_XDECREF(key);
        key = PyUnicode_InternFromString(name);  // kept for the process's life
        if (key == nullptr) throw nb::python_error();
    }
    PyObject* obj = PyDict_GetItemWithError(f.ptr(), key);  // borrowed
    if (obj == nullptr) {
        if (PyErr_Occurred()) throw nb::python_error();
        throw BadInput(std::string(name) + ": missing");
    }
    using B = std::remove_const_t<T>;
    if (memo != nullptr && memo->entries[slot].held.ptr() == obj)
        return View<T>{static_cast<B*>(memo->entries[slot].data), memo->entries[slot].size};
    nb::ndarray<const Py, nb::ndim<1>, nb::c_contig, nb::device::cpu> a;
    if (!nb::try_cast(nb::handle(obj), a, false))
        throw BadInput(std::string(name) + ": a contiguous 1-D array of the right dtype expected");
    View<T> v{const_cast<B*>(reinterpret_cast<const B*>(a.data())), a.shape(0)};
    if (memo != nullptr) memo->entries[slot] = ArrayMemo::Entry{nb::borrow(obj), const_cast<B*>(v.data), v.size};
    return v;
}

// An argument that must be a contiguous 1-D array of this dtype, as a view.
template <typename T, typename Py = T>
View<const T> array_arg(nb::handle h, const char* name) {
    Array1<Py> a;
    if (!nb::try_cast(h, a, false)) throw BadInput(std::string(name) + ": a contiguous 1-D array of the right dtype expected");
    return View<const T>{reinterpret_cast<const T*>(a.data()), a.shape(0)};
}

// An argument of job ids: an int64 array or a sequence of ints.
std::vector<int64_t> ids_arg(nb::handle h, const char* name) {
    Array1<int64_t> a;
    if (nb::try_cast(h, a, false)) return to_vector(a);
    std::vector<int64_t> v;
    if (!nb::try_cast(h, v)) throw BadInput(std::string(name) + ": a sequence of job ids expected");
    return v;
}

// An output argument: a writable C-contiguous array of `T` of `rows` (x `cols`) entries; null
// when it is not of `T` (and `other` is), else BadInput.
template <typename T, size_t Dims>
T* out_arg(nb::handle h, const char* name, size_t rows, size_t cols, bool other = false) {
    nb::ndarray<T, nb::ndim<Dims>, nb::c_contig, nb::device::cpu> a;
    if (!nb::try_cast(h, a, false)) {
        if (other) return nullptr;
        throw BadInput(std::string(name) + ": a writable contiguous float32 (or float64) array expected");
    }
    if (a.shape(0) != rows || (a.ndim() == 2 && a.shape(1) != cols))
        throw BadInput(std::string(name) + ": " + std::to_string(rows) + (a.ndim() == 2 ? " x " + std::to_string(cols) : "") +
                       " entries expected");
    return a.data();
}

}  // namespace

NB_MODULE(_core, m) {
    m.doc() = "The native decision core of gangsched (C++17). Use it through envs.core.";
    // Clusters (and so their ClusterArrays) and RateModels are cached for the process's life: what
    // is alive at exit is kept on purpose, not leaked.
    nb::set_leak_warnings(false);
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const BadInput& e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        }
    });

    nb::class_<Cluster>(m, "ClusterArrays", "The cluster arrays the core reads (envs.core.cluster_arrays builds it).")
        .def(
            "__init__",
            [](Cluster* self, const nb::dict& f) {
                Cluster c;
                c.num_types = scalar<int64_t>(f, "num_types");
                c.num_kinds = scalar<int64_t>(f, "num_kinds");
                c.speed_varies_by_kind = scalar<bool>(f, "speed_varies_by_kind");
                c.intra_nvswitch = scalar<int64_t>(f, "intra_nvswitch");
                c.intra_nvlink_pairs = scalar<int64_t>(f, "intra_nvlink_pairs");
                c.reference_nvlink_GBps = scalar<double>(f, "reference_nvlink_GBps");
                c.node_type = column<int64_t>(f, "node_gpu_type");
                c.node_speed = column<double>(f, "node_speed");
                c.node_memory_gb = column<double>(f, "node_memory_gb");
                c.node_first_gpu = column<int64_t>(f, "node_first_gpu");
                c.node_gpus = column<int64_t>(f, "node_gpus");
                c.node_intra = column<int64_t>(f, "node_intra");
                c.node_nvlink_GBps = column<double>(f, "node_nvlink_GBps");
                c.node_pcie_GBps = column<double>(f, "node_pcie_GBps");
                c.node_net_GBps = column<double>(f, "node_net_per_gpu_GBps");
                c.gpu_socket = column<int64_t>(f, "gpu_socket");
                c.gpu_node = column<int64_t>(f, "gpu_node");
                c.gpu_local = column<int64_t>(f, "gpu_local");
                c.gpu_speed = column<double>(f, "gpu_speed");
                c.switch_level = column<int64_t>(f, "switch_level");
                c.switch_uplink_GBps = column<double>(f, "switch_uplink_GBps");
                c.node_domain = column<int64_t>(f, "node_domain");
                c.node_block = column<int64_t>(f, "node_block");
                c.num_domains = scalar<int64_t>(f, "num_domains");
                c.num_nodes = static_cast<int64_t>(c.node_type.size());
                c.num_switches = static_cast<int64_t>(c.switch_level.size());
                for (int64_t g : c.node_gpus) c.num_gpus += std::max<int64_t>(g, 0);  // validate() checks each GPU array
                c.under = table<bool, uint8_t>(f, "node_under_switch", c.num_nodes, c.num_switches);
                c.node_tier = table<int8_t, int8_t>(f, "node_tier", c.num_nodes, c.num_nodes);
                c.gpu_speed_by_kind = table<double, double>(f, "gpu_speed_by_kind", c.num_gpus, c.num_kinds);
                for (int64_t l : c.switch_level) c.max_level = std::max(c.max_level, l);
                c.validate();
                c.set_derived();
                new (self) Cluster(std::move(c));
            },
            nb::arg("fields"), "From a dict of the Cluster's arrays and constants by name (envs.core.cluster_arrays).")
        .def_ro("num_nodes", &Cluster::num_nodes)
        .def_ro("num_gpus", &Cluster::num_gpus);

    m.def(
        "node_take",
        [](const Cluster& c, const std::vector<int64_t>& free, int64_t need, int64_t tp, int64_t rule, int64_t segment) -> nb::object {
            Take take;
            if (!node_take(c, free, need, tp, rule, take, segment)) return nb::none();
            nb::dict out;
            for (const auto& [n, k] : take) out[nb::int_(n)] = nb::int_(k);
            return out;
        },
        nb::arg("cluster"), nb::arg("free"), nb::arg("need"), nb::arg("tp"), nb::arg("rule"), nb::arg("segment") = 0,
        "Per node, the GPUs a rule gives a gang (a dict in the reference's order), or None; with `segment`, in "
        "segments of that many GPUs, each inside one block.");

    m.def(
        "pick_in_node",
        [](const Cluster& c, int64_t node, int64_t count, const Array1<bool>& avail) {
            if (node < 0 || node >= c.num_nodes) throw BadInput("node: out of range");
            if (avail.shape(0) != static_cast<size_t>(c.node_gpus[static_cast<size_t>(node)]))
                throw BadInput("avail: one flag per GPU of the node expected");
            std::vector<int64_t> out;
            pick_in_node(c, node, count, reinterpret_cast<const uint8_t*>(avail.data()), out);
            return as_numpy<int64_t>(std::move(out));
        },
        nb::arg("cluster"), nb::arg("node"), nb::arg("count"), nb::arg("avail"),
        "`count` available GPUs of one node, inside one NUMA socket when they fit in one.");

    m.def(
        "placement_geometry",
        [](const Cluster& c, const Array1<int64_t>& gpus, int64_t tp, double cross_socket_factor, double cross_tier_efficiency) {
            Geometry g;
            placement_geometry(c, to_vector(gpus), tp, SpeedConstants{cross_socket_factor, cross_tier_efficiency}, g);
            nb::list by_kind;
            for (double x : g.min_speed_by_kind) by_kind.append(x);
            return nb::make_tuple(g.min_speed, nb::tuple(by_kind), as_numpy<int64_t>(std::move(g.nodes)),
                                  as_numpy<int64_t>(std::move(g.gpus_on_node)), g.tp_stretch, g.tp_cross_node, g.dp_bw_GBps,
                                  g.tier, as_numpy<int64_t>(std::move(g.uplinks)), as_numpy<double>(std::move(g.uplink_demand_GBps)));
        },
        nb::arg("cluster"), nb::arg("gpus"), nb::arg("tp_degree"), nb::arg("cross_socket_factor"), nb::arg("cross_tier_efficiency"),
        "envs.cluster.speed.placement_geometry's fields, in PlacementGeometry's order.");

    nb::class_<RateModel>(m, "RateModel", "The speed model's constants a rate reads (envs.core.rate_model builds it).")
        .def(
            "__init__",
            [](RateModel* self, double cross_socket_factor, double cross_tier_efficiency, double interference_coeff,
               double reference_net_per_gpu_GBps, const std::vector<double>& sensitivity_by_kind,
               const std::vector<double>& pressure_by_kind) {
                if (sensitivity_by_kind.size() != pressure_by_kind.size())
                    throw BadInput("pressure_by_kind: one entry per job kind, as sensitivity_by_kind");
                new (self) RateModel{SpeedConstants{cross_socket_factor, cross_tier_efficiency}, interference_coeff,
                                     reference_net_per_gpu_GBps, sensitivity_by_kind, pressure_by_kind};
            },
            nb::arg("cross_socket_factor"), nb::arg("cross_tier_efficiency"), nb::arg("interference_coeff"),
            nb::arg("reference_net_per_gpu_GBps"), nb::arg("sensitivity_by_kind"), nb::arg("pressure_by_kind"));

    m.def(
        "choose_sect",
        [](const Cluster& c, const RateModel& model, const Array1<bool>& free_mask, const Array1<int64_t>& node_free,
           const Array1<double>& node_pressure, const Array1<double>& uplink_demand, const Array1<int64_t>& num_gpus,
           const Array1<int64_t>& tp_degree, const Array1<double>& mem_per_gpu_gb, const Array1<int64_t>& kind,
           const Array1<double>& comm_fraction, const Array1<double>& tp_comm_share, const Array1<double>& estimate_s,
           const Array1<double>& work_done_s, const Array1<double>& restore_s, const Array1<bool>& needs_restore,
           const Array1<int64_t>& enqueue_seq, bool any_restore, const std::vector<int64_t>& window, const Array1<bool>& mask,
           int64_t num_rules, const Array1<int64_t>& segment_gpus) {
            if (static_cast<int64_t>(model.sensitivity_by_kind.size()) < c.num_kinds)
                throw BadInput("model: one sensitivity per job kind expected");
            const auto N = static_cast<size_t>(c.num_nodes);
            Allocation a{reinterpret_cast<const uint8_t*>(sized(free_mask, static_cast<size_t>(c.num_gpus), "free_mask")),
                         sized(node_free, N, "node_free"), sized(node_pressure, N, "node_pressure"),
                         sized(uplink_demand, static_cast<size_t>(c.num_switches), "uplink_demand")};
            for (size_t n = 0; n < N; ++n)
                if (a.node_free[n] < 0 || a.node_free[n] > c.node_gpus[n]) throw BadInput("node_free: a count outside 0..the node's GPUs");
            const size_t J = num_gpus.shape(0);
            Jobs jobs{static_cast<int64_t>(J), num_gpus.data(), sized(tp_degree, J, "tp_degree"),
                      sized(mem_per_gpu_gb, J, "mem_per_gpu_gb"), sized(kind, J, "kind"), sized(comm_fraction, J, "comm_fraction"),
                      sized(tp_comm_share, J, "tp_comm_share"), sized(estimate_s, J, "estimate_s"),
                      sized(work_done_s, J, "work_done_s"), sized(restore_s, J, "restore_s"),
                      reinterpret_cast<const uint8_t*>(sized(needs_restore, J, "needs_restore")),
                      sized(enqueue_seq, J, "enqueue_seq"), any_restore,
                      segment_gpus.shape(0) ? sized(segment_gpus, J, "segment_gpus") : nullptr};
            if (jobs.segment_gpus != nullptr)
                for (int64_t j : window)
                    if (j >= 0 && static_cast<size_t>(j) < J) {
                        const int64_t seg = jobs.segment_gpus[j];
                        if (seg < 0 || (seg > 0 && (seg % jobs.tp_degree[j] != 0 || jobs.num_gpus[j] % seg != 0)))
                            throw BadInput("segment_gpus: 0 (none) or whole TP groups dividing the gang expected");
                    }
            return choose_sect(c, model, a, jobs, window, reinterpret_cast<const uint8_t*>(mask.data()),
                               static_cast<int64_t>(mask.shape(0)), num_rules);
        },
        nb::arg("cluster"), nb::arg("model"), nb::arg("free_mask"), nb::arg("node_free"), nb::arg("node_pressure"),
        nb::arg("uplink_demand"), nb::arg("num_gpus"), nb::arg("tp_degree"), nb::arg("mem_per_gpu_gb"), nb::arg("kind"),
        nb::arg("comm_fraction"), nb::arg("tp_comm_share"), nb::arg("estimate_s"), nb::arg("work_done_s"),
        nb::arg("restore_s"), nb::arg("needs_restore"), nb::arg("enqueue_seq"), nb::arg("any_restore"), nb::arg("window"),
        nb::arg("mask"), nb::arg("num_rules"), nb::arg("segment_gpus"),
        "baselines/sect.py's choice over a decision state's arrays: a candidate index, or -1 when none is valid "
        "(`segment_gpus`: GPUs per segment of each job, or an empty array when no job asks for segments).");


    nb::class_<ArrayMemo>(m, "ArrayMemo",
                          "The arrays of candidate_features' last call on a state and their views (keep one per state).")
        .def(nb::init<>());

    {
        nb::list cand, glob;
        for (const char* n : CANDIDATE_COLUMN_NAMES) cand.append(nb::str(n));
        for (const char* n : GLOBAL_COLUMN_NAMES) glob.append(nb::str(n));
        m.attr("CANDIDATE_COLUMNS") = nb::tuple(cand);
        m.attr("GLOBAL_COLUMNS") = nb::tuple(glob);
    }

    m.def(
        "candidate_features",
        [](const Cluster& c, const RateModel& model, const nb::dict& f, nb::handle running, nb::handle checkpointing,
           nb::handle reserved, double now, const std::vector<int64_t>& counts, nb::handle window, nb::handle mask,
           nb::handle gpus, nb::handle gpus_end, nb::handle victims, nb::handle victims_end, nb::handle out_candidates,
           nb::handle out_global, bool clip, ArrayMemo* memo) {
            if (counts.size() != 8)
                throw BadInput("counts: (free GPUs, fragmented free GPUs, known jobs, queue length, past arrivals, queued GPUs, "
                               "queued high-priority jobs, restores owed) expected");
            SimArrays a;
            a.estimate = read_view<const double>(f, "estimate", memo, 0);
            a.work_done = read_view<double>(f, "work_done", memo, 1);
            a.restore_s = read_view<const double>(f, "restore_s", memo, 2);
            a.needs_restore = read_view<uint8_t, bool>(f, "needs_restore", memo, 3);
            a.checkpoint_s = read_view<const double>(f, "checkpoint_s", memo, 4);
            a.gpus_req = read_view<const int64_t>(f, "gpus_req", memo, 5);
            a.tp_degree = read_view<const int64_t>(f, "tp_degree", memo, 6);
            a.kind = read_view<const int64_t>(f, "kind", memo, 7);
            a.priority = read_view<const int64_t>(f, "priority", memo, 8);
            a.preemptible = read_view<const uint8_t, bool>(f, "preemptible", memo, 9);
            a.comm_fraction = read_view<const double>(f, "comm_fraction", memo, 10);
            a.tp_comm_share = read_view<const double>(f, "tp_comm_share", memo, 11);
            a.mem_req = read_view<const double>(f, "mem_req", memo, 12);
            a.queued_since = read_view<double>(f, "queued_since", memo, 13);
            a.wait_s = read_view<double>(f, "wait_s", memo, 14);
            a.attained_gpu_s = read_view<double>(f, "attained_gpu_s", memo, 15);
            a.overhead_left = read_view<double>(f, "overhead_left", memo, 16);
            a.checkpoint_end = read_view<double>(f, "checkpoint_end", memo, 17);
            a.rate = read_view<double>(f, "rate", memo, 18);
            a.q_ids = read_view<int64_t>(f, "q_ids", memo, 19);
            a.node_free = read_view<int64_t>(f, "node_free", memo, 20);
            a.node_pressure = read_view<double>(f, "node_pressure", memo, 21);
            a.uplink_demand = read_view<double>(f, "uplink_demand", memo, 22);
            a.whole_gang = read_view<const int64_t>(f, "whole_gang", memo, 23);
            a.running = ids_arg(running, "running");
            a.checkpointing = ids_arg(checkpointing, "checkpointing");
            a.reserved = ids_arg(reserved, "reserved");
            SimScalars s;
            s.now = now;
            s.num_free = counts[0];
            s.fragmented = counts[1];
            s.next_arrival = counts[2];
            s.qlen = counts[3];
            s.queued_gpus = counts[5];
            s.queued_high = counts[6];
            s.num_needs_restore = counts[7];
            PastArrivals past;
            past.times = read_view<const double>(f, "arrival_times", memo, 24);
            past.requested = read_view<const double>(f, "arrival_requested", memo, 25);
            if (counts[4] < 0) throw BadInput("counts: a negative count of past arrivals");
            if (static_cast<size_t>(counts[4]) > past.times.size) throw BadInput("arrival_times: fewer than the past arrivals");
            if (static_cast<size_t>(counts[4]) > past.requested.size)
                throw BadInput("arrival_requested: fewer than the past arrivals");
            past.times.size = past.requested.size = static_cast<size_t>(counts[4]);
            const std::vector<int64_t> win = ids_arg(window, "window");
            CandidateArrays cs;
            cs.window = View<const int64_t>{win.data(), win.size()};
            cs.mask = array_arg<uint8_t, bool>(mask, "mask");
            cs.gpus = array_arg<int64_t>(gpus, "gpus");
            cs.gpus_end = array_arg<int64_t>(gpus_end, "gpus_end");
            cs.victims = array_arg<int64_t>(victims, "victims");
            cs.victims_end = array_arg<int64_t>(victims_end, "victims_end");
            const size_t K = cs.mask.size;
            if (float* feats = out_arg<float, 2>(out_candidates, "out_candidates", K, NUM_CANDIDATE_COLUMNS, true)) {
                float* glob = out_arg<float, 1>(out_global, "out_global", NUM_GLOBAL_COLUMNS, 0);
                candidate_features(c, model, a, s, past, cs, feats, glob, clip);
            } else {  // float64: the values before the cast to float32
                double* feats64 = out_arg<double, 2>(out_candidates, "out_candidates", K, NUM_CANDIDATE_COLUMNS);
                double* glob64 = out_arg<double, 1>(out_global, "out_global", NUM_GLOBAL_COLUMNS, 0);
                candidate_features(c, model, a, s, past, cs, feats64, glob64, clip);
            }
        },
        nb::arg("cluster"), nb::arg("model"), nb::arg("arrays"), nb::arg("running"), nb::arg("checkpointing"),
        nb::arg("reserved"), nb::arg("now"), nb::arg("counts"), nb::arg("window"), nb::arg("mask"), nb::arg("gpus"),
        nb::arg("gpus_end"), nb::arg("victims"), nb::arg("victims_end"), nb::arg("out_candidates"), nb::arg("out_global"),
        nb::arg("clip") = false, nb::arg("memo") = nb::none(),
        "envs.decision.features.candidate_features over a decision state's arrays (by name: per job, the queue q_ids, per node, "
        "the past arrivals; the counts say how many of the jobs are known, how long the queue is, how many arrivals are "
        "past) and a candidate set (the window, the mask, each valid candidate's GPUs and victims as flat "
        "arrays with ends), written into out_candidates (K x CANDIDATE_COLUMNS float32) and out_global "
        "(GLOBAL_COLUMNS float32), or float64 for both: the values before the cast; with clip, clipped to [-1, 1] as the "
        "env's observation. memo (an ArrayMemo kept per state): the arrays that are the same objects as at its last "
        "call are not imported again.");

    m.def(
        "state_placements",
        [](const Cluster& c, const RateModel& model, const nb::dict& f, nb::handle running, nb::handle checkpointing,
           double now, nb::handle window, nb::handle mask, const std::vector<double>& las_thresholds, double starvation_factor) {
            if (static_cast<int64_t>(model.sensitivity_by_kind.size()) < c.num_kinds)
                throw BadInput("model: one sensitivity per job kind expected");
            const auto N = static_cast<size_t>(c.num_nodes), G = static_cast<size_t>(c.num_gpus),
                       S = static_cast<size_t>(c.num_switches);
            SimArrays a;
            a.gpus_req = read_view<const int64_t>(f, "gpus_req", nullptr, 5);
            const size_t J = a.gpus_req.size;
            auto sized_view = [J](auto v, const char* name, size_t n) {
                if (v.size != n) throw BadInput(std::string(name) + ": " + std::to_string(v.size) + " entries, expected " + std::to_string(n));
                return v;
            };
            a.arrival = sized_view(read_view<const double>(f, "arrival", nullptr, 26), "arrival", J);
            a.tp_degree = sized_view(read_view<const int64_t>(f, "tp_degree", nullptr, 6), "tp_degree", J);
            a.segment_gpus = sized_view(read_view<const int64_t>(f, "segment_gpus", nullptr, 29), "segment_gpus", J);
            a.mem_req = sized_view(read_view<const double>(f, "mem_req", nullptr, 12), "mem_req", J);
            a.priority = sized_view(read_view<const int64_t>(f, "priority", nullptr, 8), "priority", J);
            a.preemptible = sized_view(read_view<const uint8_t, bool>(f, "preemptible", nullptr, 9), "preemptible", J);
            a.attained_gpu_s = sized_view(read_view<double>(f, "attained_gpu_s", nullptr, 15), "attained_gpu_s", J);
            a.checkpoint_s = sized_view(read_view<const double>(f, "checkpoint_s", nullptr, 4), "checkpoint_s", J);
            a.restore_s = sized_view(read_view<const double>(f, "restore_s", nullptr, 2), "restore_s", J);
            a.queued_since = sized_view(read_view<double>(f, "queued_since", nullptr, 13), "queued_since", J);
            a.free_mask = sized_view(read_view<uint8_t, bool>(f, "free_mask", nullptr, 27), "free_mask", G);
            a.gpu_owner = sized_view(read_view<int64_t>(f, "gpu_owner", nullptr, 28), "gpu_owner", G);
            a.node_free = sized_view(read_view<int64_t>(f, "node_free", nullptr, 20), "node_free", N);
            a.node_pressure = sized_view(read_view<double>(f, "node_pressure", nullptr, 21), "node_pressure", N);
            a.uplink_demand = sized_view(read_view<double>(f, "uplink_demand", nullptr, 22), "uplink_demand", S);
            for (size_t j = 0; j < J; ++j) {
                if (a.gpus_req[j] < 1 || a.tp_degree[j] < 1 || a.gpus_req[j] % a.tp_degree[j])
                    throw BadInput("tp_degree: a gang that is not whole TP groups");
                if (a.priority[j] < 0) throw BadInput("priority: a negative class");
                const int64_t seg = a.segment_gpus[j];
                if (seg < 0 || (seg > 0 && (seg % a.tp_degree[j] != 0 || a.gpus_req[j] % seg != 0)))
                    throw BadInput("segment_gpus: 0 (none) or whole TP groups dividing the gang expected");
            }
            for (size_t n = 0; n < N; ++n)
                if (a.node_free[n] < 0 || a.node_free[n] > c.node_gpus[n]) throw BadInput("node_free: a count outside 0..the node's GPUs");
            for (size_t g = 0; g < G; ++g)
                if (a.gpu_owner[g] < -1 || a.gpu_owner[g] >= static_cast<int64_t>(J)) throw BadInput("gpu_owner: a job id out of range");
            a.running = ids_arg(running, "running");
            a.checkpointing = ids_arg(checkpointing, "checkpointing");
            // each placed job's record: the nodes of its GPUs (ascending) with the GPUs it holds on each
            std::vector<int64_t> slot(J, -1), rec_i, pool_i;
            std::vector<double> rec_f, pool_counts;
            std::vector<uint8_t> placed(J, 0);
            for (const auto* jobs : {&a.running, &a.checkpointing})
                for (int64_t j : *jobs) {
                    if (j < 0 || static_cast<size_t>(j) >= J) throw BadInput("running: a job id out of range (or checkpointing)");
                    if (placed[static_cast<size_t>(j)]) throw BadInput("running: a job listed twice (or checkpointing)");
                    placed[static_cast<size_t>(j)] = 1;
                }
            std::vector<std::vector<std::pair<int64_t, int64_t>>> nodes_of(J);
            for (size_t g = 0; g < G; ++g) {
                const int64_t o = a.gpu_owner[g];
                if (o < 0 || !placed[static_cast<size_t>(o)]) continue;
                auto& nodes = nodes_of[static_cast<size_t>(o)];
                const int64_t n = c.gpu_node[g];
                if (nodes.empty() || nodes.back().first != n) nodes.emplace_back(n, 0);
                ++nodes.back().second;
            }
            for (const auto* jobs : {&a.running, &a.checkpointing})
                for (int64_t j : *jobs) {
                    const auto& nodes = nodes_of[static_cast<size_t>(j)];
                    if (nodes.empty()) throw BadInput("gpu_owner: a running or checkpointing job that holds no GPU");
                    const auto lo = static_cast<int64_t>(pool_i.size());
                    for (const auto& [n, k] : nodes) {
                        pool_i.push_back(n);
                        pool_counts.push_back(static_cast<double>(k));
                    }
                    const auto hi = static_cast<int64_t>(pool_i.size());
                    slot[static_cast<size_t>(j)] = static_cast<int64_t>(rec_i.size() / 4);
                    rec_i.insert(rec_i.end(), {lo, hi, hi, 0});
                    rec_f.insert(rec_f.end(), 8, 0.0);
                }
            a.job_slot = View<const int64_t>{slot.data(), slot.size()};
            a.rec_i = View<const int64_t>{rec_i.data(), rec_i.size()};
            a.rec_f = View<const double>{rec_f.data(), rec_f.size()};
            a.pool_i = View<const int64_t>{pool_i.data(), pool_i.size()};
            a.pool_counts = View<const double>{pool_counts.data(), pool_counts.size()};
            const std::vector<int64_t> win = ids_arg(window, "window");
            const View<const uint8_t> m = array_arg<uint8_t, bool>(mask, "mask");
            if (m.size < 1 || (m.size - 1) % NUM_FEATURE_RULES || win.size() > (m.size - 1) / NUM_FEATURE_RULES)
                throw BadInput("mask: the window's slots x rules + WAIT entries expected");
            for (int64_t j : win)
                if (j < 0 || static_cast<size_t>(j) >= J) throw BadInput("window: a job id out of range");
            SimScalars sc;
            sc.now = now;
            const LasSpec las{las_thresholds, starvation_factor};
            CandidateSet out;
            // with the GIL held: tens of microseconds, and a service's event loop that took the GIL
            // meanwhile would keep this thread waiting for the interpreter's switch interval
            place_candidates(c, model, a, sc, win, m.data, las, out);
            return nb::make_tuple(out.index, out.gpus, out.victims);
        },
        nb::arg("cluster"), nb::arg("model"), nb::arg("arrays"), nb::arg("running"), nb::arg("checkpointing"), nb::arg("now"),
        nb::arg("window"), nb::arg("mask"), nb::arg("las_thresholds"), nb::arg("starvation_factor"),
        "envs.decision.candidates.build_candidates' placements for a decision state's arrays (by name: per job, per GPU, per node, "
        "per switch) and a window and mask worked out by it: (the valid candidates' indices other than WAIT, their GPUs "
        "(empty: none found), their victims), as SimView.candidates gives them.");

    m.def(
        "exact_sum", [](const Array1<double>& x) { return exact_sum(x.data(), x.shape(0)); }, nb::arg("values"),
        "Python's math.fsum of a float64 array, as the features' sums over past arrivals take it.");

    m.def(
        "rollout_sect",
        [](const Cluster& c, const RateModel& model, const nb::dict& f, const std::vector<int64_t>& running,
           const std::vector<int64_t>& checkpointing, const std::vector<int64_t>& reserved,
           const std::vector<std::vector<int64_t>>& reserved_gpus, const std::vector<double>& fscal,
           const std::vector<int64_t>& iscal, int64_t queue_window, int64_t priority_high, double until, int64_t first_job,
           const std::vector<int64_t>& first_gpus, const std::vector<int64_t>& first_victims) {
            SimArrays a;
            SimScalars s;
            parse_sim(c, model, f, running, checkpointing, reserved, reserved_gpus, fscal, iscal, a, s);
            RolloutResult r;
            {
                nb::gil_scoped_release release;
                r = rollout_sect(c, model, a, s, queue_window, priority_high, until, first_job, first_gpus, first_victims);
            }
            return nb::make_tuple(
                nb::make_tuple(s.now, s.jobs_in_system_s, s.energy_j, s.allocated_gpu_s, s.useful_work_s, s.power_w,
                               s.preemption_gpu_s),
                nb::make_tuple(s.num_free, s.fragmented, s.alloc_version, s.num_done, s.jobs_in_system, s.next_arrival, s.qlen,
                               s.enqueued, s.queued_gpus, s.queued_high, s.num_needs_restore, s.num_preemptions),
                a.running, a.checkpointing, a.reserved, r.decisions, r.starts, r.events, r.stuck);
        },
        nb::arg("cluster"), nb::arg("model"), nb::arg("arrays"), nb::arg("running"), nb::arg("checkpointing"),
        nb::arg("reserved"), nb::arg("reserved_gpus"), nb::arg("floats"), nb::arg("ints"), nb::arg("queue_window"),
        nb::arg("priority_high"), nb::arg("until"), nb::arg("first_job") = SECT_DECIDES,
        nb::arg("first_gpus") = std::vector<int64_t>(), nb::arg("first_victims") = std::vector<int64_t>(),
        "A lookahead's rollout of sect from a decision state, over a simulator's arrays (changed in place): first a "
        "start of first_job on first_gpus (with first_victims: their preemption and a reservation), a WAIT (-1) or "
        "sect's choice (-2).");

    nb::class_<SimView>(m, "SimView",
                        "A simulator's arrays parsed once, for the calls that read its state at each decision.")
        .def(
            "__init__",
            [](SimView* self, const Cluster& c, const RateModel& model, const nb::dict& f) {
                SimArrays a;
                parse_arrays(c, model, f, a);
                const View<const double> requested = view<const double, double>(f, "requested_gpu_s", a.arrival.size);
                new (self) SimView{&c, &model, nb::borrow(f), a, requested};
            },
            nb::keep_alive<1, 2>(), nb::keep_alive<1, 3>(), nb::arg("cluster"), nb::arg("model"), nb::arg("arrays"))
        .def(
            "candidates",
            [](const SimView& v, const nb::tuple& allocation, const std::vector<int64_t>& running,
               const std::vector<int64_t>& checkpointing, const std::vector<int64_t>& reserved,
               const std::vector<std::vector<int64_t>>& reserved_gpus, const std::vector<double>& fscal,
               const std::vector<int64_t>& iscal, int64_t queue_window, int64_t priority_high, bool preempt_las,
               const std::vector<double>& wait_guard, const std::vector<double>& las_thresholds, double starvation_factor,
               nb::handle out_candidates, nb::handle out_global, bool clip) {
                ViewCall call = view_call(v, allocation, running, checkpointing, reserved, reserved_gpus, fscal, iscal,
                                          wait_guard, las_thresholds, starvation_factor);
                if (queue_window < 1) throw BadInput("queue_window: at least 1");
                const bool features = !out_candidates.is_none() || !out_global.is_none();
                float *feats = nullptr, *glob = nullptr;
                if (features) {
                    const size_t K = static_cast<size_t>(queue_window) * NUM_FEATURE_RULES + 1;
                    feats = out_arg<float, 2>(out_candidates, "out_candidates", K, NUM_CANDIDATE_COLUMNS);
                    glob = out_arg<float, 1>(out_global, "out_global", NUM_GLOBAL_COLUMNS, 0);
                }
                SimArrays& a = call.a;
                CandidateSet out;
                {
                    nb::gil_scoped_release release;
                    build_candidates(*v.c, *v.model, a, call.s, queue_window, priority_high, preempt_las, call.guard, call.las,
                                     out);
                    if (features) write_features(*v.c, *v.model, a, call.s, v.requested, out, feats, glob, clip);
                }
                return nb::make_tuple(out.window, as_numpy<uint8_t>(std::move(out.mask)), out.index, out.gpus, out.victims);
            },
            nb::arg("allocation"), nb::arg("running"), nb::arg("checkpointing"), nb::arg("reserved"),
            nb::arg("reserved_gpus"), nb::arg("floats"), nb::arg("ints"), nb::arg("queue_window"), nb::arg("priority_high"),
            nb::arg("preempt_las"), nb::arg("wait_guard"), nb::arg("las_thresholds"), nb::arg("starvation_factor"),
            nb::arg("out_candidates") = nb::none(), nb::arg("out_global") = nb::none(), nb::arg("clip") = false,
            "envs.decision.candidates.build_candidates over the simulator's state (read, not changed): (window, mask, the valid "
            "candidates' indices other than WAIT, their GPUs (empty: none found), their victims). With out_candidates "
            "(K x CANDIDATE_COLUMNS float32) and out_global (GLOBAL_COLUMNS float32), the same call writes the set's "
            "features there (envs.decision.features.candidate_features; with clip, clipped to [-1, 1] as the env's observation): "
            "a decision's whole observation in one call.")
        .def(
            "can_place",
            [](const SimView& v, const nb::tuple& allocation, const std::vector<int64_t>& running,
               const std::vector<int64_t>& checkpointing, const std::vector<int64_t>& reserved,
               const std::vector<std::vector<int64_t>>& reserved_gpus, const std::vector<double>& fscal,
               const std::vector<int64_t>& iscal, int64_t priority_high, bool preempt_las,
               const std::vector<double>& las_thresholds, double starvation_factor) {
                ViewCall call = view_call(v, allocation, running, checkpointing, reserved, reserved_gpus, fscal, iscal, {},
                                          las_thresholds, starvation_factor);
                return can_place(*v.c, *v.model, call.a, call.s, priority_high, preempt_las, call.las);
            },
            nb::arg("allocation"), nb::arg("running"), nb::arg("checkpointing"), nb::arg("reserved"),
            nb::arg("reserved_gpus"), nb::arg("floats"), nb::arg("ints"), nb::arg("priority_high"), nb::arg("preempt_las"),
            nb::arg("las_thresholds"), nb::arg("starvation_factor"),
            "envs.decision.window.can_place (preempt_las) or any_feasible over the simulator's state: some queued job has a "
            "valid placement.");

    nb::class_<EpisodeBox>(m, "Episode",
                           "A whole episode owned by the core: the env's decision loop over a simulator's arrays (changed "
                           "in place), its segments and timeline recorded.")
        .def(
            "__init__",
            [](EpisodeBox* self, const Cluster& c, const RateModel& model, const nb::dict& f, const std::vector<int64_t>& running,
               const std::vector<int64_t>& checkpointing, const std::vector<int64_t>& reserved,
               const std::vector<std::vector<int64_t>>& reserved_gpus, const std::vector<double>& fscal,
               const std::vector<int64_t>& iscal, int64_t priority_high, int64_t queue_window, bool preempt_las,
               const std::vector<double>& wait_guard, const std::vector<double>& las_thresholds, double starvation_factor) {
                SimArrays a;
                SimScalars s;
                parse_sim(c, model, f, running, checkpointing, reserved, reserved_gpus, fscal, iscal, a, s);
                WaitGuardSpec guard;
                if (!wait_guard.empty()) {
                    if (wait_guard.size() != 2) throw BadInput("wait_guard: (overdue_factor, min_wait_s) or empty");
                    guard = WaitGuardSpec{true, wait_guard[0], wait_guard[1]};
                }
                if (queue_window < 1) throw BadInput("queue_window: at least 1");
                const View<const double> requested = view<const double, double>(f, "requested_gpu_s", a.arrival.size);
                auto ep = std::make_unique<Episode>(c, model, std::move(a), s, priority_high, queue_window, preempt_las, guard,
                                                    LasSpec{las_thresholds, starvation_factor});
                new (self) EpisodeBox{std::move(ep), &c, &model, nb::borrow(f), requested,
                                      static_cast<size_t>(queue_window) * NUM_FEATURE_RULES + 1};
            },
            nb::keep_alive<1, 2>(), nb::keep_alive<1, 3>(), nb::arg("cluster"), nb::arg("model"), nb::arg("arrays"),
            nb::arg("running"), nb::arg("checkpointing"), nb::arg("reserved"), nb::arg("reserved_gpus"), nb::arg("floats"),
            nb::arg("ints"), nb::arg("priority_high"), nb::arg("queue_window"), nb::arg("preempt_las"), nb::arg("wait_guard"),
            nb::arg("las_thresholds"), nb::arg("starvation_factor"))
        .def(
            "step",
            [](EpisodeBox& b, int64_t action, nb::handle out_candidates, nb::handle out_global) {
                float* feats = out_arg<float, 2>(out_candidates, "out_candidates", b.K, NUM_CANDIDATE_COLUMNS);
                float* glob = out_arg<float, 1>(out_global, "out_global", NUM_GLOBAL_COLUMNS, 0);
                Episode& e = *b.ep;
                bool ok;
                const CandidateSet* cs;
                {
                    nb::gil_scoped_release release;
                    cs = &step_episode(b, action, feats, glob, ok);
                }
                const SimScalars& s = e.scalars();
                std::vector<uint8_t> mask(cs->mask);
                return nb::make_tuple(as_numpy<uint8_t>(std::move(mask)), ok, s.now, s.jobs_in_system_s, s.energy_j,
                                      s.preemption_gpu_s, s.num_done, s.next_arrival, s.qlen, e.arrays().running.size(), e.done());
            },
            nb::arg("action"), nb::arg("out_candidates"), nb::arg("out_global"),
            "Carry out candidate `action` of the last candidate set (-1: none, the episode's first call), then the events "
            "to the next decision (or the end), its candidate set and its features, clipped, written into out_candidates "
            "(K x CANDIDATE_COLUMNS float32) and out_global: (mask, False when nothing was left to happen, now, "
            "jobs_in_system_s, energy_j, preemption_gpu_s, num_done, arrived, queued, running, done).")
        .def(
            "state",
            [](EpisodeBox& b) {
                const SimScalars& s = b.ep->scalars();
                const SimArrays& a = b.ep->arrays();
                return nb::make_tuple(
                    nb::make_tuple(s.now, s.jobs_in_system_s, s.energy_j, s.allocated_gpu_s, s.useful_work_s, s.power_w,
                                   s.preemption_gpu_s),
                    nb::make_tuple(s.num_free, s.fragmented, s.alloc_version, s.num_done, s.jobs_in_system, s.next_arrival,
                                   s.qlen, s.enqueued, s.queued_gpus, s.queued_high, s.num_needs_restore, s.num_preemptions),
                    a.running, a.checkpointing, a.reserved, b.ep->events());
            },
            "The scalars and lists as replay's result: ((floats), (ints), running, checkpointing, reserved, events).")
        .def(
            "records",
            [](EpisodeBox& b) {
                Recording rec;
                std::swap(rec, b.ep->recording());
                return nb::make_tuple(as_numpy<int64_t>(std::move(rec.seg_job)), as_numpy<double>(std::move(rec.seg_start)),
                                      as_numpy<double>(std::move(rec.seg_end)), as_numpy<uint8_t>(std::move(rec.seg_preempted)),
                                      as_numpy<int64_t>(std::move(rec.seg_gpu_end)), as_numpy<int64_t>(std::move(rec.seg_gpus)),
                                      as_numpy<double>(std::move(rec.timeline)));
            },
            "The segments and timeline rows recorded since the last call (as replay's), handed over.");

    nb::class_<EpisodeBatch>(m, "EpisodeBatch",
                             "Episodes stepped together, each on one of a pool of `threads` threads (the caller's "
                             "included) with the GIL released, each writing its row of the batch's arrays.")
        .def(nb::init<int>(), nb::arg("threads"))
        .def_prop_ro("threads", [](EpisodeBatch& b) { return b.pool.threads(); })
        .def("start", &EpisodeBatch::start, nb::arg("episodes"), nb::arg("actions"), nb::arg("candidates"), nb::arg("global_"),
             nb::arg("mask"), nb::arg("floats"), nb::arg("ints"),
             "Begin Episode.step for every episode whose action is at least -1 (-2 skips it; its entry may be None): "
             "each writes row i of the batch arrays, candidates (n x K x CANDIDATE_COLUMNS float32) and global_ (n x "
             "GLOBAL_COLUMNS) its features, mask (n x K bool) its candidate set's mask, floats (n x 4 float64) (now, "
             "jobs_in_system_s, energy_j, preemption_gpu_s), ints (n x 6 int64) (ok, num_done, arrived, queued, running, "
             "done); a skipped episode's rows are left as they were. Then call `next` until it returns [].")
        .def("next", &EpisodeBatch::next,
             "The episodes whose step has finished since the last call (at least one; skipped ones too), after stepping "
             "one on this thread when none has; [] once all are handed out. ValueError naming the episode if its step "
             "failed (after the others have finished).")
        .def(
            "run",
            [](EpisodeBatch& b, const nb::list& episodes, nb::handle actions, nb::handle candidates, nb::handle global,
               nb::handle mask, nb::handle floats, nb::handle ints) {
                b.start(episodes, actions, candidates, global, mask, floats, ints);
                while (!b.next().empty()) {
                }
            },
            nb::arg("episodes"), nb::arg("actions"), nb::arg("candidates"), nb::arg("global_"), nb::arg("mask"),
            nb::arg("floats"), nb::arg("ints"), "`start`, then `next` until every episode's step has finished.");

    m.def(
        "replay",
        [](const Cluster& c, const RateModel& model, const nb::dict& f, const std::vector<int64_t>& running,
           const std::vector<int64_t>& checkpointing, const std::vector<int64_t>& reserved,
           const std::vector<std::vector<int64_t>>& reserved_gpus, const std::vector<double>& fscal,
           const std::vector<int64_t>& iscal, int64_t queue_window, int64_t priority_high, int64_t policy) {
            SimArrays a;
            SimScalars s;
            parse_sim(c, model, f, running, checkpointing, reserved, reserved_gpus, fscal, iscal, a, s);
            RolloutResult r;
            Recording rec;
            {
                nb::gil_scoped_release release;
                r = replay(c, model, a, s, queue_window, priority_high, policy, rec);
            }
            return nb::make_tuple(
                nb::make_tuple(s.now, s.jobs_in_system_s, s.energy_j, s.allocated_gpu_s, s.useful_work_s, s.power_w,
                               s.preemption_gpu_s),
                nb::make_tuple(s.num_free, s.fragmented, s.alloc_version, s.num_done, s.jobs_in_system, s.next_arrival, s.qlen,
                               s.enqueued, s.queued_gpus, s.queued_high, s.num_needs_restore, s.num_preemptions),
                a.running, a.checkpointing, a.reserved, r.decisions, r.starts, r.events, r.stuck,
                nb::make_tuple(as_numpy<int64_t>(std::move(rec.seg_job)), as_numpy<double>(std::move(rec.seg_start)), as_numpy<double>(std::move(rec.seg_end)),
                               as_numpy<uint8_t>(std::move(rec.seg_preempted)), as_numpy<int64_t>(std::move(rec.seg_gpu_end)),
                               as_numpy<int64_t>(std::move(rec.seg_gpus)), as_numpy<double>(std::move(rec.timeline))));
        },
        nb::arg("cluster"), nb::arg("model"), nb::arg("arrays"), nb::arg("running"), nb::arg("checkpointing"),
        nb::arg("reserved"), nb::arg("reserved_gpus"), nb::arg("floats"), nb::arg("ints"), nb::arg("queue_window"),
        nb::arg("priority_high"), nb::arg("policy"),
        "envs.sim.replay.replay of sect (policy 0), a FIFO rule (1 binpack, 2 spread, 3 topology) or sjf (4) to the workload's end, "
        "over a simulator's arrays (changed in place): as rollout_sect's result, then the segments (job, start, end, "
        "preempted, GPU list ends, GPUs) and the timeline rows (flat, 6 a row).");

    nb::class_<World>(m, "World",
                      "A sampled world of the lookahead: the core's own copy of a simulator's arrays, each rollout on a "
                      "fresh copy of what it changes.")
        .def(
            "__init__",
            [](World* self, const Cluster& c, const RateModel& model, const nb::dict& f, const std::vector<int64_t>& running,
               const std::vector<int64_t>& checkpointing, const std::vector<int64_t>& reserved,
               const std::vector<std::vector<int64_t>>& reserved_gpus, const std::vector<double>& fscal,
               const std::vector<int64_t>& iscal) {
                SimArrays a;
                SimScalars s;
                parse_sim(c, model, f, running, checkpointing, reserved, reserved_gpus, fscal, iscal, a, s);
                new (self) World(c, model, a, s);
            },
            nb::keep_alive<1, 2>(), nb::keep_alive<1, 3>(), nb::arg("cluster"), nb::arg("model"), nb::arg("arrays"),
            nb::arg("running"), nb::arg("checkpointing"), nb::arg("reserved"), nb::arg("reserved_gpus"), nb::arg("floats"),
            nb::arg("ints"))
        .def(
            "rollout_sect",
            [](const World& w, int64_t queue_window, int64_t priority_high, double until, int64_t first_job,
               const std::vector<int64_t>& first_gpus, const std::vector<int64_t>& first_victims) {
                WorldOutcome o;
                {
                    nb::gil_scoped_release release;
                    o = w.rollout_sect(queue_window, priority_high, until, first_job, first_gpus, first_victims);
                }
                const SimScalars& s = o.s;
                return nb::make_tuple(
                    nb::make_tuple(s.now, s.jobs_in_system_s, s.energy_j, s.preemption_gpu_s),
                    nb::make_tuple(s.num_done, s.next_arrival), to_numpy(o.end), to_numpy(o.first_start),
                    to_numpy(o.work_left), to_numpy(o.overhead_left), o.r.decisions, o.r.starts, o.r.events, o.r.stuck);
            },
            nb::arg("queue_window"), nb::arg("priority_high"), nb::arg("until"), nb::arg("first_job") = SECT_DECIDES,
            nb::arg("first_gpus") = std::vector<int64_t>(), nb::arg("first_victims") = std::vector<int64_t>(),
            "rollout_sect on a copy of the world: ((now, jobs_in_system_s, energy_j, preemption_gpu_s), (num_done, "
            "arrived), end, first_start, work_left, overhead_left of the arrived jobs, decisions, starts, events, stuck).")
        .def(
            "costs",
            [](const World& w, int64_t queue_window, int64_t priority_high, double until, const nb::list& options,
               const std::vector<double>& weights, const std::vector<double>& priority_weights,
               const std::vector<double>& slo_start_s, const std::vector<double>& slo_finish_slowdown) {
                if (weights.size() != 5) throw BadInput("weights: the 5 terms' weights (envs.sim.objective.OBJECTIVE_TERMS) expected");
                ObjectiveSpec o{weights[0], weights[1], weights[2], weights[3], weights[4], priority_weights, slo_start_s,
                                slo_finish_slowdown};
                std::vector<FirstAction> firsts;
                for (nb::handle h : options) {  // (job,), or (job, gpus, victims)
                    nb::tuple t;
                    if (!nb::try_cast(h, t) || (t.size() != 1 && t.size() != 3))
                        throw BadInput("options: each a tuple (job,) or (job, gpus, victims)");
                    FirstAction f;
                    f.job = nb::cast<int64_t>(t[0]);
                    if (t.size() == 3) {
                        f.gpus = nb::cast<std::vector<int64_t>>(t[1]);
                        f.victims = nb::cast<std::vector<int64_t>>(t[2]);
                    }
                    firsts.push_back(std::move(f));
                }
                OptionCosts out;
                {
                    nb::gil_scoped_release release;
                    out = w.costs(queue_window, priority_high, until, firsts, o);
                }
                return nb::make_tuple(as_numpy<double>(std::move(out.costs)), out.decisions, out.starts, out.events, out.stuck);
            },
            nb::arg("queue_window"), nb::arg("priority_high"), nb::arg("until"), nb::arg("options"), nb::arg("weights"),
            nb::arg("priority_weights"), nb::arg("slo_start_s"), nb::arg("slo_finish_slowdown"),
            "Each option's rollout_sect on a copy of the world and its cost (agents.lookahead.Lookahead._cost): (costs, "
            "decisions, starts, events, the first option that found nothing left to wait for or -1).")
        .def_prop_ro("num_jobs", &World::num_jobs);
}
