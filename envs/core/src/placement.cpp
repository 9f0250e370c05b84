#include "placement.hpp"

#include <algorithm>
#include <numeric>

namespace gangsched {

void Cluster::validate() const {
    auto need = [](bool ok, const std::string& what) {
        if (!ok) throw BadInput(what);
    };
    const auto N = static_cast<size_t>(num_nodes), S = static_cast<size_t>(num_switches);
    need(num_nodes >= 0 && num_gpus >= 0 && num_switches >= 0 && num_types >= 1, "cluster: negative sizes or no GPU type");
    need(node_type.size() == N, "node_gpu_type: one entry per node expected");
    need(node_speed.size() == N, "node_speed: one entry per node expected");
    need(node_memory_gb.size() == N, "node_memory_gb: one entry per node expected");
    need(node_first_gpu.size() == N, "node_first_gpu: one entry per node expected");
    need(node_gpus.size() == N, "node_gpus: one entry per node expected");
    need(switch_level.size() == S, "switch_level: one entry per switch expected");
    need(under.size() == N * S, "node_under_switch: a nodes x switches table expected");
    int64_t next = 0;
    for (size_t n = 0; n < N; ++n) {
        need(node_type[n] >= 0 && node_type[n] < num_types, "node_gpu_type: a type index out of range");
        need(node_gpus[n] >= 0, "node_gpus: a negative count");
        need(node_first_gpu[n] == next, "node_first_gpu: nodes must number their GPUs consecutively from 0");
        next += node_gpus[n];
    }
    need(next == num_gpus && gpu_socket.size() == static_cast<size_t>(num_gpus),
         "gpu_socket: one entry per GPU of the nodes expected");
    for (int64_t s : gpu_socket) need(s >= 0 && s < 64, "gpu_socket: a socket index outside 0..63");
    for (int64_t l : switch_level) need(l >= 1, "switch_level: levels start at 1 (leaf)");
    const auto G = static_cast<size_t>(num_gpus);
    need(num_kinds >= 1, "gpu_speed_by_kind: one column per job kind expected");
    need(node_intra.size() == N, "node_intra: one entry per node expected");
    need(node_nvlink_GBps.size() == N, "node_nvlink_GBps: one entry per node expected");
    need(node_pcie_GBps.size() == N, "node_pcie_GBps: one entry per node expected");
    need(node_net_GBps.size() == N, "node_net_per_gpu_GBps: one entry per node expected");
    need(node_tier.size() == N * N, "node_tier: a nodes x nodes table expected");
    need(node_domain.size() == N, "node_domain: one entry per node expected");
    need(node_block.size() == N, "node_block: one entry per node expected");
    for (int64_t b : node_block) need(b >= 0 && b < static_cast<int64_t>(N), "node_block: a block index outside 0..nodes-1");
    for (int64_t d : node_domain) need(d >= -1 && d < num_domains, "node_domain: a domain index out of range");
    need(switch_uplink_GBps.size() == S, "switch_uplink_GBps: one entry per switch expected");
    need(gpu_node.size() == G, "gpu_node: one entry per GPU expected");
    need(gpu_local.size() == G, "gpu_local: one entry per GPU expected");
    need(gpu_speed.size() == G, "gpu_speed: one entry per GPU expected");
    need(gpu_speed_by_kind.size() == G * static_cast<size_t>(num_kinds), "gpu_speed_by_kind: a GPUs x kinds table expected");
    for (size_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < node_gpus[n]; ++i) {
            const auto g = static_cast<size_t>(node_first_gpu[n] + i);
            need(gpu_node[g] == static_cast<int64_t>(n), "gpu_node: a GPU outside the node that numbers it");
            need(gpu_local[g] == i, "gpu_local: GPUs numbered 0.. inside each node expected");
        }
}

void Cluster::set_derived() {
    int64_t blocks = 0;
    for (int64_t b : node_block) blocks = std::max(blocks, b + 1);
    block_nodes.assign(static_cast<size_t>(blocks), {});
    for (int64_t n = 0; n < num_nodes; ++n) block_nodes[static_cast<size_t>(node_block[static_cast<size_t>(n)])].push_back(n);
    domain_tray.assign(static_cast<size_t>(num_domains), -1);
    domain_nodes.assign(static_cast<size_t>(num_domains), {});
    for (int64_t n = 0; n < num_nodes; ++n) {
        const int64_t d = node_domain[static_cast<size_t>(n)];
        if (d < 0) continue;
        auto& g = domain_tray[static_cast<size_t>(d)];
        const int64_t size = node_gpus[static_cast<size_t>(n)];
        g = g < 0 ? size : (g == size ? g : 0);
        domain_nodes[static_cast<size_t>(d)].push_back(n);
    }
    for (auto& g : domain_tray) g = std::max<int64_t>(g, 0);
    level_switches.assign(static_cast<size_t>(std::max<int64_t>(max_level, 0) + 1), {});
    switch_nodes.assign(static_cast<size_t>(num_switches), {});
    for (int64_t s = 0; s < num_switches; ++s) {
        const int64_t level = switch_level[static_cast<size_t>(s)];
        if (level >= 0 && level <= max_level) level_switches[static_cast<size_t>(level)].push_back(s);
        for (int64_t n = 0; n < num_nodes; ++n)
            if (node_under(n, s)) switch_nodes[static_cast<size_t>(s)].push_back(n);
    }
}

namespace {

// x / d for counts x >= 0 (negatives divide as written) and d >= 1: a shift when d is a power of
// two (every TP degree of the shipped workloads), so the per-node loops run without a division.
struct CountDiv {
    int64_t d;
    int shift = -1;
    explicit CountDiv(int64_t d_) : d(d_) {
        if (d_ > 0 && (d_ & (d_ - 1)) == 0) shift = __builtin_ctzll(static_cast<unsigned long long>(d_));
    }
    int64_t operator()(int64_t x) const { return shift >= 0 && x >= 0 ? x >> shift : x / d; }
};

// envs.decision.placement._best_fit on unit counts: the fewest among those with at least `need`, lowest id
// on ties; -1 when none.
int64_t best_fit(const std::vector<int64_t>& free, int64_t need) {
    int64_t best = -1;
    for (size_t n = 0; n < free.size(); ++n)
        if (free[n] >= need && (best < 0 || free[n] < free[static_cast<size_t>(best)])) best = static_cast<int64_t>(n);
    return best;
}

void add_to(Take& take, int64_t node, int64_t k) {
    for (auto& [n, count] : take)
        if (n == node) {
            count += k;
            return;
        }
    take.emplace_back(node, k);
}

// envs.decision.placement._fill_domain: inside one domain (`nodes`, ascending), whole TP groups per node,
// fastest then emptiest nodes first, best fit for the last groups; leftovers in the same order.
void fill_domain(const std::vector<double>& speed, const std::vector<int64_t>& free, const std::vector<int64_t>& nodes,
                 int64_t need, int64_t tp, Take& take) {
    std::vector<int64_t> order(nodes);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const double sa = speed[static_cast<size_t>(a)], sb = speed[static_cast<size_t>(b)];
        if (sa != sb) return sa > sb;
        return free[static_cast<size_t>(a)] > free[static_cast<size_t>(b)];
    });
    std::vector<int64_t> cap(free);
    int64_t groups_left = need / tp;
    for (int64_t n : order) {
        if (groups_left == 0) break;
        // Best fit among the fastest nodes that can take every remaining group (first in order on ties).
        double fastest = 0.0;
        bool any = false;
        for (int64_t m : order)
            if (cap[static_cast<size_t>(m)] / tp >= groups_left && (!any || speed[static_cast<size_t>(m)] > fastest)) {
                fastest = speed[static_cast<size_t>(m)];
                any = true;
            }
        if (any) {
            int64_t last = -1;
            for (int64_t m : order)
                if (cap[static_cast<size_t>(m)] / tp >= groups_left && speed[static_cast<size_t>(m)] == fastest &&
                    (last < 0 || cap[static_cast<size_t>(m)] < cap[static_cast<size_t>(last)]))
                    last = m;
            add_to(take, last, groups_left * tp);
            cap[static_cast<size_t>(last)] -= groups_left * tp;
            groups_left = 0;
            break;
        }
        const int64_t g = cap[static_cast<size_t>(n)] / tp;
        if (g) {
            add_to(take, n, g * tp);
            cap[static_cast<size_t>(n)] -= g * tp;
            groups_left -= g;
        }
    }
    int64_t rest = groups_left * tp + need % tp;
    for (int64_t n : order) {
        if (rest == 0) break;
        const int64_t k = std::min(cap[static_cast<size_t>(n)], rest);
        if (k) {
            add_to(take, n, k);
            cap[static_cast<size_t>(n)] -= k;
            rest -= k;
        }
    }
}

