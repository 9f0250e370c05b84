"""report.html: an evaluation's results document as one self-contained page (inline CSS, no
scripts, no external resources; plots embedded as base64 PNG data URIs), and the building
blocks (`page`, `html_table`, `verdict`) that benchmarks.leaderboard renders its page with.

Every piece of text is HTML-escaped (policy labels and the command come from the command line).
Summary cells are formatted as results.md formats them (`summary_cell`: mean ± 95% t-interval
half-width); relative differences as signed percentages with one decimal (`pct`).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agents.evaluation.results import KIND_COLUMNS, TABLE_COLUMNS
from agents.evaluation.results import _cell as summary_cell
from agents.evaluation.stats import paired_rel_diffs
from envs.sim.objective import OBJECTIVE_TERMS

REPORT_NAME = "report.html"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# A table cell: its text, or (text, CSS class).
Cell = str | tuple[str, str]

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #1d1d1f; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.3em; } h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.note { color: #555; font-size: 0.92em; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 0.15em 1.2em; font-size: 0.95em; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.86em; margin: 0.6em 0; }
th, td { border: 1px solid #d0d0d0; padding: 0.25em 0.5em; text-align: right; white-space: nowrap; background: #fff; }
th { background: #f2f2f2; }
td:first-child, th:first-child { text-align: left; position: sticky; left: 0; }
tr.reference td, tr.best td { font-weight: 600; background: #f4f4fa; }
td.text { text-align: left; white-space: normal; }
td.better { background: #d9f2dd; color: #14532d; } td.worse { background: #fadcdc; color: #7f1d1d; }
code { background: #f2f2f2; padding: 0 0.2em; overflow-wrap: anywhere; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
"""

_PLOT_CAPTIONS = {
    "jct_cdf.png": "Job completion time CDF per policy, all seeds pooled.",
    "timeline.png": "Allocated GPU share and queued jobs over time per policy, first seed.",
}


def esc(text: object) -> str:
    """`text` as HTML text or attribute value."""
    return html.escape(str(text), quote=True)


def pct(x: float | None) -> str:
    """A relative difference as a signed percentage (`+1.2%`), `n/a` for null."""
    return "n/a" if x is None else f"{x:+.1%}"


def ci_text(d: dict) -> str:
    """A paired entry's 95% interval as `[-3.1%, +0.4%]`, `n/a` when undefined."""
    return "n/a" if d.get("ci95_low") is None else f"[{pct(d['ci95_low'])}, {pct(d['ci95_high'])}]"


def paired_text(d: dict) -> str:
    """A paired entry's mean with its 95% interval when defined: `-2.0% [-3.1%, -0.9%]`."""
    if d.get("rel_diff_mean") is None:
        return "n/a"
    return pct(d["rel_diff_mean"]) + ("" if d.get("ci95_low") is None else f" {ci_text(d)}")


def verdict(d: dict) -> str:
    """`better` or `worse` when the paired difference's 95% interval excludes 0 (lower is
    better), else the empty string."""
    if d.get("ci95_low") is None:
        return ""
    return "better" if d["ci95_high"] < 0 else "worse" if d["ci95_low"] > 0 else ""


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, row_classes: Sequence[str] | None = None, table_id: str | None = None) -> str:
    """A table with one header row; every cell and header escaped."""
    def td(cell: Cell) -> str:
        text, cls = (cell, "") if isinstance(cell, str) else cell
        return f'<td class="{esc(cls)}">{esc(text)}</td>' if cls else f"<td>{esc(text)}</td>"

    classes = row_classes or [""] * len(rows)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "\n".join((f'<tr class="{esc(c)}">' if c else "<tr>") + "".join(td(cell) for cell in row) + "</tr>" for row, c in zip(rows, classes))
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return f'<div class="scroll"><table{ident}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>'


