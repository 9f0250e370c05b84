"""Compiled twins of the hot path's inner loops (numba; see envs.core.jit for the switch).

Each kernel is the loop of one reference function, over plain arrays, and gives bit for bit
what that function gives: the same integer logic, and the same floating-point operations in the
same order (`pairwise_sum` is numpy's summation of a float64 array). The reference it mirrors is
named in each docstring; tests/test_kernels.py checks each pair on random inputs and whole
episodes on every shipped cluster.
"""

from __future__ import annotations

import math

import numpy as np

from envs.core.jit import njit

_PW_BLOCKSIZE = 128  # numpy's pairwise summation block


@njit
def pairwise_sum(a):
    """`float(a.sum())` of a 1-D float64 array, in numpy's order: blocks of up to 128 summed
    with 8 accumulators, halves summed recursively (numpy's pairwise_sum), plus the identity 0.
    The recursion runs on an explicit stack (numba's on-disk cache does not keep recursive
    functions safely)."""
    n = len(a)
    if n <= _PW_BLOCKSIZE:
        return 0.0 + _block_sum(a, 0, n)
    los = np.empty(64, dtype=np.int64)
    ns = np.empty(64, dtype=np.int64)
    stage = np.empty(64, dtype=np.int64)
    values = np.empty(64)
    sp = vp = 0
    los[0], ns[0], stage[0] = 0, n, 0
    sp = 1
    while sp:
        f = sp - 1
        lo, m = los[f], ns[f]
        if m <= _PW_BLOCKSIZE:
            values[vp] = _block_sum(a, lo, m)
            vp += 1
            sp -= 1
            continue
        half = m // 2
        half -= half % 8
        if stage[f] == 0:  # the left half first
            stage[f] = 1
            los[sp], ns[sp], stage[sp] = lo, half, 0
            sp += 1
        elif stage[f] == 1:  # then the right half
            stage[f] = 2
            los[sp], ns[sp], stage[sp] = lo + half, m - half, 0
            sp += 1
        else:  # left + right
            values[vp - 2] = values[vp - 2] + values[vp - 1]
            vp -= 1
            sp -= 1
    return 0.0 + values[0]


