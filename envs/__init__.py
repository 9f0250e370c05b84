"""gangsched environments: topology, workloads, the event simulator and the Gymnasium env."""

from gymnasium.envs.registration import register, registry

ENV_ID = "gangsched/GpuCluster-v0"

if ENV_ID not in registry:
    register(id=ENV_ID, entry_point="envs.env:GpuClusterEnv")
