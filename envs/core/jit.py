"""The switch between the compiled hot path and the plain-Python reference.

Some of the simulator's and the candidate layer's inner loops have a compiled twin in
envs.core.kernels (numba, `cache=True`: compiled once per machine and kept on disk next to the
module, in `__pycache__`, or under NUMBA_CACHE_DIR; where no cache location is writable, once
per process). Each call site keeps its plain-Python/numpy code as the reference and
takes the kernel only while `ENABLED` is true; both give bit-for-bit the same results (the
kernels do the same floating-point operations in the same order, numpy's pairwise summation
included), which tests/test_kernels.py checks kernel by kernel and episode by episode.

`ENABLED` is true when numba imports and the environment variable `GANGSCHED_JIT` is not `0`;
`reference_path()` turns it off for a block (tests and benchmarks compare the two paths in one
process). Without numba everything runs on the reference path. Segment requests
(envs.jobs.Job.segment_gpus) are counted by the reference and the native core, not by the
kernels' feasibility counts: the window's counts take the reference for a state with segment
jobs, and the decision loop (envs.sim.replay) does not run the compiled event loop for a workload
with them.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

try:  # numba is a dependency; the reference path still runs without it
    import numba
except ImportError:  # pragma: no cover - exercised only on a machine without numba
    numba = None

AVAILABLE = numba is not None
ENABLED = AVAILABLE and os.environ.get("GANGSCHED_JIT", "1").strip() != "0"


def njit(fn):
    """Compile `fn` with numba (nopython, cached on disk) when numba is there; else leave it
    plain Python (then no call site takes it: ENABLED is false)."""
    if numba is None:
        return fn
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # no writable cache location (a read-only install, no NUMBA_CACHE_DIR): compile per process
        return numba.njit(nogil=True)(fn)


def set_enabled(flag: bool) -> bool:
    """Take the compiled path (True, where numba is available) or the reference (False) from
    now on; returns the previous setting."""
    global ENABLED
    previous = ENABLED
    ENABLED = bool(flag) and AVAILABLE
    return previous


@contextmanager
def reference_path():
    """Run a block on the plain-Python reference path."""
    previous = set_enabled(False)
    try:
        yield
    finally:
        set_enabled(previous)