// envs.decision.placement._topology_domains: no single node holds the gang; the smallest switch domain
// that holds it in whole TP groups (faster, then tighter, then lower switch id), filled by
// fill_domain. A domain's speed is the mean over its usable GPUs, summed in node order.
// The best of the domains `member(d, n)` for d in [0, count): the fastest mean speed of its
// usable GPUs, then the fewest, then the lowest index; -1 when none holds `need`.
// The best of the domains whose nodes (in node order) `nodes_of(d)` lists, d in [0, count): the
// fastest mean speed of its usable GPUs, then the fewest, then the lowest index; -1 when none
// holds `need`.
template <typename NodesOf>
int64_t best_domain(const Cluster& c, const std::vector<int64_t>& usable, int64_t need, int64_t count, NodesOf nodes_of) {
    int64_t best = -1, best_free = 0;
    double best_speed = 0.0;
    for (int64_t d = 0; d < count; ++d) {
        int64_t dom_free = 0;
        double sum = 0.0;
        for (int64_t v : nodes_of(d)) {
            const auto n = static_cast<size_t>(v);
            dom_free += usable[n];
            sum += static_cast<double>(usable[n]) * c.node_speed[n];
        }
        if (dom_free < need) continue;
        const double speed = sum / static_cast<double>(dom_free);
        if (best < 0 || speed > best_speed || (speed == best_speed && dom_free < best_free)) {
            best = d;
            best_free = dom_free;
            best_speed = speed;
        }
    }
    return best;
}

