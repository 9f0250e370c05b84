"""A/B timing of one command on two versions of the code, interleaved, for a noisy machine.

    python -m benchmarks.ab --base REV [--runs 7] [--cpu N] [--same-output] -- COMMAND ...

Checks out REV (a commit, tag or branch) into a temporary git worktree, runs COMMAND once on
each side untimed (numba compiles or loads its cache, the OS caches files), then `--runs` times
on each side in alternating order (base, this tree; this tree, base; ...), each run in its own
process from that side's root with PYTHONPATH pointing there, pinned to CPU `--cpu` when given.
The base side imports only the worktree's code: the editable install's import redirection (which
maps `envs`, `agents`, ... to this tree) is switched off there by a `sitecustomize`, and a base
with a native core (CMakeLists.txt) has it compiled into its worktree first (or this tree's built
core copied there, when the base's core sources are this tree's).
It prints each side's process CPU time (user + system, from the child's rusage) and wall time:
the minimum and the median, and this tree's over the base's; and the ratio of the CPU times of
each pair of runs adjacent in time (run i of each side), their median and range, which cancels
the machine's slow drifts.

On these shared machines one run's time moves by 10-25% from one minute to the next (see
docs/performance.md): the minimum over interleaved runs is the figure to compare, and a difference
smaller than the two sides' spread is no difference. `--same-output` also checks that both sides
print the same last line (a replay's avg JCT, a digest), so a speed-up that changes results is
caught. The worktree is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


_SITECUSTOMIZE = """\
# benchmarks.ab's base side, tests.mutation's copy: import this tree's code, not the editable install's.
import sys
sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__name__.startswith("ScikitBuild")]
sys.path[:] = [p for p in sys.path if p != {root!r}]
"""


def _same_core_sources(worktree: Path) -> bool:
    """The worktree's native core sources (CMakeLists.txt, envs/core/src) are byte for byte this
    tree's."""
    def files(root: Path) -> dict[str, bytes]:
        out = {"CMakeLists.txt": (root / "CMakeLists.txt").read_bytes()}
        src = root / "envs" / "core" / "src"
        if src.is_dir():
            out.update({str(f.relative_to(root)): f.read_bytes() for f in sorted(src.rglob("*")) if f.is_file()})
        return out
    return files(worktree) == files(ROOT)


def isolated_site(tmp: Path) -> Path:
    """A folder holding a `sitecustomize` that switches the editable install's import redirection
    off, so that a process with it first on PYTHONPATH imports the code of its own tree."""
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(root=str(ROOT)))
    return site


def install_core(tree: Path, tmp: Path) -> None:
    """Put `tree`'s native core, when it has one, into its envs/core: this tree's built one when
    the sources are the same, else compiled in `tmp`."""
    if not (tree / "CMakeLists.txt").exists():
        return
    if _same_core_sources(tree):
        from envs.core import _core
        shutil.copy(_core.__file__, tree / "envs" / "core" / Path(_core.__file__).name)
        return
    import nanobind
    build = tmp / "core-build"
    subprocess.run(["cmake", "-S", str(tree), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                    f"-DPython_EXECUTABLE={sys.executable}", f"-Dnanobind_DIR={nanobind.cmake_dir()}"],
                   check=True, capture_output=True, text=True)
    subprocess.run(["cmake", "--build", str(build), "-j", "2"], check=True, capture_output=True, text=True)
    for lib in build.glob("_core*.so"):
        shutil.copy(lib, tree / "envs" / "core" / lib.name)


def isolate(worktree: Path, tmp: Path) -> str:
    """The PYTHONPATH that makes a process import `worktree`'s code alone (see the module's
    docstring), its native core in place."""
    site = isolated_site(tmp)
    install_core(worktree, tmp)
    return f"{site}{os.pathsep}{worktree}"


