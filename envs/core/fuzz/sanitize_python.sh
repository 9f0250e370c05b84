#!/usr/bin/env bash
# The native core's Python tests (tests/test_core*.py, tests/test_native_rollout.py, tests/test_native_replay.py,
# tests/test_native_candidates.py, tests/test_spanning_episodes.py, tests/test_native_features.py,
# tests/test_native_episode.py, tests/test_vec.py: the batch on threads) against the
# extension built with AddressSanitizer and UndefinedBehaviorSanitizer: a copy of the working
# tree in a temporary folder, its envs.core._core compiled there with -fsanitize=address,undefined,
# the sanitizer runtimes preloaded into Python, the editable install's redirection switched off.
# Usage: bash envs/core/fuzz/sanitize_python.sh [pytest arguments]   (`make sanitize-python`)
set -euo pipefail
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/test_core.py tests/test_core_choice.py tests/test_native_rollout.py tests/test_native_replay.py tests/test_native_candidates.py tests/test_spanning_episodes.py tests/test_native_features.py tests/test_native_episode.py tests/test_vec.py)
root="$(cd "$(dirname "$0")/../../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/tree"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tmp/tree")
site="$(cd "$root" && python3 -c "from pathlib import Path; from benchmarks.ab import isolated_site; print(isolated_site(Path('$tmp')))")"
cmake -S "$tmp/tree" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Debug -DGANGSCHED_SANITIZE=ON \
  -DPython_EXECUTABLE="$(command -v python3)" -Dnanobind_DIR="$(python3 -c 'import nanobind; print(nanobind.cmake_dir())')" >/dev/null
cmake --build "$tmp/build" -j 2 >/dev/null
cp "$tmp"/build/_core*.so "$tmp/tree/envs/core/"
cd "$tmp/tree"
# A sanitizer's report ends the process inside a test, where pytest captures stderr: the reports
# go to files, printed below when the run fails.
rc=0
PYTHONPATH="$site:$tmp/tree" \
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
ASAN_OPTIONS="detect_leaks=0:log_path=$tmp/asan" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$tmp/ubsan" \
python3 -m pytest -q -p no:randomly -p no:cacheprovider -n 0 "${tests[@]}" || rc=$?
if [ "$rc" -ne 0 ]; then
  cat "$tmp"/asan.* "$tmp"/ubsan.* 2>/dev/null || true
  echo "sanitize_python: pytest exited $rc" >&2
fi
exit "$rc"