bool topology_domains(const Cluster& c, const std::vector<int64_t>& free, int64_t need, int64_t tp, Take& take) {
    const auto N = static_cast<size_t>(c.num_nodes);
    thread_local std::vector<int64_t> usable, nodes;  // scratch
    usable.resize(N);
    nodes.clear();
    const CountDiv per_tp(tp);
    int64_t total = 0;
    for (size_t n = 0; n < N; ++n) total += usable[n] = per_tp(free[n]) * tp;
    if (total < need) return false;
    auto fill = [&](const std::vector<int64_t>& members) {
        for (int64_t n : members)
            if (usable[static_cast<size_t>(n)] > 0) nodes.push_back(n);
        fill_domain(c.node_speed, usable, nodes, need, tp, take);
        return true;
    };
    if (c.num_domains > 0) {  // an NVLink domain first
        auto domain = [&](int64_t d) -> const std::vector<int64_t>& { return c.domain_nodes[static_cast<size_t>(d)]; };
        const int64_t d = best_domain(c, usable, need, c.num_domains, domain);
        if (d >= 0) return fill(domain(d));
    }
    for (int64_t level = 1; level <= c.max_level; ++level) {  // then the switches, level by level
        const auto& switches = c.level_switches[static_cast<size_t>(level)];
        auto under = [&](int64_t i) -> const std::vector<int64_t>& {
            return c.switch_nodes[static_cast<size_t>(switches[static_cast<size_t>(i)])];
        };
        const int64_t i = best_domain(c, usable, need, static_cast<int64_t>(switches.size()), under);
        if (i >= 0) return fill(under(i));
    }
    for (size_t n = 0; n < N; ++n)
        if (usable[n] > 0) nodes.push_back(static_cast<int64_t>(n));
    fill_domain(c.node_speed, usable, nodes, need, tp, take);
    return true;
}

