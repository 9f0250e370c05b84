// Fuzz driver of the native core, run under AddressSanitizer and UndefinedBehaviorSanitizer by
// `make sanitize` (and CI). No Python: random clusters (node sizes, NUMA sockets, GPU types,
// switch trees of 1-3 levels), random availability, gangs and rules, checked against the rules'
// invariants; the features of random decision states; the candidates' placements on states built
// from per-GPU owners, as the service's are (place_candidates); and malformed input, which must
// raise BadInput, never crash.
//
//   core_fuzz [iterations] [seed]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "cluster.hpp"
#include "features.hpp"
#include "geometry.hpp"
#include "choice.hpp"
#include "placement.hpp"
#include "rollout.hpp"

using namespace gangsched;

namespace {

int failures = 0;
uint64_t domain_checks = 0;  // placements checked to stay inside one NVLink domain
uint64_t spanning_placements = 0;  // placements with TP groups on whole trays of a domain
uint64_t segment_placements = 0;  // placements of gangs in segments, each inside one block
uint64_t feature_candidates = 0, feature_victims = 0;  // valid candidates whose features were checked, victims among them
uint64_t rebuilt_checks = 0, rebuilt_victims = 0;  // place_candidates' placements on rebuilt states checked, victims among them
uint64_t fuzz_seed = 1;  // the run's seed (main's second argument)

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
    std::vector<double> type_speed, type_memory;
    const double memories[] = {40.0, 80.0, 141.0, 192.0};
    for (int64_t t = 0; t < c.num_types; ++t) {
        type_speed.push_back(0.25 * static_cast<double>(1 + rng() % 8));
        type_memory.push_back(memories[rng() % 4]);
    }
    for (int64_t n = 0; n < c.num_nodes; ++n) {
        const int64_t t = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.num_types));
        const int64_t g = sizes[rng() % 6];
        c.node_type.push_back(t);
        c.node_speed.push_back(type_speed[static_cast<size_t>(t)]);
        c.node_memory_gb.push_back(type_memory[static_cast<size_t>(t)]);
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
    // The speed model's arrays: intra-node links, bandwidths, tiers (the lowest switch holding
    // both nodes), uplinks (finite below the top), per-kind speeds.
    c.num_kinds = 4;
    c.speed_varies_by_kind = rng() % 2;
    std::uniform_real_distribution<double> bw(5.0, 900.0);
    for (int64_t n = 0; n < c.num_nodes; ++n) {
        c.node_intra.push_back(static_cast<int64_t>(rng() % 3));
        c.node_nvlink_GBps.push_back(bw(rng));
        c.node_pcie_GBps.push_back(bw(rng) / 8.0);
        c.node_net_GBps.push_back(bw(rng) / 16.0);
        for (int64_t i = 0; i < c.node_gpus[static_cast<size_t>(n)]; ++i) {
            c.gpu_node.push_back(n);
            c.gpu_local.push_back(i);
            c.gpu_speed.push_back(c.node_speed[static_cast<size_t>(n)]);
            for (int64_t k = 0; k < c.num_kinds; ++k)
                c.gpu_speed_by_kind.push_back(c.node_speed[static_cast<size_t>(n)] * (0.5 + 0.25 * static_cast<double>(k)));
        }
    }
    // NVLink domains: runs of consecutive NVSwitch nodes of one GPU type, sometimes.
    c.node_domain.assign(static_cast<size_t>(c.num_nodes), -1);
    if (rng() % 2)
        for (int64_t n = 0; n + 1 < c.num_nodes;) {
            const int64_t w = 2 + static_cast<int64_t>(rng() % 5);
            int64_t k = 0;
            while (k < w && n + k < c.num_nodes && c.node_type[static_cast<size_t>(n + k)] == c.node_type[static_cast<size_t>(n)] &&
                   c.node_intra[static_cast<size_t>(n + k)] == c.intra_nvswitch)
                ++k;
            if (k >= 2) {
                for (int64_t i = 0; i < k; ++i) c.node_domain[static_cast<size_t>(n + i)] = c.num_domains;
                ++c.num_domains;
            }
            n += std::max<int64_t>(k, 1);
        }
    c.node_tier.assign(static_cast<size_t>(c.num_nodes * c.num_nodes), 0);
    for (int64_t a = 0; a < c.num_nodes; ++a)
        for (int64_t b = 0; b < c.num_nodes; ++b) {
            if (a == b || (c.node_domain[static_cast<size_t>(a)] >= 0 && c.node_domain[static_cast<size_t>(a)] == c.node_domain[static_cast<size_t>(b)]))
                continue;  // tier 0: the same node or the same NVLink domain
            int64_t tier = c.max_level + 1;
            for (int64_t s = 0; s < c.num_switches; ++s)
                if (c.node_under(a, s) && c.node_under(b, s)) tier = std::min(tier, c.switch_level[static_cast<size_t>(s)]);
            c.node_tier[static_cast<size_t>(a * c.num_nodes + b)] = static_cast<int8_t>(tier);
        }
    for (int64_t s = 0; s < c.num_switches; ++s)
        c.switch_uplink_GBps.push_back(c.switch_level[static_cast<size_t>(s)] == c.max_level ? HUGE_VAL : bw(rng));
    // Blocks (envs.cluster.topology.Cluster.node_block): the NVLink domains, then one per leaf switch, in
    // switch order, for the nodes outside them (the nodes under no leaf share one).
    std::vector<int64_t> leaf(static_cast<size_t>(c.num_nodes), -1), leaves;
    for (int64_t n = 0; n < c.num_nodes; ++n) {
        for (int64_t s = 0; s < c.num_switches && leaf[static_cast<size_t>(n)] < 0; ++s)
            if (c.switch_level[static_cast<size_t>(s)] == 1 && c.node_under(n, s)) leaf[static_cast<size_t>(n)] = s;
        if (c.node_domain[static_cast<size_t>(n)] < 0) leaves.push_back(leaf[static_cast<size_t>(n)]);
    }
    std::sort(leaves.begin(), leaves.end());
    leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());
    for (int64_t n = 0; n < c.num_nodes; ++n) {
        const int64_t d = c.node_domain[static_cast<size_t>(n)];
        c.node_block.push_back(d >= 0 ? d : c.num_domains + (std::lower_bound(leaves.begin(), leaves.end(), leaf[static_cast<size_t>(n)]) -
                                                          leaves.begin()));
    }
    c.validate();
    c.set_derived();
    return c;
}

