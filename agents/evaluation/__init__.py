"""Evaluation of schedulers on paired workloads, the library behind evaluate.py.

    policies   which policies: baselines by name, `PREFIX=ARG` loaded policies (POLICY_LOADERS)
    runners    episodes: baselines (replay loop), actors (Gymnasium env), every episode of a run
               through agents.parallel (local processes or Ray tasks), failed ones listed
    stats      Student-t quantile, mean with 95% t-interval, paired relative difference
    results    the results.json schema and checker, the document, the results.md report
    plots      JCT CDF, timelines, Gantt chart (matplotlib, imported when plots are written)

Importing this package (or running baselines with it) imports neither torch nor
stable-baselines3: a loaded policy brings its framework in with its loader's `load`.
"""

from __future__ import annotations

from agents.evaluation.plots import write_plots
from agents.evaluation.policies import (
    POLICY_LOADERS,
    Actor,
    MaskablePPOLoader,
    PolicyLoader,
    PolicySpec,
    UsageError,
    model_actor,
    parse_policies,
    parse_policy,
    with_wait_guards,
)
from agents.evaluation.results import (
    KIND_COLUMNS,
    RESULTS_SCHEMA,
    SCHEMA_VERSION,
    TABLE_COLUMNS,
    build_results,
    environment_record,
    results_markdown,
    schema_errors,
)
from agents.evaluation.runners import (
    EPISODE_STEP_CAP,
    EvaluationRuns,
    RunTask,
    cluster_and_spec,
    run_actor,
    run_all,
    run_baseline,
    run_one,
    workload_sha256,
)
from agents.evaluation.stats import mean_ci95, paired_rel_diff, t_quantile

__all__ = [
    "Actor", "EPISODE_STEP_CAP", "EvaluationRuns", "KIND_COLUMNS", "MaskablePPOLoader", "POLICY_LOADERS", "PolicyLoader",
    "PolicySpec", "RESULTS_SCHEMA", "RunTask", "SCHEMA_VERSION", "TABLE_COLUMNS", "UsageError",
    "build_results", "cluster_and_spec", "environment_record", "mean_ci95", "model_actor",
    "paired_rel_diff", "parse_policies", "parse_policy", "results_markdown", "run_actor", "run_all",
    "run_baseline", "run_one", "schema_errors", "t_quantile", "with_wait_guards", "workload_sha256", "write_plots",
]
