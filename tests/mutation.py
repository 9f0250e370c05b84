"""Mutation testing of the modules where a silent break costs most, with mutmut.

    python -m tests.mutation [--group NAME ...] [--all] [--update] [--keep DIR]

Each group names the modules it mutates and the test files that must catch their mutants
(`GROUPS`). For each group, a copy of the working tree (tracked and untracked, not ignored files)
is made in a temporary folder with the built native core, mutmut mutates the group's modules
there and runs, for each mutant, the group's tests that cover the mutated function. The copy
imports its own code: the editable install's import redirection (which maps `envs`, `agents`,
... to this tree) is switched off there by a `sitecustomize`, as `benchmarks.ab` does.

It prints, per module, the mutants killed, survived and not covered, and the score (killed over
killed + survived). Every surviving mutant must be listed, with the reason it may survive, in
`tests/mutation_survivors.json`; a survivor not listed there fails the run (exit 1), and so does
a group whose score falls below its `min_score` there. A listed survivor is identified by its
module, function and the changed source line, not by mutmut's running number, so editing other
functions does not invalidate the list. `--update` rewrites the list's entries for the groups
run, keeping the reasons already written and marking new ones "unreviewed" (to review before
committing). docs/testing.md gives the scores and how long each group takes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.ab import install_core, isolated_site

ROOT = Path(__file__).resolve().parent.parent
SURVIVORS = ROOT / "tests" / "mutation_survivors.json"

# group -> (modules mutated, test files that must catch them)
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "baselines": (["baselines/*.py"], ["tests/test_baselines.py", "tests/test_baselines_choices.py", "tests/test_block_baseline.py",
                                       "tests/test_segment_states.py"]),
    "placement": (["envs/decision/placement.py"], ["tests/test_core.py", "tests/test_nvlink_domains.py", "tests/test_spanning_groups.py",
                                          "tests/test_segment_rules.py"]),
    "objective": (["envs/sim/objective.py", "envs/sim/metrics.py"], ["tests/test_metrics_hand.py"]),
    "window": (["envs/decision/window.py", "envs/decision/candidates.py"], ["tests/test_window_hand.py", "tests/test_kernels_spanning.py"]),
    "lookahead-sampling": (["agents/lookahead.py"], ["tests/test_lookahead.py"]),
    "extender": (["service/k8s.py"], ["tests/test_extender_verbs.py", "tests/test_service_k8s.py"]),
}
CI_GROUPS = ("baselines", "placement", "objective")  # what .ci/run checks (the others: docs/testing.md)

_STATUS = {0: "survived", 33: "no tests", 5: "no tests", None: "not checked"}  # others: killed (or timeout)


def _copy_tree(dest: Path) -> None:
    """The working tree's tracked and untracked (not ignored) files."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def _configure(dest: Path, modules: list[str], tests: list[str]) -> None:
    packages = ["envs/", "agents/", "baselines/", "service/"]
    others = sorted(x.name + ("/" if x.is_dir() else "") for x in dest.iterdir() if x.name + "/" not in packages)
    config = ["", "[tool.mutmut]", f"source_paths = {json.dumps(packages)}", f"only_mutate = {json.dumps(modules)}",
              f"also_copy = {json.dumps(others)}", f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
              'pytest_add_cli_args = ["-p", "no:cacheprovider", "-x"]']
    with open(dest / "pyproject.toml", "a") as f:
        f.write("\n".join(config) + "\n")