void geometry(const Cluster& c, const std::vector<int64_t>& gpus, int64_t tp, std::mt19937_64& rng, uint64_t it);

void placements(const Cluster& c, std::mt19937_64& rng, uint64_t it) {
    std::vector<int64_t> free(static_cast<size_t>(c.num_nodes));
    const double p = static_cast<double>(rng() % 101) / 100.0;
    std::bernoulli_distribution up(p);
    for (int64_t n = 0; n < c.num_nodes; ++n) {
        int64_t k = 0;
        for (int64_t g = 0; g < c.node_gpus[static_cast<size_t>(n)]; ++g) k += up(rng);
        free[static_cast<size_t>(n)] = k;
    }
    const int64_t tps[] = {1, 2, 4, 8, 16};
    const int64_t tp = tps[rng() % 5];
    const int64_t need = tp * (1 + static_cast<int64_t>(rng() % 24));
    // Worked here, not by the core: per node the GPUs usable in whole TP groups (f / tp x tp), and
    // in a domain whose nodes all have g < tp GPUs with g dividing tp, its fully free nodes in whole
    // groups of tp / g (the domain's group capacity, `span_room`).
    std::vector<int64_t> usable(free.size());
    std::vector<int64_t> span_room(static_cast<size_t>(c.num_domains), -1);  // -1: the domain's groups sit on one node
    for (int64_t d = 0; d < c.num_domains; ++d) {
        int64_t g = -1, whole = 0;
        bool alike = true;
        for (int64_t n = 0; n < c.num_nodes; ++n) {
            if (c.node_domain[static_cast<size_t>(n)] != d) continue;
            const int64_t size = c.node_gpus[static_cast<size_t>(n)];
            alike = alike && (g < 0 || g == size);
            g = size;
            whole += free[static_cast<size_t>(n)] == size;
        }
        if (alike && g > 0 && g < tp && tp % g == 0) span_room[static_cast<size_t>(d)] = whole / (tp / g) * tp;
    }
    int64_t aligned = 0;
    for (size_t n = 0; n < free.size(); ++n) {
        const int64_t d = c.node_domain[n];
        usable[n] = d >= 0 && span_room[static_cast<size_t>(d)] >= 0 ? 0 : free[n] / tp * tp;
        aligned += usable[n];
    }
    for (int64_t r : span_room) aligned += std::max<int64_t>(r, 0);
    for (int64_t rule = 0; rule < 5; ++rule) {
        Take take;
        const bool ok = node_take(c, free, need, tp, rule, take);
        check(ok == (aligned >= need), "a placement exists exactly when the free GPUs hold the gang in whole TP groups", it);
        if (!ok) continue;
        int64_t sum = 0;
        std::set<int64_t> nodes, types;
        std::vector<int64_t> in_domain(static_cast<size_t>(c.num_domains), 0);
        for (const auto& [n, k] : take) {
            check(n >= 0 && n < c.num_nodes, "a node in range", it);
            check(k > 0 && k <= free[static_cast<size_t>(n)], "no more GPUs than the node has free", it);
            const int64_t d = c.node_domain[static_cast<size_t>(n)];
            if (d >= 0 && span_room[static_cast<size_t>(d)] >= 0) {
                check(k == c.node_gpus[static_cast<size_t>(n)], "whole trays for TP groups that span them", it);
                in_domain[static_cast<size_t>(d)] += k;
            } else {
                check(k % tp == 0, "whole TP groups on every node", it);
            }
            check(nodes.insert(n).second, "each node once", it);
            types.insert(c.node_type[static_cast<size_t>(n)]);
            sum += k;
        }
        for (int64_t k : in_domain) check(k % tp == 0, "whole TP groups in every domain whose groups span trays", it);
        for (int64_t k : in_domain) spanning_placements += k > 0;
        check(sum == need, "exactly the gang's GPUs", it);
        std::vector<int64_t> per_type(static_cast<size_t>(c.num_types), 0);
        for (int64_t n = 0; n < c.num_nodes; ++n)
            per_type[static_cast<size_t>(c.node_type[static_cast<size_t>(n)])] += usable[static_cast<size_t>(n)];
        for (int64_t d = 0; d < c.num_domains; ++d)
            if (span_room[static_cast<size_t>(d)] > 0)
                for (int64_t n = 0; n < c.num_nodes; ++n)
                    if (c.node_domain[static_cast<size_t>(n)] == d) {
                        per_type[static_cast<size_t>(c.node_type[static_cast<size_t>(n)])] += span_room[static_cast<size_t>(d)];
                        break;
                    }
        bool one_type_holds = false;
        for (int64_t room : per_type) one_type_holds |= room >= need;
        check(!one_type_holds || types.size() == 1, "one GPU type when one type holds the gang", it);
        if (rule == TOPOLOGY && take.size() > 1 && c.num_domains > 0 && types.size() == 1) {
            // A gang on several nodes of one GPU type t is inside one NVLink domain when one domain of
            // type t holds it in whole TP groups (envs.decision.placement): where no domain's TP groups
            // of tp span trays, _topology_domains tries every NVLink domain (its nodes' f / tp x tp
            // GPUs) before the switches; where some domain's do (span_room >= 0), _node_take_spanning's
            // hosts are each spanning domain (its whole groups of trays) and each node outside them, and
            // _spanning_topology tries the NVLink domains (a spanning one is one host; another holds its
            // nodes' f / tp x tp GPUs) before the switches as well.
            const int64_t t = *types.begin();
            std::vector<int64_t> room(static_cast<size_t>(c.num_domains), 0);
            for (int64_t n = 0; n < c.num_nodes; ++n) {
                const int64_t d = c.node_domain[static_cast<size_t>(n)];
                if (d < 0 || c.node_type[static_cast<size_t>(n)] != t) continue;
                const int64_t span = span_room[static_cast<size_t>(d)];
                if (span >= 0)
                    room[static_cast<size_t>(d)] = span;  // a spanning domain: its whole groups of trays
                else
                    room[static_cast<size_t>(d)] += usable[static_cast<size_t>(n)];
            }
            bool fits = false;
            for (int64_t r : room) fits |= r >= need;
            std::vector<int64_t> used;
            for (const auto& [n, k] : take) used.push_back(n);
            check(!fits || c.one_domain(used.begin(), used.end()), "inside one NVLink domain when one domain holds the gang", it);
            domain_checks += fits;
        }
        std::vector<int64_t> gpus;  // the concrete GPUs: available, distinct, ascending per node
        for (const auto& [n, k] : take) {
            const size_t before = gpus.size();
            std::vector<uint8_t> avail(static_cast<size_t>(c.node_gpus[static_cast<size_t>(n)]), 0);
            std::vector<size_t> idx(avail.size());
            for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
            std::shuffle(idx.begin(), idx.end(), rng);
            for (int64_t i = 0; i < free[static_cast<size_t>(n)]; ++i) avail[idx[static_cast<size_t>(i)]] = 1;
            std::vector<int64_t> out;
            pick_in_node(c, n, k, avail.data(), out);
            gpus.insert(gpus.end(), out.begin(), out.end());
            check(gpus.size() == before + out.size(), "the picks appended", it);
            check(static_cast<int64_t>(out.size()) == k, "the node's count of GPUs picked", it);
            const int64_t lo = c.node_first_gpu[static_cast<size_t>(n)];
            for (size_t i = 0; i < out.size(); ++i) {
                check(out[i] >= lo && out[i] < lo + c.node_gpus[static_cast<size_t>(n)], "a GPU of the node", it);
                check(avail[static_cast<size_t>(out[i] - lo)] != 0, "an available GPU", it);
                check(i == 0 || out[i] > out[i - 1], "ascending and distinct", it);
            }
        }
        geometry(c, gpus, tp, rng, it);
    }
    // Segments of `segment` GPUs (whole TP groups), each inside one block: a placement exists
    // exactly when the blocks' usable GPUs (worked above), each block's rounded down to whole
    // segments, hold the gang; each consecutive run of `segment` GPUs of the take in one block.
    std::mt19937_64 seg_rng(fuzz_seed * 0xD1B54A32D192ED03ULL + it);  // its own draws, per seed and iteration: the other checks' stream is left as it was
    const int64_t segment = tp * (1 + static_cast<int64_t>(seg_rng() % 4)), seg_need = segment * (1 + static_cast<int64_t>(seg_rng() % 4));
    std::vector<int64_t> block_room(c.block_nodes.size(), 0);
    for (int64_t n = 0; n < c.num_nodes; ++n) block_room[static_cast<size_t>(c.node_block[static_cast<size_t>(n)])] += usable[static_cast<size_t>(n)];
    for (int64_t d = 0; d < c.num_domains; ++d)  // a domain is its own block
        if (span_room[static_cast<size_t>(d)] > 0) block_room[static_cast<size_t>(d)] += span_room[static_cast<size_t>(d)];
    int64_t seg_room = 0;
    for (int64_t r : block_room) seg_room += r / segment * segment;
    for (int64_t rule = 0; rule < 5; ++rule) {
        Take take;
        const bool ok = node_take(c, free, seg_need, tp, rule, take, segment);
        check(ok == (seg_room >= seg_need), "segments: a placement exists exactly when the blocks hold whole segments", it);
        if (!ok) continue;
        int64_t pos = 0, block = -1;
        std::set<int64_t> nodes;
        for (const auto& [n, k] : take) {
            check(n >= 0 && n < c.num_nodes && k > 0 && k <= free[static_cast<size_t>(n)], "segments: a node's free GPUs", it);
            check(nodes.insert(n).second, "segments: each node once", it);
            const int64_t b = c.node_block[static_cast<size_t>(n)];
            for (int64_t i = 0; i < k; ++i, ++pos) {
                if (pos % segment == 0) block = b;
                check(b == block, "segments: each segment inside one block", it);
            }
        }
        check(pos == seg_need, "segments: exactly the gang's GPUs", it);
        segment_placements += 1;
    }
}

