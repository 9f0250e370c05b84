"""evaluate.py's figures (agents.evaluation.plots.write_plots, docs/evaluate.md) checked for
content: on a hand-made input, the data each figure plots is read back from its artists and
compared with values worked out here, and each written PNG has the series' pixels that the same
figure drawn without data lacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents.evaluation.plots import write_plots
from tests.helpers import toy_cluster

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

CLUSTER = toy_cluster(nodes=2)  # n0: GPUs 0-7, n1: GPUs 8-15
# Policy "a": three jobs finishing in 7200, 3600 and 1800 s; policy "b": one job in 5400 s.
JCTS = {"a": [7200.0, 3600.0, 1800.0], "b": [5400.0]}
TRACES = {
    # timeline rows: (t, allocated GPUs, queued jobs, running, fragmented free GPUs, power W)
    "a": {"timeline": [[0.0, 0, 3, 0, 0, 0.0], [3600.0, 8, 1, 1, 0, 0.0], [7200.0, 16, 0, 2, 0, 0.0]],
          # (job, GPUs, start s, end s, preempted)
          "segments": [(0, [0, 1], 0.0, 3600.0, False), (1, [8], 1800.0, 5400.0, True), (0, [2], 3600.0, 9000.0, False)],
          "job_kinds": ["pretrain", "inference"]},
    "b": {"timeline": [[0.0, 4, 0, 1, 0, 0.0], [5400.0, 0, 0, 0, 0, 0.0]], "segments": [], "job_kinds": []},
}


def _draw(tmp_path: Path, monkeypatch, jcts, traces) -> tuple[list[Path], list[Figure]]:
    """write_plots's files and its figures (kept as each is saved; closing a figure leaves its
    artists readable)."""
    figures: list[Figure] = []
    save = Figure.savefig

    def keep(fig, *args, **kwargs):
        figures.append(fig)
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    tmp_path.mkdir(parents=True, exist_ok=True)
    return write_plots(tmp_path, CLUSTER, "a", 0, jcts, traces), figures


def _pixels_like(png: Path, colour) -> int:
    """Pixels of `png` within a small distance of `colour` (RGB in 0-1)."""
    import matplotlib.image as mpimg

    rgb = mpimg.imread(png)[..., :3]
    return int((np.abs(rgb - np.asarray(to_rgb(colour))).max(axis=2) < 0.02).sum())


def test_the_jct_cdf_plots_each_policys_sorted_jcts_in_hours_against_the_fraction_done(tmp_path, monkeypatch) -> None:
    paths, figs = _draw(tmp_path, monkeypatch, JCTS, TRACES)
    assert [p.name for p in paths] == ["jct_cdf.png", "timeline.png", "gantt_a.png"]
    (ax,) = figs[0].axes
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"a", "b"}
    # a: 1800, 3600, 7200 s = 0.5, 1, 2 h, each step one more third of its jobs done.
    np.testing.assert_allclose(lines["a"].get_xdata(), [0.5, 1.0, 2.0])
    np.testing.assert_allclose(lines["a"].get_ydata(), [1 / 3, 2 / 3, 1.0])
    np.testing.assert_allclose(lines["b"].get_xdata(), [1.5])
    np.testing.assert_allclose(lines["b"].get_ydata(), [1.0])
    assert all(ln.get_drawstyle() == "steps-post" for ln in lines.values())  # a CDF steps up at each JCT
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]


def test_the_timeline_plots_the_allocated_share_of_the_clusters_gpus_and_the_queue(tmp_path, monkeypatch) -> None:
    _, figs = _draw(tmp_path, monkeypatch, JCTS, TRACES)
    share, queue = figs[1].axes
    by_label = lambda ax: {ln.get_label(): ln for ln in ax.get_lines()}  # noqa: E731
    # a: 0, 8 and 16 of the toy cluster's 16 GPUs at 0, 1 and 2 h; 3, 1 and 0 jobs queued.
    np.testing.assert_allclose(by_label(share)["a"].get_xdata(), [0.0, 1.0, 2.0])
    np.testing.assert_allclose(by_label(share)["a"].get_ydata(), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(by_label(queue)["a"].get_ydata(), [3, 1, 0])
    # b: 4 of 16 GPUs = 0.25 from 0 to 1.5 h, nothing queued.
    np.testing.assert_allclose(by_label(share)["b"].get_xdata(), [0.0, 1.5])
    np.testing.assert_allclose(by_label(share)["b"].get_ydata(), [0.25, 0.0])
    np.testing.assert_allclose(by_label(queue)["b"].get_ydata(), [0, 0])
    assert share.get_ylabel() == "allocated GPU share" and queue.get_ylabel() == "queued jobs"


def _bars(ax) -> dict[tuple, tuple]:
    """Each drawn bar as (x0 h, width h, y0 GPU row) -> (face RGB, edge RGB or None)."""
    out = {}
    for coll in ax.collections:
        faces, edges = coll.get_facecolors(), coll.get_edgecolors()
        for i, path in enumerate(coll.get_paths()):
            v = path.vertices
            x0, x1, y0 = v[:, 0].min(), v[:, 0].max(), v[:, 1].min()
            edge = tuple(edges[i % len(edges)][:3]) if len(edges) else None
            out[(round(x0, 9), round(x1 - x0, 9), round(y0, 9))] = (tuple(faces[i % len(faces)][:3]), edge)
    return out


def test_the_gantt_draws_each_segment_on_its_gpus_rows_coloured_by_kind(tmp_path, monkeypatch) -> None:
    _, figs = _draw(tmp_path, monkeypatch, JCTS, TRACES)
    ax = figs[2].axes[0]
    legend = ax.get_legend()
    kinds = [t.get_text() for t in legend.get_texts()]
    assert kinds == ["pretrain", "finetune", "inference", "batch"]
    colour = {k: tuple(to_rgb(h.get_facecolor())) for k, h in zip(kinds, legend.legend_handles)}
    assert len(set(colour.values())) == 4  # one colour per kind
    bars = _bars(ax)
    # Job 0 (pretrain) on GPUs 0 and 1 from 0 to 1 h, then on GPU 2 from 1 to 2.5 h; job 1
    # (inference, preempted: outlined in black) on GPU 8 from 0.5 to 1.5 h. Each row is 0.9 high.
    assert set(bars) == {(0.0, 1.0, 0.0), (0.0, 1.0, 1.0), (1.0, 1.5, 2.0), (0.5, 1.0, 8.0)}
    for key in [(0.0, 1.0, 0.0), (0.0, 1.0, 1.0), (1.0, 1.5, 2.0)]:
        assert bars[key][0] == pytest.approx(colour["pretrain"])
        assert bars[key][1] is None or bars[key][1] != (0.0, 0.0, 0.0)  # not outlined
    assert bars[(0.5, 1.0, 8.0)][0] == pytest.approx(colour["inference"])
    assert bars[(0.5, 1.0, 8.0)][1] == (0.0, 0.0, 0.0)
    for coll in ax.collections:
        for path in coll.get_paths():
            assert path.vertices[:, 1].max() - path.vertices[:, 1].min() == pytest.approx(0.9)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["n0", "n1"]
    np.testing.assert_allclose(ax.get_yticks(), [4.0, 12.0])  # the middle of each node's 8 rows
    assert sorted(ax.get_ylim()) == [0.0, 16.0]


def test_each_png_has_the_data_pixels_that_the_same_figure_without_data_lacks(tmp_path, monkeypatch) -> None:
    """The files written hold the plotted data: pixels in a series' colour outnumber those of
    the same figure drawn from empty data (axes, legend, labels only) by the data's area."""
    full, figs = _draw(tmp_path / "full", monkeypatch, JCTS, TRACES)
    empty_traces = {k: dict(v, timeline=[v["timeline"][0][:1] + [0, 0, 0, 0, 0.0]], segments=[]) for k, v in TRACES.items()}
    empty, _ = _draw(tmp_path / "empty", monkeypatch, {"a": [], "b": []}, empty_traces)
    line_a = figs[0].axes[0].get_lines()[0].get_color()
    legend = figs[2].axes[0].get_legend()
    pretrain = legend.legend_handles[[t.get_text() for t in legend.get_texts()].index("pretrain")].get_facecolor()
    for i, colour, least in ((0, line_a, 400), (1, line_a, 800), (2, pretrain, 8000)):
        more = _pixels_like(full[i], colour) - _pixels_like(empty[i], colour)
        assert more >= least, (full[i].name, more)
