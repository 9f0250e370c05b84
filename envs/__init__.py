"""gangsched environments: topology, workloads, the event simulator, the decision state, the
candidate layer and the Gymnasium env.

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
        register(id=ENV_ID, entry_point="envs.env:GpuClusterEnv")