// A placement's geometry: its nodes and counts, its tier, uplinks and speeds, within their ranges.
void geometry(const Cluster& c, const std::vector<int64_t>& gpus, int64_t tp, std::mt19937_64& rng, uint64_t it) {
    Geometry g;
    const SpeedConstants model{0.25 + 0.5 * static_cast<double>(rng() % 2), 0.85};
    placement_geometry(c, gpus, tp, model, g);
    int64_t sum = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        check(i == 0 || g.nodes[i] > g.nodes[i - 1], "geometry: nodes ascending", it);
        sum += g.gpus_on_node[i];
    }
    check(sum == static_cast<int64_t>(gpus.size()), "geometry: every GPU on its node", it);
    const bool island = g.nodes.size() == 1 || c.one_domain(g.nodes.begin(), g.nodes.end());
    check((g.tier == 0) == island, "geometry: tier 0 exactly on one node or one NVLink domain", it);
    check(!island || (g.uplinks.empty() && !g.tp_cross_node), "geometry: no network inside one node or domain", it);
    check(g.tier <= c.max_level + 1, "geometry: a tier of the cluster", it);
    check(g.tp_stretch >= 1.0 && std::isfinite(g.tp_stretch), "geometry: a finite TP stretch of at least 1", it);
    check(tp > 1 || (g.tp_stretch == 1.0 && !g.tp_cross_node), "geometry: no TP cost without TP", it);
    check(g.dp_bw_GBps > 0.0 && std::isfinite(g.dp_bw_GBps), "geometry: a finite DP bandwidth", it);
    check(g.uplinks.size() == g.uplink_demand_GBps.size(), "geometry: a demand per uplink", it);
    for (size_t u = 0; u < g.uplinks.size(); ++u) {
        check(std::isfinite(c.switch_uplink_GBps[static_cast<size_t>(g.uplinks[u])]), "geometry: only finite uplinks", it);
        check(g.uplink_demand_GBps[u] > 0.0, "geometry: traffic on a crossed uplink", it);
    }
    double slowest = HUGE_VAL;
    for (int64_t x : gpus) slowest = std::min(slowest, c.gpu_speed[static_cast<size_t>(x)]);
    check(g.min_speed == slowest, "geometry: the slowest GPU's speed", it);
    check(static_cast<int64_t>(g.min_speed_by_kind.size()) == c.num_kinds, "geometry: a speed per kind", it);
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
    must_refuse([&] { node_take(c, free, 8, 2, 0, take, 3); }, "a segment of partial TP groups is refused", it);
    must_refuse([&] { node_take(c, free, 8, 2, 0, take, 6); }, "a segment that does not divide the gang is refused", it);
    must_refuse([&] { node_take(c, free, 8, 2, 0, take, -2); }, "a negative segment is refused", it);
    std::vector<uint8_t> avail(16, 1);
    std::vector<int64_t> out;
    must_refuse([&] { pick_in_node(c, c.num_nodes, 1, avail.data(), out); }, "a node out of range is refused", it);
    must_refuse([&] { pick_in_node(c, 0, c.node_gpus[0] + 1, avail.data(), out); }, "more GPUs than available is refused", it);
    Geometry g;
    must_refuse([&] { placement_geometry(c, {}, 1, SpeedConstants{}, g); }, "an empty placement is refused", it);
    must_refuse([&] { placement_geometry(c, {0, c.num_gpus}, 1, SpeedConstants{}, g); }, "a GPU out of range is refused", it);
    must_refuse([&] { placement_geometry(c, {0}, 2, SpeedConstants{}, g); }, "a partial TP group is refused", it);
    Cluster broken = c;
    switch (rng() % 5) {
        case 0: broken.node_type[0] = c.num_types; break;
        case 1: broken.node_first_gpu.back() += 1; break;
        case 2: broken.under.push_back(1); break;
        case 3: broken.node_block.back() = c.num_nodes; break;
        default: broken.gpu_socket.push_back(0); break;
    }
    must_refuse([&] { broken.validate(); }, "a malformed cluster is refused", it);
}