def png_data_uri(path: Path) -> str:
    """The PNG file at `path` as a `data:image/png;base64,` URI; ValueError naming the file when
    it is not a PNG."""
    data = Path(path).read_bytes()
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError(f"{path}: not a PNG file")
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def page(title: str, body: Sequence[str]) -> str:
    """A complete HTML document: `title` (escaped) and the `body` fragments (already HTML)."""
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">', f"<title>{esc(title)}</title>",
        f"<style>{_CSS}</style>", "</head>", "<body>", *body, "</body>", "</html>", "",
    ])


def _title(doc: dict) -> str:
    where = f"{doc['workload']} on {doc['cluster']}"
    return f"Scenario {doc['scenario']}: {where}" if doc.get("scenario") else where


def _mapping_text(m: object) -> str:
    """`{'a': 1.0, 'b': {'c': None}}` as `a 1, b (c none)`."""
    if isinstance(m, dict):
        return ", ".join(f"{k} ({_mapping_text(v)})" if isinstance(v, dict) else f"{k} {_mapping_text(v)}" for k, v in m.items())
    return "none" if m is None else f"{m:g}" if isinstance(m, float) else str(m)


def _objective_text(doc: dict) -> str:
    objective = doc.get("objective")
    if not objective:
        return "average JCT per job (avg_jct 1), lower is better"
    terms = ", ".join(f"{k} {v:g}" for k, v in objective.items() if k in OBJECTIVE_TERMS and v)
    extra = "; ".join(f"{k.replace('_', ' ')}: {_mapping_text(objective[k])}" for k in ("priority_weights", "slos") if objective.get(k))
    return f"{terms or 'avg_jct 1'} per job, lower is better" + (f" ({extra})" if extra else "")


def _header(doc: dict) -> list[str]:
    env = doc["environment"]
    items = [
        ("scenario", doc.get("scenario") or "none"),
        ("cluster", doc["cluster"]), ("workload", doc["workload"]),
        ("jobs per episode", doc["num_jobs"] if doc.get("num_jobs") is not None else "the workload's"),
        ("queue window", doc["queue_window"]),
        ("seeds", f"{len(doc['seeds'])} paired: {', '.join(map(str, doc['seeds']))}"),
        ("objective", _objective_text(doc)),
        ("reference policy", doc["reference"]),
        ("paired on", doc.get("paired_metric", "avg_jct_s")),
        ("date (UTC)", env.get("started_utc", "unknown")),
        ("git commit", env.get("git_commit") or "unknown"),
        ("wall time", f"{env['wall_s']:.1f} s, {env['workers']} worker(s), backend {env.get('backend', 'local')}"),
    ]
    rows = "\n".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items)
    rows += f"\n<dt>command</dt><dd><code>{esc(env['command'])}</code></dd>"
    return [f"<h1>{esc(_title(doc))}</h1>", f'<dl class="meta">\n{rows}\n</dl>']


def _summary_table(doc: dict, columns: tuple[tuple[str, str, float], ...], table_id: str) -> str:
    rows = [[label, *(summary_cell(p["summary"][m], scale) for m, _, scale in columns)] for label, p in doc["policies"].items()]
    classes = ["reference" if label == doc["reference"] else "" for label in doc["policies"]]
    return html_table(["policy", *(title for _, title, _ in columns)], rows, row_classes=classes, table_id=table_id)


