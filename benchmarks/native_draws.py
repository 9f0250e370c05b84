"""Whether a workload's draws can move to compiled code without changing the workload: numpy's
distributions as a C library, through a Python `Generator`'s own bit generator.

    python -m benchmarks.native_draws [--seeds 300] [--jobs 200]

`envs.workload.generator.generate` draws each job's fields one by one from
`np.random.default_rng([seed, 0x5EED])`: about nine scalar calls a job (`random`, `lognormal`,
`uniform`, `integers`), 0.3-1.4 us each. numpy ships the C functions behind them
(`numpy/random/lib/libnpyrandom.a`, `numpy/random/distributions.h`: the documented way to draw
from a `Generator`'s bit generator in compiled code), and the bit generator's `capsule` gives
compiled code that generator's state. This script compiles a few lines of C (gcc, the Python and
numpy headers) that make one job's draws in `generate`'s order through those functions, then
checks, per seed, that they equal the Python calls' draws bit for bit and leave the generator in
the same state (the next draw equal), and times both. A benchmark printing figures, not a test:
it needs gcc and builds in a temporary folder.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

C_SOURCE = r"""
#include <stdint.h>
#include "numpy/random/distributions.h"
/* Per job, in generate's order: random, lognormal(0, sigma), lognormal(0, noise), random,
   uniform, uniform, random, random, integers(tenants): 9 doubles a job. */
void draws(bitgen_t *bg, int n, double sigma, double noise, double lo, double hi, uint64_t tenants, double *out) {
    for (int i = 0; i < n; i++) {
        double *o = out + 9 * i;
        uint64_t v;
        o[0] = bg->next_double(bg->state);
        o[1] = random_lognormal(bg, 0.0, sigma);
        o[2] = random_lognormal(bg, 0.0, noise);
        o[3] = bg->next_double(bg->state);
        o[4] = random_uniform(bg, lo, hi - lo);
        o[5] = random_uniform(bg, lo, hi - lo);
        o[6] = bg->next_double(bg->state);
        o[7] = bg->next_double(bg->state);
        random_bounded_uint64_fill(bg, 0, tenants - 1, 1, 0, &v);
        o[8] = (double)v;
    }
}
"""

SIGMA, NOISE, LOW, HIGH, TENANTS = 1.2, 0.5, 0.1, 0.4, 3  # llm-mix-like parameters


def build(folder: Path) -> ctypes.CDLL:
    numpy_dir = Path(np.__file__).parent
    (folder / "draws.c").write_text(C_SOURCE)
    lib = folder / "libdraws.so"
    subprocess.run(["gcc", "-O2", "-fPIC", "-shared", f"-I{sysconfig.get_paths()['include']}",
                    f"-I{numpy_dir / '_core' / 'include'}", str(folder / "draws.c"),
                    str(numpy_dir / "random" / "lib" / "libnpyrandom.a"), "-lm", "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib))


def python_draws(seed: int, jobs: int) -> tuple[np.ndarray, float]:
    rng = np.random.default_rng([seed, 0x5EED])
    out = []
    for _ in range(jobs):
        out += [rng.random(), rng.lognormal(0.0, SIGMA), rng.lognormal(0.0, NOISE), rng.random(),
                rng.uniform(LOW, HIGH), rng.uniform(LOW, HIGH), rng.random(), rng.random(), float(rng.integers(TENANTS))]
    return np.array(out), rng.random()


def compiled_draws(lib: ctypes.CDLL, seed: int, jobs: int) -> tuple[np.ndarray, float]:
    rng = np.random.default_rng([seed, 0x5EED])
    out = np.zeros(9 * jobs)
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype, pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    with rng.bit_generator.lock:
        lib.draws(ctypes.c_void_p(pointer(rng.bit_generator.capsule, b"BitGenerator")), jobs, ctypes.c_double(SIGMA),
                  ctypes.c_double(NOISE), ctypes.c_double(LOW), ctypes.c_double(HIGH), ctypes.c_uint64(TENANTS),
                  out.ctypes.data_as(ctypes.c_void_p))
    return out, rng.random()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=300)
    p.add_argument("--jobs", type=int, default=200)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        lib = build(Path(tmp))
        differ = [s for s in range(args.seeds)
                  if not (lambda a, b: np.array_equal(a[0], b[0]) and a[1] == b[1])(python_draws(s, args.jobs),
                                                                                   compiled_draws(lib, s, args.jobs))]
        times = {}
        for name, f in (("Python calls", lambda s: python_draws(s, args.jobs)),
                        ("C through the same bit generator", lambda s: compiled_draws(lib, s, args.jobs))):
            start = time.perf_counter()
            for s in range(100):
                f(s)
            times[name] = (time.perf_counter() - start) / 100 * 1e3
    print(f"numpy {np.__version__}, {os.cpu_count()} cpus; {args.seeds} seeds x {args.jobs} jobs x 9 draws")
    print(f"draws and the generator's state after them identical on {args.seeds - len(differ)} of {args.seeds} seeds"
          + (f" (differ: {differ[:10]})" if differ else ""))
    for name, ms in times.items():
        print(f"{name}: {ms:.3f} ms per {args.jobs} jobs (the generator's creation included)")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