@njit
def _block_sum(a, lo, n):
    """numpy's pairwise_sum of a[lo:lo + n] for n <= 128: 8 accumulators, then the rest."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


# ---------------------------------------------------------------------- the event loop


@njit
def next_completion_s(now, run, overhead_left, work_left, rate, restoring):
    """The earliest end of a running job (Simulator._next_event_s): min over the running jobs
    of now + restore left + work left / rate; with no restore owed, now + min(work / rate)."""
    if restoring:
        t = np.inf
        for j in run:
            x = now + overhead_left[j] + work_left[j] / rate[j]
            if x < t:
                t = x
        return t
    m = np.inf
    for j in run:
        x = work_left[j] / rate[j]
        if x < m:
            m = x
    return now + m


@njit
def next_end_estimate_s(now, run, estimate_s, work_done_s, restore_left_s, rate):
    """The scheduler's expected earliest end of a running job (ClusterState.next_event_estimate_s):
    now + min over the running jobs of restore left + max(estimate - work done, 0) / rate."""
    m = np.inf
    for j in run:
        x = restore_left_s[j] + max(estimate_s[j] - work_done_s[j], 0.0) / rate[j]
        if x < m:
            m = x
    return now + m


@njit
def advance_running(run, dt, restoring, finish, rate, overhead_left, work_left, work_done, work_total, gpus_req,
                    attained_gpu_s, run_s, interference_loss_s, interference, order):
    """The running jobs' part of an advance by `dt` (Simulator._integrate, then with `finish`
    Simulator._finish_completed's test) in one call. Integration, only where dt > 0: restore time
    paid before progress, progress capped at the work left, attained service, run time and
    interference loss. Then, with `finish`, the jobs whose remaining time is below float slack
    go to order[:k] in the order of `run`, and the others to order[k:len(run)] in the reverse
    order of `run`, in one pass (`order` is scratch of at least len(run)). Returns (the useful
    reference GPU-s done, k): scalars only, so the call boxes no array."""
    n = len(run)
    total = 0.0
    if dt > 0:
        useful = np.empty(n)
        for i in range(n):
            j = run[i]
            if restoring:
                left = overhead_left[j]
                overhead = min(left, dt)
                overhead_left[j] = left - overhead
                progress = (dt - overhead) * rate[j]
            else:
                progress = dt * rate[j]
            left = work_left[j]
            progress = min(progress, left)
            left = left - progress
            work_left[j] = left
            work_done[j] = work_total[j] - left
            useful[i] = progress * gpus_req[j]
            attained_gpu_s[j] += gpus_req[j] * dt
            run_s[j] += dt
            interference_loss_s[j] += (1.0 - interference[j]) * dt
        total = pairwise_sum(useful)
    k = 0
    if finish:
        back = n
        for j in run:
            if overhead_left[j] + work_left[j] / rate[j] <= 1e-7:
                order[k] = j
                k += 1
            else:
                back -= 1
                order[back] = j
    return total, k


@njit
def update_rates(running, dirty_node, dirty_uplink, job_slot, rec_f, rec_i, pool_i, pool_counts, node_pressure,
                 node_gpus, uplink_demand, uplink_cap, ref_net_per_gpu, rate, interference):
    """envs.sim.load.LoadModel.update_rates over its arrays: the rate and interference of every
    running job with a node in `dirty_node` or an uplink in `dirty_uplink`, by the same float
    operations in the same order (speed.interference_from, congestion_shares,
    PlacementProfile.efficiency); then both dirty masks are cleared. A job's placed record is
    row job_slot[j] of rec_f (pressure, coeff x sensitivity, rate before interference, min speed,
    TP stretch, DP bandwidth, c_tp, c_dp) and rec_i (lo, hi, uhi, TP across nodes: its nodes
    pool_i[lo:hi] with pool_counts[lo:hi] GPUs on each, its uplinks pool_i[hi:uhi])."""
    any_uplink = False
    for u in range(len(dirty_uplink)):
        if dirty_uplink[u]:
            any_uplink = True
            break
    shares = np.empty(0)
    have_shares = False
    for j in running:
        s = job_slot[j]
        lo, hi, uhi = rec_i[s, 0], rec_i[s, 1], rec_i[s, 2]  # its uplinks follow its nodes: pool_i[hi:uhi]
        stale = False
        for q in range(lo, hi):
            if dirty_node[pool_i[q]]:
                stale = True
                break
        if not stale and any_uplink:
            for q in range(hi, uhi):
                if dirty_uplink[pool_i[q]]:
                    stale = True
                    break
        if not stale:
            continue
        pressure = rec_f[s, 0]
        n = pool_i[lo]
        others = (node_pressure[n] - pressure * pool_counts[lo]) / node_gpus[n]
        for q in range(lo + 1, hi):  # the worst node; ties keep the first, as max() does
            n = pool_i[q]
            x = (node_pressure[n] - pressure * pool_counts[q]) / node_gpus[n]
            if x > others:
                others = x
        interf = 1.0 / (1.0 + rec_f[s, 1] * (0.0 if 0.0 > others else others))
        interference[j] = interf
        if uhi > hi:
            if not have_shares:
                shares = np.ones(len(uplink_demand))
                for u in range(len(uplink_demand)):
                    if uplink_demand[u] > uplink_cap[u]:
                        shares[u] = uplink_cap[u] / uplink_demand[u]
                have_shares = True
            congestion = shares[pool_i[hi]]
            for q in range(hi + 1, uhi):
                if shares[pool_i[q]] < congestion:
                    congestion = shares[pool_i[q]]
            tp = rec_f[s, 4] / (congestion if rec_i[s, 3] else 1.0)
            dp_bw = rec_f[s, 5] * congestion
            dp = ref_net_per_gpu / (dp_bw if dp_bw > 1e-12 else 1e-12)
            if 1.0 > dp:
                dp = 1.0
            c_tp, c_dp = rec_f[s, 6], rec_f[s, 7]
            rate[j] = rec_f[s, 3] * (1.0 / ((1.0 - c_tp - c_dp) + c_tp * tp + c_dp * dp)) * interf
        else:
            rate[j] = rec_f[s, 2] * interf
    for n in range(len(dirty_node)):
        dirty_node[n] = False
    for u in range(len(dirty_uplink)):
        dirty_uplink[u] = False


@njit
def masked_sum(values, mask):
    """`float(values[mask].sum())` of a 1-D float64 array: the selected entries in order,
    summed as numpy sums them (envs.sim.power.PowerMeter.update)."""
    picked = np.empty(len(values))
    k = 0
    for i in range(len(values)):
        if mask[i]:
            picked[k] = values[i]
            k += 1
    return pairwise_sum(picked[:k])


@njit
def sorted_insert_at(sorted_ids, length, key, remaining_s):
    """envs.sim.queue.JobQueue.push's reference: where a job of remaining estimate `key` goes in
    sorted_ids[:length], the queue by (remaining_s, enqueue rank): after every job of the same
    estimate, its rank being the largest yet (bisect_right by estimate). The caller
    shifts the array (numpy's memmove is faster than a compiled loop)."""
    lo, hi = 0, length
    while lo < hi:
        mid = (lo + hi) // 2
        if key < remaining_s[sorted_ids[mid]]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit
def queue_positions(ids, sorted_ids, length, job_id, remaining_s, enqueue_seq):
    """envs.sim.queue.JobQueue.remove's reference: where `job_id` (queued) is in sorted_ids[:length],
    the queue by (remaining_s, enqueue_seq), and in ids[:length], the queue in FIFO order (whose
    ranks increase along it), each found by binary search, as one int: sorted position x length
    + FIFO position (one scalar back is cheaper than a tuple)."""
    key, seq = remaining_s[job_id], enqueue_seq[job_id]
    lo, hi = 0, length
    while lo < hi:
        mid = (lo + hi) // 2
        j = sorted_ids[mid]
        if remaining_s[j] < key or (remaining_s[j] == key and enqueue_seq[j] < seq):
            lo = mid + 1
        else:
            hi = mid
    at = lo
    lo, hi = 0, length
    while lo < hi:
        mid = (lo + hi) // 2
        if enqueue_seq[ids[mid]] < seq:
            lo = mid + 1
        else:
            hi = mid
    return at * length + lo


# ---------------------------------------------------------------------- feasibility and the window


@njit
def _usable_totals(node_free, weights, held, on_level, by_free, node_domain, node_gpus, span, span_level):
    """Per row r of `weights` and per (memory level, TP degree), flattened: the GPUs usable in
    whole TP groups over the nodes of each level, counting on node n its free GPUs plus
    sum_k weights[r, k] * held[k, n]; then what TP groups that span trays add
    (envs.decision.window._spanning_totals): for each row s of `span` (TP degree column, NVLink domain,
    trays per group, TP degree), the domain's fully available trays (nodes n of `node_domain`
    d whose count is node_gpus[n]) in whole groups of trays, times the TP degree, on each memory
    level of span_level[s] (the domain's first node's on_level column). Integer sums: exact in
    any order."""
    n_levels, n_tp = on_level.shape[0], by_free.shape[1]
    n_rows = weights.shape[0]
    totals = np.zeros((n_rows, n_levels * n_tp), dtype=np.int64)
    counts = np.empty(n_rows, dtype=np.int64)
    n_span = span.shape[0]
    n_domains = 0  # the domains spanning groups read: whole trays are counted in these only
    for s in range(n_span):
        if span[s, 1] + 1 > n_domains:
            n_domains = span[s, 1] + 1
    whole = np.zeros((n_rows, n_domains), dtype=np.int64)
    for n in range(len(node_free)):
        counts[:] = node_free[n]
        for k in range(weights.shape[1]):
            h = held[k, n]
            if h:  # most nodes hold GPUs of few (priority, queue) cells
                for r in range(n_rows):
                    counts[r] += weights[r, k] * h
        for lv in range(n_levels):
            w = on_level[lv, n]
            if w:
                for r in range(n_rows):
                    c = counts[r]
                    for t in range(n_tp):
                        totals[r, lv * n_tp + t] += w * by_free[c, t]
        d = node_domain[n]
        if 0 <= d < n_domains:
            g = node_gpus[n]
            for r in range(n_rows):
                if counts[r] == g:
                    whole[r, d] += 1
    for s in range(n_span):
        col, d, trays, tp = span[s, 0], span[s, 1], span[s, 2], span[s, 3]
        for r in range(n_rows):
            groups = whole[r, d] // trays * tp
            if groups:
                for lv in range(n_levels):
                    totals[r, lv * n_tp + col] += groups * span_level[s, lv]
    return totals


@njit
def class_fits(node_free, node_preemptible, lower, on_level, by_free, positions, need, node_domain, node_gpus, span,
               span_level):
    """envs.decision.window.class_fits's three rows per class: (fits in whole TP groups now, fits that
    way only after preemption, either). `positions` and `need` hold the classes' entries without
    preemption, then with it: fits is need <= (on_level @ by_free[counts] + the groups that span
    trays, `_usable_totals`).take(positions), counts = node_free + lower @ node_preemptible.T."""
    totals = _usable_totals(node_free, lower, node_preemptible.T, on_level, by_free, node_domain, node_gpus, span,
                            span_level).ravel()
    n = len(positions) // 2
    out = np.empty((3, n), dtype=np.bool_)
    for i in range(n):
        now = need[i] <= totals[positions[i]]
        preempt = not now and need[n + i] <= totals[positions[n + i]]
        out[0, i] = now
        out[1, i] = preempt
        out[2, i] = now or preempt
    return out


@njit
def feasible_of(queue, job_class, class_ok):
    """The queued jobs whose class is feasible, in queue order (envs.decision.window.feasible_queue)."""
    out = np.empty(len(queue), dtype=np.int64)
    k = 0
    for j in queue:
        if class_ok[job_class[j]]:
            out[k] = j
            k += 1
    return out[:k]


@njit
def shortest_head(sorted_ids, job_class, class_ok, k, walk_limit):
    """envs.decision.window.shortest_head: the first k queued jobs of a feasible class in the order of
    `sorted_ids` (the queue by remaining estimate). (False, empty) when more than `walk_limit`
    infeasible jobs come first."""
    out = np.empty(k, dtype=np.int64)
    got = 0
    for n in range(len(sorted_ids)):
        j = sorted_ids[n]
        if class_ok[job_class[j]]:
            out[got] = j
            got += 1
            if got == k:
                break
        elif n - got > walk_limit:
            return False, out[:0]
    return True, out[:got]


@njit
def any_feasible(queue, job_class, class_ok):
    """Some queued job's class is feasible (envs.decision.window.any_feasible: feasible_of would not be
    empty), stopping at the first."""
    for j in queue:
        if class_ok[job_class[j]]:
            return True
    return False


@njit
def _enters(keys, count, x):
    """Whether key `x` enters a head buffer (see `_head_insert`) holding `count` entries: it has
    room, or x is below its last key."""
    return count < len(keys) or (count > 0 and x < keys[count - 1])


@njit
def _head_insert(buf, keys, count, x, item):
    """Files `item` with key `x`, which `_enters`, into buf[:count], kept sorted by keys[:count]
    with ties in filing order and at most len(buf) long: after the entries whose key is not
    above x; when full, the last one drops out. Returns the new count. (Callers test `_enters`
    first, which compiles inline: a call to this one per key costs ten times the loop, and
    filing is rare once the buffer is full.)"""
    if count == len(buf):
        p = count - 1  # the last one drops out
    else:
        p = count
        count += 1
    while p > 0 and keys[p - 1] > x:
        buf[p] = buf[p - 1]
        keys[p] = keys[p - 1]
        p -= 1
    buf[p] = item
    keys[p] = x
    return count


@njit
def _stable_head(values, idx, sign, k):
    """Positions of the first k entries of a stable sort (ties in position order) of the keys
    sign * values[idx[i]]: what envs.decision.window.select_window's `head` takes, by insertion into a
    sorted buffer (sign is 1.0 or -1.0: the product is exact, for float and integer values)."""
    size = min(k, len(idx))
    buf = np.empty(size, dtype=np.int64)
    keys = np.empty(size)
    count = 0
    for i in range(len(idx)):
        x = sign * values[idx[i]]
        if _enters(keys, count, x):
            count = _head_insert(buf, keys, count, x, i)
    return buf


@njit
def _round_robin(orders, queue_window):
    """Up to `queue_window` jobs taken round-robin from the heads of `orders`, skipping jobs taken
    (envs.decision.window.select_window's loop)."""
    window = np.empty(queue_window, dtype=np.int64)
    n = 0
    heads = np.zeros(len(orders), dtype=np.int64)
    while n < queue_window:
        for o in range(len(orders)):
            order = orders[o]
            h = heads[o]
            while h < len(order):
                taken = False
                for w in range(n):
                    if window[w] == order[h]:
                        taken = True
                        break
                if not taken:
                    break
                h += 1
            heads[o] = h
            if h < len(order) and n < queue_window:
                window[n] = order[h]
                n += 1
    return window


@njit
def select_window(feasible, queue_window, remaining, priority, attained_gpu_s):
    """envs.decision.window.select_window past its short cut (more feasible jobs than slots) when the
    shortest order cannot be walked from the sorted queue (see `queue_window`): round-robin over
    the heads of four orders of `feasible` (queue order; the stable order of `remaining`, per
    feasible job; priority, highest first; attained service, least first), skipping jobs taken."""
    k = 2 * queue_window
    return _round_robin((
        feasible,
        feasible[_stable_head(remaining, np.arange(len(feasible)), 1.0, k)],
        feasible[_stable_head(priority, feasible, -1.0, k)],
        feasible[_stable_head(attained_gpu_s, feasible, 1.0, k)],
    ), queue_window)


@njit
def queue_window(queue, sorted_ids, job_class, class_ok, queue_window, walk_limit, priority, attained_gpu_s, top_priority):
    """envs.decision.window.select_window in one pass over the queue, without listing the feasible jobs:
    the first 2Q feasible ones in queue order (no order is walked further), and the heads by
    priority and by attained service filed as they come, as `select_window` takes them over
    feasible_of's list. (True, the window), or (False, empty) when more jobs are feasible than
    slots and more than `walk_limit` infeasible jobs come first in `sorted_ids` (the caller
    then takes select_window's order by remaining estimate).

    `top_priority` bounds the queued jobs' priorities from above. The pass stops early, with
    the same window, once 2Q feasible jobs are found and both heads are full of jobs with the
    smallest key any queued job can have (priority `top_priority`, no attained service): a later
    job only ties them, and ties keep queue order. On a long queue of equal-priority jobs that
    never ran (a trace replay) that is after some 2Q feasible jobs instead of the whole queue."""
    k = 2 * queue_window
    arrival = np.empty(k, dtype=np.int64)
    by_priority = np.empty(k, dtype=np.int64)
    priority_keys = np.empty(k)
    by_attained = np.empty(k, dtype=np.int64)
    attained_keys = np.empty(k)
    n = n_priority = n_attained = 0
    for j in queue:
        if class_ok[job_class[j]]:
            if n < k:
                arrival[n] = j
            n += 1
            x = -1.0 * priority[j]
            if _enters(priority_keys, n_priority, x):
                n_priority = _head_insert(by_priority, priority_keys, n_priority, x, j)
            x = 1.0 * attained_gpu_s[j]
            if _enters(attained_keys, n_attained, x):
                n_attained = _head_insert(by_attained, attained_keys, n_attained, x, j)
            if (n >= k and n_priority == k and priority_keys[k - 1] <= -1.0 * top_priority and n_attained == k
                    and attained_keys[k - 1] <= 0.0):
                break
    if n <= queue_window:
        return True, arrival[:n]
    walked, shortest = shortest_head(sorted_ids, job_class, class_ok, k, walk_limit)
    if not walked:
        return False, arrival[:0]
    return True, _round_robin((arrival[: min(n, k)], shortest, by_priority[:n_priority], by_attained[:n_attained]),
                              queue_window)


# ---------------------------------------------------------------------- preempt-las validity


@njit
def preemptible_gpus(gpu_owner, gpu_node, running, preemptible, num_jobs):
    """envs.decision.window._preemptible_gpus past its cache: (owner, node) of every GPU held by a
    running preemptible job, in GPU order."""
    held = np.zeros(num_jobs, dtype=np.bool_)
    for j in running:
        if preemptible[j]:
            held[j] = True
    n = 0
    for g in range(len(gpu_owner)):
        j = gpu_owner[g]
        if j >= 0 and held[j]:
            n += 1
    owner = np.empty(n, dtype=gpu_owner.dtype)
    node = np.empty(n, dtype=gpu_node.dtype)
    n = 0
    for g in range(len(gpu_owner)):
        j = gpu_owner[g]
        if j >= 0 and held[j]:
            owner[n] = j
            node[n] = gpu_node[g]
            n += 1
    return owner, node


@njit
def _las_queue_of(attained, thresholds):
    """np.searchsorted(thresholds, attained, side="right") for one value: the 2D-LAS queue by
    attained service alone (envs.decision.las.las_queue)."""
    q = 0
    for th in thresholds:
        if th <= attained:
            q += 1
    return q


@njit
def las_totals(owner, node, attained_gpu_s, priority, thresholds, n_priorities, node_free, rows, on_level, by_free,
               node_domain, node_gpus, span, span_level):
    """envs.decision.window._las_totals past its cache: per row of `rows` (priority p, LAS queue q) and
    (memory level, TP degree), the GPUs usable in whole TP groups counting each node's free GPUs
    and those of the GPUs (`owner`, `node`) held by preemptible jobs of priority <= p in a LAS
    queue > q. (False, empty) when no such GPU's job is below queue 0."""
    n_queues = len(thresholds) + 1
    n_nodes = len(node_free)
    held_by = np.zeros((n_priorities * n_queues, n_nodes), dtype=np.int64)
    below = False
    for i in range(len(owner)):
        j = owner[i]
        q = _las_queue_of(attained_gpu_s[j], thresholds)
        if q > 0:
            below = True
        held_by[priority[j] * n_queues + q, node[i]] += 1
    if not below:
        return False, np.zeros((0, on_level.shape[0] * by_free.shape[1]), dtype=np.int64)
    return True, _usable_totals(node_free, rows, held_by, on_level, by_free, node_domain, node_gpus, span, span_level)


@njit
def _las_fit(j, c, totals, attained_gpu_s, num_gpus, now, queued_since_s, priority, thresholds, starvation_factor,
             positions, need):
    """Queued job `j` (of class `c`, which does not fit now in whole TP groups): its LAS queue
    with the starvation promotion of envs.decision.las.las_queue when preempting the jobs of lower LAS
    queues would make room for it, else -1."""
    lower_queues = len(thresholds)  # queues that have a lower one
    a = attained_gpu_s[j]
    q = _las_queue_of(a, thresholds)
    executed_s = a / num_gpus[j]
    waited_s = now - queued_since_s[j]
    if waited_s >= starvation_factor * executed_s:
        q = 0
    if q < lower_queues and need[c] <= totals[priority[j] * lower_queues + min(q, lower_queues - 1), positions[c]]:
        return q
    return -1


@njit
def las_fits(jobs, cls, fits_aligned, totals, attained_gpu_s, num_gpus, now, queued_since_s, priority, thresholds,
             starvation_factor, positions, need):
    """envs.decision.window._las_fits past its short cuts: per queued job, it does not fit now in whole
    TP groups but would after preempting the jobs of lower LAS queues (`_las_fit`)."""
    out = np.zeros(len(jobs), dtype=np.bool_)
    for i in range(len(jobs)):
        c = cls[i]
        if not fits_aligned[c]:
            out[i] = _las_fit(jobs[i], c, totals, attained_gpu_s, num_gpus, now, queued_since_s, priority, thresholds,
                              starvation_factor, positions, need) >= 0
    return out


@njit
def las_only(queue, job_class, fits, totals, attained_gpu_s, num_gpus, now, queued_since_s, priority, thresholds,
             starvation_factor, positions, need):
    """envs.decision.window.las_only_queue past its cache and short cuts: the queued jobs whose class
    fits neither now nor after preempting lower-priority jobs (`fits`, per class, false) but
    which preempt-las would place (`_las_fit`), in LAS queue order and queue order inside each
    (the reference's stable sort)."""
    jobs = np.empty(len(queue), dtype=np.int64)
    levels = np.empty(len(queue), dtype=np.int64)
    k = 0
    for j in queue:
        c = job_class[j]
        if fits[c]:
            continue
        q = _las_fit(j, c, totals, attained_gpu_s, num_gpus, now, queued_since_s, priority, thresholds,
                     starvation_factor, positions, need)
        if q >= 0:
            jobs[k], levels[k] = j, q
            k += 1
    out = np.empty(k, dtype=np.int64)
    m = 0
    for level in range(len(thresholds)):  # a job preempt-las places is above the last queue
        for i in range(k):
            if levels[i] == level:
                out[m] = jobs[i]
                m += 1
    return out


@njit
def las_can_place(q_ids, qlen, q_per_shape, shape_id, class_of_shape, fits, node_preemptible, gpu_owner, gpu_node,
                  running, preemptible, num_jobs, attained_gpu_s, priority, thresholds, node_free, rows, on_level, by_free,
                  num_gpus, now, queued_since_s, starvation_factor, positions, need, node_domain, node_gpus, span,
                  span_level):
    """envs.decision.window.las_only_queue is not empty, when no queued job's class fits (`fits`, per
    class, either way): 1 when some queued job preempt-las would place, 0 when none, -1 when a
    queued job's shape has no registered class (Python's test registers it). The same steps as
    the reference: a queued job whose class fits neither now nor after preempting lower-priority
    jobs; the GPUs of running preemptible jobs (`preemptible_gpus`, of the `num_jobs` jobs
    arrived); their LAS totals (`las_totals`, None when no such job is below queue 0); a queued
    job that `_las_fit` places."""
    blocked = False
    for m in range(len(q_per_shape)):
        if q_per_shape[m]:
            c = class_of_shape[m]
            if c < 0:
                return -1
            if not fits[c]:
                blocked = True
    if not blocked:
        return 0
    held = False
    for x in node_preemptible.ravel():
        if x:
            held = True
            break
    if not held:
        return 0
    owner, node = preemptible_gpus(gpu_owner, gpu_node, running, preemptible, num_jobs)
    below, totals = las_totals(owner, node, attained_gpu_s, priority, thresholds, node_preemptible.shape[1], node_free,
                               rows, on_level, by_free, node_domain, node_gpus, span, span_level)
    if not below:
        return 0
    for i in range(qlen):
        j = q_ids[i]
        c = class_of_shape[shape_id[j]]
        if not fits[c] and _las_fit(j, c, totals, attained_gpu_s, num_gpus, now, queued_since_s, priority, thresholds,
                                    starvation_factor, positions, need) >= 0:
            return 1
    return 0


# ---------------------------------------------------------------------- events between decisions

# What `run_events` returns (Simulator.run_events): why it stopped.
EV_FEASIBLE, EV_DONE, EV_UNTIL, EV_NO_EVENT, EV_NEW_CLASS, EV_ROOM = 0, 1, 2, 3, 4, 5
# Positions in its float scalars `fs` and int scalars `iscal` (read and written back).
F_NOW, F_JOBS_S, F_ENERGY, F_ALLOC_S, F_USEFUL, F_POWER, F_UNTIL = range(7)
(I_NUM_FREE, I_FRAGMENTED, I_ALLOC_VERSION, I_VERSION, I_NUM_DONE, I_IN_SYSTEM, I_NEXT_ARRIVAL, I_QLEN, I_ENQUEUED,
 I_QGPUS, I_QHIGH, I_RUNNING, I_EVENTS, I_FINISHED, I_RELEASED, I_ANY_RESTORE, I_CLAIMED) = range(17)


@njit
def _load_and_hold(sign, j, s, rec_f, rec_i, pool_i, pool_counts, node_pressure, dirty_node, uplink_demand,
                   dirty_uplink, node_preemptible, preemptible, priority, node_owned, node_free, whole_gang,
                   node_gpus_i, node_power_w, node_on, power_terms, iscal):
    """A job on record row `s` starts (sign +1.0) or stops (-1.0) loading its nodes and uplinks
    (LoadModel._add_load(placed, sign)) and counting as preemptible where it is
    (count_preemptible(..., sign)); then its GPUs change hands on its nodes (AllocationLedger.move:
    owned +sign, free -sign times its GPUs there, with the free and fragmented counts) and the
    power meter takes those nodes (nodes_changed), in the reference's order. The GPU arrays
    themselves are the caller's."""
    lo, hi, uhi = rec_i[s, 0], rec_i[s, 1], rec_i[s, 2]
    pressure = sign * rec_f[s, 0]
    for q in range(lo, hi):
        n = pool_i[q]
        node_pressure[n] += pressure * pool_counts[q]
        dirty_node[n] = True
    for q in range(hi, uhi):
        u = pool_i[q]
        uplink_demand[u] += sign * pool_counts[q]
        dirty_uplink[u] = True
    step = np.int64(sign)
    if preemptible[j]:
        p = priority[j]
        for q in range(lo, hi):
            node_preemptible[pool_i[q], p] += step * np.int64(pool_counts[q])
    iscal[I_ALLOC_VERSION] += 1
    for q in range(lo, hi):
        n = pool_i[q]
        k = step * np.int64(pool_counts[q])
        node_owned[n] += k
        was = node_free[n]
        node_free[n] = was - k
        iscal[I_NUM_FREE] -= k
        w = whole_gang[n]
        iscal[I_FRAGMENTED] += ((was - k) if was - k < w else 0) - (was if was < w else 0)
    for q in range(lo, hi):
        n = pool_i[q]
        o = node_owned[n]
        node_power_w[n] = power_terms[n, 0] + o * power_terms[n, 1] + (node_gpus_i[n] - o) * power_terms[n, 2]
        node_on[n] = o > 0


@njit
def _release_job(j, s, rec_i, rec_f, pool_i, pool_counts, node_pressure, dirty_node, uplink_demand, dirty_uplink,
                 node_preemptible, preemptible, priority, rate, gpu_owner, free_mask, node_first_gpu, node_gpus_i,
                 node_owned, node_free, whole_gang, node_power_w, node_on, power_terms, iscal):
    """A finished job stops and lets its GPUs go (Simulator._stop then _release without a
    reserved job), in the reference's order, on record row `s`: its GPUs are found among its
    nodes' (gpu_owner), then _load_and_hold(-1)."""
    rate[j] = 0.0
    for q in range(rec_i[s, 0], rec_i[s, 1]):  # AllocationLedger.release: its GPUs on each of its nodes
        n = pool_i[q]
        for g in range(node_first_gpu[n], node_first_gpu[n] + node_gpus_i[n]):
            if gpu_owner[g] == j:
                gpu_owner[g] = -1
                free_mask[g] = True
    _load_and_hold(-1.0, j, s, rec_f, rec_i, pool_i, pool_counts, node_pressure, dirty_node, uplink_demand,
                   dirty_uplink, node_preemptible, preemptible, priority, node_owned, node_free, whole_gang,
                   node_gpus_i, node_power_w, node_on, power_terms, iscal)


@njit
def _launch_job(j, gpus, s, iscal, q_ids, q_sorted, q_remaining, q_seq, q_per_shape, shape_id, gpus_req, priority,
                priority_high, preemptible, rec_f, rec_i, pool_i, pool_counts, node_pressure, dirty_node,
                uplink_demand, dirty_uplink, gpu_owner, gpu_reserved, free_mask, node_owned, node_free,
                node_preemptible, whole_gang, node_gpus_i, node_power_w, node_on, power_terms):
    """Simulator.start's bookkeeping after its checks and records, for a queued job `j` on free
    `gpus` with record row `s`, in the reference's order: the queue lets it go (JobQueue.remove),
    it takes its GPUs (AllocationLedger.claim), then _load_and_hold(+1). The caller then updates
    the rates and the power drawn."""
    length = iscal[I_QLEN]  # JobQueue.remove
    pos = queue_positions(q_ids, q_sorted, length, j, q_remaining, q_seq)
    at, i = pos // length, pos % length
    for m in range(at, length - 1):
        q_sorted[m] = q_sorted[m + 1]
    for m in range(i, length - 1):
        q_ids[m] = q_ids[m + 1]
    iscal[I_QLEN] = length - 1
    iscal[I_QGPUS] -= gpus_req[j]
    if priority[j] == priority_high:
        iscal[I_QHIGH] -= 1
    q_per_shape[shape_id[j]] -= 1
    for g in gpus:  # AllocationLedger.claim
        gpu_owner[g] = j
        gpu_reserved[g] = -1
        free_mask[g] = False
    _load_and_hold(1.0, j, s, rec_f, rec_i, pool_i, pool_counts, node_pressure, dirty_node, uplink_demand,
                   dirty_uplink, node_preemptible, preemptible, priority, node_owned, node_free, whole_gang,
                   node_gpus_i, node_power_w, node_on, power_terms, iscal)


@njit
def run_events(fs, iscal, run_buf, order, fin_buf, timeline, arrival, estimate, work_done, restore_s, needs_restore,
               state, queued_since, end, work_left, work_total, gpus_req, rate, overhead_left, attained_gpu_s, run_s,
               interference_loss_s, interference, preemptible, priority, q_ids, q_sorted, q_remaining, q_seq,
               q_per_shape, job_slot, rec_f, rec_i, pool_i, pool_counts, node_pressure, node_gpus_f, uplink_demand, uplink_cap,
               dirty_node, dirty_uplink, ref_net_per_gpu, gpu_owner, free_mask, node_owned, node_free,
               node_preemptible, node_first_gpu, node_gpus_i, whole_gang, node_power_w, node_on, power_terms,
               shape_id, class_of_shape, lower, on_level, by_free, positions, need, node_domain, class_node_gpus, span,
               span_level, priority_high, num_gpus,
               test_first, gpu_reserved, las, gpu_node, las_rows, las_thresholds, starvation_factor, launch,
               launch_gpus):
    """Simulator.advance, event after event, until some queued job could be placed (the decision
    loop's any_feasible, envs.sim.replay.advance_to_decision; with `las`, its can_place: also a job
    that only preempt-las places, `las_can_place`; with `test_first` tested before the
    first event too, else only after each) or something needs Python: the
    reference's operations in the reference's order, for events of completions and arrivals
    (checkpoints and reservations are Python's: the caller starts this only when there are none).

    Each event: the next event's time (Simulator._next_event_s), the integrals and the running
    jobs' integration (advance_running), the finished jobs stopped and released (_release_job,
    their ids appended to fin_buf for the caller's records), the arrivals queued (JobQueue.push),
    the rates and power brought up to date (update_rates, masked_sum), the version bumped, one
    timeline row (Simulator._record). Then the stop tests, which say why it returned (EV_*):
    the workload is done; the next event is after `until` (fs[F_UNTIL]) or there is none (no
    event processed); a job arrived whose class is unknown (class_of_shape[shape_id[j]] < 0,
    after its event, or one is queued); the timeline or fin_buf may not hold another event; or a queued job's
    class fits (class_fits over `lower`, `on_level`, `by_free`, `positions`, `need` and, for TP
    groups that span trays, `node_domain`, `class_node_gpus`, `span`, `span_level`: the class
    index of envs.decision.window), tested per shape of the queued jobs (`q_per_shape`: the queue's count per shape id, kept up to date).

    With `launch` >= 0 it first carries out Simulator.start of that job on `launch_gpus` after
    the caller's checks and records (the job already among the running): _launch_job, the rate
    update and the power drawn, the version bumped (iscal[I_CLAIMED] set).

    Scalars are read from and written back to `fs` and `iscal` (F_*, I_*); the running jobs are
    run_buf[:iscal[I_RUNNING]] (in place); node_owned and node_free are the caller's copies."""
    n_jobs = len(arrival)
    if launch >= 0:
        _launch_job(launch, launch_gpus, job_slot[launch], iscal, q_ids, q_sorted, q_remaining, q_seq, q_per_shape,
                    shape_id, gpus_req, priority, priority_high, preemptible, rec_f, rec_i, pool_i, pool_counts,
                    node_pressure, dirty_node, uplink_demand, dirty_uplink, gpu_owner, gpu_reserved, free_mask,
                    node_owned, node_free, node_preemptible, whole_gang, node_gpus_i, node_power_w, node_on,
                    power_terms)
        update_rates(run_buf[:iscal[I_RUNNING]], dirty_node, dirty_uplink, job_slot, rec_f, rec_i, pool_i,
                     pool_counts, node_pressure, node_gpus_f, uplink_demand, uplink_cap, ref_net_per_gpu, rate,
                     interference)
        fs[F_POWER] = masked_sum(node_power_w, node_on)
        iscal[I_VERSION] += 1
        iscal[I_CLAIMED] = 1
    cap_events = timeline.shape[0]
    fits = np.zeros(0, dtype=np.bool_)
    fits_version = -1
    any_fit = False
    test = test_first
    while True:
        if test and iscal[I_QLEN]:  # the decision loop's test: does a queued job's class fit?
            if fits_version != iscal[I_ALLOC_VERSION]:
                fits = class_fits(node_free, node_preemptible, lower, on_level, by_free, positions, need, node_domain,
                                  class_node_gpus, span, span_level)[2]
                fits_version = iscal[I_ALLOC_VERSION]
                any_fit = False
                for x in fits:
                    if x:
                        any_fit = True
                        break
            if any_fit:  # per shape of the queued jobs, not per queued job
                for m in range(len(q_per_shape)):
                    if q_per_shape[m]:
                        c = class_of_shape[m]
                        if c < 0:  # not registered: Python's test registers it
                            return EV_NEW_CLASS
                        if fits[c]:
                            return EV_FEASIBLE
            if las:  # LAS queues move with time: tested afresh at every event
                placed = las_can_place(q_ids, iscal[I_QLEN], q_per_shape, shape_id, class_of_shape, fits,
                                       node_preemptible, gpu_owner, gpu_node, run_buf[:iscal[I_RUNNING]], preemptible,
                                       iscal[I_NEXT_ARRIVAL], attained_gpu_s, priority, las_thresholds, node_free,
                                       las_rows, on_level, by_free, gpus_req, fs[F_NOW], queued_since,
                                       starvation_factor, positions, need, node_domain, class_node_gpus, span,
                                       span_level)
                if placed < 0:
                    return EV_NEW_CLASS
                if placed:
                    return EV_FEASIBLE
        test = True
        if iscal[I_EVENTS] >= cap_events or iscal[I_FINISHED] + iscal[I_RUNNING] > len(fin_buf):
            return EV_ROOM
        nrun = iscal[I_RUNNING]
        run = run_buf[:nrun]
        restoring = False
        for j in run:
            if overhead_left[j] > 0:
                restoring = True
                break
        now = fs[F_NOW]
        na = iscal[I_NEXT_ARRIVAL]
        t = arrival[na] if na < n_jobs else np.inf
        if nrun:
            c = next_completion_s(now, run, overhead_left, work_left, rate, restoring)
            if c < t:
                t = c
        if t > fs[F_UNTIL]:
            return EV_UNTIL
        if not t < np.inf:
            return EV_NO_EVENT
        dt = t - now
        if dt > 0:
            fs[F_JOBS_S] += iscal[I_IN_SYSTEM] * dt
            fs[F_ENERGY] += fs[F_POWER] * dt
            fs[F_ALLOC_S] += (num_gpus - iscal[I_NUM_FREE]) * dt
        found = 0
        if nrun:
            useful, found = advance_running(run, dt, restoring, True, rate, overhead_left, work_left, work_done,
                                            work_total, gpus_req, attained_gpu_s, run_s, interference_loss_s,
                                            interference, order)
            if dt > 0:
                fs[F_USEFUL] += useful
        now = fs[F_NOW] = t
        changed = found > 0
        if changed:  # _finish_completed: the finished in run's order, the others keep theirs
            nf = iscal[I_FINISHED]
            for i in range(found):
                j = order[i]
                work_left[j] = 0.0
                work_done[j] = work_total[j]
                state[j] = 5  # JobState.DONE
                end[j] = now
                _release_job(j, job_slot[j], rec_i, rec_f, pool_i, pool_counts, node_pressure, dirty_node,
                             uplink_demand, dirty_uplink, node_preemptible, preemptible, priority, rate, gpu_owner,
                             free_mask, node_first_gpu, node_gpus_i, node_owned, node_free, whole_gang, node_power_w,
                             node_on, power_terms, iscal)
                iscal[I_NUM_DONE] += 1
                iscal[I_IN_SYSTEM] -= 1
                fin_buf[nf] = j
                nf += 1
            iscal[I_FINISHED] = nf
            iscal[I_RELEASED] += found
            k = 0
            for i in range(nrun - 1, found - 1, -1):  # order[found:nrun] holds the others reversed
                run_buf[k] = order[i]
                k += 1
            iscal[I_RUNNING] = k
        new_class = False
        until = now + 1e-9  # Simulator._admit_arrivals
        j = iscal[I_NEXT_ARRIVAL]
        while j < n_jobs and arrival[j] <= until:
            state[j] = 1  # JobState.QUEUED
            queued_since[j] = now
            r = estimate[j] - work_done[j]  # remaining_estimate_s: np.maximum(estimate - done, 0.0) ...
            if r < 0.0:
                r = 0.0
            if iscal[I_ANY_RESTORE]:  # ... + restore_s * needs_restore while some job owes a restore
                r = r + restore_s[j] * (1.0 if needs_restore[j] else 0.0)
            length, seq = iscal[I_QLEN], iscal[I_ENQUEUED]  # JobQueue.push
            q_ids[length] = j
            q_remaining[j] = r
            q_seq[j] = seq
            at = sorted_insert_at(q_sorted, length, r, q_remaining)
            for m in range(length, at, -1):
                q_sorted[m] = q_sorted[m - 1]
            q_sorted[at] = j
            iscal[I_QLEN] = length + 1
            iscal[I_QGPUS] += gpus_req[j]
            if priority[j] == priority_high:
                iscal[I_QHIGH] += 1
            iscal[I_ENQUEUED] = seq + 1
            q_per_shape[shape_id[j]] += 1
            iscal[I_IN_SYSTEM] += 1
            if class_of_shape[shape_id[j]] < 0:
                new_class = True
            j += 1
            iscal[I_NEXT_ARRIVAL] = j
        if changed:  # Simulator._rates_changed
            update_rates(run_buf[:iscal[I_RUNNING]], dirty_node, dirty_uplink, job_slot, rec_f, rec_i, pool_i,
                         pool_counts, node_pressure, node_gpus_f, uplink_demand, uplink_cap, ref_net_per_gpu, rate,
                         interference)
            fs[F_POWER] = masked_sum(node_power_w, node_on)
        iscal[I_VERSION] += 1
        e = iscal[I_EVENTS]  # Simulator._record
        timeline[e, 0] = now
        timeline[e, 1] = num_gpus - iscal[I_NUM_FREE]
        timeline[e, 2] = iscal[I_QLEN]
        timeline[e, 3] = iscal[I_RUNNING]
        timeline[e, 4] = iscal[I_FRAGMENTED]
        timeline[e, 5] = fs[F_POWER]
        iscal[I_EVENTS] = e + 1
        if iscal[I_NUM_DONE] == n_jobs:
            return EV_DONE
        if new_class:
            return EV_NEW_CLASS


@njit
def log_scale(x):
    """envs.decision.features.log_scale: log10(1 + max(x, 0)) / 6 (Python's max: `x` unless 0 is greater)."""
    return math.log10(1.0 + (0.0 if 0.0 > x else x)) / 6.0


@njit
def candidate_rows(feats, job_rows, window, rem, work_done_s, queued_since_s, wait_s, needs_restore, now, n_rules,
                   dyn_cols, rule_col, valid_rows, row_in, valid_col, place_col, ref_net_per_gpu, coeff):
    """The job block and the valid rows' placement block of envs.decision.features.candidate_features
    (its reference path, `_job_block` and `_placement_block`), written into `feats` (K, columns,
    float32, zeros on entry): for window slot s (job window[s], estimated remaining rem[s]) on
    each rule's row, the job's static columns (`job_rows[j]`), the dynamic ones at `dyn_cols`
    (est_remaining_log, wait_log, progress, was_preempted) and the rule's one-hot at rule_col;
    for each valid row valid_rows[v], `valid`, and from row_in[v] = (tier / 3, nodes per GPU,
    whole free nodes share, fragmentation change, neighbours' pressure per GPU, TP congestion
    factor, DP bandwidth, TP stretch, slowest GPU's speed for the job's kind, c_tp, c_dp,
    sensitivity, then the five victim columns) the placement columns from `place_col` on, in the
    schema's order: envs.cluster.speed.efficiency_of and interference_from, the rate and the estimated
    runtime there, with the same float64 operations in the same order, cast to float32 on
    assignment as numpy casts."""
    nj = job_rows.shape[1]
    for s in range(len(window)):
        j = window[s]
        r = rem[s]
        d = work_done_s[j]
        w = now - queued_since_s[j] + wait_s[j]
        progress = d / (d + r) if d + r > 0 else 0.0
        lr, lw = log_scale(r), log_scale(w)
        restore = 1.0 if needs_restore[j] else 0.0
        for k in range(n_rules):
            row = s * n_rules + k
            for c in range(nj):
                feats[row, c] = job_rows[j, c]
            feats[row, dyn_cols[0]] = lr
            feats[row, dyn_cols[1]] = lw
            feats[row, dyn_cols[2]] = progress
            feats[row, dyn_cols[3]] = restore
            feats[row, rule_col + k] = 1.0
    for v in range(len(valid_rows)):
        i = valid_rows[v]
        x = row_in[v]
        tp = x[7] / x[5]  # efficiency_of
        bw = 1e-12 if 1e-12 > x[6] else x[6]
        q = ref_net_per_gpu / bw
        dp = q if q > 1.0 else 1.0
        c_tp, c_dp = x[9], x[10]
        eff = 1.0 / ((1.0 - c_tp - c_dp) + c_tp * tp + c_dp * dp)
        others = 0.0 if 0.0 > x[4] else x[4]  # interference_from
        interf = 1.0 / (1.0 + coeff * x[11] * others)
        rate = x[8] * eff * interf
        feats[i, valid_col] = 1.0
        p = place_col
        feats[i, p] = rate
        feats[i, p + 1] = eff
        feats[i, p + 2] = interf
        feats[i, p + 3] = x[0]
        feats[i, p + 4] = x[1]
        feats[i, p + 5] = x[2]
        feats[i, p + 6] = x[3]
        feats[i, p + 7] = x[12]
        feats[i, p + 8] = x[13]
        feats[i, p + 9] = x[8]
        feats[i, p + 10] = log_scale(rem[i // n_rules] / (1e-6 if 1e-6 > rate else rate))
        feats[i, p + 11] = x[14]
        feats[i, p + 12] = x[15]
        feats[i, p + 13] = x[16]
