"""The Gymnasium layer.

- `env`: `GpuClusterEnv`, registered as `gangsched/GpuCluster-v0`: a decision step per action,
  observations in the feature schema of `envs.decision.features`, the mask from the candidate set.
- `vec`: batched vector envs (SB3 and Gymnasium vector APIs): N episodes stepped in one call.

Contract: an observation and a mask are exactly the decision layer's for the simulator's state;
the same config and seed give the same episode.
"""
