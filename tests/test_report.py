"""report.html of evaluate.py and benchmarks.leaderboard, loaded in headless Chromium: a real tiny
evaluation and leaderboard run, the page's DOM (every policy, the objective means of results.json,
the paired verdicts), its embedded PNGs, a screenshot that is not blank, and escaping of hostile
labels. Without chromium the browser tests skip, except under CI (CI=true), where they fail."""

from __future__ import annotations

import base64
import copy
import html
import io
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from agents.evaluation.report import PNG_SIGNATURE, ci_text, evaluation_report, pct, summary_cell

REPO = Path(__file__).resolve().parent.parent
POLICIES = ("spread", "topology", "random")
HOSTILE = "ppo=<img src=x onerror=\"document.title='pwned'\">&amp;<script>document.title='pwned'</script></td>"


class Dom(HTMLParser):
    """What a test reads of a page: its text, title, tags, <img> sources, other links, and its
    tables by id as rows of (cell text, cell class)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.chunks: list[str] = []
        self.title = ""
        self.tags: list[str] = []
        self.images: list[str] = []
        self.links: list[str] = []
        self.tables: dict[str, list[list[tuple[str, str]]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._cell_class = ""
        self._in_title = False
        self.feed(text)
        self.text = " ".join(" ".join(self.chunks).split())

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "img":
            self.images.append(a.get("src") or "")
        elif a.get("href") or a.get("src"):
            self.links.append(a.get("href") or a.get("src"))
        if tag == "title":
            self._in_title = True
        if tag == "table":
            self._table = a.get("id") or f"table{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell, self._cell_class = [], a.get("class") or ""

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append((" ".join("".join(self._cell).split()), self._cell_class))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        self.chunks.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def rows(self, table_id: str) -> dict[str, list[tuple[str, str]]]:
        """The body rows of a table, keyed by their first cell's text."""
        return {row[0][0]: row for row in self.tables[table_id][1:]}


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed; under CI (CI=true) the report tests need it (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium); under CI this fails instead")
    return path


