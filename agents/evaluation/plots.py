"""The evaluation's figures: JCT CDF, utilisation and queue timelines, and a Gantt chart of GPU
occupancy. matplotlib is imported (with the Agg backend) only when plots are written."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from envs.cluster.topology import Cluster
from envs.jobs import JOB_KIND_NAMES


def write_plots(out: Path, cluster: Cluster, reference: str, seed: int, jcts: dict[str, list[float]], traces: dict[str, dict]) -> list[Path]:
    """jct_cdf.png (all seeds pooled), timeline.png (seed `seed`), gantt_<reference>.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, values in jcts.items():
        x = np.sort(np.array(values)) / 3600
        ax.step(x, np.arange(1, len(x) + 1) / max(len(x), 1), where="post", label=label)
    ax.set(xscale="log", xlabel="job completion time (h)", ylabel="fraction of jobs", title="JCT CDF (all seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    paths.append(out / "jct_cdf.png")
    fig.savefig(paths[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)

    fig, (ax_u, ax_q) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for label, tr in traces.items():
        tl = np.array(tr["timeline"], dtype=float)
        ax_u.step(tl[:, 0] / 3600, tl[:, 1] / cluster.num_gpus, where="post", label=label, lw=0.8)
        ax_q.step(tl[:, 0] / 3600, tl[:, 2], where="post", label=label, lw=0.8)
    ax_u.set(ylabel="allocated GPU share", title=f"utilisation and queue (seed {seed})")
    ax_q.set(xlabel="time (h)", ylabel="queued jobs")
    ax_u.legend(fontsize=8, ncol=2)
    paths.append(out / "timeline.png")
    fig.savefig(paths[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)

    tr = traces[reference]
    kinds = list(JOB_KIND_NAMES.values())
    colours = {k: plt.get_cmap("tab10")(i) for i, k in enumerate(kinds)}
    bars: dict[tuple[int, str, bool], list[tuple[float, float]]] = {}
    for job_id, gpus, start, end, preempted in tr["segments"]:
        for g in gpus:
            bars.setdefault((g, tr["job_kinds"][job_id], preempted), []).append((start / 3600, (end - start) / 3600))
    fig, ax = plt.subplots(figsize=(11, max(3.0, cluster.num_gpus * 0.06)))
    for (g, kind, preempted), spans in bars.items():
        ax.broken_barh(spans, (g, 0.9), facecolors=colours[kind], edgecolor="black" if preempted else "none", linewidth=0.3)
    ax.set_yticks(cluster.node_first_gpu + cluster.node_gpus / 2, list(cluster.node_names), fontsize=7)
    for first in cluster.node_first_gpu[1:]:
        ax.axhline(first, color="grey", lw=0.4)
    ax.set(xlabel="time (h)", ylim=(0, cluster.num_gpus), title=f"GPU occupancy, {reference}, seed {seed} (outlined: preempted)")
    ax.invert_yaxis()
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in kinds], labels=kinds, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    paths.append(out / f"gantt_{_file_safe(reference)}.png")
    fig.savefig(paths[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)
    return paths


def _file_safe(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in label)
