"""benchmarks/ab.py: each side runs its own version of the code, the timing summary is printed,
--same-output catches differing results, and the temporary worktree is removed."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.test_train import REPO


def ab(tmp, *args: str) -> subprocess.CompletedProcess:
    """benchmarks.ab with its temporary worktree under `tmp` (TMPDIR), so that the checks below see
    only this test's worktrees, whatever other A/B runs on the repository do meanwhile."""
    return subprocess.run([sys.executable, "-m", "benchmarks.ab", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TMPDIR=str(tmp)))


def worktrees() -> str:
    return subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout


def test_each_side_imports_its_own_code_and_differing_output_fails(tmp_path):
    where = "import envs, pathlib; print(pathlib.Path(envs.__file__).resolve().parent.parent)"
    r = ab(tmp_path, "--base", "HEAD", "--runs", "2", "--same-output", "--", sys.executable, "-c", where)
    assert r.returncode == 1, r.stderr
    assert "the last lines differ" in r.stderr and "gangsched-ab-" in r.stderr and str(REPO) in r.stderr
    assert sum(line.startswith("run ") for line in r.stdout.splitlines()) == 4
    assert "this tree / base: cpu" in r.stdout and "paired cpu ratios" in r.stdout
    assert str(tmp_path) in r.stderr and str(tmp_path) not in worktrees()

    r = ab(tmp_path, "--base", "HEAD", "--runs", "1", "--same-output", "--", sys.executable, "-c", "print(6 * 7)")
    assert r.returncode == 0 and "same last line on both sides: 42" in r.stdout, r.stderr
    r = ab(tmp_path, "--base", "no-such-rev", "--", sys.executable, "-c", "pass")
    assert r.returncode == 2 and "--base 'no-such-rev': not a commit" in r.stderr
    r = ab(tmp_path, "--base", "HEAD", "--", sys.executable, "-c", "raise SystemExit(3)")
    assert r.returncode == 1 and "exited with 3" in r.stderr and str(tmp_path) not in worktrees()


def test_the_philly_replays_digest_is_the_schedule_on_both_paths(capsys):
    """`benchmarks.replay_philly --digest` ends with a digest of the schedule, the line the A/B
    tool compares: the same on the compiled and the reference path, another for another seed."""
    from benchmarks.replay_philly import main
    from envs.core import jit

    def digest(*args: str) -> str:
        main(["--max-jobs", "400", "--digest", *args])
        last = capsys.readouterr().out.strip().splitlines()[-1]
        assert last.startswith("schedule digest ") and len(last.split()[-1]) == 16
        return last

    fast = digest()
    with jit.reference_path():
        assert digest() == fast
    assert digest("--seed", "1") != fast
