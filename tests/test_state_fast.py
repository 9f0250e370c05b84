"""`ClusterState.from_dict`'s bulk path against its per-field reference: on every input (states of
episodes on several shipped clusters through JSON, their variants with defaults and other
accepted spellings, and thousands of malformed variants) both build the same state, bit for bit,
or both refuse it with the same error type and message."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import fields, is_dataclass
from pathlib import Path

import numpy as np
import pytest

from baselines import make_baseline
from envs.cluster.config import load_cluster
from envs.cluster.speed import SpeedModel
from envs.decision.candidates import apply_candidate
from envs.decision.state import STATE_SECTIONS, ClusterState
from envs.sim.replay import advance_to_decision
from envs.sim.simulator import Simulator
from envs.workload.generator import load_workload_spec, make_workload

# Values tried in every field: wrong types, missing (None), negative, zero, NaN, infinities, huge.
ODD_VALUES = [None, "x", "", True, False, -1, -0.5, 0, 0.0, -0.0, 0.5, 1, 1.0, 1.5, 2, 3, 7, 8, 9, 65, 1e9, 10**30,
              2**63, math.nan, math.inf, -math.inf, [], [1], {}, "finetune", "high", "low", 2.0**53 + 1]
GPU_LISTS = [[], None, 3, "0", [True], [1.0], [-1], [0, 0], [10**30], [2**63]]


def fingerprint(state: ClusterState):
    """Everything a state holds, in a form where equal means bit for bit (arrays by dtype,
    shape and bytes; Python numbers by type and repr)."""

    def of(v):
        if isinstance(v, np.ndarray):
            return ("array", v.dtype.str, v.shape, v.tobytes())
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, [of(x) for x in v])
        if isinstance(v, dict):
            return ("dict", [(of(k), of(x)) for k, x in v.items()])
        if isinstance(v, (bool, int, float, str, np.generic)) or v is None:
            return (type(v).__name__, repr(v))
        if type(v).__name__ == "Cluster":
            return ("cluster", v.name)
        if is_dataclass(v):
            return (type(v).__name__, [(f.name, of(getattr(v, f.name))) for f in fields(v)])
        if hasattr(v, "__slots__"):
            return (type(v).__name__, [(name, of(getattr(v, name))) for name in v.__slots__])
        raise TypeError(f"no fingerprint for {type(v).__name__}")

    return [(name, of(getattr(state, name))) for name in ClusterState.__slots__]


def outcome(build, data, cluster, **kwargs):
    """The fingerprint of what `build` makes of `data`, or the error's type and message."""
    try:
        return ("state", fingerprint(build(data, cluster, **kwargs)))
    except Exception as e:  # noqa: BLE001 - every error type is part of the behaviour compared
        return ("error", type(e).__name__, str(e))


# ---------------------------------------------------------------------- inputs


def _episode_states(cluster_name: str, workload: str, num_jobs: int, policy: str, seed: int, every: int, limit: int):
    """Plain-data states (through JSON) of one episode, every `every`-th decision."""
    cluster = load_cluster(cluster_name)
    sim = Simulator(cluster, make_workload(load_workload_spec(workload), cluster, seed, num_jobs=num_jobs))
    chooser = make_baseline(policy, seed=seed)
    cset = advance_to_decision(sim, 8)
    out, k = [], 0
    while not sim.done and len(out) < limit:
        state = sim.decision_state()
        if k % every == 0:
            out.append(json.loads(json.dumps(state.to_dict())))
        apply_candidate(sim, cset, chooser.select(state, cset))
        cset = advance_to_decision(sim, 8)
        k += 1
    return out


EPISODES = [  # (cluster, workload, jobs, policy, seed, every, states)
    ("mixed-64gpu", "slo-preempt", 120, "priority", 0, 2, 40),
    ("mixed-64gpu", "llm-mix-bursty", 100, "random", 1, 3, 20),
    ("hetero-64gpu", "llm-mix", 80, "random", 2, 3, 15),
    ("h100-4node", "llm-mix", 60, "priority", 3, 2, 15),
    ("gb200-nvl72-4rack", "llm-mix-large", 80, "random", 4, 3, 10),
    ("topo-stress-128gpu", "topology-stress", 80, "random", 5, 3, 10),
    ("h100-1024gpu", "llm-mix-large", 300, "sect", 0, 25, 8),
]

_CACHE: dict = {}


def episode_states() -> list[tuple[str, dict]]:
    if "episodes" not in _CACHE:
        _CACHE["episodes"] = [(c, d) for c, w, n, p, s, every, limit in EPISODES for d in _episode_states(c, w, n, p, s, every, limit)]
    return _CACHE["episodes"]


