import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


import pytest


def worker_threads(environ=os.environ, cores: int | None = None) -> int | None:
    """Under pytest-xdist with several workers, each worker's share of the cores (at least 1);
    None in a single process (torch keeps its default there)."""
    workers = int(environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if not environ.get("PYTEST_XDIST_WORKER") or workers < 2:
        return None
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // workers)


def pytest_configure(config):
    """Each xdist worker's torch (and OpenMP/MKL, in the processes the tests start too: train.py,
    spawned label workers) gets the worker's share of the cores, so `-n 2` on 2 cores runs 2 torch
    threads, not 4 that contend (the suite's torch-heavy tests took half as much CPU again under
    -n 2 before). A count the environment sets already is kept."""
    threads = worker_threads()
    if threads is None:
        return
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
    torch = sys.modules.get("torch")  # not imported yet as a rule: it reads OMP_NUM_THREADS then
    if torch is not None:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


# Under `-n N --dist loadfile` pytest-xdist hands out whole files, by default in the order of their
# number of tests, most first, so the files of a few long tests came last: the Ray file (its Tune
# trials) then ran alone on one worker while the other had nothing left. These files (measured in
# the suite, longest first; docs/testing.md) are handed out first, the rest after them in xdist's
# order. A file missing here only loses its place; which worker runs a file changes no result.
LONG_FILES_FIRST = (
    "tests/test_ray.py",
    "tests/test_shipped_models.py",
    "tests/test_distill.py",
    "tests/test_native_rollout.py",
    "tests/test_deploy.py",
    "tests/test_state_fast.py",
    "tests/test_extender_watch_failures.py",
    "tests/test_train.py",
    "tests/test_reselect.py",
    "tests/test_service_model.py",
    "tests/test_vec.py",
    "tests/test_report.py",
    "tests/test_extender_watch.py",
    "tests/test_export.py",
    "tests/test_kernels.py",
    "tests/test_service.py",
)
# Files handed to the worker that takes the first of them, at the same time: they share a
# session's tiny run (tiny_run_64, tiny_run_192 below), which each worker would train.
SAME_WORKER = {"tests/test_deploy.py": ("tests/test_anchor.py",), "tests/test_reselect.py": ("tests/test_average.py",)}


def long_files_first(scopes, first=LONG_FILES_FIRST) -> list:
    """`scopes` (test files, in xdist's order) with those in `first` moved to the front in that order."""
    ahead = [f for f in first if f in scopes]
    return ahead + [s for s in scopes if s not in ahead]


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (each file on one worker) with LONG_FILES_FIRST handed out first and the
    files of SAME_WORKER together."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongFilesFirst(LoadFileScheduling):
        def _assign_work_unit(self, node):
            if not getattr(self, "_reordered", False):  # the first call: the queue of files is complete
                self._reordered = True
                for scope in reversed(long_files_first(list(self.workqueue))):
                    self.workqueue.move_to_end(scope, last=False)
            scope = next(iter(self.workqueue))
            super()._assign_work_unit(node)
            for other in SAME_WORKER.get(scope, ()):
                if other in self.workqueue:
                    self.workqueue.move_to_end(other, last=False)
                    super()._assign_work_unit(node)

    return LongFilesFirst(config, log)


@pytest.fixture(autouse=True)
def _private_cache_dir(tmp_path_factory, monkeypatch):
    """Each test its own teacher-check cache (agents.distill.check_cache_dir), so no test reads
    another's (or the user's) cached result; train.py subprocesses inherit it."""
    monkeypatch.setenv("GANGSCHED_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def _tiny_run(tmp_path_factory, name: str, **overrides) -> Path:
    """train.py's `main` on tests/test_train.py's tiny config with `overrides`, in this process,
    once per session (per xdist worker): a complete run folder. Tests take a copy (tests.helpers.run_copy)."""
    from tests.helpers import run_main
    from tests.test_train import write_config

    import train

    root = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GANGSCHED_CACHE_DIR", str(root / "cache"))
        r = run_main(train.main, ["--no-progress", "--config", write_config(root, **overrides), "--out", root / "run"])
    assert r.returncode == 0, r.stderr[-2000:]
    return root / "run"


@pytest.fixture(scope="session")
def tiny_run_192(tmp_path_factory) -> Path:
    """The tiny run trained for 192 timesteps: three evaluated stages (tests/test_reselect.py,
    tests/test_average.py)."""
    return _tiny_run(tmp_path_factory, "tiny192", total_timesteps=192)


@pytest.fixture(scope="session")
def tiny_run_64(tmp_path_factory) -> Path:
    """The tiny run trained for 64 timesteps, validated on seeds 500-501 against sect and sjf
    (tests/test_anchor.py, tests/test_deploy.py)."""
    return _tiny_run(tmp_path_factory, "tiny64", total_timesteps=64,
                     eval={"every_timesteps": 64, "seeds": "500-501", "baselines": ["sect", "sjf"]})

