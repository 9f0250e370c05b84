// Fuzz driver of the native core, run under AddressSanitizer and UndefinedBehaviorSanitizer by
// `make sanitize` (and CI). No Python: random clusters (node sizes, NUMA sockets, GPU types,
// switch trees of 1-3 levels), random availability, gangs and rules, checked against the rules'
// invariants; and malformed input, which must raise BadInput, never crash.
//
//   core_fuzz [iterations] [seed]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "cluster.hpp"
#include "placement.hpp"

using namespace gangsched;

namespace {

int failures = 0;

void check(bool ok, const char* what, uint64_t iteration) {
    if (!ok) {
        std::fprintf(stderr, "iteration %llu: %s\n", static_cast<unsigned long long>(iteration), what);
        if (++failures > 20) std::exit(1);
    }
}

Cluster random_cluster(std::mt19937_64& rng) {
    Cluster c;
    c.num_nodes = 1 + static_cast<int64_t>(rng() % 24);
    c.num_types = 1 + static_cast<int64_t>(rng() % 3);
    const int64_t sizes[] = {1, 2, 4, 8, 8, 16};
    const int64_t sockets = 1 + static_cast<int64_t>(rng() % 2);
    std::vector<double> type_speed;
    for (int64_t t = 0; t < c.num_types; ++t) type_speed.push_back(0.25 * static_cast<double>(1 + rng() % 8));
    for (int64_t n = 0; n < c.num_nodes; ++n) {
        const int64_t t = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.num_types));
        const int64_t g = sizes[rng() % 6];
        c.node_type.push_back(t);
        c.node_speed.push_back(type_speed[static_cast<size_t>(t)]);
        c.node_first_gpu.push_back(c.num_gpus);
        c.node_gpus.push_back(g);
        for (int64_t i = 0; i < g; ++i) c.gpu_socket.push_back(i * sockets / g);
        c.num_gpus += g;
    }
    // Leaves of random width, then each level groups the one below until one switch is left.
    std::vector<std::vector<int64_t>> members;  // per switch: its nodes
    std::vector<int64_t> level_of;
    std::vector<size_t> level_start{0};
    for (int64_t n = 0; n < c.num_nodes;) {
        const int64_t w = 1 + static_cast<int64_t>(rng() % 6);
        std::vector<int64_t> nodes;
        for (int64_t k = 0; k < w && n < c.num_nodes; ++k) nodes.push_back(n++);
        members.push_back(nodes);
        level_of.push_back(1);
    }
    for (int64_t level = 2; level <= 3 && members.size() - level_start.back() > 1; ++level) {
        const size_t lo = level_start.back(), hi = members.size();
        level_start.push_back(hi);
        for (size_t s = lo; s < hi;) {
            const size_t w = 2 + rng() % 3;
            std::vector<int64_t> nodes;
            for (size_t k = 0; k < w && s < hi; ++k, ++s) nodes.insert(nodes.end(), members[s].begin(), members[s].end());
            members.push_back(nodes);
            level_of.push_back(level);
        }
    }
    if (rng() % 5 == 0) {  // sometimes no switches at all
        members.clear();
        level_of.clear();
    }
    c.num_switches = static_cast<int64_t>(members.size());
    c.switch_level = level_of;
    c.under.assign(static_cast<size_t>(c.num_nodes * c.num_switches), 0);
    for (size_t s = 0; s < members.size(); ++s)
        for (int64_t n : members[s]) c.under[static_cast<size_t>(n * c.num_switches) + s] = 1;
    for (int64_t l : c.switch_level) c.max_level = std::max(c.max_level, l);
    c.validate();
    return c;
}

