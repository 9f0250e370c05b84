import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


import pytest


@pytest.fixture(autouse=True)
def _private_cache_dir(tmp_path_factory, monkeypatch):
    """Each test its own teacher-check cache (agents.distill.check_cache_dir), so no test reads
    another's (or the user's) cached result; train.py subprocesses inherit it."""
    monkeypatch.setenv("GANGSCHED_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
