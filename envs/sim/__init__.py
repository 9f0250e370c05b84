"""The discrete-event simulator and what is measured of it.

- `simulator`: `Simulator`: allocate, preempt with checkpoint, advance from event to event; every
  job's record, forks for planning.
- `queue`, `ledger`, `load`, `power`: the simulator's job queue, allocation ledger, load model
  (what running jobs put on nodes and uplinks, and their rates) and power meter.
- `objective`: the scheduling objective, a weighted sum of documented per-job terms.
- `metrics`: the scheduling metrics, the one implementation.
- `replay`: the decision loop without Gymnasium: drive a simulator with any rule that picks
  candidates (and the native core's whole replays).

Contract: the simulator knows each job's true work and enforces the gang rule (a job runs on all
its GPUs or none); a scheduler sees it only through `Simulator.decision_state()`. The same
cluster, jobs and decisions give the same episode, bit for bit.
"""
