"""The decision layer: what a scheduler knows, and what it may do about it.

- `state`: `ClusterState`, everything a scheduler knows at one moment (estimates, never true
  work; the past, never future arrivals), and its plain-data form.
- `window`: which queued jobs can be placed now, and the queue window.
- `placement`: the placement rules (which GPUs a gang gets), pure functions of free GPU counts.
- `candidates`: the candidate set and the one action mask (starts, preemptions, WAIT).
- `features`: the feature schema and the features a policy sees of a decision state.
- `las`: Tiresias' two-dimensional least-attained-service queues.
- `cache`: the candidate layer's caches, keyed on the state's versions.

Contract: every function here reads a decision state and nothing else; none imports the
simulator, the workload or the envs (tests/test_layout.py checks it), so a baseline, a policy and
the scoring service decide from the same information. The native core (`envs.core`) computes
the same candidates and features bit for bit.
"""