def _paired_section(doc: dict) -> list[str]:
    metric = doc.get("paired_metric", "avg_jct_s")
    ref = doc["reference"]
    words = {"better": "better: CI excludes 0", "worse": "worse: CI excludes 0"}
    rows = []
    for label, d in doc["paired_vs_reference"].items():
        v = verdict(d)
        rows.append([label, str(d["n"]), (pct(d["rel_diff_mean"]), v), (ci_text(d), v),
                     (words[v], v) if v else ("CI includes 0" if d["ci95_low"] is not None else "n/a")])
    table = html_table(["policy", "seeds", "mean rel. diff", "95% CI", "verdict"], rows, table_id="paired")

    ref_runs = doc["policies"][ref]["runs"]
    ref_seeds = {r["seed"] for r in ref_runs}
    dist = []
    for label in doc["paired_vs_reference"]:
        diffs = paired_rel_diffs([r for r in doc["policies"][label]["runs"] if r["seed"] in ref_seeds], ref_runs, metric)
        if not diffs:
            dist.append([label, "0", "n/a", "n/a", "n/a", "n/a", "n/a"])
            continue
        values = np.array(list(diffs.values()))
        worst = max(diffs, key=diffs.get)
        best = min(diffs, key=diffs.get)
        dist.append([label, str(len(values)), f"{int((values < 0).sum())}/{len(values)}", pct(float(np.median(values))),
                     pct(float(np.percentile(values, 90))), f"{pct(diffs[worst])} (seed {worst})", f"{pct(diffs[best])} (seed {best})"])
    dist_table = html_table(["policy", "seeds", "better on", "median", "p90", "worst seed", "best seed"], dist, table_id="paired-seeds")
    name = "objective" if metric == "objective" else "average JCT"
    return [
        f"<h2>Paired {esc(name)} vs {esc(ref)}</h2>",
        f'<p class="note">Per seed (policy &minus; reference) / reference of <code>{esc(metric)}</code>; negative is better. '
        "Mean and two-sided 95% t-interval over seeds; green or red where the interval excludes 0.</p>",
        table,
        "<h2>Per-seed paired difference</h2>",
        '<p class="note">The distribution over seeds of the same per-seed difference: on how many seeds the policy beat the '
        "reference, the median, the 90th percentile (linear interpolation) and the worst and best seeds.</p>",
        dist_table,
    ]


def _plots_section(plots: Sequence[Path]) -> list[str]:
    if not plots:
        return []
    out = ["<h2>Plots</h2>"]
    for path in plots:
        name = Path(path).name
        caption = _PLOT_CAPTIONS.get(name, "GPU occupancy per node of the reference policy, first seed, coloured by job kind (outlined: preempted)."
                                     if name.startswith("gantt_") else name)
        out.append(f'<figure><img src="{png_data_uri(path)}" alt="{esc(name)}"><figcaption>{esc(name)}: {esc(caption)}</figcaption></figure>')
    return out


def _missing_section(doc: dict) -> list[str]:
    missing = doc.get("missing") or []
    if not missing:
        return []
    rows = [[m["policy"], m["scenario"] or "-", str(m["seed"]), (m["error"], "text")] for m in missing]
    return [f"<h2>Missing episodes ({len(missing)})</h2>", '<p class="note">Failed, left out of every figure above.</p>',
            html_table(["policy", "scenario", "seed", "error"], rows, table_id="missing")]


def evaluation_report(doc: dict, plots: Sequence[Path] = ()) -> str:
    """The report page of a results document (`build_results`' or a results.json read back)
    with the PNG files `plots` embedded."""
    lb = doc["lower_bound"]["avg_ideal_runtime_s"]["mean"]
    bound = f" Lower bound on avg JCT (ideal runtimes, no queueing): {lb / 3600:.2f} h." if lb is not None else ""
    body = [
        *_header(doc),
        "<h2>Summary</h2>",
        f'<p class="note">Mean ± 95% t-interval half-width over {len(doc["seeds"])} seeds; times in hours; '
        f"the reference policy in bold.{esc(bound)}</p>",
        _summary_table(doc, TABLE_COLUMNS, "summary"),
        *_paired_section(doc),
        "<h2>Average JCT by job kind</h2>",
        _summary_table(doc, KIND_COLUMNS, "kinds"),
        *_missing_section(doc),
        *_plots_section(plots),
    ]
    return page(_title(doc), body)


def write_report(out: Path, doc: dict, plots: Sequence[Path] = ()) -> Path:
    """Write OUT/report.html (`evaluation_report`) and return its path."""
    path = Path(out) / REPORT_NAME
    path.write_text(evaluation_report(doc, plots), encoding="utf-8")
    return path
