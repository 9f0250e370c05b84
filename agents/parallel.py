"""One way to run many independent tasks: in this process, in a pool of worker processes, or as
Ray tasks on this machine or on a Ray cluster.

Evaluation episodes (`agents.evaluation.run_all`) and teacher labelling (`agents.distill`) both
go through `run_tasks`, so a backend added here serves both. Results come back in task order
whatever order the workers finish in, so a run is the same with 1 or N workers and with either
backend.

Backends:
    local   `workers` <= 1: in this process; else a pool of `workers` spawned processes.
    ray     each task is a Ray task (`ray.remote`, one CPU each). `ray_address=None` starts Ray
            on this machine; an address (`auto`, `HOST:6379`, `ray://HOST:10001`) joins that
            cluster. `workers` is ignored: the cluster's CPUs decide how many run at once, or
            `max_in_flight` caps the tasks submitted at a time.
            Ray is an optional extra (`pip install -e .[ray]`) imported only here, only then.

Failures: with `on_error="raise"` (the default) the first failed task raises its own exception.
With `on_error="keep"` every task runs; a failed one (an exception in it, its worker process
killed) leaves a `TaskError` in its place and the others' results are kept. Retries are Ray's
own task options (`ray_options`, passed to `.options()`): `max_retries` (default 3) reruns a
task whose worker died (killed, out of memory, node lost); `retry_exceptions` (default False)
would rerun a task that raised, which an evaluation episode, being deterministic, would only
raise again. The local backend does not retry: a killed pool worker fails the tasks that had
not finished.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

BACKENDS = ("local", "ray")
ON_ERROR = ("raise", "keep")
RAY_INSTALL = "pip install -e .[ray]"
# Ray's own defaults for a task, spelled out: one CPU, a task whose worker died is rerun up to 3
# times, one that raised is not rerun.
RAY_TASK_DEFAULTS: dict[str, Any] = {"num_cpus": 1, "max_retries": 3, "retry_exceptions": False}


class BackendError(RuntimeError):
    """A backend that cannot run here (Ray not installed, a cluster that cannot be reached):
    one line, reported before any task runs."""


@dataclass(frozen=True)
class TaskError:
    """A failed task, in its result's place when `run_tasks(..., on_error="keep")`."""

    index: int  # position in `tasks`
    error: str  # one line: "ExceptionType: message"
    details: str  # the traceback, or Ray's report of the dead worker

    def __str__(self) -> str:
        return self.error


def task_errors(results: Sequence[Any]) -> list[TaskError]:
    """The failed tasks of a `run_tasks(..., on_error="keep")` result, in task order."""
    return [r for r in results if isinstance(r, TaskError)]


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _task_error(index: int, e: BaseException) -> TaskError:
    cause = getattr(e, "cause", None)  # a RayTaskError carries the task's own exception
    shown = cause if isinstance(cause, BaseException) else e
    return TaskError(index, _one_line(shown), "".join(traceback.format_exception(e)))


