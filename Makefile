# gangsched: the two commands of the README, and the rest.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
TORCH_VERSION ?= 2.13.0

.PHONY: install demo test test-fast bench clean

# torch is pinned first so that pip does not pull a multi-GB CUDA build on CPU-only machines.
install:
	$(PIP) install -q "torch==$(TORCH_VERSION)"
	$(PIP) install -q -e ".[test,service,ray]"

# Install, train the quick PPO config for a few minutes, compare it with every baseline.
demo: install
	$(PYTHON) train.py --config configs/train/research/ppo-quick.yaml --out runs/quick --compare

# Install and run the whole test suite.
test: install
	$(PYTHON) -m pytest -q

bench: install
	$(PYTHON) -m benchmarks.env_speed
	$(PYTHON) -m benchmarks.replay_philly
	$(PYTHON) -m benchmarks.headroom

clean:
	rm -rf runs results build *.egg-info .pytest_cache .hypothesis
