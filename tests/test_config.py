"""Bad cluster and workload files fail at load time, naming the file and the field."""

from __future__ import annotations

import textwrap

import gymnasium as gym
import pytest

import envs  # noqa: F401
from envs.cluster.config import ConfigError, load_cluster
from envs.workload.generator import load_workload_spec

CLUSTER = """\
name: t
node_types:
  box: {gpu_type: H100-80GB, gpus: 8}
nodes:
  - {names: "n[0-1]", type: box}
switches:
  - {name: leaf0, nodes: "n[0-1]"}
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


@pytest.mark.parametrize(
    "mutation, field, message",
    [
        (("gpu_type: H100-80GB", "gpu_type: Z9000"), "node_types.box.gpu_type", "unknown GPU type 'Z9000'"),
        (("type: box}", "type: crate}"), "nodes[0].type", "unknown node type 'crate'"),
        (("gpus: 8", "gpus: -8"), "node_types.box.gpus", "must be >= 1"),
        (("gpus: 8", "gpus: eight"), "node_types.box.gpus", "must be int"),
        (('nodes: "n[0-1]"}', 'nodes: "n[0-2]"}'), "switches", "unknown node 'n2'"),
        (('nodes: "n[0-1]"}', 'nodes: "n[0-1"}'), "switches[0].nodes", "unbalanced"),
        (("name: t\n", "name: t\nsize: 3\n"), "size", "unknown key"),
        (("  - {names: \"n[0-1]\", type: box}\n", "  - {type: box}\n"), "nodes[0].names", "missing required field"),
    ],
)
def test_bad_cluster_names_file_and_field(tmp_path, mutation, field, message):
    p = write(tmp_path, "bad.yaml", CLUSTER.replace(*mutation))
    with pytest.raises(ConfigError) as e:
        load_cluster(p)
    assert str(p) in str(e.value) and f"{field}:" in str(e.value) and message in str(e.value)


def test_disconnected_fabric_is_refused(tmp_path):
    text = CLUSTER.replace('  - {name: leaf0, nodes: "n[0-1]"}', '  - {name: leaf0, nodes: "n0"}\n  - {name: leaf1, nodes: "n1"}')
    with pytest.raises(ConfigError, match="share no switch"):
        load_cluster(write(tmp_path, "c.yaml", text))


def test_invalid_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_cluster(write(tmp_path, "c.yaml", "name: [unclosed\n"))
    with pytest.raises(ConfigError, match="no such file"):
        load_cluster(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not a known cluster config"):
        load_cluster("no-such-cluster")


WORKLOAD = """\
name: w
num_jobs: 10
target_load: 0.8
kinds:
  finetune:
    share: 1.0
    gpus: {1: 0.5, 8: 0.5}
    work_median_s: 600
    mem_per_gpu_gb: 40
"""


@pytest.mark.parametrize(
    "mutation, field, message",
    [
        (("work_median_s: 600", "work_median_s: -5"), "kinds.finetune.work_median_s", "must be >= 1.0"),
        (("    share: 1.0\n", ""), "kinds.finetune.share", "missing required field"),
        (("finetune:", "training:"), "kinds.training", "unknown job kind"),
        (("target_load: 0.8", "target_load: high"), "target_load", "must be float"),
        (("gpus: {1: 0.5, 8: 0.5}", "gpus: {1: -0.5}"), "kinds.finetune.gpus", "probability"),
        (("num_jobs: 10\n", ""), "num_jobs", "missing required field"),
    ],
)
def test_bad_workload_names_file_and_field(tmp_path, mutation, field, message):
    p = write(tmp_path, "w.yaml", WORKLOAD.replace(*mutation))
    with pytest.raises(ConfigError) as e:
        load_workload_spec(p)
    assert str(p) in str(e.value) and f"{field}:" in str(e.value) and message in str(e.value)


def test_job_larger_than_cluster_fails_at_make_time(tmp_path):
    c = write(tmp_path, "c.yaml", CLUSTER)
    w = write(tmp_path, "w.yaml", WORKLOAD.replace("gpus: {1: 0.5, 8: 0.5}", "gpus: {1: 0.5, 32: 0.5}"))
    with pytest.raises(ConfigError) as e:
        gym.make("gangsched/GpuCluster-v0", cluster=str(c), workload=str(w))
    assert str(w) in str(e.value) and "kinds.finetune.gpus" in str(e.value) and "32-GPU job" in str(e.value)


def test_memory_no_gpu_has(tmp_path):
    c = write(tmp_path, "c.yaml", CLUSTER)
    w = write(tmp_path, "w.yaml", WORKLOAD.replace("mem_per_gpu_gb: 40", "mem_per_gpu_gb: 141"))
    with pytest.raises(ConfigError, match="kinds.finetune.mem_per_gpu_gb: no GPU"):
        gym.make("gangsched/GpuCluster-v0", cluster=str(c), workload=str(w))


def test_a_cluster_file_loads_once_per_content(tmp_path):
    """Envs of one process on the same cluster file share one Cluster object (and so the memo
    tables of the hot path); an edited file is loaded afresh, even at the same size."""
    path = write(tmp_path, "c.yaml", CLUSTER)
    first = load_cluster(path)
    assert load_cluster(str(path)) is first
    a = gym.make("gangsched/GpuCluster-v0", cluster="mixed-64gpu").unwrapped
    b = gym.make("gangsched/GpuCluster-v0", scenario="default").unwrapped
    assert a.cluster is b.cluster is load_cluster("mixed-64gpu")
    edited = CLUSTER.replace("gpus: 8", "gpus: 4")
    assert len(edited) == len(CLUSTER)
    path.write_text(edited)
    second = load_cluster(path)
    assert second is not first and second.num_gpus == 8 and first.num_gpus == 16


def test_a_train_config_in_a_subfolder_is_named_with_its_folder(tmp_path):
    """configs/train/research/X.yaml is `research/X` (as a --config name and as a `base:`); the bare
    `X` is an error that says which file it looked for and lists the subfolder's names too."""
    from envs.cluster.config import CONFIG_ROOT, resolve_config
    from agents.config import load_train_config

    research = CONFIG_ROOT / "train" / "research"
    assert resolve_config("research/ppo-quick", "train") == research / "ppo-quick.yaml"
    assert resolve_config("ppo", "train") == CONFIG_ROOT / "train" / "ppo.yaml"
    with pytest.raises(ConfigError) as e:
        resolve_config("ppo-quick", "train")
    message = str(e.value)
    assert "not a known train config" in message and str(CONFIG_ROOT / "train" / "ppo-quick.yaml") in message
    assert "research/ppo-quick" in message and "distill-default," in message
    # a variant beside the repository's configs names a research config as its base
    (tmp_path / "quick-seed.yaml").write_text("base: research/ppo-quick\nseed: 7\n")
    v, q = load_train_config(tmp_path / "quick-seed.yaml"), load_train_config("research/ppo-quick")
    assert v.seed == 7 and {**v.to_dict(), "seed": q.seed} == q.to_dict()
    # a research config's `base: NAME` (a config that stayed in configs/train/) resolves there
    s8 = load_train_config("research/distill-slo-preempt-s8")
    assert s8.scenario == "slo-preempt" and s8.distill["lookahead"] == {"samples": 8}