void placements(const Cluster& c, std::mt19937_64& rng, uint64_t it) {
    std::vector<int64_t> free(static_cast<size_t>(c.num_nodes));
    const double p = static_cast<double>(rng() % 101) / 100.0;
    std::bernoulli_distribution up(p);
    for (int64_t n = 0; n < c.num_nodes; ++n) {
        int64_t k = 0;
        for (int64_t g = 0; g < c.node_gpus[static_cast<size_t>(n)]; ++g) k += up(rng);
        free[static_cast<size_t>(n)] = k;
    }
    const int64_t tps[] = {1, 2, 4, 8};
    const int64_t tp = tps[rng() % 4];
    const int64_t need = tp * (1 + static_cast<int64_t>(rng() % 24));
    int64_t aligned = 0;
    for (int64_t f : free) aligned += f / tp * tp;
    for (int64_t rule = 0; rule < 5; ++rule) {
        Take take;
        const bool ok = node_take(c, free, need, tp, rule, take);
        check(ok == (aligned >= need), "a placement exists exactly when the free GPUs hold the gang in whole TP groups", it);
        if (!ok) continue;
        int64_t sum = 0;
        std::set<int64_t> nodes, types;
        for (const auto& [n, k] : take) {
            check(n >= 0 && n < c.num_nodes, "a node in range", it);
            check(k > 0 && k <= free[static_cast<size_t>(n)], "no more GPUs than the node has free", it);
            check(k % tp == 0, "whole TP groups on every node", it);
            check(nodes.insert(n).second, "each node once", it);
            types.insert(c.node_type[static_cast<size_t>(n)]);
            sum += k;
        }
        check(sum == need, "exactly the gang's GPUs", it);
        std::vector<int64_t> per_type(static_cast<size_t>(c.num_types), 0);
        for (int64_t n = 0; n < c.num_nodes; ++n)
            per_type[static_cast<size_t>(c.node_type[static_cast<size_t>(n)])] += free[static_cast<size_t>(n)] / tp * tp;
        bool one_type_holds = false;
        for (int64_t room : per_type) one_type_holds |= room >= need;
        check(!one_type_holds || types.size() == 1, "one GPU type when one type holds the gang", it);
        std::vector<int64_t> gpus;  // the concrete GPUs: available, distinct, ascending per node
        for (const auto& [n, k] : take) {
            std::vector<uint8_t> avail(static_cast<size_t>(c.node_gpus[static_cast<size_t>(n)]), 0);
            std::vector<size_t> idx(avail.size());
            for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
            std::shuffle(idx.begin(), idx.end(), rng);
            for (int64_t i = 0; i < free[static_cast<size_t>(n)]; ++i) avail[idx[static_cast<size_t>(i)]] = 1;
            std::vector<int64_t> out;
            pick_in_node(c, n, k, avail.data(), out);
            check(static_cast<int64_t>(out.size()) == k, "the node's count of GPUs picked", it);
            const int64_t lo = c.node_first_gpu[static_cast<size_t>(n)];
            for (size_t i = 0; i < out.size(); ++i) {
                check(out[i] >= lo && out[i] < lo + c.node_gpus[static_cast<size_t>(n)], "a GPU of the node", it);
                check(avail[static_cast<size_t>(out[i] - lo)] != 0, "an available GPU", it);
                check(i == 0 || out[i] > out[i - 1], "ascending and distinct", it);
            }
        }
    }
}

template <typename F>
void must_refuse(F f, const char* what, uint64_t it) {
    try {
        f();
    } catch (const BadInput&) {
        return;
    }
    check(false, what, it);
}

void malformed(const Cluster& c, std::mt19937_64& rng, uint64_t it) {
    Take take;
    std::vector<int64_t> free(c.node_gpus);
    std::vector<int64_t> shorter(free.begin(), free.end() - 1);
    must_refuse([&] { node_take(c, shorter, 1, 1, 2, take); }, "a free vector of the wrong length is refused", it);
    std::vector<int64_t> bad(free);
    bad[rng() % bad.size()] = (rng() % 2) ? -1 - static_cast<int64_t>(rng() % 5) : 1000;
    must_refuse([&] { node_take(c, bad, 1, 1, static_cast<int64_t>(rng() % 5), take); }, "a count outside the node is refused", it);
    must_refuse([&] { node_take(c, free, 3, 2, 0, take); }, "a gang of partial TP groups is refused", it);
    must_refuse([&] { node_take(c, free, 0, 1, 1, take); }, "an empty gang is refused", it);
    std::vector<uint8_t> avail(16, 1);
    std::vector<int64_t> out;
    must_refuse([&] { pick_in_node(c, c.num_nodes, 1, avail.data(), out); }, "a node out of range is refused", it);
    must_refuse([&] { pick_in_node(c, 0, c.node_gpus[0] + 1, avail.data(), out); }, "more GPUs than available is refused", it);
    Cluster broken = c;
    switch (rng() % 4) {
        case 0: broken.node_type[0] = c.num_types; break;
        case 1: broken.node_first_gpu.back() += 1; break;
        case 2: broken.under.push_back(1); break;
        default: broken.gpu_socket.push_back(0); break;
    }
    must_refuse([&] { broken.validate(); }, "a malformed cluster is refused", it);
}

}  // namespace

int main(int argc, char** argv) {
    const uint64_t iterations = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
    const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
    std::mt19937_64 rng(seed);
    Cluster c;
    for (uint64_t it = 0; it < iterations; ++it) {
        if (it % 50 == 0) c = random_cluster(rng);
        placements(c, rng, it);
        if (it % 10 == 0) malformed(c, rng, it);
    }
    std::printf("core_fuzz: %llu iterations (seed %llu), %d failures\n", static_cast<unsigned long long>(iterations),
                static_cast<unsigned long long>(seed), failures);
    return failures ? 1 : 0;
}