// sect's choice over a random allocation and window: -1 exactly when no candidate is valid, else
// a valid one whose placement exists, holds the gang and has a positive finite rate.
void choices(const Cluster& c, std::mt19937_64& rng, uint64_t it) {
    const auto N = static_cast<size_t>(c.num_nodes), G = static_cast<size_t>(c.num_gpus);
    std::vector<uint8_t> free_mask(G);
    std::vector<int64_t> node_free(N, 0);
    std::bernoulli_distribution up(static_cast<double>(rng() % 101) / 100.0);
    for (size_t g = 0; g < G; ++g) node_free[static_cast<size_t>(c.gpu_node[g])] += free_mask[g] = up(rng);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::vector<double> pressure(N), demand(static_cast<size_t>(c.num_switches));
    for (double& x : pressure) x = 4.0 * unit(rng);
    for (double& x : demand) x = 200.0 * unit(rng);
    Allocation a{free_mask.data(), node_free.data(), pressure.data(), demand.data()};
    RateModel m;
    m.sensitivity_by_kind = {0.3, 0.3, 1.0, 0.2};
    const int64_t J = 1 + static_cast<int64_t>(rng() % 10);
    std::vector<int64_t> gpus(J), tp(J), kind(J), seq(J);
    std::vector<double> mem(J), comm(J), share(J), est(J), done(J), restore(J);
    std::vector<uint8_t> needs(J);
    const int64_t tps[] = {1, 2, 4, 8};
    const double mems[] = {10.0, 40.0, 80.0, 100.0, 150.0};
    for (int64_t j = 0; j < J; ++j) {
        tp[j] = tps[rng() % 4];
        gpus[j] = tp[j] * (1 + static_cast<int64_t>(rng() % 8));
        kind[j] = static_cast<int64_t>(rng() % 4);
        seq[j] = static_cast<int64_t>(rng() % 5);  // ties on purpose
        mem[j] = mems[rng() % 5];
        comm[j] = unit(rng);
        share[j] = unit(rng);
        est[j] = 3600.0 * unit(rng);
        done[j] = 3600.0 * unit(rng);
        restore[j] = 60.0 * unit(rng);
        needs[j] = rng() % 2;
    }
    Jobs jobs{J, gpus.data(), tp.data(), mem.data(), kind.data(), comm.data(), share.data(), est.data(), done.data(),
              restore.data(), needs.data(), seq.data(), rng() % 2 == 0};
    const int64_t R = 5, nw = static_cast<int64_t>(rng() % 9);
    std::vector<int64_t> window;
    for (int64_t s = 0; s < nw; ++s) window.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(J)));
    std::vector<uint8_t> mask(static_cast<size_t>(nw * R + 1), 0);
    bool any = false;
    for (int64_t s = 0; s < nw; ++s) {  // valid exactly when the eligible free GPUs hold the gang in whole TP groups
        const auto j = static_cast<size_t>(window[static_cast<size_t>(s)]);
        int64_t aligned = 0;
        for (size_t n = 0; n < N; ++n)
            if (c.node_memory_gb[n] >= mem[j]) aligned += node_free[n] / tp[j] * tp[j];
        for (int64_t r = 0; r < 3; ++r) any |= mask[static_cast<size_t>(s * R + r)] = aligned >= gpus[j] && rng() % 4 != 0;
    }
    const int64_t best = choose_sect(c, m, a, jobs, window, mask.data(), static_cast<int64_t>(mask.size()), R);
    check((best < 0) == !any, "no choice exactly when no candidate is valid", it);
    if (best < 0) return;
    check(best < nw * R && best % R < 3 && mask[static_cast<size_t>(best)], "a valid non-preempting candidate", it);
    const auto j = static_cast<size_t>(window[static_cast<size_t>(best / R)]);
    std::vector<int64_t> picked;
    check(place_free(c, a, gpus[j], tp[j], mem[j], best % R, picked), "its placement exists", it);
    check(static_cast<int64_t>(picked.size()) == gpus[j], "the placement holds the gang", it);
    std::set<int64_t> distinct(picked.begin(), picked.end());
    check(distinct.size() == picked.size(), "distinct GPUs", it);
    for (int64_t g : picked) check(free_mask[static_cast<size_t>(g)] && c.node_memory_gb[static_cast<size_t>(c.gpu_node[static_cast<size_t>(g)])] >= mem[j],
                                   "free GPUs with the job's memory", it);
    Geometry geo;
    placement_geometry(c, picked, tp[j], m.geometry, geo);
    double c_tp, c_dp;
    comm_shares(gpus[j], tp[j], comm[j], share[j], c_tp, c_dp);
    const double rate = rate_if_started(c, m, a, geo, c_tp, c_dp, m.sensitivity_by_kind[static_cast<size_t>(kind[j])], kind[j]);
    check(std::isfinite(rate) && rate > 0.0, "a positive finite rate", it);
}


