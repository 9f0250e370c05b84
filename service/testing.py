"""Start a real service process on a free loopback port, for tests and benchmarks.

    with ServiceProcess(["--cluster", "mixed-64gpu"]) as svc:
        httpx.post(svc.url + "/v1/score", json={...})

`python -m service ...` runs as a subprocess; the context waits for `GET /readyz` to answer 200
(or the process to exit, raising with its output) and stops the process on exit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    def __init__(self, args: list[str], startup_timeout_s: float = 60.0):
        self.args = list(args)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def get(self, path: str) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, {}

    def __enter__(self) -> ServiceProcess:
        cmd = [sys.executable, "-m", "service", *self.args, "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd)} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if self.get("/readyz")[0] == 200:
                    return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        self.__exit__(None, None, None)
        raise RuntimeError(f"service not ready within {self.startup_timeout_s} s:\n{self.output()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