// envs.decision.placement._one_type and the restriction to it: when one GPU type alone has `room` (per
// node, GPUs usable in whole TP groups) for the gang, spread keeps the type with the most room,
// every other rule the tightest (lowest type id on ties); `counts` (per node) is zeroed on the
// other types' nodes. Nothing changes when no one type can host it.
void keep_one_type(const Cluster& c, const std::vector<int64_t>& room, std::vector<int64_t>& counts, int64_t need, int64_t rule) {
    if (c.num_types <= 1) return;
    const auto N = static_cast<size_t>(c.num_nodes);
    std::vector<int64_t> per_type(static_cast<size_t>(c.num_types), 0);
    for (size_t n = 0; n < N; ++n) per_type[static_cast<size_t>(c.node_type[n])] += room[n];
    int64_t t = -1;
    for (int64_t k = 0; k < c.num_types; ++k) {
        const int64_t r = per_type[static_cast<size_t>(k)];
        if (r < need) continue;
        if (t < 0 || (rule == SPREAD ? r > per_type[static_cast<size_t>(t)] : r < per_type[static_cast<size_t>(t)])) t = k;
    }
    if (t >= 0)
        for (size_t n = 0; n < N; ++n)
            if (c.node_type[n] != t) counts[n] = 0;
}

// envs.decision.placement._binpack over unit counts (`units` is consumed): the best-fit unit holder, else
// the fullest whole (lowest id on ties), and again; (holder, units) in the order taken.
void binpack_units(std::vector<int64_t>& units, int64_t left, Take& out) {
    const size_t N = units.size();
    while (left > 0) {
        const int64_t b = best_fit(units, left);
        if (b >= 0) {
            out.emplace_back(b, left);
            break;
        }
        size_t m = 0;
        for (size_t n = 1; n < N; ++n)
            if (units[n] > units[m]) m = n;
        out.emplace_back(static_cast<int64_t>(m), units[m]);
        left -= units[m];
        units[m] = 0;
    }
}

// envs.decision.placement._spread over unit counts (`units` is consumed): each unit to the holder with the
// most left, lowest id on ties; (holder, units) in holder order.
// Taken one at a time, the units bring the fullest holders down level by level, the holders at a
// level taken in id order: so the holders above the final level L (the smallest with at most
// `left` units above it) end at L, and the r units still left go one each to the first r holders
// (by id) at L. Counted that way when the counts are small, else unit by unit.
void spread_units(std::vector<int64_t>& units, int64_t left, Take& out) {
    const size_t N = units.size();
    if (left >= 1 && left <= 4) {  // a few units: one at a time, the picks then in holder order
        size_t picks[4];
        for (int64_t u = 0; u < left; ++u) {
            size_t m = 0;
            for (size_t n = 1; n < N; ++n)
                if (units[n] > units[m]) m = n;
            picks[u] = m;
            --units[m];
        }
        std::sort(picks, picks + left);
        for (int64_t u = 0; u < left;) {
            int64_t k = 1;
            while (u + k < left && picks[u + k] == picks[u]) ++k;
            out.emplace_back(static_cast<int64_t>(picks[u]), k);
            u += k;
        }
        return;
    }
    constexpr int64_t SMALL = 64;
    int64_t top = 0, total = 0;
    bool small = left >= 0;
    for (size_t n = 0; n < N && small; ++n) {
        small = units[n] >= 0 && units[n] <= SMALL;
        if (units[n] > top) top = units[n];
        total += units[n];
    }
    if (small && left <= total) {
        int64_t at[SMALL + 2] = {0};  // holders per count
        for (size_t n = 0; n < N; ++n) ++at[units[n]];
        int64_t level = top, above = 0, holders = 0;  // above: units over `level`; holders: those at or over it
        while (level > 0) {
            holders += at[level];
            if (above + holders > left) break;  // bringing every holder down to level - 1 takes too many
            above += holders;
            --level;
        }
        int64_t extra = left - above;  // to the first holders at `level`
        for (size_t n = 0; n < N; ++n) {
            int64_t k = units[n] > level ? units[n] - level : 0;
            if (extra > 0 && units[n] >= level && level > 0) {
                ++k;
                --extra;
            }
            if (k) {
                out.emplace_back(static_cast<int64_t>(n), k);
                units[n] -= k;
            }
        }
        return;
    }
    thread_local std::vector<int64_t> taken;  // scratch
    taken.assign(N, 0);
    for (int64_t u = 0; u < left; ++u) {
        size_t m = 0;
        for (size_t n = 1; n < N; ++n)
            if (units[n] > units[m]) m = n;
        ++taken[m];
        --units[m];
    }
    for (size_t n = 0; n < N; ++n)
        if (taken[n]) out.emplace_back(static_cast<int64_t>(n), taken[n]);
}