// The features of a random decision state and candidate set: every value finite, the clipped
// ones in [-1, 1], the float32 ones the float64 ones cast; malformed candidate arrays refused.
void features(const Cluster& c, std::mt19937_64& rng, uint64_t it) {
    const auto N = static_cast<size_t>(c.num_nodes), G = static_cast<size_t>(c.num_gpus);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const auto J = static_cast<size_t>(1 + rng() % 30);
    std::vector<double> est(J), done(J), restore(J), ckpt(J), comm(J), share(J), mem(J), since(J), wait(J), attained(J),
        overhead(J), ckpt_end(J), rate(J), arrival(J), requested(J);
    std::vector<int64_t> gpus(J), tp(J), kind(J), prio(J);
    std::vector<uint8_t> needs(J), preemptible(J);
    const int64_t tps[] = {1, 2, 4, 8};
    double now = 1e5 * unit(rng), t = 0.0;
    for (size_t j = 0; j < J; ++j) {
        tp[j] = tps[rng() % 4];
        gpus[j] = tp[j] * (1 + static_cast<int64_t>(rng() % 4));
        kind[j] = static_cast<int64_t>(rng() % 4);
        prio[j] = static_cast<int64_t>(rng() % 3);
        est[j] = 1.0 + 1e5 * unit(rng);
        done[j] = est[j] * 1.5 * unit(rng);
        restore[j] = 100.0 * unit(rng);
        ckpt[j] = 60.0 * unit(rng);
        comm[j] = unit(rng) * 0.9;
        share[j] = unit(rng);
        mem[j] = 80.0 * unit(rng);
        needs[j] = rng() % 3 == 0;
        preemptible[j] = rng() % 2;
        t += (now / static_cast<double>(J)) * unit(rng);
        arrival[j] = t;
        requested[j] = static_cast<double>(gpus[j]) * est[j];
        since[j] = arrival[j] + (now - arrival[j]) * unit(rng);
        wait[j] = 1e3 * unit(rng);
        attained[j] = 1e6 * unit(rng);
        overhead[j] = rng() % 4 == 0 ? 50.0 * unit(rng) : 0.0;
        ckpt_end[j] = now + 30.0 * unit(rng);
        rate[j] = 0.05 + unit(rng);
    }
    // each job queued, running or checkpointing; the allocation random (its GPUs not the jobs')
    std::vector<int64_t> queue, running, checkpointing;
    for (size_t j = 0; j < J; ++j) {
        const auto r = rng() % 6;
        (r < 3 ? queue : r < 5 ? running : checkpointing).push_back(static_cast<int64_t>(j));
    }
    std::vector<uint8_t> free_mask(G);
    std::vector<int64_t> node_free(N, 0), whole_gang(N);
    std::bernoulli_distribution up(unit(rng));
    for (size_t g = 0; g < G; ++g) node_free[static_cast<size_t>(c.gpu_node[g])] += free_mask[g] = up(rng);
    std::vector<double> pressure(N), demand(static_cast<size_t>(c.num_switches));
    for (double& x : pressure) x = 4.0 * unit(rng);
    for (double& x : demand) x = 200.0 * unit(rng);
    SimScalars s;
    s.now = now;
    s.next_arrival = static_cast<int64_t>(J);
    s.qlen = static_cast<int64_t>(queue.size());
    s.num_needs_restore = static_cast<int64_t>(rng() % 2);
    for (size_t n = 0; n < N; ++n) {
        whole_gang[n] = std::min<int64_t>(8, c.node_gpus[n]);
        s.num_free += node_free[n];
        s.fragmented += node_free[n] < whole_gang[n] ? node_free[n] : 0;
    }
    for (int64_t j : queue) {
        s.queued_gpus += gpus[static_cast<size_t>(j)];
        s.queued_high += prio[static_cast<size_t>(j)] == 2;
    }
    SimArrays a;
    const auto cv = [](const auto& v) { return View<const typename std::decay_t<decltype(v)>::value_type>{v.data(), v.size()}; };
    const auto mv = [](auto& v) { return View<typename std::decay_t<decltype(v)>::value_type>{v.data(), v.size()}; };
    a.estimate = cv(est); a.work_done = mv(done); a.restore_s = cv(restore); a.needs_restore = mv(needs);
    a.checkpoint_s = cv(ckpt); a.gpus_req = cv(gpus); a.tp_degree = cv(tp); a.kind = cv(kind); a.priority = cv(prio);
    a.preemptible = cv(preemptible); a.comm_fraction = cv(comm); a.tp_comm_share = cv(share); a.mem_req = cv(mem);
    a.queued_since = mv(since); a.wait_s = mv(wait); a.attained_gpu_s = mv(attained); a.overhead_left = mv(overhead);
    a.checkpoint_end = mv(ckpt_end); a.rate = mv(rate); a.q_ids = mv(queue); a.node_free = mv(node_free);
    a.node_pressure = mv(pressure); a.uplink_demand = mv(demand); a.whole_gang = cv(whole_gang);
    a.running = running;
    a.checkpointing = checkpointing;
    if (rng() % 3 == 0) a.reserved.push_back(0);
    PastArrivals past{cv(arrival), cv(requested)};
    // the window: queued jobs; rules 0-2 valid where the free GPUs place the gang, 3-4 sometimes,
    // on any GPUs, with running victims
    const int64_t R = NUM_FEATURE_RULES, Q = 1 + static_cast<int64_t>(rng() % 6);
    std::vector<int64_t> window;
    for (int64_t j : queue)
        if (static_cast<int64_t>(window.size()) < Q && rng() % 4) window.push_back(j);
    std::vector<uint8_t> mask(static_cast<size_t>(Q * R + 1), 0);
    std::vector<int64_t> cand_gpus, gpus_end, victims, victims_end;
    const Allocation alloc{free_mask.data(), node_free.data(), pressure.data(), demand.data()};
    for (size_t k = 0; k < window.size(); ++k) {
        const auto j = static_cast<size_t>(window[k]);
        for (int64_t r = 0; r < R; ++r) {
            std::vector<int64_t> placed;
            if (r < 3) {
                if (!place_free(c, alloc, gpus[j], tp[j], mem[j], r, placed)) continue;
            } else {
                if (running.empty() || gpus[j] > c.num_gpus || rng() % 2) continue;
                std::vector<int64_t> all(G);
                for (size_t g = 0; g < G; ++g) all[g] = static_cast<int64_t>(g);
                std::shuffle(all.begin(), all.end(), rng);
                placed.assign(all.begin(), all.begin() + gpus[j]);
                const size_t nv = 1 + rng() % 3;
                for (size_t v = 0; v < nv; ++v) victims.push_back(running[rng() % running.size()]);
            }
            mask[k * static_cast<size_t>(R) + static_cast<size_t>(r)] = 1;
            cand_gpus.insert(cand_gpus.end(), placed.begin(), placed.end());
            gpus_end.push_back(static_cast<int64_t>(cand_gpus.size()));
            victims_end.push_back(static_cast<int64_t>(victims.size()));
        }
    }
    mask.back() = rng() % 2;
    CandidateArrays cs;
    cs.window = View<const int64_t>{window.data(), window.size()};
    cs.mask = View<const uint8_t>{mask.data(), mask.size()};
    cs.gpus = cv(cand_gpus); cs.gpus_end = cv(gpus_end); cs.victims = cv(victims); cs.victims_end = cv(victims_end);
    feature_candidates += gpus_end.size();
    feature_victims += victims.size();
    const size_t F = NUM_CANDIDATE_COLUMNS, K = mask.size();
    std::vector<float> feats(K * F), glob(NUM_GLOBAL_COLUMNS), clipped(K * F), clipped_glob(NUM_GLOBAL_COLUMNS);
    std::vector<double> feats64(K * F), glob64(NUM_GLOBAL_COLUMNS);
    const RateModel m{SpeedConstants{}, 0.6, 50.0, {0.3, 0.3, 1.0, 0.2}, {1.0, 0.5, 2.0, 0.3}};
    candidate_features(c, m, a, s, past, cs, feats.data(), glob.data());
    candidate_features(c, m, a, s, past, cs, feats64.data(), glob64.data());
    candidate_features(c, m, a, s, past, cs, clipped.data(), clipped_glob.data(), true);
    for (size_t i = 0; i < feats.size(); ++i) {
        check(std::isfinite(feats[i]), "every candidate feature finite", it);
        check(feats[i] == static_cast<float>(feats64[i]), "the float32 features are the float64 values cast", it);
        check(clipped[i] == std::min(1.0f, std::max(-1.0f, feats[i])), "clipped to [-1, 1]", it);
    }
    for (size_t i = 0; i < glob.size(); ++i) {
        check(std::isfinite(glob[i]), "every global feature finite", it);
        check(glob[i] == static_cast<float>(glob64[i]), "the float32 global features are the float64 values cast", it);
        check(clipped_glob[i] == std::min(1.0f, std::max(-1.0f, glob[i])), "global features clipped to [-1, 1]", it);
    }
    // malformed candidate arrays
    CandidateArrays bad = cs;
    std::vector<uint8_t> short_mask(mask.begin(), mask.end() - 1);
    bad.mask = View<const uint8_t>{short_mask.data(), short_mask.size()};
    must_refuse([&] { candidate_features(c, m, a, s, past, bad, feats.data(), glob.data()); }, "a mask of the wrong size is refused", it);
    if (!gpus_end.empty()) {
        bad = cs;
        bad.gpus_end.size -= 1;
        must_refuse([&] { candidate_features(c, m, a, s, past, bad, feats.data(), glob.data()); }, "too few GPU lists are refused", it);
        std::vector<int64_t> far(cand_gpus);
        far[rng() % far.size()] = c.num_gpus + static_cast<int64_t>(rng() % 3);
        bad = cs;
        bad.gpus = cv(far);
        must_refuse([&] { candidate_features(c, m, a, s, past, bad, feats.data(), glob.data()); }, "a GPU out of range is refused", it);
    }
    if (!window.empty()) {
        std::vector<int64_t> unknown(window);
        unknown[0] = static_cast<int64_t>(J);
        bad = cs;
        bad.window = View<const int64_t>{unknown.data(), unknown.size()};
        must_refuse([&] { candidate_features(c, m, a, s, past, bad, feats.data(), glob.data()); }, "an unknown window job is refused", it);
    }
    SimScalars more = s;
    more.qlen = static_cast<int64_t>(queue.size()) + 1;
    must_refuse([&] { candidate_features(c, m, a, more, past, cs, feats.data(), glob.data()); }, "a queue longer than q_ids is refused", it);
}