def run_timed(cmd: list[str], cwd: Path, cpu: int | None, pythonpath: str | None = None) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, last line of stdout) of one run of `cmd` in `cwd` (PYTHONPATH:
    `pythonpath`, default `cwd`); the CPU time is the child's own (os.wait4's rusage: this child
    alone, user + system)."""
    env = dict(os.environ, PYTHONPATH=pythonpath or str(cwd))
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, error = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} in {cwd} exited with {proc.returncode}:\n{error[-2000:]}")
    lines = text.strip().splitlines()
    return usage.ru_utime + usage.ru_stime, wall, lines[-1] if lines else ""


def summary(xs: list[float]) -> str:
    return f"min {min(xs):7.2f} s  median {statistics.median(xs):7.2f} s"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print("error: give the command after --", file=sys.stderr)
        return 2
    split = argv.index("--")
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the version to compare against: a commit, tag or branch")
    ap.add_argument("--runs", type=int, default=7, help="timed runs per side (7)")
    ap.add_argument("--cpu", type=int, default=None, help="pin every run to this CPU (taskset)")
    ap.add_argument("--same-output", action="store_true", help="fail unless both sides print the same last line")
    args = ap.parse_args(argv[:split])
    cmd = argv[split + 1:]
    if not cmd:
        print("error: give the command after --", file=sys.stderr)
        return 2
    if args.runs < 1:
        print("error: --runs must be at least 1", file=sys.stderr)
        return 2
    rev = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{args.base}^{{commit}}"], cwd=ROOT, capture_output=True, text=True)
    if rev.returncode != 0:
        print(f"error: --base {args.base!r}: not a commit of this repository", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="gangsched-ab-"))
    base_dir = tmp / "base"
    try:
        subprocess.run(["git", "worktree", "add", "--detach", str(base_dir), rev.stdout.strip()], cwd=ROOT, check=True,
                       capture_output=True, text=True)
        sides = {"base": base_dir, "this tree": ROOT}
        paths = {"base": isolate(base_dir, tmp), "this tree": None}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        last: dict[str, set[str]] = {name: set() for name in sides}
        for name, cwd in sides.items():  # untimed: compile or load numba's cache, warm the file cache
            last[name].add(run_timed(cmd, cwd, args.cpu, paths[name])[2])
        for i in range(args.runs):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for name in order:
                cpu_s, wall, line = run_timed(cmd, sides[name], args.cpu, paths[name])
                times[name].append((cpu_s, wall))
                last[name].add(line)
                print(f"run {i + 1}/{args.runs} {name:9s}: cpu {cpu_s:7.2f} s  wall {wall:7.2f} s", flush=True)
        print(f"\n{' '.join(cmd)}: {args.runs} interleaved runs per side{'' if args.cpu is None else f' on CPU {args.cpu}'}")
        for name in sides:
            cpu_s, wall = zip(*times[name])
            print(f"{name:9s} ({args.base if name == 'base' else 'HEAD + changes'}): cpu {summary(list(cpu_s))};  wall {summary(list(wall))}")
        (b_cpu, b_wall), (n_cpu, n_wall) = ([min(x) for x in zip(*times[n])] for n in sides)
        print(f"this tree / base: cpu {n_cpu / b_cpu:.3f} (min over min), wall {n_wall / b_wall:.3f}")
        pairs = sorted(n[0] / b[0] for b, n in zip(times["base"], times["this tree"]))  # run i of each side: adjacent in time
        print(f"paired cpu ratios (run i of each side, adjacent in time): median {statistics.median(pairs):.3f}, "
              f"range {pairs[0]:.3f}-{pairs[-1]:.3f}")
        if args.same_output:
            if len(last["base"]) != 1 or last["base"] != last["this tree"]:
                print(f"error: the last lines differ: base {sorted(last['base'])}, this tree {sorted(last['this tree'])}", file=sys.stderr)
                return 1
            print(f"same last line on both sides: {next(iter(last['base']))}")
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as e:
        print(f"error: {' '.join(e.cmd)} failed:\n{(e.stderr or '')[-2000:]}", file=sys.stderr)
        return 1
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_dir)], cwd=ROOT, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
