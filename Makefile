# gangsched: the two commands of the README, and the rest.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
TORCH_VERSION ?= 2.13.0
# pytest-xdist worker processes for make test / test-fast, each test file on one worker (0: no workers, one process).
TEST_WORKERS ?= 2

.PHONY: install demo test test-fast sanitize sanitize-python mutation bench clean

# torch is pinned first so that pip does not pull a multi-GB CUDA build on CPU-only machines.
install:
	$(PIP) install -q "torch==$(TORCH_VERSION)"
	$(PIP) install -q -e ".[test,service,ray]"

# Install, distil the lookahead into a policy on the slo-preempt scenario with a small budget
# (configs/train/demo.yaml), then compare it with every baseline on the scenario's test seeds.
demo: install
	$(PYTHON) train.py --config configs/train/demo.yaml --out runs/demo --compare

# Install and run the whole test suite (docs/testing.md: its layers and times).
test: install
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# Install and run the suite without the tests marked slow (each over 20 s: the tiny training
# runs end to end, the Ray trials, the shipped model against the heuristics).
test-fast: install
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow"

# Mutation testing of the CI groups (tests/mutation.py; `python -m tests.mutation --all` for every group):
# fails on a surviving mutant not listed with its reason in tests/mutation_survivors.json.
mutation: install
	$(PYTHON) -m tests.mutation

# The native core's fuzz driver under AddressSanitizer and UndefinedBehaviorSanitizer (no Python),
# 20,000 iterations per seed (10-19 s each on the shared 2-core machine). Seeds 4 and 5 reach states
# that seed 1 does not: TP groups spanning trays beside domains whose groups sit on one node.
FUZZ_SEEDS ?= 1 4 5
sanitize:
	cmake -S . -B build/sanitize -DGANGSCHED_PYTHON=OFF -DGANGSCHED_FUZZ=ON -DGANGSCHED_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build build/sanitize -j 2
	for seed in $(FUZZ_SEEDS); do build/sanitize/core_fuzz 20000 $$seed || exit 1; done

sanitize-python:  # the core's Python tests against an ASan+UBSan build of the extension (~4 min; not in CI)
	bash envs/core/fuzz/sanitize_python.sh

bench: install
	$(PYTHON) -m benchmarks.env_speed
	$(PYTHON) -m benchmarks.replay_philly
	$(PYTHON) -m benchmarks.headroom

clean:
	rm -rf runs results build *.egg-info .pytest_cache .hypothesis