// place_candidates (envs.core.state_placements: the scoring service's placements on decision states
// rebuilt from plain data) over a random state built as bindings.cpp's state_placements builds it
// from per-GPU owners: each running or checkpointing job's record lists the nodes of its GPUs,
// ascending, with the GPUs it holds on each. A random window of queued jobs and a random mask (a
// candidate valid by the mask may still find no placement: its GPU list is then empty). Checked:
// one entry per set mask bit of the window's slots, in index order; a placement holds the gang on
// distinct GPUs with the job's memory, in segments inside blocks; binpack, spread and topology
// on free GPUs, as place_free gives them, empty exactly where place_free finds none; the preempt
// rules only where the free GPUs do not hold the gang (node_take over them), on free GPUs and
// those of victims that are running, preemptible, of a lower priority (preempt) or of no higher
// one in a strictly lower LAS queue (preempt-las), each victim giving at least one GPU.
void rebuilt_placements(const Cluster& c, std::mt19937_64& rng, uint64_t it) {
    const auto N = static_cast<size_t>(c.num_nodes), G = static_cast<size_t>(c.num_gpus);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const auto J = static_cast<size_t>(1 + rng() % 12);
    std::vector<double> arrival(J), mem(J), attained(J), ckpt(J), restore(J), since(J);
    std::vector<int64_t> gpus(J), tp(J), segment(J), prio(J);
    std::vector<uint8_t> preemptible(J);
    const int64_t tps[] = {1, 2, 4, 8};
    const double mems[] = {10.0, 40.0, 80.0, 100.0, 150.0};
    const double now = 1e5 * unit(rng);
    for (size_t j = 0; j < J; ++j) {
        tp[j] = tps[rng() % 4];
        segment[j] = rng() % 3 ? 0 : tp[j] * static_cast<int64_t>(1 + rng() % 3);
        gpus[j] = (segment[j] ? segment[j] : tp[j]) * static_cast<int64_t>(1 + rng() % 4);
        mem[j] = mems[rng() % 5];
        prio[j] = static_cast<int64_t>(rng() % 3);
        preemptible[j] = rng() % 4 != 0;
        arrival[j] = now * unit(rng);
        since[j] = arrival[j] + (now - arrival[j]) * unit(rng);
        attained[j] = rng() % 4 ? 1e6 * unit(rng) * unit(rng) : 0.0;
        ckpt[j] = 60.0 * unit(rng);
        restore[j] = 60.0 * unit(rng);
    }
    // owners: some jobs running or checkpointing on random GPUs (any GPUs: a state from plain data
    // need not be one the rules made); some unowned GPUs not free (down, or reserved)
    std::vector<int64_t> owner(G, -1), running, checkpointing, queued;
    std::vector<size_t> perm(G);
    for (size_t g = 0; g < G; ++g) perm[g] = g;
    std::shuffle(perm.begin(), perm.end(), rng);
    size_t next = 0;
    for (size_t j = 0; j < J; ++j) {
        const auto r = rng() % 5;
        if (r < 2 || next + static_cast<size_t>(gpus[j]) > G) {
            queued.push_back(static_cast<int64_t>(j));
            continue;
        }
        for (int64_t k = 0; k < gpus[j]; ++k) owner[perm[next++]] = static_cast<int64_t>(j);
        (r < 4 ? running : checkpointing).push_back(static_cast<int64_t>(j));
    }
    if (queued.empty()) return;
    const bool down = rng() % 3 == 0;
    std::vector<uint8_t> free_mask(G);
    std::vector<int64_t> node_free(N, 0);
    for (size_t g = 0; g < G; ++g)
        node_free[static_cast<size_t>(c.gpu_node[g])] += free_mask[g] = owner[g] < 0 && !(down && rng() % 8 == 0);
    std::vector<double> pressure(N), demand(static_cast<size_t>(c.num_switches));
    for (double& x : pressure) x = 4.0 * unit(rng);
    for (double& x : demand) x = 200.0 * unit(rng);
    // the records, as bindings.cpp's state_placements makes them
    std::vector<int64_t> slot(J, -1), rec_i, pool_i;
    std::vector<double> rec_f, pool_counts;
    for (const auto* jobs : {&running, &checkpointing})
        for (int64_t j : *jobs) {
            const auto lo = static_cast<int64_t>(pool_i.size());
            for (size_t g = 0; g < G; ++g) {
                if (owner[g] != j) continue;
                if (static_cast<int64_t>(pool_i.size()) == lo || pool_i.back() != c.gpu_node[g]) {
                    pool_i.push_back(c.gpu_node[g]);
                    pool_counts.push_back(0.0);
                }
                pool_counts.back() += 1.0;
            }
            const auto hi = static_cast<int64_t>(pool_i.size());
            slot[static_cast<size_t>(j)] = static_cast<int64_t>(rec_i.size() / 4);
            rec_i.insert(rec_i.end(), {lo, hi, hi, 0});
            rec_f.insert(rec_f.end(), 8, 0.0);
        }
    SimArrays a;
    const auto cv = [](const auto& v) { return View<const typename std::decay_t<decltype(v)>::value_type>{v.data(), v.size()}; };
    const auto mv = [](auto& v) { return View<typename std::decay_t<decltype(v)>::value_type>{v.data(), v.size()}; };
    a.arrival = cv(arrival); a.gpus_req = cv(gpus); a.tp_degree = cv(tp); a.segment_gpus = cv(segment); a.mem_req = cv(mem);
    a.priority = cv(prio); a.preemptible = cv(preemptible); a.attained_gpu_s = mv(attained); a.checkpoint_s = cv(ckpt);
    a.restore_s = cv(restore); a.queued_since = mv(since); a.free_mask = mv(free_mask); a.gpu_owner = mv(owner);
    a.node_free = mv(node_free); a.node_pressure = mv(pressure); a.uplink_demand = mv(demand);
    a.running = running;
    a.checkpointing = checkpointing;
    a.job_slot = cv(slot); a.rec_i = cv(rec_i); a.rec_f = cv(rec_f); a.pool_i = cv(pool_i); a.pool_counts = cv(pool_counts);
    const int64_t R = NUM_FEATURE_RULES, Q = 1 + static_cast<int64_t>(rng() % 6);
    std::vector<int64_t> window;
    for (int64_t j : queued)
        if (static_cast<int64_t>(window.size()) < Q && rng() % 4) window.push_back(j);
    std::vector<uint8_t> mask(static_cast<size_t>(Q * R + 1), 0);
    for (auto& m : mask) m = rng() % 3 != 0;
    const LasSpec las{{3200.0, 36000.0, 360000.0}, 1.0 + 4.0 * unit(rng)};
    SimScalars s;
    s.now = now;
    CandidateSet out;
    place_candidates(c, RateModel{}, a, s, window, mask.data(), las, out);
    std::vector<int64_t> want;
    for (size_t i = 0; i < window.size() * static_cast<size_t>(R); ++i)
        if (mask[i]) want.push_back(static_cast<int64_t>(i));
    check(out.index == want && out.gpus.size() == want.size() && out.victims.size() == want.size(),
          "rebuilt states: one placement per valid candidate, in index order", it);
    if (out.index != want) return;
    const auto las_queue = [&](double att) { return static_cast<int64_t>((att >= 3200.0) + (att >= 36000.0) + (att >= 360000.0)); };
    const Allocation alloc{free_mask.data(), node_free.data(), pressure.data(), demand.data()};
    for (size_t k = 0; k < want.size(); ++k) {
        const auto j = static_cast<size_t>(window[static_cast<size_t>(want[k] / R)]);
        const int64_t rule = want[k] % R;
        const auto& placed = out.gpus[k];
        const auto& victims = out.victims[k];
        std::vector<int64_t> eligible(N);  // free GPUs per node with the job's memory
        for (size_t n = 0; n < N; ++n) eligible[n] = c.node_memory_gb[n] >= mem[j] ? node_free[n] : 0;
        Take take;
        const bool fits_free = node_take(c, eligible, gpus[j], tp[j], TOPOLOGY, take, segment[j]);
        rebuilt_checks += 1;
        if (rule < 3) {
            std::vector<int64_t> again;
            const bool ok = place_free(c, alloc, gpus[j], tp[j], mem[j], rule, again, segment[j]);
            check(placed == again && ok == !placed.empty() && ok == fits_free, "rebuilt states: place_free's placement, empty exactly when none", it);
            check(victims.empty(), "rebuilt states: no victims without preemption", it);
        } else {
            check(placed.empty() == victims.empty(), "rebuilt states: victims exactly with a placement over them", it);
            check(placed.empty() || !fits_free, "rebuilt states: preemption only where the free GPUs do not hold the gang", it);
            rebuilt_victims += victims.size();
            std::set<int64_t> seen;
            for (int64_t v : victims) {
                const auto x = static_cast<size_t>(v);
                check(v >= 0 && static_cast<size_t>(v) < J && seen.insert(v).second, "rebuilt states: distinct victims", it);
                check(std::find(running.begin(), running.end(), v) != running.end() && preemptible[x],
                      "rebuilt states: victims running and preemptible", it);
                const double waited = now - since[j], executed = attained[j] / static_cast<double>(gpus[j]);
                const int64_t qj = waited >= las.starvation_factor * executed ? 0 : las_queue(attained[j]);
                check(rule == 3 ? prio[x] < prio[j] : prio[x] <= prio[j] && las_queue(attained[x]) > qj,
                      "rebuilt states: victims the rule may take", it);
                bool gives = false;
                for (int64_t g : placed) gives |= owner[static_cast<size_t>(g)] == v;
                check(gives, "rebuilt states: each victim gives the gang a GPU", it);
            }
            for (int64_t g : placed) {
                const int64_t o = owner[static_cast<size_t>(g)];
                check(free_mask[static_cast<size_t>(g)] || (o >= 0 && seen.count(o)), "rebuilt states: free GPUs or the victims'", it);
            }
        }
        if (placed.empty()) continue;
        check(static_cast<int64_t>(placed.size()) == gpus[j], "rebuilt states: the gang's GPUs", it);
        std::set<int64_t> distinct(placed.begin(), placed.end());
        check(distinct.size() == placed.size(), "rebuilt states: distinct GPUs", it);
        for (size_t i = 0; i < placed.size(); ++i) {
            const int64_t g = placed[i];
            check(g >= 0 && g < c.num_gpus, "rebuilt states: GPUs in range", it);
            if (g < 0 || g >= c.num_gpus) break;
            const auto n = static_cast<size_t>(c.gpu_node[static_cast<size_t>(g)]);
            check(c.node_memory_gb[n] >= mem[j], "rebuilt states: GPUs with the job's memory", it);
            const auto first = static_cast<size_t>(placed[i - i % static_cast<size_t>(tp[j])]);
            const auto n0 = static_cast<size_t>(c.gpu_node[first]);
            const int64_t d = c.node_domain[n];
            check(n == n0 || (d >= 0 && d == c.node_domain[n0] && c.spanning(d, tp[j])),
                  "rebuilt states: each TP group on one node, or on trays of one domain where groups span them", it);
            if (segment[j]) {
                const auto s0 = static_cast<size_t>(c.gpu_node[static_cast<size_t>(placed[i - i % static_cast<size_t>(segment[j])])]);
                check(c.node_block[n] == c.node_block[s0], "rebuilt states: each segment inside one block", it);
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const uint64_t iterations = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
    const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
    fuzz_seed = seed;
    std::mt19937_64 rng(seed);
    std::mt19937_64 rebuilt_rng(seed * 0x9E3779B97F4A7C15ULL + 1);  // its own stream: the other checks' draws are left as they were
    Cluster c;
    for (uint64_t it = 0; it < iterations; ++it) {
        if (it % 50 == 0) c = random_cluster(rng);
        placements(c, rng, it);
        choices(c, rng, it);
        if (it % 4 == 0) features(c, rng, it);
        if (it % 10 == 0) malformed(c, rng, it);
        if (it % 2 == 0) rebuilt_placements(c, rebuilt_rng, it);
    }
    std::printf("core_fuzz: %llu iterations (seed %llu), %llu placements kept inside one NVLink domain, "
                "%llu with TP groups on whole trays, %llu in segments, features of %llu candidates (%llu victims), "
                "%llu placements on rebuilt states (%llu victims), %d failures\n",
                static_cast<unsigned long long>(iterations), static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(domain_checks), static_cast<unsigned long long>(spanning_placements),
                static_cast<unsigned long long>(segment_placements),
                static_cast<unsigned long long>(feature_candidates), static_cast<unsigned long long>(feature_victims),
                static_cast<unsigned long long>(rebuilt_checks), static_cast<unsigned long long>(rebuilt_victims), failures);
    return failures ? 1 : 0;
}
