"""Trace readers and trace replay: Philly, Alibaba openb, the project's CSV format."""

from pathlib import Path

import pytest

from envs.cluster.config import ConfigError, load_cluster, read_yaml
from envs.jobs import PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, JobKind
from envs.workload.generator import offered_load
from envs.workload.traces import read_alibaba, read_csv_trace, read_philly, workload_from_trace

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def mixed():
    return load_cluster("mixed-64gpu")


def test_philly_sorted_filled_and_counted() -> None:
    jobs, report = read_philly(FIXTURES / "philly_small.csv", seed=3)
    assert report.rows_read == 9 and report.kept == 7
    assert report.skipped == {"malformed": 1, "non_positive_duration": 1}
    assert report.examples["malformed"][0].endswith("philly_small.csv:7: column 'num_gpus': expected an integer, got 'four'")
    assert [j.job_id for j in jobs] == list(range(7))
    # Unsorted rows come out in arrival order, ties in file order (lines 3 and 6 at 06:13:03).
    assert [j.gpus for j in jobs] == [2, 8, 16, 1, 128, 4, 1]
    assert [j.arrival_s for j in jobs[:4]] == [0.0, 783.0, 783.0, 3715.0]
    assert [j.tenant for j in jobs[:3]] == ["vcA", "vcB", "vcA"]
    assert [j.kind for j in jobs[:4]] == [JobKind.FINETUNE, JobKind.FINETUNE, JobKind.PRETRAIN, JobKind.BATCH]
    assert [j.tp_degree for j in jobs] == [2, 8, 8, 1, 8, 4, 1]
    assert jobs[3].comm_fraction == 0.0 and jobs[3].tp_comm_share == 0.0
    assert jobs[2].tp_comm_share == 0.7 and jobs[1].tp_comm_share == 1.0
    assert all(j.priority == PRIORITY_NORMAL and j.preemptible for j in jobs)
    assert jobs[4].checkpoint_s == 60.0 and jobs[4].restore_s == 120.0
    for j in jobs:
        j.validate()


def test_philly_strict_stops_at_bad_row() -> None:
    with pytest.raises(ValueError, match=r"philly_small.csv:7: column 'num_gpus': expected an integer"):
        read_philly(FIXTURES / "philly_small.csv", strict=True)


def test_same_trace_and_seed_same_jobs() -> None:
    a, _ = read_philly(FIXTURES / "philly_small.csv", seed=7)
    b, _ = read_philly(FIXTURES / "philly_small.csv", seed=7)
    c, _ = read_philly(FIXTURES / "philly_small.csv", seed=8)
    assert a == b and a != c
    known, _ = read_philly(FIXTURES / "philly_small.csv", seed=7, estimate_noise_sigma=0.0)
    assert all(j.estimate_s == j.work_s for j in known)
    scaled, _ = read_philly(FIXTURES / "philly_small.csv", seed=7, work_scale=0.5)
    assert [j.work_s for j in scaled] == [j.work_s * 0.5 for j in a]


def test_alibaba_rules_and_counts() -> None:
    jobs, report = read_alibaba(FIXTURES / "alibaba_pods.csv", seed=1)
    assert report.rows_read == 8 and report.kept == 6
    assert report.skipped == {"cpu_only": 1, "malformed": 1}
    assert report.counted == {"fractional_rounded_up": 1, "censored": 2}
    assert "alibaba_pods.csv:9: column 'num_gpu'" in report.examples["malformed"][0]
    # Arrival order: pods 0041, 0043, 0017, 0042, 0022, 0035.
    guaranteed, g2, burstable, pending, fractional, ls = jobs
    assert [j.arrival_s for j in jobs] == [0, 199500, 436997, 499500, 678675, 966558]
    assert (guaranteed.gpus, guaranteed.priority, guaranteed.preemptible, guaranteed.mem_per_gpu_gb) == (4, PRIORITY_NORMAL, False, 32.0)
    assert guaranteed.work_s == 9100500 - 9000600
    assert g2.mem_per_gpu_gb == 40.0  # G2 -> A100-40GB by default
    assert (burstable.gpus, burstable.kind, burstable.preemptible) == (8, JobKind.FINETUNE, True)
    assert pending.work_s == 3600  # never scheduled: deletion - creation
    assert (fractional.gpus, fractional.kind, fractional.priority) == (1, JobKind.BATCH, PRIORITY_LOW)
    assert (ls.kind, ls.priority, ls.preemptible, ls.mem_per_gpu_gb) == (JobKind.INFERENCE, PRIORITY_HIGH, False, 16.0)
    assert report.censored_job_ids == [1, 5]


def test_alibaba_options() -> None:
    jobs, report = read_alibaba(FIXTURES / "alibaba_pods.csv", fractional="drop", censored="drop")
    assert report.kept == 3
    assert report.skipped == {"cpu_only": 1, "malformed": 1, "fractional": 1, "censored": 2}
    assert report.censored_job_ids == []
    with pytest.raises(ValueError, match=r"alibaba_pods.csv:9: column 'num_gpu'"):
        read_alibaba(FIXTURES / "alibaba_pods.csv", strict=True)


