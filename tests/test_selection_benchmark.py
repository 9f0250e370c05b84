"""benchmarks/selection.py: each rule picks the model it names, from the files train.py,
agents.reselect and evaluate.py write (written here by hand, with figures chosen so that every
rule picks a different model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.selection import RULES, main, run_table

STAGES = [("distill-r0", 0), ("distill-r1", 0), ("ppo", 20000), ("ppo", 40000), ("ppo", 40960)]
FIRST = [3.0, 2.9, 2.8, 2.95, 3.1]  # lowest: stage 2
SECOND = [3.0, 2.7, 2.95, 2.85, 3.2]  # lowest: stage 1; mean of both: stage 1 (2.80) before 3 (2.90)
TEST = [-0.02, -0.03, -0.01, -0.06, 0.02]  # lowest: stage 3


def _write(tmp_path: Path, run_name: str = "run") -> tuple[Path, Path]:
    run, results = tmp_path / run_name, tmp_path / f"{run_name}-test"
    run.mkdir()
    results.mkdir()
    models = [f"stages/{i:02d}-{s}-{t}.zip" for i, (s, t) in enumerate(STAGES)]
    (run / "eval.json").write_text(json.dumps([
        {"stage": s, "timesteps": t, "score": f, "rel_diff": f / 3.0 - 1, "model": m}
        for (s, t), f, m in zip(STAGES, FIRST, models)]))
    (run / "reselect-120-139.json").write_text(json.dumps(
        {"stages": [{"model": m, "score": f, "rel_diff": f / 3.0 - 1} for f, m in zip(SECOND, models)]}))
    (results / "results.json").write_text(json.dumps({"paired_vs_reference": {
        "sect": {"rel_diff_mean": 0.0, "ci95_low": 0.0, "ci95_high": 0.0},
        **{f"ppo={run / m}": {"rel_diff_mean": t, "ci95_low": t - 0.02, "ci95_high": t + 0.02} for t, m in zip(TEST, models)}}}))
    return run, results


def test_each_rule_picks_its_model(tmp_path, capsys):
    run, results = _write(tmp_path)
    rows = run_table(run, results, "reselect-120-139.json")
    assert [r["test"] for r in rows] == TEST
    picks = {name: rule(rows) for name, rule in RULES.items()}
    assert picks == {"first": 2, "second": 1, "both": 1, "last": 4, "student": 1, "oracle": 3}
    assert main([f"{run}:{results}"]) == 0
    out = capsys.readouterr().out
    assert "| ppo 40000 | -1.7% | -5.0% | -6.0% [-8.0%, -4.0%] | oracle |" in out
    # first picks stage 2 (test -1.0%, upper end +1.0%: within the bound, not ahead); regret 5.0 points
    assert "| first | -1.0% | 1 | 0 | -1.0% | 5.0 points | 1 |" in out


def test_a_missing_model_is_named(tmp_path):
    run, results = _write(tmp_path)
    data = json.loads((results / "results.json").read_text())
    del data["paired_vs_reference"][f"ppo={run / 'stages/04-ppo-40960.zip'}"]
    (results / "results.json").write_text(json.dumps(data))
    with pytest.raises(SystemExit, match=r"results.json: has no ppo=.*04-ppo-40960.zip"):
        run_table(run, results, "reselect-120-139.json")
    with pytest.raises(SystemExit, match=r"reselect-9.json: no such file"):
        run_table(run, results, "reselect-9.json")
