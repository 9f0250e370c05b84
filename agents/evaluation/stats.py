"""Statistics over paired seeds: Student-t quantiles, means with two-sided 95% t-intervals, and
the per-seed relative difference of a policy against a reference.

Plain numpy (no scipy). Summaries are dicts with `mean`, `ci95_low`, `ci95_high` (None where
undefined) and `n`, as written into results.json.
"""

from __future__ import annotations

import math

import numpy as np


def t_quantile(p: float, df: int) -> float:
    """Quantile `p` (> 0.5) of Student's t with `df` degrees of freedom: bisection on the CDF,
    integrated with Simpson's rule (accurate to ~1e-6, enough for confidence intervals)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        xs = np.linspace(0.0, x, 4001)
        pdf = np.exp(log_norm - (df + 1) / 2 * np.log1p(xs**2 / df))
        h = xs[1] - xs[0]
        return 0.5 + h / 3 * (pdf[0] + pdf[-1] + 4 * pdf[1:-1:2].sum() + 2 * pdf[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def mean_ci95(values: list[float]) -> dict[str, float | int | None]:
    """Mean and two-sided 95% t-interval over the finite values; the interval is null below
    two values."""
    x = np.array([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    n = len(x)
    if n == 0:
        return {"mean": None, "ci95_low": None, "ci95_high": None, "n": 0}
    mean = float(x.mean())
    if n < 2:
        return {"mean": mean, "ci95_low": None, "ci95_high": None, "n": 1}
    half = t_quantile(0.975, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return {"mean": mean, "ci95_low": mean - half, "ci95_high": mean + half, "n": n}


def paired_rel_diffs(runs: list[dict], ref_runs: list[dict], metric: str = "avg_jct_s") -> dict[int, float]:
    """Seed -> (policy - reference) / reference of `metric`, in the order of `runs`."""
    ref = {r["seed"]: r["metrics"][metric] for r in ref_runs}
    return {r["seed"]: (r["metrics"][metric] - ref[r["seed"]]) / ref[r["seed"]] for r in runs}


def paired_rel_diff(runs: list[dict], ref_runs: list[dict], metric: str = "avg_jct_s") -> dict:
    """Per seed (policy - reference) / reference of `metric`, with its mean and 95% t-interval:
    {"metric", "rel_diff_mean", "ci95_low", "ci95_high", "n"}."""
    s = mean_ci95(list(paired_rel_diffs(runs, ref_runs, metric).values()))
    return {"metric": metric, "rel_diff_mean": s["mean"], "ci95_low": s["ci95_low"], "ci95_high": s["ci95_high"], "n": s["n"]}