def import_ray() -> Any:
    """The `ray` module, or BackendError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise BackendError(f"--backend ray needs Ray, which is not installed here: {RAY_INSTALL}") from None
    return ray


def ray_init(address: str | None = None, *, num_cpus: int | None = None) -> Any:
    """Connect this process to Ray once: `address=None` starts a new Ray instance on this
    machine (`num_cpus`: its CPUs, all by default), an address joins that cluster. A no-op when
    this process is already connected (a test's session, a second call). Returns `ray`."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": True}
    if address is None:
        kwargs.update(address="local", num_cpus=num_cpus, include_dashboard=False)
    else:
        _check_reachable(address)
        kwargs.update(address=address)
    try:
        ray.init(**kwargs)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as e:
        where = f"the Ray cluster at {address}" if address else "Ray on this machine"
        hint = ""
        if address not in (None, "auto") and "RAY_AUTH_MODE" not in os.environ:  # Ray sends its token to an explicit address only when told
            hint = " (a cluster with token authentication also needs RAY_AUTH_MODE=token and its token: docs/ray.md)"
        raise BackendError(f"cannot start or reach {where}: {_one_line(e)}{hint}") from None
    return ray


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """A HOST:PORT (or ray://HOST[:PORT]) address must accept a connection: Ray itself would
    retry an unreachable one for minutes. `auto` and other forms are left to Ray."""
    host_port = address.removeprefix("ray://")
    host, sep, port = host_port.rpartition(":")
    if not sep:
        host, port = host_port, "10001" if address.startswith("ray://") else ""
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise BackendError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


@contextlib.contextmanager
def ray_session(address: str | None = None, *, num_cpus: int | None = None) -> Iterator[Any]:
    """`ray_init` for the length of a command: shuts Ray down at the end only if it started it
    here (a session opened by the caller, e.g. a test's, stays open)."""
    ray = import_ray()
    started = not ray.is_initialized()
    ray_init(address, num_cpus=num_cpus)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def ray_cpus() -> int:
    """CPUs of the Ray cluster this process is connected to (0 when not connected)."""
    ray = import_ray()
    return int(ray.cluster_resources().get("CPU", 0)) if ray.is_initialized() else 0


def _worker_init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per worker, also for torch (read at its import)


def run_tasks(fn: Callable[[Any], Any], tasks: Sequence[Any], *, workers: int = 1, backend: str = "local",
              desc: str = "tasks", progress: bool = True, on_error: str = "raise", ray_address: str | None = None,
              ray_options: dict[str, Any] | None = None, max_in_flight: int | None = None) -> list[Any]:
    """`[fn(t) for t in tasks]`, in task order, with a progress bar on stderr.

    backend "local": in `workers` spawned processes when workers > 1 (`fn` and the tasks must
    pickle). backend "ray": each task a Ray task (`fn` and the tasks travel through Ray's object
    store; `fn` must be importable on the workers, as a module-level function of this project
    is); `ray_address` as `ray_init`, `ray_options` override `RAY_TASK_DEFAULTS`, `max_in_flight`
    (None: no cap) limits the tasks submitted at a time.
    on_error "raise": the first failure raises; "keep": a failed task's slot holds a TaskError."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend '{backend}' (known: {', '.join(BACKENDS)})")
    if on_error not in ON_ERROR:
        raise ValueError(f"unknown on_error '{on_error}' (known: {', '.join(ON_ERROR)})")
    from tqdm import tqdm

    out: list[Any] = [None] * len(tasks)
    with tqdm(total=len(tasks), desc=desc, unit="task", file=sys.stderr, disable=not progress) as bar:
        if backend == "ray":
            _run_ray(fn, tasks, out, bar, max_in_flight, on_error, ray_address, ray_options)
        elif workers <= 1 or len(tasks) <= 1:
            for i, t in enumerate(tasks):
                try:
                    out[i] = fn(t)
                except Exception as e:
                    if on_error == "raise":
                        raise
                    out[i] = _task_error(i, e)
                bar.update()
        else:
            _run_pool(fn, tasks, out, bar, workers, on_error)
    return out


def _run_pool(fn: Callable, tasks: Sequence[Any], out: list, bar: Any, workers: int, on_error: str) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # torch and fork do not mix
    with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=ctx, initializer=_worker_init) as pool:
        futures = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
        for f in as_completed(futures):
            i = futures[f]
            try:
                out[i] = f.result()
            except Exception as e:
                if on_error == "raise":
                    raise
                if isinstance(e, BrokenProcessPool):  # a worker died: every unfinished task fails with it
                    e = BrokenProcessPool("a worker process died (killed or out of memory) before this task finished")
                out[i] = _task_error(i, e)
            bar.update()


def _run_ray(fn: Callable, tasks: Sequence[Any], out: list, bar: Any, max_in_flight: int | None, on_error: str,
             address: str | None, options: dict[str, Any] | None) -> None:
    ray = ray_init(address)
    remote = ray.remote(fn).options(**{**RAY_TASK_DEFAULTS, **(options or {})})
    cap = max(1, max_in_flight) if max_in_flight else len(tasks)
    index: dict[Any, int] = {}
    pending: list[Any] = []
    queue = iter(enumerate(tasks))

    def submit() -> None:
        for i, t in queue:
            ref = remote.remote(t)
            index[ref] = i
            pending.append(ref)
            if len(pending) >= cap:
                return

    submit()
    while pending:
        done, rest = ray.wait(pending, num_returns=1)
        pending[:] = rest
        for ref in done:
            i = index.pop(ref)
            try:
                out[i] = ray.get(ref)
            except ray.exceptions.RayTaskError as e:
                if on_error == "raise":
                    raise e.as_instanceof_cause() from None
                out[i] = _task_error(i, e)
            except ray.exceptions.RayError as e:  # the worker died (after Ray's retries), the node was lost, ...
                if on_error == "raise":
                    raise
                out[i] = _task_error(i, e)
            bar.update()
        submit()
