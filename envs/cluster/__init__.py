"""The cluster: hardware and how placement changes a job's speed.

- `topology`: GPU and node types (the catalogue), the switch fabric as a networkx graph, NVLink
  domains, and the arrays the hot path reads (`Cluster`).
- `speed`: the speed model: placement efficiency by interconnect tier, shared uplinks, rates.
- `config`: cluster (and workload) YAML loading and validation, with errors naming file and field.
- `topology_import`: clusters from real descriptions (Slurm `topology.conf` / `topology.yaml`,
  `nvidia-smi topo -m`, node lists); `python -m envs.cluster.topology_import`.
- `hostlist`: Slurm hostlist expressions.
- `memo`: memo tables per cluster (pure functions of a cluster that recur across decisions).

Contract: a function of the cluster and a job's shape alone. Nothing here imports the workload,
the decision layer, the simulator or the envs.
"""
