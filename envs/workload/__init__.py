"""The workload: the jobs that arrive, synthetic or from real traces.

- `generator`: the synthetic LLM workload generator and workload loading (`make_workload`,
  `load_workload_spec`).
- `traces`: readers of real traces (Philly, Alibaba, the project's CSV), turned into jobs; the
  generator replays them, never the reverse.
- `capacity`: how a job list weighs on a cluster (capacity, offered load, ever-fits).
- `data/`: the shipped trace files.

Contract: a workload is a list of `envs.jobs.Job` sorted by arrival, the same for the same spec,
cluster and seed. It holds each job's true work (the simulator's) beside its estimate (what a
scheduler sees); nothing here imports the simulator or the envs, and of the decision layer only
the placement rules' counts (whether a job asking for segments can ever fit).
"""