def test_alibaba_unknown_model_error_and_mapping() -> None:
    with pytest.raises(ValueError, match=r"alibaba_pods_unknown_model.csv:8: column 'gpu_spec': unknown GPU model 'H800'.*gpu_models"):
        read_alibaba(FIXTURES / "alibaba_pods_unknown_model.csv")
    jobs, _ = read_alibaba(FIXTURES / "alibaba_pods_unknown_model.csv", gpu_models={"H800": "H100-80GB"})
    assert jobs[1].mem_per_gpu_gb == 80.0


def test_own_csv_format(tmp_path: Path) -> None:
    jobs, report = read_csv_trace(FIXTURES / "own_jobs.csv", seed=0)
    assert report.skipped == {"malformed": 1}
    assert "own_jobs.csv:5: field 'tp_degree' (3) must divide 'gpus' (16)" in report.examples["malformed"][0]
    default, inference, pretrain = jobs
    assert (default.arrival_s, default.kind, default.tenant, default.priority) == (0.0, JobKind.BATCH, "default", PRIORITY_NORMAL)
    assert (inference.tp_degree, inference.priority, inference.tenant) == (2, PRIORITY_LOW, "serving")
    assert (pretrain.mem_per_gpu_gb, pretrain.estimate_s, pretrain.preemptible, pretrain.priority) == (70.0, 4000.0, False, PRIORITY_HIGH)
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,gpus,work_s,colour\n0,1,10,red\n")
    with pytest.raises(ValueError, match=r"bad.csv:1: unknown column 'colour'"):
        read_csv_trace(bad)
    bad.write_text("arrival_s,gpus\n0,1\n")
    with pytest.raises(ValueError, match=r"bad.csv:1: missing column\(s\) work_s"):
        read_csv_trace(bad)


def test_replay_options(mixed) -> None:
    source = str(FIXTURES / "workload_philly_small.yaml")
    spec = read_yaml(Path(source))["trace"]
    jobs, report = workload_from_trace(spec, source, mixed, seed=0)
    assert [j.gpus for j in jobs] == [2, 8, 16, 1, 4]
    assert report.skipped == {"malformed": 1, "non_positive_duration": 1, "outside_window": 1, "unfittable": 1}
    assert offered_load(jobs, mixed) == pytest.approx(0.5)
    assert jobs[0].arrival_s == 0.0 and all(j.estimate_s == j.work_s for j in jobs)
    unwindowed = {k: v for k, v in spec.items() if k != "window"}
    capped, report = workload_from_trace({**unwindowed, "max_jobs": 2, "tenants": ["vcB"]}, source, mixed, seed=0)
    assert [j.tenant for j in capped] == ["vcB", "vcB"] and report.skipped["tenant_filtered"] == 4
    stamps, _ = workload_from_trace({**spec, "window": {"start": "2017-10-09 06:10:00", "end": "2017-10-09 08:00:00"}}, source, mixed, seed=0)
    assert [j.gpus for j in stamps] == [8, 16, 1]


@pytest.mark.parametrize(
    "change, field",
    [
        ({"colour": "red"}, "trace.colour"),
        ({"max_jobs": "ten"}, "trace.max_jobs"),
        ({"format": "slurm"}, "trace.format"),
        ({"fractional": "drop"}, "trace.fractional"),
        ({"path": "missing.csv"}, "trace.path"),
        ({"window": {"start": 10, "stop": 20}}, "trace.window.stop"),
        ({"unfittable": "error"}, "trace.unfittable"),
        ({"strict": True}, "trace.path"),
    ],
)
def test_replay_errors_name_file_and_field(mixed, change: dict, field: str) -> None:
    source = str(FIXTURES / "workload_philly_small.yaml")
    spec = {**read_yaml(Path(source))["trace"], **change}
    with pytest.raises(ConfigError, match=f"workload_philly_small.yaml: {field}: ") as info:
        workload_from_trace(spec, source, mixed, seed=0)
    assert info.value.field == field


def test_shipped_philly_trace_loads_every_row() -> None:
    jobs, report = read_philly()
    assert report.rows_read == 82247 and report.kept == 82247 and not report.skipped
    assert sum(j.gpus == 1 for j in jobs) == 76627 and max(j.gpus for j in jobs) == 128
    assert jobs[0].arrival_s == 0.0 and all(a.arrival_s <= b.arrival_s for a, b in zip(jobs, jobs[1:]))


@pytest.mark.parametrize("workload, cluster", [("philly-busy-vc", "mixed-64gpu"), ("philly-full", "philly-sized")])
def test_shipped_replay_configs(workload: str, cluster: str) -> None:
    from envs.workload.generator import load_workload_spec

    spec = load_workload_spec(workload)
    target = load_cluster(cluster)
    jobs, report = workload_from_trace(spec.trace, spec.source, target, seed=0)
    if workload == "philly-busy-vc":
        assert len(jobs) == 300 and {j.tenant for j in jobs} == {"ee9e8c"}
        assert offered_load(jobs, target) == pytest.approx(0.85)
    else:
        assert len(jobs) == 82247 and not report.skipped
