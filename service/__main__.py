"""`python -m service`: start the scoring service (FastAPI on uvicorn).

    python -m service --model DIR_OR_NAME --cluster NAME_OR_PATH [--host 127.0.0.1] [--port 8080]
                      [--baseline sect] [--queue-window 8] [--max-body-mb 16] [--body-timeout-s 10] [--header-timeout-s 5]
                      [--gang-ttl-s 600] [--kube-api none|in-cluster|KUBECONFIG] [--log-level info]
                      [--auth-token-file F | --insecure-no-auth] [--tls-cert F --tls-key F [--tls-client-ca F]]
                      [--health-port P]
                      [--watch [--watch-resync-s 300] [--watch-timeout-s 300] [--topology-labels L1,L2]]
                      [--leader-elect [--leader-elect-lease NAMESPACE/NAME] [--leader-elect-identity ID]
                       [--leader-elect-lease-duration-s 15] [--leader-elect-renew-deadline-s 10]
                       [--leader-elect-retry-period-s 2]]
                      [--wait-guard K|overdue_factor=K,min_wait_s=S|off]
    python -m service --policy lookahead --cluster NAME_OR_PATH [--scenario default]
                      [--lookahead-k K] [--lookahead-preempt-k K] [--lookahead-samples N]
                      [--lookahead-horizon-s S] [--planner-budget-ms 2000] [--planner-seed 0] ...
    python -m service --policy BASELINE --cluster NAME_OR_PATH ...

`--model` takes an export folder or the name of a shipped model (models/NAME). `--policy
lookahead` serves the honest lookahead planner (agents.lookahead.StatePlanner) on each request's
state: the scenario (`--scenario`, default `default`) gives its objective, its search budget
(each `--lookahead-*` flag overrides one field), its bound on checkpoint time and the estimate
noise of its workload; `--baseline` answers where the search fails or runs past
`--planner-budget-ms`. `--policy BASELINE` serves that baseline; without --model or --policy,
`--baseline` is served. A model directory whose policy.onnx does not match the sha256 in
policy.json, or whose feature schema version is not this code's, is refused: the command prints
why and exits with status 2 before serving anything; so does an unknown model, cluster, policy,
scenario or baseline, --policy together with --model, or a bad --wait-guard or search setting.
The bound on WAIT of the served masks is the model's (policy.json `wait_guard`) unless
--wait-guard is given. On a cluster that policy.json's `clusters` does not list (the clusters
agents.deploy validated the model on), the model's anchor baseline is served instead, with a
warning.

`--watch` (with `--kube-api`) takes the occupancy from the API server: Nodes, Pods and
PodGroups listed and watched (service.watch); `PUT /v1/state` is then refused. `--leader-elect` (with `--watch`)
runs several replicas of which only the Lease holder binds (service.leader).
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys

# The collector's generation thresholds while serving (young, middle, old; Python's defaults are 700, 10, 10).
GC_THRESHOLDS = (100_000, 50, 100)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m service", description="gangsched scoring service and Kubernetes scheduler extender")
    p.add_argument("--model", help="exported policy directory (policy.onnx + policy.json, from python -m agents.export) "
                                   "or the name of a shipped model under models/")
    p.add_argument("--policy", help="'lookahead' (the honest lookahead planner) or a baseline name; not with --model")
    p.add_argument("--scenario", default=None, help="with --policy lookahead: the scenario whose objective, search budget, "
                                                    "checkpoint bound and estimate noise the planner takes (default: default)")
    p.add_argument("--lookahead-k", type=int, default=None, help="planner: best non-preempting candidates searched (default: the scenario's)")
    p.add_argument("--lookahead-preempt-k", type=int, default=None, help="planner: best preempting candidates searched (default: the scenario's)")
    p.add_argument("--lookahead-samples", type=int, default=None, help="planner: sampled futures per candidate (default: the scenario's)")
    p.add_argument("--lookahead-horizon-s", type=float, default=None, help="planner: seconds simulated ahead (default: the scenario's)")
    p.add_argument("--planner-budget-ms", type=float, default=2000.0,
                   help="planner: a search longer than this gives up and the baseline answers (counted as a fallback)")
    p.add_argument("--planner-seed", type=int, default=0, help="planner: seed of its sampled futures (the same state and seed decide alike)")
    p.add_argument("--cluster", required=True, help="cluster config name (configs/clusters/) or YAML path")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--baseline", default="sect", help="baseline served without --model or --policy, and the fallback when "
                                                      "inference or the planner fails")
    p.add_argument("--queue-window", type=int, default=None, help="queued jobs per decision (default: the model's, else 8)")
    p.add_argument("--max-body-mb", type=float, default=16.0, help="larger request bodies get 413")
    p.add_argument("--body-timeout-s", type=float, default=10.0, help="a body not received within this gets 408")
    p.add_argument("--header-timeout-s", type=float, default=5.0,
                   help="a request's line and headers not received within this (from the connection's opening, or the "
                        "request's first byte on a kept-alive connection) get 408 and the connection is closed")
    p.add_argument("--gang-ttl-s", type=float, default=600.0, help="how long a gang's placement plan waits for its members")
    p.add_argument("--kube-api", default="none", metavar="none|in-cluster|KUBECONFIG",
                   help="the API server the bind verb creates Bindings through (and PodGroups, Nodes sent by name "
                        "and victims sent by UID are read from): in-cluster (the pod's service account) or a "
                        "kubeconfig path; none: the bind verb is refused")
    p.add_argument("--bind-api", dest="kube_api", help=argparse.SUPPRESS)  # the former name of --kube-api
    p.add_argument("--auth-token-file", default=None,
                   help="file holding the bearer token that PUT /v1/state, DELETE /v1/bindings and the bind verb "
                        "require (else the environment variable GANGSCHED_AUTH_TOKEN)")
    p.add_argument("--insecure-no-auth", action="store_true",
                   help="accept those requests without credentials (a trusted network only)")
    p.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate (PEM) ...")
    p.add_argument("--tls-key", default=None, help="... and this private key (PEM)")
    p.add_argument("--tls-client-ca", default=None,
                   help="require a client certificate signed by this CA on every connection (kube-scheduler's "
                        "tlsConfig certFile/keyFile): such connections need no bearer token")
    p.add_argument("--health-port", type=int, default=None,
                   help="also serve GET /healthz, /readyz and /metrics (only) over plain HTTP on this port, for probes")
    p.add_argument("--watch", action="store_true",
                   help="take the occupancy from the API server (needs --kube-api): list and watch Nodes, Pods and "
                        "PodGroups, running jobs from bound GPU pods, gang sizes from PodGroups; PUT /v1/state is then refused")
    p.add_argument("--watch-resync-s", type=float, default=300.0,
                   help="with --watch: list Nodes, Pods and PodGroups again this often, a safety net for a lost event "
                        "(0: never); a PodGroup kind whose CRD is not installed is tried again this often (30 s when 0)")
    p.add_argument("--watch-timeout-s", type=float, default=300.0,
                   help="with --watch: each watch call lasts a random time in [this, twice this] and is resumed "
                        "from its last resourceVersion (client-go's minWatchTimeout)")
    p.add_argument("--topology-labels", default="cloud.provider.com/topology-rack,cloud.provider.com/topology-block",
                   help="node labels, most specific first: with --watch, a label whose value names a switch or an NVLink "
                        "domain of the topology places a node not named like a topology node (after its nvidia.com/gpu.clique "
                        "label) on a free topology node of its GPU type and count there; for Kueue topology requests, a "
                        "level's value is qualified by the labels after it (a rack unique only inside its block)")
    p.add_argument("--leader-elect", action="store_true",
                   help="run as one of several replicas (needs --watch): the holder of a coordination.k8s.io Lease "
                        "binds, the others are followers (/readyz 503) ready to take over")
    p.add_argument("--leader-elect-lease", default="gangsched-system/gangsched", metavar="NAMESPACE/NAME",
                   help="the Lease object")
    p.add_argument("--leader-elect-identity", default=None,
                   help="this replica's holderIdentity (default: the host name and a random suffix, as kube-scheduler)")
    p.add_argument("--leader-elect-lease-duration-s", type=float, default=15.0,
                   help="a follower takes the lease after this long without seeing it renewed")
    p.add_argument("--leader-elect-renew-deadline-s", type=float, default=10.0,
                   help="the leader stops binding when it could not renew for this long (< the lease duration)")
    p.add_argument("--leader-elect-retry-period-s", type=float, default=2.0,
                   help="how often replicas try to acquire or renew the lease")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.add_argument("--wait-guard", default=None, metavar="K|overdue_factor=K,min_wait_s=S|off",
                   help="bound on WAIT of the served masks (default: the model's policy.json wait_guard, else none)")
    return p.parse_args(argv)


def make_planner(args: argparse.Namespace):
    """The planner of `--policy lookahead`: the scenario's objective, search budget (each
    --lookahead-* flag over one field), checkpoint bound and its workload's estimate noise.
    Raises ConfigError or ValueError naming the flag."""
    import dataclasses

    from agents.lookahead import StatePlanner, estimate_noise
    from envs.scenario import load_scenario
    from envs.workload.generator import load_workload_spec

    scenario = load_scenario(args.scenario or "default")
    overrides = {}
    for flag, least in (("k", 0), ("preempt_k", 0), ("samples", 1), ("horizon_s", 0)):
        value = getattr(args, f"lookahead_{flag}")
        if value is None:
            continue
        if not (value > least if flag == "horizon_s" else value >= least):
            raise ValueError(f"--lookahead-{flag.replace('_', '-')} {value}: must be {'>' if flag == 'horizon_s' else '>='} {least}")
        overrides[flag] = value
    if not args.planner_budget_ms > 0:
        raise ValueError(f"--planner-budget-ms {args.planner_budget_ms}: must be > 0")
    config = dataclasses.replace(scenario.lookahead, **overrides)
    return StatePlanner(config, scenario.objective, seed=args.planner_seed,
                        estimate_noise=estimate_noise(load_workload_spec(scenario.workload)),
                        max_checkpoint_s=scenario.max_checkpoint_s, budget_s=args.planner_budget_ms / 1000.0,
                        scenario=scenario.name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from baselines import BASELINES
    from envs.cluster.config import ConfigError, load_cluster
    from service.scoring import PolicyLoadError, Scorer, load_onnx_policy

    def fail(message: str) -> int:
        print(f"python -m service: error: {message}", file=sys.stderr)
        return 2

    if args.baseline not in BASELINES:
        return fail(f"--baseline {args.baseline!r}: unknown (known: {', '.join(BASELINES)})")
    if args.policy is not None:
        if args.model:
            return fail(f"--policy {args.policy} and --model {args.model}: serve a model or a policy, not both")
        if args.policy != "lookahead" and args.policy not in BASELINES:
            return fail(f"--policy {args.policy!r}: unknown (known: lookahead, {', '.join(BASELINES)})")
    planner_flags = [f for f in ("scenario", "lookahead_k", "lookahead_preempt_k", "lookahead_samples", "lookahead_horizon_s")
                     if getattr(args, f) is not None]
    if planner_flags and args.policy != "lookahead":
        return fail(f"--{planner_flags[0].replace('_', '-')} applies to --policy lookahead only")
    try:
        cluster = load_cluster(args.cluster)
    except (ConfigError, OSError) as e:
        return fail(f"--cluster: {e}")
    model = info = None
    if args.model:
        from pathlib import Path

        from agents.shipped import ModelNotFound, model_dir
        try:
            directory = model_dir(args.model)
        except ModelNotFound as e:
            if not (Path(args.model).exists() or "/" in args.model or "\\" in args.model):
                return fail(f"--model: {e}")
            directory = args.model  # a path: the loader says what is wrong with it
        try:
            model, info = load_onnx_policy(directory)
        except PolicyLoadError as e:
            return fail(str(e))
        from agents.policy_file import policy_clusters

        deployed_on = policy_clusters(info.metadata)
        if deployed_on is not None and cluster.name not in deployed_on:  # not validated here: its heuristic serves
            fallback = info.anchor.baseline if info.anchor is not None else args.baseline
            logging.getLogger("gangsched.service").warning(
                "%s is deployed on %s only (policy.json clusters), not on %s: serving its heuristic %s",
                directory, ", ".join(deployed_on) or "no cluster", cluster.name, fallback)
            model = info = None
            args.baseline = fallback
    planner = None
    if args.policy == "lookahead":
        try:
            planner = make_planner(args)
        except (ConfigError, OSError, ValueError) as e:
            return fail(str(e))
    guard = {}
    if args.wait_guard is not None:
        from envs.decision.candidates import wait_guard_of
        try:
            guard = {"wait_guard": wait_guard_of(args.wait_guard, "--wait-guard")}
        except ValueError as e:
            return fail(str(e))
    for flag in ("body_timeout_s", "header_timeout_s"):
        if not getattr(args, flag) > 0:
            return fail(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be > 0")
    queue_window = args.queue_window or (info.queue_window if info and info.queue_window else 8)
    if not 1 <= queue_window <= 64:
        return fail(f"--queue-window {queue_window}: must be in 1..64")
    kube = None
    if args.kube_api and args.kube_api != "none":
        from service.kube import KubeAPI, KubeConfigError
        try:
            kube = KubeAPI.connect(args.kube_api)
        except KubeConfigError as e:
            return fail(str(e))
    import os

    watch = leader = None
    if args.watch or args.leader_elect:
        if kube is None:
            return fail(f"--{'watch' if args.watch else 'leader-elect'} needs --kube-api (in-cluster or a kubeconfig)")
        if args.leader_elect and not args.watch:
            return fail("--leader-elect needs --watch: a follower must keep its state from the API server to take over")
        if args.watch_resync_s < 0 or not args.watch_timeout_s >= 1:
            return fail("--watch-resync-s must be >= 0 and --watch-timeout-s >= 1")
        from service.watch import ClusterWatch

        labels = tuple(x.strip() for x in args.topology_labels.split(",") if x.strip())
        watch = ClusterWatch(kube, cluster, resync_s=args.watch_resync_s, watch_timeout_s=args.watch_timeout_s,
                             topology_labels=labels)
        if args.leader_elect:
            import socket
            import uuid

            from service.leader import LeaderElector

            ns, _, name = args.leader_elect_lease.partition("/")
            if not ns or not name or "/" in name:
                return fail(f"--leader-elect-lease {args.leader_elect_lease!r}: must be NAMESPACE/NAME")
            identity = args.leader_elect_identity or f"{socket.gethostname()}_{uuid.uuid4()}"
            try:
                leader = LeaderElector(kube, ns, name, identity, args.leader_elect_lease_duration_s,
                                       args.leader_elect_renew_deadline_s, args.leader_elect_retry_period_s)
            except ValueError as e:
                return fail(f"--leader-elect: {e}")
    token = None
    if args.auth_token_file:
        try:
            with open(args.auth_token_file) as f:
                token = f.read().strip()
        except OSError as e:
            return fail(f"--auth-token-file: {e}")
        if not token:
            return fail(f"--auth-token-file {args.auth_token_file}: empty")
    elif os.environ.get("GANGSCHED_AUTH_TOKEN", "").strip():
        token = os.environ["GANGSCHED_AUTH_TOKEN"].strip()
    if (args.tls_cert is None) != (args.tls_key is None):
        return fail("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        return fail("--tls-client-ca needs --tls-cert and --tls-key (HTTPS)")
    for flag in ("tls_cert", "tls_key", "tls_client_ca"):
        path = getattr(args, flag)
        if path and not os.path.exists(path):
            return fail(f"--{flag.replace('_', '-')} {path}: no such file")
    if token is None and not args.tls_client_ca and not args.insecure_no_auth:
        logging.getLogger("gangsched.service").warning(
            "no --auth-token-file, GANGSCHED_AUTH_TOKEN or --tls-client-ca: PUT /v1/state, DELETE /v1/bindings and "
            "the bind verb are refused (403) until one is given (or --insecure-no-auth)")
    import uvicorn

    from service.app import create_app, header_timeout_protocol

    served = args.policy if args.policy in BASELINES else args.baseline
    scorer = Scorer(served, model, info, planner=planner, **guard)
    app = create_app(cluster, scorer, queue_window, int(args.max_body_mb * (1 << 20)), args.body_timeout_s,
                     args.gang_ttl_s, kube, auth_token=token, client_certs=bool(args.tls_client_ca),
                     insecure_no_auth=args.insecure_no_auth, watch=watch, leader=leader,
                     topology_labels=tuple(x.strip() for x in args.topology_labels.split(",") if x.strip()))
    scheme = "https" if args.tls_cert else "http"
    logging.getLogger("gangsched.service").info("serving %s on %s (%d GPUs), queue window %d, wait guard %s, at %s://%s:%d",
                                                scorer.policy_name, cluster.name, cluster.num_gpus, queue_window,
                                                scorer.wait_guard or "off", scheme, args.host, args.port)
    import asyncio
    import ssl

    tls = {}
    if args.tls_cert:
        tls = {"ssl_certfile": args.tls_cert, "ssl_keyfile": args.tls_key}
        if args.tls_client_ca:
            tls.update(ssl_ca_certs=args.tls_client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
    http = header_timeout_protocol(args.header_timeout_s)
    servers = [uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                                             timeout_keep_alive=30, http=http, **tls))]
    if args.health_port is not None:
        from service.app import health_app

        servers.append(uvicorn.Server(uvicorn.Config(health_app(app), host=args.host, port=args.health_port,
                                                     log_level=args.log_level, access_log=False, lifespan="on", http=http)))

    async def serve_all():  # the first server to stop (a signal, a failed start) stops the others
        tasks = [asyncio.create_task(s.serve()) for s in servers]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for s in servers:
            s.should_exit = True
        await asyncio.gather(*tasks)

    # The collector: what was built at start (topology, models, caches) is moved out of its
    # generations, and a young collection waits for 100,000 new objects rather than 700, so that a
    # request's many short-lived parsed objects (a filter's 2,000 Nodes) do not set off full
    # collections over them and the whole heap (docs/service.md, "Throughput").
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    asyncio.run(serve_all())
    return 0


if __name__ == "__main__":
    sys.exit(main())
