"""`python -m service`: start the scoring service (FastAPI on uvicorn).

    python -m service --model DIR --cluster NAME_OR_PATH [--host 127.0.0.1] [--port 8080]
                      [--baseline sect] [--queue-window 8] [--max-body-mb 16] [--body-timeout-s 10]
                      [--gang-ttl-s 600] [--bind-api none|in-cluster] [--log-level info]
                      [--wait-guard K|overdue_factor=K,min_wait_s=S|off]

Without --model the named baseline is served. A model directory whose policy.onnx does not
match the sha256 in policy.json, or whose feature schema version is not this code's, is refused:
the command prints why and exits with status 2 before serving anything; so does an unknown
cluster or baseline, or a bad --wait-guard. The bound on WAIT of the served masks is the model's
(policy.json `wait_guard`) unless --wait-guard is given.
"""

from __future__ import annotations

import argparse
import logging
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m service", description="gangsched scoring service and Kubernetes scheduler extender")
    p.add_argument("--model", help="exported policy directory (policy.onnx + policy.json, from python -m agents.export)")
    p.add_argument("--cluster", required=True, help="cluster config name (configs/clusters/) or YAML path")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--baseline", default="sect", help="baseline served without --model, and the fallback when inference fails")
    p.add_argument("--queue-window", type=int, default=None, help="queued jobs per decision (default: the model's, else 8)")
    p.add_argument("--max-body-mb", type=float, default=16.0, help="larger request bodies get 413")
    p.add_argument("--body-timeout-s", type=float, default=10.0, help="a body not received within this gets 408")
    p.add_argument("--gang-ttl-s", type=float, default=600.0, help="how long a gang's placement plan waits for its members")
    p.add_argument("--bind-api", choices=("none", "in-cluster"), default="none",
                   help="in-cluster: the bind verb also creates the Binding through the API server")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.add_argument("--wait-guard", default=None, metavar="K|overdue_factor=K,min_wait_s=S|off",
                   help="bound on WAIT of the served masks (default: the model's policy.json wait_guard, else none)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from baselines import BASELINES
    from envs.config import ConfigError, load_cluster
    from service.scoring import PolicyLoadError, Scorer, load_onnx_policy

    def fail(message: str) -> int:
        print(f"python -m service: error: {message}", file=sys.stderr)
        return 2

    if args.baseline not in BASELINES:
        return fail(f"--baseline {args.baseline!r}: unknown (known: {', '.join(BASELINES)})")
    try:
        cluster = load_cluster(args.cluster)
    except (ConfigError, OSError) as e:
        return fail(f"--cluster: {e}")
    model = info = None
    if args.model:
        try:
            model, info = load_onnx_policy(args.model)
        except PolicyLoadError as e:
            return fail(str(e))
    guard = {}
    if args.wait_guard is not None:
        from envs.candidates import wait_guard_of
        try:
            guard = {"wait_guard": wait_guard_of(args.wait_guard, "--wait-guard")}
        except ValueError as e:
            return fail(str(e))
    queue_window = args.queue_window or (info.queue_window if info and info.queue_window else 8)
    if not 1 <= queue_window <= 64:
        return fail(f"--queue-window {queue_window}: must be in 1..64")
    binder = None
    if args.bind_api == "in-cluster":
        from service.k8s import KubeBinder
        try:
            binder = KubeBinder()
        except RuntimeError as e:
            return fail(str(e))
    import uvicorn

    from service.app import create_app

    scorer = Scorer(args.baseline, model, info, **guard)
    app = create_app(cluster, scorer, queue_window, int(args.max_body_mb * (1 << 20)), args.body_timeout_s,
                     args.gang_ttl_s, binder)
    logging.getLogger("gangsched.service").info("serving %s on %s (%d GPUs), queue window %d, wait guard %s, at http://%s:%d",
                                                scorer.policy_name, cluster.name, cluster.num_gpus, queue_window,
                                                scorer.wait_guard or "off", args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                timeout_keep_alive=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
