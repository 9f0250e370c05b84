"""gangsched environments, in layers; each sub-package's docstring states its contract.

- `envs.jobs`: the job record and the vocabulary every layer shares (kinds, priorities).
- `envs.cluster`: the hardware: topology, GPU and node types, the speed model, cluster configs
  and importers of real topology descriptions.
- `envs.workload.generator`: what arrives: the synthetic generator, trace readers, capacity and load.
- `envs.decision`: the decision layer: the decision state (what a scheduler knows), the queue
  window, the placement rules, the candidate set with its one action mask, and the features.
- `envs.sim`: the discrete-event simulator and its records, the objective and the metrics, and
  the decision loop without Gymnasium (`envs.sim.replay`).
- `envs.core`: the compiled hot path: the native C++ core and its bindings, the numba kernels,
  and the switch to the plain-Python reference (`envs.core.jit`).
- `envs.gym`: the Gymnasium env `gangsched/GpuCluster-v0` and the vector envs.
- `envs.scenario`: a scenario: a cluster, a workload, an objective and its seeds.

The direction of imports: the cluster knows nothing of the other layers; the workload nothing of
simulation (it asks the placement rules only whether a job can ever fit); the decision layer never
imports the simulator, the env or the workload (a decision is made from the state alone); the
simulator uses the decision layer; the Gymnasium layer uses them all.

Importing `envs` registers `gangsched/GpuCluster-v0` with Gymnasium when Gymnasium is installed;
the simulator, the decision state and the candidate layer need neither Gymnasium nor torch.
"""

ENV_ID = "gangsched/GpuCluster-v0"

try:
    from gymnasium.envs.registration import register, registry
except ImportError:  # the simulator and the candidate layer run without Gymnasium
    pass
else:
    if ENV_ID not in registry:
        register(id=ENV_ID, entry_point="envs.gym.env:GpuClusterEnv")