// envs.decision.placement._spanning_topology over TP-group hosts: the fastest, then tightest, then first
// host holding the k groups; else the smallest domain whose hosts do, tried as topology_domains
// tries them (an NVLink domain, then a switch's subtree level by level; faster, then tighter, then
// lower id; a host is under a domain when all its nodes are), filled by fill_domain one unit per
// group; else every host.
void spanning_topology(const Cluster& c, const std::vector<int64_t>& groups, const std::vector<std::vector<int64_t>>& members,
                       int64_t k, Take& out) {
    const size_t H = groups.size();
    std::vector<double> speed(H, 0.0);
    for (size_t h = 0; h < H; ++h)
        if (!members[h].empty()) speed[h] = c.node_speed[static_cast<size_t>(members[h][0])];
    int64_t best = -1;
    for (size_t h = 0; h < H; ++h) {
        if (groups[h] < k) continue;
        const auto b = static_cast<size_t>(best);
        if (best < 0 || speed[h] > speed[b] || (speed[h] == speed[b] && groups[h] < groups[b])) best = static_cast<int64_t>(h);
    }
    if (best >= 0) {
        out.emplace_back(best, k);
        return;
    }
    std::vector<int64_t> hosts;
    // The domains `ids`, each holding node n when node_in(n, id): the fastest, then tightest, then
    // first whose hosts hold the k groups fills them; false when none does.
    auto place_in_best = [&](const std::vector<int64_t>& ids, auto node_in) {
        auto host_in = [&](size_t h, int64_t id) {
            for (int64_t n : members[h])
                if (!node_in(n, id)) return false;
            return true;
        };
        int64_t chosen = -1, chosen_groups = 0;
        double chosen_speed = 0.0;
        for (int64_t id : ids) {
            int64_t dom = 0;
            double sum = 0.0;
            for (size_t h = 0; h < H; ++h) {
                if (groups[h] <= 0 || !host_in(h, id)) continue;
                dom += groups[h];
                sum += static_cast<double>(groups[h]) * speed[h];
            }
            if (dom < k) continue;
            const double mean = sum / static_cast<double>(dom);
            if (chosen < 0 || mean > chosen_speed || (mean == chosen_speed && dom < chosen_groups)) {
                chosen = id;
                chosen_groups = dom;
                chosen_speed = mean;
            }
        }
        if (chosen < 0) return false;
        for (size_t h = 0; h < H; ++h)
            if (groups[h] > 0 && host_in(h, chosen)) hosts.push_back(static_cast<int64_t>(h));
        fill_domain(speed, groups, hosts, k, 1, out);
        return true;
    };
    if (c.num_domains > 0) {  // an NVLink domain first
        std::vector<int64_t> domains(static_cast<size_t>(c.num_domains));
        for (int64_t d = 0; d < c.num_domains; ++d) domains[static_cast<size_t>(d)] = d;
        if (place_in_best(domains, [&](int64_t n, int64_t d) { return c.node_domain[static_cast<size_t>(n)] == d; })) return;
    }
    for (int64_t level = 1; level <= c.max_level; ++level)  // then the switches, level by level
        if (place_in_best(c.level_switches[static_cast<size_t>(level)], [&](int64_t n, int64_t s) { return c.node_under(n, s); }))
            return;
    for (size_t h = 0; h < H; ++h)
        if (groups[h] > 0) hosts.push_back(static_cast<int64_t>(h));
    fill_domain(speed, groups, hosts, k, 1, out);
}

// envs.decision.placement._node_take_spanning: a gang whose TP groups span trays in some NVLink domain.
// Each host's units (TP groups or segments of `unit` GPUs, `by_host` in its order) taken from its
// member nodes' usable GPUs in node order (envs.decision.placement's loop after a host rule).
void fill_hosts(const Take& by_host, const std::vector<std::vector<int64_t>>& members, const std::vector<int64_t>& usable,
                int64_t unit, Take& take) {
    for (const auto& [h, g] : by_host) {
        int64_t left = g * unit;
        for (int64_t n : members[static_cast<size_t>(h)]) {
            if (!left) break;
            const int64_t share = std::min(usable[static_cast<size_t>(n)], left);
            take.emplace_back(n, share);
            left -= share;
        }
    }
}