def _with_all_sections() -> list[tuple[str, dict]]:
    """States holding checkpointing and reserved jobs (preemptions in flight), and a plain one."""
    states = [(c, d) for c, d in episode_states() if c == "mixed-64gpu"]
    chosen = [next((c, d) for c, d in states if d["checkpointing"] and d["queued"] and len(d["recent_arrivals"]) > 1),
              next((c, d) for c, d in states if d["reserved"]),
              next((c, d) for c, d in states if len(d["running"]) >= 4 and d["queued"] and not d["checkpointing"])]
    return chosen


def _copy(d):
    return json.loads(json.dumps(d))


def accepted_variants():
    """(cluster, data, kwargs) of valid inputs spelled otherwise: defaults left out, integers for
    numbers, priorities and kinds as numbers, string ids, the other form of an arrival."""
    for c, base in _with_all_sections():
        d = _copy(base)
        for s in STATE_SECTIONS:
            for job in d[s]:
                for key in ("work_done_s", "checkpoint_s", "restore_s", "arrival_s", "wait_s", "queued_since_s",
                            "attained_gpu_s", "preemptions", "needs_restore", "restore_left_s", "checkpoint_end_s",
                            "mem_per_gpu_gb", "kind", "priority", "preemptible", "comm_fraction", "tp_comm_share"):
                    job.pop(key, None)
                if s != "queued":
                    job.pop("num_gpus")
                    if all(g // 8 == job["gpus"][0] // 8 for g in job["gpus"]):
                        job.pop("tp_degree")
        yield c, d, {}
        d = _copy(base)
        for s in STATE_SECTIONS:
            for i, job in enumerate(d[s]):
                job["id"] = f"job-{job['id']}"
                job["priority"] = {"low": 0, "normal": 1, "high": 2}[job["priority"]]
                job["kind"] = ["pretrain", "finetune", "inference", "batch"].index(job["kind"])
                for key in ("estimate_s", "work_done_s", "checkpoint_s", "restore_s", "mem_per_gpu_gb", "arrival_s"):
                    job[key] = int(job[key]) + 1 if key == "estimate_s" else int(job[key])
                job["wait_s"] = -0.0
                job["checkpoint_s"] = 90.0 if i % 2 else 90
        d["recent_arrivals"] = [{"time_s": a["time_s"], "gpus": 1 + k % 8, "estimate_s": 60 * k + 0.5 * (k % 2)}
                                if k % 3 else a for k, a in enumerate(d["recent_arrivals"])]
        d["time_s"] = math.ceil(d["time_s"])
        yield c, d, {}
        yield c, _copy(base), {"max_checkpoint_s": 10}
        yield c, _copy(base), {"max_checkpoint_s": 45.0, "speed_model": SpeedModel(interference_coeff=0.9)}
    yield "mixed-64gpu", {}, {}
    yield "mixed-64gpu", {"time_s": 5}, {}
    yield "mixed-64gpu", {"time_s": 5.0, "queued": [{"id": "a", "num_gpus": 2, "estimate_s": 1.0}], "recent_arrivals": []}, {}


def _set(path, value):
    def edit(d):
        target = d
        for p in path[:-1]:
            target = target[p]
        if value is _DROP:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = value
    return edit


_DROP = object()


def refused_variants():
    """(label, cluster, data) of inputs with one thing changed: every field of a job of each
    section and of an arrival set to odd values or removed, GPU lists broken, ids repeated,
    unknown fields, wrong containers."""
    for c, base in _with_all_sections():
        for s in STATE_SECTIONS:
            for i in sorted({0, len(base[s]) - 1}) if base[s] else []:
                keys = sorted(set(base[s][i]) | {"gpus", "queued_since_s", "restore_left_s", "checkpoint_end_s", "colour"})
                for key in keys:
                    for v in [*ODD_VALUES, _DROP]:
                        yield f"{s}[{i}].{key}={v!r}", c, base, _set((s, i, key), v)
                if s != "queued":
                    gpus = base[s][i]["gpus"]
                    for v in GPU_LISTS + [gpus[:-1], gpus + [gpus[0]], [64] + gpus[1:], gpus[:1] * len(gpus),
                                          list(reversed(gpus)), [(g + 8) % 64 for g in gpus], [(g + 4) % 64 for g in gpus],
                                          [(g + 1) % 64 for g in gpus], [g + 0.0 for g in gpus], [np.int64(g) for g in gpus]]:
                        yield f"{s}[{i}].gpus={v!r}", c, base, _set((s, i, "gpus"), v)
                for o in STATE_SECTIONS:  # the GPUs or the id of a job of another section
                    if base[o] and o != "queued" and s != "queued":
                        yield f"{s}[{i}].gpus from {o}[0]", c, base, _set((s, i, "gpus"), base[o][0]["gpus"])
                    if base[o]:
                        yield f"{s}[{i}].id from {o}[0]", c, base, _set((s, i, "id"), base[o][0]["id"])
                yield f"{s}[{i}] not a mapping", c, base, _set((s, i), [1])
        arrivals = base["recent_arrivals"]
        for i in sorted({0, len(arrivals) - 1}) if arrivals else []:
            for key in ("time_s", "requested_gpu_s", "gpus", "estimate_s", "colour"):
                for v in [*ODD_VALUES, _DROP, base["time_s"] + 1.0, base["time_s"]]:
                    yield f"recent_arrivals[{i}].{key}={v!r}", c, base, _set(("recent_arrivals", i, key), v)
            yield f"recent_arrivals[{i}] not a mapping", c, base, _set(("recent_arrivals", i), 3)
        for v in [*ODD_VALUES, _DROP, base["time_s"] - 1.0]:
            yield f"time_s={v!r}", c, base, _set(("time_s",), v)
        for key in (*STATE_SECTIONS, "recent_arrivals", "pending"):
            for v in (None, {}, "x", 3, [None], [[]], _DROP):
                yield f"{key}={v!r}", c, base, _set((key,), v)
    _, base = _with_all_sections()[0]
    for shuffled in range(3):  # arrivals out of time order
        d = _copy(base)
        rng = np.random.default_rng(shuffled)
        d["recent_arrivals"] = [d["recent_arrivals"][k] for k in rng.permutation(len(d["recent_arrivals"]))]
        yield f"arrivals shuffled {shuffled}", "mixed-64gpu", d, None
    for bad in ([], None, "state", 3):
        yield f"state={bad!r}", "mixed-64gpu", bad, None


# ---------------------------------------------------------------------- the comparison


def _reference_and_fast():
    from envs.decision.state import _from_dict_fast, _from_dict_reference

    def reference(data, cluster, speed_model=None, max_checkpoint_s=60.0):
        return _from_dict_reference(data, cluster, speed_model or SpeedModel(), max_checkpoint_s)

    return reference, ClusterState.from_dict, _from_dict_fast


def test_states_of_episodes_are_built_by_the_bulk_path_as_by_the_reference():
    """Every episode state (through JSON) and its variants: the bulk path takes it (no fallback)
    and builds exactly the reference's state; the default max_checkpoint_s and others."""
    reference, from_dict, fast = _reference_and_fast()
    seen = set()
    cases = [(c, d, {}) for c, d in episode_states()] + list(accepted_variants())
    for c, d, kwargs in cases:
        cluster = load_cluster(c)
        expected = outcome(reference, d, cluster, **kwargs)
        assert expected[0] == "state", expected
        assert fast(d, cluster, kwargs.get("speed_model") or SpeedModel(), kwargs.get("max_checkpoint_s", 60.0)) is not None, \
            f"{c}: the bulk path fell back on a valid state"
        assert outcome(from_dict, d, cluster, **kwargs) == expected, c
        seen.add(c)
    assert seen == {e[0] for e in EPISODES}
    assert any(d["checkpointing"] for _, d in episode_states()) and any(d["reserved"] for _, d in episode_states())


def test_malformed_states_are_refused_as_by_the_reference():
    """Thousands of one-change variants (odd values in every field, broken GPU lists, repeated
    ids, unknown fields): the same state or the same error type and message as the reference;
    many of them refused, some accepted."""
    reference, from_dict, _ = _reference_and_fast()
    refused = accepted = 0
    clusters = {}
    for label, c, base, edit in refused_variants():
        if edit is None:
            d = base
        else:
            d = _copy(base)
            edit(d)
        cluster = clusters.setdefault(c, load_cluster(c))
        expected = outcome(reference, d, cluster)
        assert outcome(from_dict, d, cluster) == expected, label
        refused += expected[0] == "error"
        accepted += expected[0] == "state"
    assert refused > 2000 and accepted > 300, (refused, accepted)


def test_the_reference_refuses_with_the_field_named():
    """The reference's messages are the documented ones (so the comparison above compares
    the errors the project promises)."""
    reference, from_dict, _ = _reference_and_fast()
    c, base = _with_all_sections()[2]
    cluster = load_cluster(c)
    d = _copy(base)
    d["running"][3]["gpus"] = [70] + d["running"][3]["gpus"][1:]
    for build in (reference, from_dict):
        with pytest.raises(ValueError, match=r"^running\[3\]\.gpus: GPU 70 does not exist on a 64-GPU cluster$"):
            build(d, cluster)


# ---------------------------------------------------------------------- running_rates: vectorised vs the loop


def _rates_outcome(f, *args):
    """What `f` (a running_rates path) gives, bit for bit (dtype, shape and bytes of both arrays),
    or the error's type and message."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out = f(*args)
    except Exception as e:  # noqa: BLE001 - the error is part of the behaviour compared
        return ("error", type(e).__name__, str(e))
    if out is None:
        return None
    return tuple((a.dtype.str, a.shape, a.tobytes()) for a in out)


def _random_running_set(cluster, rng, model, jobs: int, one_node: bool = False):
    """Profiles of up to `jobs` running jobs on distinct GPUs of `cluster`: sizes 1..64, TP degrees
    dividing them, every kind, random communication shares; placed compactly (GPUs in id order
    from a random start, so whole nodes, leaves and NVLink domains) or scattered over the cluster.
    `one_node`: every job inside one node."""
    from envs.cluster.speed import job_constants_of, job_profile_of, placement_geometry

    free = np.ones(cluster.num_gpus, dtype=bool)
    profiles = []
    for _ in range(jobs):
        size = int(rng.choice([1, 2, 4, 8, 8, 8, 16, 32, 64]))
        avail = np.flatnonzero(free)
        if one_node:
            room = np.bincount(cluster.gpu_node[avail], minlength=cluster.num_nodes)
            size = min(size, int(room.max()))
            if size < 1:
                break
            node = int(rng.choice(np.flatnonzero(room >= size)))
            gpus = avail[cluster.gpu_node[avail] == node][:size]
        elif len(avail) < size:
            break
        elif rng.random() < 0.6:
            start = int(rng.integers(len(avail) - size + 1))
            gpus = avail[start:start + size]
        else:
            gpus = np.sort(rng.choice(avail, size, replace=False))
        free[gpus] = False
        tp = int(rng.choice([d for d in (1, 2, 4, 8) if size % d == 0]))
        kind = int(rng.integers(4))
        constants = job_constants_of(size, tp, kind, float(rng.choice([0.0, 0.3, rng.random()])), float(rng.random()), model)
        profiles.append(job_profile_of(constants, placement_geometry(cluster, gpus, tp, model)))
    return profiles


def _rates_cases():
    """(label, cluster, profiles, demand, pressure, model): random running sets on every shipped
    cluster under two speed models, with the demand and pressure they make."""
    from envs.cluster.speed import node_pressure, uplink_demand

    rng = np.random.default_rng(20261207)
    models = [SpeedModel(), SpeedModel(cross_tier_efficiency=0.6, interference_coeff=1.7, pressure_by_kind=(0.5, 0.1, 2.0, 0.0))]
    names = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "configs" / "clusters").glob("*.yaml"))
    assert len(names) >= 8
    for name in names:
        cluster = load_cluster(name)
        for k in range(16):
            model = models[k % 2]
            jobs = int(rng.choice([8, 20, 72, 200]))
            profiles = _random_running_set(cluster, rng, model, jobs, one_node=k % 4 == 3)
            if len(profiles) < 8:
                continue
            yield (f"{name} #{k}", cluster, profiles, uplink_demand(cluster, profiles), node_pressure(cluster, profiles), model)


def test_running_rates_vectorised_is_the_loop_bit_for_bit_on_random_running_sets():
    """Every shipped cluster, random running sets (compact and scattered, single- and multi-node,
    crossing uplinks and NVLink domains): the vectorised rates and interference factors are the
    loop's, bit for bit, and the vectorised path answers every one of them itself."""
    from envs.cluster import speed

    cases = multi = crossing = 0
    for label, cluster, profiles, demand, pressure, model in _rates_cases():
        expected = _rates_outcome(speed.running_rates_reference, cluster, profiles, demand, pressure, model)
        assert expected[0] != "error", label
        assert _rates_outcome(speed._running_rates_vector, cluster, profiles, demand, pressure, model) == expected, label
        assert _rates_outcome(speed.running_rates, cluster, profiles, demand, pressure, model) == expected, label
        cases += 1
        multi += any(len(p.nodes) > 1 for p in profiles)
        crossing += any(len(p.uplinks) > 0 for p in profiles)
    assert cases >= 80 and 40 <= multi <= cases - 20 and crossing >= 20, (cases, multi, crossing)


def _odd_profiles(profiles, rng):
    """The profiles with NaN, infinities, zeros and negatives in their constants and geometry."""
    import dataclasses

    odd = [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0, 1e-300, 1e300]
    out = list(profiles)
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(len(out)))
        p = out[i]
        field = str(rng.choice(["min_speed", "c_tp", "c_dp", "pressure", "sensitivity", "tp_stretch", "dp_bw_GBps"]))
        value = float(rng.choice(odd))
        if field in ("tp_stretch", "dp_bw_GBps"):
            out[i] = dataclasses.replace(p, geometry=dataclasses.replace(p.geometry, **{field: value}))
        else:
            out[i] = dataclasses.replace(p, **{field: value})
    return out