def _diff_line(dest: Path, env: dict, name: str) -> str:
    """The source lines a mutant changes (- old / + new), as mutmut shows them."""
    out = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=dest, env=env, capture_output=True, text=True).stdout
    lines = [ln.rstrip() for ln in out.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return " / ".join(" ".join(ln.split()) for ln in lines)


def _function(name: str) -> str:
    """mutmut's mutant name without its running number: module.x_function or module.xǁClassǁmethod."""
    return re.sub(r"__mutmut_\d+$", "", name)


def run_group(group: str, keep: Path | None = None) -> dict:
    """Run one group; returns {"modules": {module: counts}, "survivors": [...], "score": float, "seconds": float}."""
    modules, tests = GROUPS[group]
    tmp = Path(tempfile.mkdtemp(prefix=f"gangsched-mutation-{group}-")) if keep is None else keep / group
    if keep is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    t0 = time.perf_counter()
    try:
        work = tmp / "tree"
        work.mkdir()
        site = isolated_site(tmp)
        _copy_tree(work)
        install_core(work, tmp)
        _configure(work, modules, tests)
        env = dict(os.environ, PYTHONPATH=str(site), MPLBACKEND="Agg")
        proc = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", "2"], cwd=work, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0 or not (work / "mutants").is_dir():
            raise RuntimeError(f"mutmut failed on group {group}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        counts: dict[str, dict[str, int]] = {}
        survivors = []
        for meta in sorted((work / "mutants").rglob("*.py.meta")):
            module = str(meta.relative_to(work / "mutants"))[: -len(".meta")]
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            c = counts.setdefault(module, {"killed": 0, "survived": 0, "no tests": 0})
            for name, code in sorted(codes.items()):
                status = _STATUS.get(code, "killed")
                if status == "not checked":
                    continue
                c[status] += 1
                if status == "survived":
                    survivors.append({"module": module, "function": _function(name), "change": _diff_line(work, env, name)})
        killed = sum(c["killed"] for c in counts.values())
        survived = sum(c["survived"] for c in counts.values())
        return {"modules": counts, "survivors": survivors, "score": killed / max(killed + survived, 1),
                "seconds": time.perf_counter() - t0}
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


def _key(s: dict) -> tuple:
    return s["module"], s["function"], s["change"]


def check(group: str, result: dict, known: dict) -> list[str]:
    """What fails: survivors not listed for the group, and a score below its minimum."""
    entry = known.get(group, {})
    listed = {_key(s) for s in entry.get("survivors", [])}
    problems = [f"new surviving mutant in {s['module']} ({s['function']}): {s['change']}"
                for s in result["survivors"] if _key(s) not in listed]
    if result["score"] < entry.get("min_score", 0.0):
        problems.append(f"score {result['score']:.3f} below the group's minimum {entry['min_score']}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", action="append", choices=sorted(GROUPS), help="a group to run (repeatable)")
    parser.add_argument("--all", action="store_true", help="every group (default: the CI groups)")
    parser.add_argument("--update", action="store_true", help="rewrite the survivors list for the groups run")
    parser.add_argument("--keep", type=Path, help="keep each group's working copy under this folder")
    args = parser.parse_args(argv)
    groups = sorted(GROUPS) if args.all else (args.group or list(CI_GROUPS))
    known = json.loads(SURVIVORS.read_text()) if SURVIVORS.exists() else {}
    failed = False
    for group in groups:
        result = run_group(group, args.keep)
        for module, c in result["modules"].items():
            k, s = c["killed"], c["survived"]
            print(f"{group:18s} {module:28s} killed {k:4d}  survived {s:3d}  no tests {c['no tests']:3d}  "
                  f"score {k / max(k + s, 1):.3f}")
        print(f"{group:18s} score {result['score']:.3f} ({len(result['survivors'])} survivors, {result['seconds']:.0f} s)")
        if args.update:
            reasons = {_key(s): s.get("reason", "unreviewed") for s in known.get(group, {}).get("survivors", [])}
            known[group] = {"min_score": known.get(group, {}).get("min_score", round(result["score"] - 0.005, 3)),
                            "survivors": [{**s, "reason": reasons.get(_key(s), "unreviewed")} for s in result["survivors"]]}
            continue
        for problem in check(group, result, known):
            print(f"FAIL {group}: {problem}")
            failed = True
    if args.update:
        SURVIVORS.write_text(json.dumps(known, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
        print(f"wrote {SURVIVORS.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