bool node_take_spanning(const Cluster& c, const std::vector<int64_t>& free, int64_t need, int64_t tp, int64_t rule, Take& take) {
    const auto N = static_cast<size_t>(c.num_nodes);
    std::vector<int64_t> usable;
    usable_per_node(c, free, tp, usable);
    keep_one_type(c, usable, usable, need, rule);
    int64_t total = 0;
    for (int64_t u : usable) total += u;
    if (total < need) return false;
    // The hosts: each node outside the spanning domains, each spanning domain, by first node.
    std::vector<int64_t> groups, host_of_domain(static_cast<size_t>(c.num_domains), -1);
    std::vector<std::vector<int64_t>> members;
    for (size_t n = 0; n < N; ++n) {
        const int64_t d = c.node_domain[n];
        if (d >= 0 && c.spanning(d, tp)) {
            auto& h = host_of_domain[static_cast<size_t>(d)];
            if (h < 0) {
                h = static_cast<int64_t>(groups.size());
                groups.push_back(0);
                members.emplace_back();
            }
            if (usable[n]) {
                members[static_cast<size_t>(h)].push_back(static_cast<int64_t>(n));
                groups[static_cast<size_t>(h)] += usable[n];
            }
        } else {
            groups.push_back(usable[n]);
            members.emplace_back();
            if (usable[n]) members.back().push_back(static_cast<int64_t>(n));
        }
    }
    for (auto& g : groups) g /= tp;
    Take by_host;
    const int64_t k = need / tp;
    if (rule == BINPACK) {
        binpack_units(groups, k, by_host);
    } else if (rule == SPREAD) {
        spread_units(groups, k, by_host);
    } else {
        spanning_topology(c, groups, members, k, by_host);
    }
    fill_hosts(by_host, members, usable, tp, take);
    return true;
}

// envs.decision.placement._segment_hosts: per block, the whole segments its usable GPUs make and its
// nodes with usable GPUs, in node order.
void segment_hosts(const Cluster& c, const std::vector<int64_t>& usable, int64_t segment, std::vector<int64_t>& groups,
                   std::vector<std::vector<int64_t>>& members) {
    groups.clear();
    members.clear();
    for (const auto& nodes : c.block_nodes) {
        int64_t sum = 0;
        members.emplace_back();
        for (int64_t n : nodes)
            if (usable[static_cast<size_t>(n)]) {
                members.back().push_back(n);
                sum += usable[static_cast<size_t>(n)];
            }
        groups.push_back(sum / segment);
    }
}

// envs.decision.placement._node_take_segments: a gang in segments of `segment` GPUs, each inside one block.
bool node_take_segments(const Cluster& c, const std::vector<int64_t>& free, int64_t need, int64_t tp, int64_t rule,
                        int64_t segment, Take& take) {
    const auto N = static_cast<size_t>(c.num_nodes);
    std::vector<int64_t> usable, groups;
    std::vector<std::vector<int64_t>> members;
    usable_per_node(c, free, tp, usable);
    if (c.num_types > 1) {  // one GPU type when one alone holds the segments: spread the most room, else the least
        int64_t keep = -1, keep_room = 0;
        std::vector<int64_t> of_type(N);
        for (int64_t t = 0; t < c.num_types; ++t) {
            for (size_t n = 0; n < N; ++n) of_type[n] = c.node_type[n] == t ? usable[n] : 0;
            segment_hosts(c, of_type, segment, groups, members);
            int64_t room = 0;
            for (int64_t g : groups) room += g;
            room *= segment;
            if (room < need) continue;
            if (keep < 0 || (rule == SPREAD ? room > keep_room : room < keep_room)) {
                keep = t;
                keep_room = room;
            }
        }
        if (keep >= 0)
            for (size_t n = 0; n < N; ++n)
                if (c.node_type[n] != keep) usable[n] = 0;
    }
    segment_hosts(c, usable, segment, groups, members);
    const int64_t k = need / segment;
    int64_t total = 0;
    for (int64_t g : groups) total += g;
    if (total < k) return false;
    Take by_host;
    if (rule == BINPACK) {  // envs.decision.placement._smallest_fitting: each segment to the smallest fitting block
        std::vector<int64_t> sums(groups.size(), 0), order;
        for (size_t h = 0; h < groups.size(); ++h)
            for (int64_t n : members[h]) sums[h] += usable[static_cast<size_t>(n)];
        std::vector<int64_t> taken(groups.size(), 0);
        for (int64_t u = 0; u < k; ++u) {
            int64_t best = -1;
            for (size_t h = 0; h < groups.size(); ++h)
                if (groups[h] > 0 && (best < 0 || sums[h] < sums[static_cast<size_t>(best)])) best = static_cast<int64_t>(h);
            const auto b = static_cast<size_t>(best);
            if (!taken[b]++) order.push_back(best);
            --groups[b];
            sums[b] -= segment;
        }
        for (int64_t h : order) by_host.emplace_back(h, taken[static_cast<size_t>(h)]);
    } else if (rule == SPREAD) {
        spread_units(groups, k, by_host);
    } else {
        spanning_topology(c, groups, members, k, by_host);
    }
    fill_hosts(by_host, members, usable, segment, take);
    return true;
}

}  // namespace