def test_running_rates_vectorised_is_the_loop_on_nan_inf_and_zero_divisors():
    """NaN, infinities, zeros and negatives in the uplink demand, the node pressure and the
    profiles' numbers (max(1.0, nan) is 1.0 for the loop's Python floats, not NaN; inf demand
    makes a congestion share of 0, a TP stretch divided by it raises ZeroDivisionError there):
    running_rates gives the loop's results bit for bit or raises its error, and the vectorised
    path itself answers most of them (declining only a zero divisor or a NaN among a multi-node
    job's nodes)."""
    from envs.cluster import speed

    rng = np.random.default_rng(7)
    odd = np.array([math.nan, math.inf, -math.inf, 0.0, -0.0, -5.0, 1e-300, 1e300])
    cases = answered = errors = 0
    for label, cluster, profiles, demand, pressure, model in _rates_cases():
        for k in range(6):
            d, pr, ps = demand.copy(), pressure.copy(), profiles
            if k % 3 == 0 and len(d):
                hit = rng.integers(len(d), size=int(rng.integers(1, 4)))
                d[hit] = rng.choice(odd, len(hit))
            if k % 3 == 1:
                hit = rng.integers(len(pr), size=int(rng.integers(1, 4)))
                pr[hit] = rng.choice(odd, len(hit))
            if k % 3 == 2:
                ps = _odd_profiles(profiles, rng)
            expected = _rates_outcome(speed.running_rates_reference, cluster, ps, d, pr, model)
            assert _rates_outcome(speed.running_rates, cluster, ps, d, pr, model) == expected, (label, k)
            vector = _rates_outcome(speed._running_rates_vector, cluster, ps, d, pr, model)
            assert vector is None or vector == expected, (label, k)
            cases += 1
            answered += vector is not None
            errors += expected[0] == "error"
    assert cases >= 400 and answered >= cases // 2 and errors >= 10, (cases, answered, errors)