def _chromium(binary: str, page: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", *flags, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def dump_dom(binary: str, page: Path, tmp_path: Path) -> Dom:
    """The page's DOM after Chromium loaded it (scripts, had there been any, run)."""
    return Dom(_chromium(binary, page, tmp_path / "profile", "--dump-dom").stdout)


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory) -> tuple[Path, dict, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("report") / "out"
    proc = subprocess.run([sys.executable, "evaluate.py", "--cluster", "h100-4node", "--policies", ",".join(POLICIES), "--seeds", "0-1",
                           "--num-jobs", "20", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads((out / "results.json").read_text()), proc


def test_evaluate_writes_the_report_and_prints_its_path_last(evaluation) -> None:
    out, _, proc = evaluation
    assert proc.stdout.rstrip().splitlines()[-1] == f"report: {out / 'report.html'}"
    assert (out / "report.html").stat().st_size > 0


def test_the_page_shows_every_policy_with_the_objective_of_results_json(evaluation, chromium, tmp_path) -> None:
    out, doc, _ = evaluation
    dom = dump_dom(chromium, out / "report.html", tmp_path)
    summary = dom.rows("summary")
    for label in POLICIES:
        assert label in dom.text
        o = doc["policies"][label]["summary"]["objective"]
        assert summary[label][1] == (summary_cell(o, 1.0), ""), label
        # results.md's cell, from its description: the mean (3 decimals below 10) ± the 95% half-width
        assert abs(o["mean"]) < 10 and summary[label][1][0] == f"{o['mean']:.3f} ± {o['ci95_high'] - o['mean']:.3f}", label
    assert [h for h, _ in dom.tables["summary"][0][:2]] == ["policy", "objective"]
    for fact in ("h100-4node", "llm-mix", "2 paired: 0, 1", "reference policy topology", doc["environment"]["git_commit"] or "unknown",
                 doc["environment"]["started_utc"]):
        assert fact in dom.text, fact


def test_the_paired_comparison_marks_exactly_the_intervals_that_exclude_zero(evaluation, chromium, tmp_path) -> None:
    out, doc, _ = evaluation
    dom = dump_dom(chromium, out / "report.html", tmp_path)
    paired = dom.rows("paired")
    assert set(paired) == set(doc["paired_vs_reference"]) == {"spread", "random"}
    marked = set()
    for label, d in doc["paired_vs_reference"].items():
        expected = "better" if d["ci95_high"] < 0 else "worse" if d["ci95_low"] > 0 else ""
        assert paired[label][2] == (_signed_pct(d["rel_diff_mean"]), expected), label
        assert paired[label][3] == (f"[{_signed_pct(d['ci95_low'])}, {_signed_pct(d['ci95_high'])}]", expected), label
        marked |= {label} if expected else set()
    assert marked, "no interval excludes 0 in this setting: the highlight goes untested"
    seeds = dom.rows("paired-seeds")
    for label in doc["paired_vs_reference"]:
        runs = {r["seed"]: r["metrics"]["avg_jct_s"] for r in doc["policies"][label]["runs"]}
        ref = {r["seed"]: r["metrics"]["avg_jct_s"] for r in doc["policies"]["topology"]["runs"]}
        diffs = {s: (runs[s] - ref[s]) / ref[s] for s in runs}
        worst = max(diffs, key=diffs.get)
        assert seeds[label][5][0] == f"{_signed_pct(diffs[worst])} (seed {worst})", label
        assert seeds[label][4][0] == _signed_pct(float(np.percentile(list(diffs.values()), 90))), label


def test_every_image_is_an_embedded_png_and_nothing_is_fetched(evaluation, chromium, tmp_path) -> None:
    from PIL import Image

    out, _, _ = evaluation
    dom = dump_dom(chromium, out / "report.html", tmp_path)
    assert len(dom.images) == 3
    for src in dom.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix), src[:60]
        data = base64.b64decode(src[len(prefix):], validate=True)
        assert data.startswith(PNG_SIGNATURE)
        assert Image.open(io.BytesIO(data)).size[0] > 100
    assert {"script", "link", "iframe"}.isdisjoint(dom.tags) and dom.links == []


def test_the_screenshot_is_not_blank(evaluation, chromium, tmp_path) -> None:
    from PIL import Image

    out, _, _ = evaluation
    shot = tmp_path / "report.png"
    _chromium(chromium, out / "report.html", tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,2000")
    assert shot.read_bytes().startswith(PNG_SIGNATURE)
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape[:2] == (2000, 1200)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 1
    assert (pixels.min(axis=2) < 128).mean() > 0.005  # text and plots, not a page of one colour


def _signed_pct(x: float) -> str:
    """A relative difference as the report shows it (docs/leaderboard.md: `-16.5%`, `+8.3%`): a
    signed percentage with one decimal, written here without the report's own helpers."""
    return f"{100.0 * x:+.1f}%"


def test_the_report_cells_by_hand() -> None:
    """The cells of report.html and the leaderboard, on values whose text is worked out here (the
    first rows of docs/leaderboard.md's default table)."""
    from agents.evaluation.report import paired_text
    from benchmarks.leaderboard import scenario_rows

    assert (pct(0.0123), pct(-0.031), pct(0.0), pct(None)) == ("+1.2%", "-3.1%", "+0.0%", "n/a")
    assert ci_text({"ci95_low": -0.031, "ci95_high": 0.004}) == "[-3.1%, +0.4%]"
    assert ci_text({"ci95_low": None, "ci95_high": None}) == "n/a"
    assert paired_text({"rel_diff_mean": -0.02, "ci95_low": -0.031, "ci95_high": -0.009}) == "-2.0% [-3.1%, -0.9%]"
    assert paired_text({"rel_diff_mean": 0.05, "ci95_low": None}) == "+5.0%"
    assert paired_text({"rel_diff_mean": None}) == "n/a"
    # mean ± 95% half-width: 3 decimals below 10, 1 below 1000, none above; n/a without a mean
    assert summary_cell({"mean": 2.6461, "ci95_low": 2.395, "ci95_high": 2.8971}, 1.0) == "2.646 ± 0.251"
    assert summary_cell({"mean": 9525.6, "ci95_low": 9000.0, "ci95_high": 10051.2}, 1 / 3600) == "2.646 ± 0.146"
    assert summary_cell({"mean": 123.456, "ci95_low": None, "ci95_high": None}, 1.0) == "123.5"
    assert summary_cell({"mean": 12345.6, "ci95_low": 12000.0, "ci95_high": 12691.2}, 1.0) == "12346 ± 346"
    assert summary_cell({"mean": None, "ci95_low": None, "ci95_high": None}, 1.0) == "n/a"

    def summary(obj, ci, jct_h, preemptions, pgh, slo):
        return {"objective": {"mean": obj, "ci95_low": obj - ci, "ci95_high": obj + ci}, "avg_jct_s": {"mean": jct_h * 3600},
                "preemptions": {"mean": preemptions}, "preemption_gpu_hours": {"mean": pgh}, "slo_misses": {"mean": slo}}

    doc = {"policies": {
        "sect": {"summary": summary(3.1884, 0.334, 3.1884, 0.0, 0.0, 3.2), "runs": [{"wall_s": 0.3, "decisions": 1000}] * 2},
        "lookahead-oracle": {"summary": summary(2.646, 0.251, 2.646, 16.5, 5.0, 0.7), "runs": [{"wall_s": 18.5, "decisions": 1000}] * 2},
        "random": {"summary": summary(1.0, 0.1, 1.0, 0.0, 0.0, 0.0), "runs": []},  # no run: no row
    }, "paired_vs_reference": {"lookahead-oracle": {"rel_diff_mean": -0.165, "ci95_low": -0.217, "ci95_high": -0.113}}}
    # Lowest mean objective first; the oracle marked as a bound; s per decision = 37 s / 2000 and 0.6 s / 2000.
    assert scenario_rows(doc, "sect") == [
        ("lookahead-oracle", ["lookahead-oracle (bound)", "2.646 ± 0.251", "-16.5% [-21.7%, -11.3%]", "2.646", "16.5", "5.00", "0.7", "0.0185"]),
        ("sect", ["sect", "3.188 ± 0.334", "(best heuristic)", "3.188", "0.0", "0.00", "3.2", "0.0003"]),
    ]


def _hostile_doc(doc: dict) -> dict:
    """`doc` with `random` relabelled HOSTILE and a hostile command."""
    doc = copy.deepcopy(doc)
    doc["policies"] = {HOSTILE if k == "random" else k: v for k, v in doc["policies"].items()}
    doc["paired_vs_reference"] = {HOSTILE if k == "random" else k: v for k, v in doc["paired_vs_reference"].items()}
    doc["environment"]["command"] = f"python evaluate.py --policies topology,{HOSTILE}"
    return doc


def test_the_report_escapes_a_hostile_policy_label(evaluation) -> None:
    _, doc, _ = evaluation
    page = evaluation_report(_hostile_doc(doc))
    assert HOSTILE not in page and "<script" not in page and "<img" not in page
    assert page.count(html.escape(HOSTILE, quote=True)) >= 4  # summary, paired, per seed, per kind (and the command)


def test_a_hostile_policy_label_is_text_in_the_browser(evaluation, chromium, tmp_path) -> None:
    _, doc, _ = evaluation
    page = tmp_path / "hostile.html"
    page.write_text(evaluation_report(_hostile_doc(doc)), encoding="utf-8")
    dom = dump_dom(chromium, page, tmp_path)
    assert dom.title == "llm-mix on h100-4node"
    assert "img" not in dom.tags and "script" not in dom.tags
    assert HOSTILE in dom.rows("summary") and HOSTILE in dom.rows("paired") and f"topology,{HOSTILE}" in dom.text


def test_the_leaderboard_writes_one_page_with_a_section_per_scenario(chromium, tmp_path) -> None:
    from benchmarks.leaderboard import scenario_rows

    scenario = tmp_path / "tiny.yaml"
    scenario.write_text("name: tiny\ndescription: a <b>tiny</b> & fixture\ncluster: h100-4node\nworkload: llm-mix\nnum_jobs: 20\n"
                        "objective: {avg_jct: 1.0}\nseeds: {test: 0-1, validation: 100}\n")
    out = tmp_path / "lb"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.leaderboard", "--scenarios", str(scenario), "--workers", "1",
                           "--policies", ",".join(POLICIES), "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().splitlines()[-1] == f"report: {out / 'report.html'}"
    doc = json.loads((out / "tiny" / "results.json").read_text())
    dom = dump_dom(chromium, out / "report.html", tmp_path)
    assert "tiny: a <b>tiny</b> & fixture" in dom.text and "b" not in dom.tags
    table = dom.tables["scenario-tiny"]
    expected = scenario_rows(doc, doc["reference"])  # its cells worked by hand: test_the_report_cells_by_hand
    assert [[text for text, _ in row] for row in table[1:]] == [cells for _, cells in expected]
    by_mean = sorted(doc["policies"], key=lambda p: doc["policies"][p]["summary"]["objective"]["mean"])
    assert [row[0][0] for row in table[1:]] == by_mean  # lowest mean objective first
    for row, label in zip(table[1:], by_mean):
        assert row[1][0].split(" ± ")[0] == f"{doc['policies'][label]['summary']['objective']['mean']:.3f}", label
    assert [label for label, _ in expected][0] == doc["reference"]  # best first
    for row, (label, _) in zip(table[1:], expected):
        d = doc["paired_vs_reference"].get(label)
        want = "" if d is None else "better" if d["ci95_high"] < 0 else "worse" if d["ci95_low"] > 0 else ""
        assert row[2][1] == want, label
    assert dom.links == [] and "script" not in dom.tags
    assert (out / "tiny" / "report.html").stat().st_size > 0