int64_t segment_total(const Cluster& c, const std::vector<int64_t>& usable, int64_t segment) {
    int64_t total = 0;
    for (const auto& nodes : c.block_nodes) {
        int64_t sum = 0;
        for (int64_t n : nodes) sum += usable[static_cast<size_t>(n)];
        total += sum / segment;
    }
    return total * segment;
}

void usable_per_node(const Cluster& c, const std::vector<int64_t>& free, int64_t tp, std::vector<int64_t>& out) {
    const auto N = static_cast<size_t>(c.num_nodes);
    out.resize(N);
    const CountDiv per_tp(tp);
    for (size_t n = 0; n < N; ++n) out[n] = per_tp(free[n]) * tp;
    for (int64_t d = 0; d < c.num_domains; ++d) {
        if (!c.spanning(d, tp)) continue;
        const auto& nodes = c.domain_nodes[static_cast<size_t>(d)];
        const int64_t trays = tp / c.domain_tray[static_cast<size_t>(d)];
        int64_t whole = 0;
        for (int64_t n : nodes) whole += free[static_cast<size_t>(n)] == c.node_gpus[static_cast<size_t>(n)];
        int64_t keep = whole / trays * trays;
        for (int64_t n : nodes)
            if (keep > 0 && free[static_cast<size_t>(n)] == c.node_gpus[static_cast<size_t>(n)]) {
                out[static_cast<size_t>(n)] = c.node_gpus[static_cast<size_t>(n)];
                --keep;
            }
    }
}

void check_gang(int64_t need, int64_t tp, int64_t segment) {
    if (need < 1) throw BadInput("gpus: a gang needs at least one GPU");
    if (tp < 1 || need % tp != 0) throw BadInput("tp: the gang must be whole TP groups of at least one GPU");
    if (segment < 0 || (segment > 0 && (segment % tp != 0 || need % segment != 0)))
        throw BadInput("segment: GPUs per segment must be 0 (none) or whole TP groups dividing the gang");
}

namespace {
bool take_counts(const Cluster& c, const std::vector<int64_t>& free_in, int64_t need, int64_t tp, int64_t rule, Take& take,
                 int64_t segment);
}  // namespace

bool node_take(const Cluster& c, const std::vector<int64_t>& free_in, int64_t need, int64_t tp, int64_t rule, Take& take,
               int64_t segment) {
    const auto N = static_cast<size_t>(c.num_nodes);
    if (free_in.size() != N) throw BadInput("free: one count per node expected");
    check_gang(need, tp, segment);
    for (size_t n = 0; n < N; ++n)
        if (free_in[n] < 0 || free_in[n] > c.node_gpus[n]) throw BadInput("free: a count outside 0..the node's GPUs");
    return take_counts(c, free_in, need, tp, rule, take, segment);
}

bool node_take_checked(const Cluster& c, const std::vector<int64_t>& free_in, int64_t need, int64_t tp, int64_t rule, Take& take,
                       int64_t segment) {
    if (free_in.size() != static_cast<size_t>(c.num_nodes)) throw BadInput("free: one count per node expected");
    check_gang(need, tp, segment);
    return take_counts(c, free_in, need, tp, rule, take, segment);
}