def test_running_rates_on_the_services_loaded_state():
    """The benchmark's h100-1024gpu state (72 running jobs): the state's rates are the loop's."""
    from benchmarks.service_latency import loaded_state
    from envs.cluster import speed

    cluster, model = load_cluster("h100-1024gpu"), SpeedModel()
    state = ClusterState.from_dict(json.loads(json.dumps(loaded_state("h100-1024gpu", "llm-mix-large", 600))), cluster, model)
    profiles = [state.profiles[j] for j in state.running.tolist()]
    args = (cluster, profiles, state.uplink_demand, state.node_pressure, model)
    expected = _rates_outcome(speed.running_rates_reference, *args)
    assert _rates_outcome(speed._running_rates_vector, *args) == expected
    assert state.rate[state.running].tobytes() == np.array(speed.running_rates_reference(*args)[0]).tobytes()


def test_running_rates_vectorised_keeps_python_max_of_a_nan_bandwidth():
    """A job whose DP bandwidth is NaN: the loop's max(1.0, REF / max(nan, 1e-12)) of Python floats
    is 1.0 (nan > 1.0 is false), so its rate is a number, not NaN. The vectorised path answers
    it itself (np.maximum would give NaN and hand it back to the loop) with the loop's bits."""
    import dataclasses

    from envs.cluster import speed

    cluster, model = load_cluster("h100-1024gpu"), SpeedModel()
    profiles = _random_running_set(cluster, np.random.default_rng(3), model, 72)
    for i in (0, 5, len(profiles) - 1):
        p = profiles[i]
        odd = list(profiles)
        odd[i] = dataclasses.replace(p, geometry=dataclasses.replace(p.geometry, dp_bw_GBps=math.nan))
        args = (cluster, odd, speed.uplink_demand(cluster, odd), speed.node_pressure(cluster, odd), model)
        expected = _rates_outcome(speed.running_rates_reference, *args)
        assert np.isfinite(speed.running_rates_reference(*args)[0]).all()
        assert _rates_outcome(speed._running_rates_vector, *args) == expected
