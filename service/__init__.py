"""The scoring service: an exported policy (or a baseline) behind HTTP.

    python -m service --model DIR --cluster NAME_OR_PATH --host 127.0.0.1 --port 8080

Modules: `service.scoring` (decision state -> ranked candidates, no HTTP), `service.wire`
(reading Kubernetes objects), `service.k8s` (the scheduler-extender verbs and the occupancy they
keep), `service.app` (FastAPI routes, body limits, metrics), `service.__main__` (the command
line). The serving process never imports torch: models run in onnxruntime
(agents.policy_file). docs/service.md describes the API and the Kubernetes set-up.
"""