namespace {

bool take_counts(const Cluster& c, const std::vector<int64_t>& free_in, int64_t need, int64_t tp, int64_t rule, Take& take,
                 int64_t segment) {
    const auto N = static_cast<size_t>(c.num_nodes);
    take.clear();
    if (segment > 0) return node_take_segments(c, free_in, need, tp, rule, segment, take);
    if (c.num_domains > 0 && c.spans(tp)) return node_take_spanning(c, free_in, need, tp, rule, take);
    const CountDiv per_tp(tp);
    thread_local std::vector<int64_t> one_type, units;  // scratch
    const std::vector<int64_t>* counts = &free_in;
    if (c.num_types > 1) {  // envs.decision.placement._single_type
        thread_local std::vector<int64_t> room;
        room.resize(N);
        for (size_t n = 0; n < N; ++n) room[n] = per_tp(free_in[n]) * tp;
        one_type = free_in;
        keep_one_type(c, room, one_type, need, rule);
        counts = &one_type;
    }
    const std::vector<int64_t>& free = *counts;
    if (rule == BINPACK || rule == SPREAD) {  // pods (TP groups) packed or spread over nodes
        units.resize(N);
        int64_t total = 0;
        if (per_tp.shift >= 0) {  // counts >= 0 here (checked): a plain shift, vectorized
            const int sh = per_tp.shift;
            for (size_t n = 0; n < N; ++n) total += units[n] = free[n] >> sh;
        } else {
            for (size_t n = 0; n < N; ++n) total += units[n] = free[n] / tp;
        }
        const int64_t left = need / tp;
        if (total < left) return false;
        (rule == BINPACK ? binpack_units : spread_units)(units, left, take);
        for (auto& unit : take) unit.second *= tp;
        return true;
    }
    // The topology rule: the best single node (fastest, then tightest, then lowest id) ...
    int64_t best = -1;
    for (size_t n = 0; n < N; ++n) {
        if (free[n] < need) continue;
        const auto b = static_cast<size_t>(best);
        if (best < 0 || c.node_speed[n] > c.node_speed[b] || (c.node_speed[n] == c.node_speed[b] && free[n] < free[b]))
            best = static_cast<int64_t>(n);
    }
    if (best >= 0) {
        take.emplace_back(best, need);
        return true;
    }
    return topology_domains(c, free, need, tp, take);  // ... else the smallest switch domain
}

}  // namespace

void pick_in_node(const Cluster& c, int64_t node, int64_t count, const uint8_t* avail, std::vector<int64_t>& out) {
    if (node < 0 || node >= c.num_nodes) throw BadInput("node: out of range");
    const int64_t lo = c.node_first_gpu[static_cast<size_t>(node)], size = c.node_gpus[static_cast<size_t>(node)];
    thread_local std::vector<int64_t> ids;  // scratch
    ids.clear();
    for (int64_t i = 0; i < size; ++i)
        if (avail[i]) ids.push_back(lo + i);
    if (count < 1 || count > static_cast<int64_t>(ids.size())) throw BadInput("count: more GPUs than the node has available");
    if (count == static_cast<int64_t>(ids.size())) {
        out.insert(out.end(), ids.begin(), ids.end());
        return;
    }
    int64_t per_socket[64] = {0};
    for (int64_t g : ids) ++per_socket[c.gpu_socket[static_cast<size_t>(g)]];
    int64_t best = -1;  // the best-fit socket: fewest available among those holding `count`, lowest id on ties
    for (int64_t s = 0; s < 64; ++s)
        if (per_socket[s] >= count && (best < 0 || per_socket[s] < per_socket[best])) best = s;
    if (best >= 0) {
        int64_t k = 0;
        for (int64_t g : ids)
            if (c.gpu_socket[static_cast<size_t>(g)] == best && k < count) {
                out.push_back(g);
                ++k;
            }
        return;
    }
    std::vector<int64_t> order(ids);  // fullest sockets first, ascending ids inside, then sorted
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return per_socket[c.gpu_socket[static_cast<size_t>(a)]] > per_socket[c.gpu_socket[static_cast<size_t>(b)]];
    });
    order.resize(static_cast<size_t>(count));
    std::sort(order.begin(), order.end());
    out.insert(out.end(), order.begin(), order.end());
}

}  // namespace gangsched
