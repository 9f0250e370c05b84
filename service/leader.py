"""Leader election through a `coordination.k8s.io/v1` Lease, as client-go's
`tools/leaderelection` does it (leaderelection.go, resourcelock/leaselock.go), so that of several
service replicas exactly one binds pods.

Contract:
* `LeaderElector(kube, namespace, name, identity, lease_duration_s=15, renew_deadline_s=10,
  retry_period_s=2)` (kube-scheduler's defaults); `start()` runs it on a daemon thread.
* Every `retry_period_s` (with up to 1.2x jitter while not leading, as client-go's JitterUntil)
  it tries to acquire or renew: GET the Lease (create it when absent: holderIdentity = identity,
  acquireTime = renewTime = now, leaseDurationSeconds, leaseTransitions 0; another replica's
  create first answers 409 and this round fails). When the record differs from the one last
  seen, the local time of that observation is noted. A lease held by another identity is taken
  only once `leaseDurationSeconds` have passed on this replica's clock since it last saw the
  record change (never from the renewTime written by another machine's clock: clock skew
  between machines does not matter, only their rates). Acquiring or renewing is a PUT carrying
  the resourceVersion read: holderIdentity = identity, renewTime = now, leaseDurationSeconds,
  acquireTime kept and leaseTransitions kept while the holder stays, else acquireTime = now and
  leaseTransitions + 1. A concurrent writer makes the PUT answer 409 Conflict: this round fails.
* `is_leader()` is true only while the last successful renewal is younger than
  `renew_deadline_s` (< `lease_duration_s`): a leader that cannot renew (API server
  unreachable, process paused) stops acting as leader before any other replica may take the
  lease, which needs a full `lease_duration_s` without a change. client-go's leader also stops
  leading when it cannot renew within RenewDeadline; kube-scheduler then exits, this service
  becomes a follower and keeps trying to acquire.
* `release()` (on shutdown) writes an empty holderIdentity with leaseDurationSeconds 1 when
  this replica holds the lease, as client-go's ReleaseOnCancel, so a follower takes over at once.
* `info()`: identity, leader, the holder seen, transitions, last renewal, last error.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from datetime import datetime, timezone

log = logging.getLogger("gangsched.service")
JITTER = 1.2  # client-go's JitterFactor


def micro_time(t: float | None = None) -> str:
    """A MicroTime (RFC 3339 with microseconds, UTC) as the API server writes it."""
    return datetime.fromtimestamp(time.time() if t is None else t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, kube, namespace: str, name: str, identity: str, lease_duration_s: float = 15.0,
                 renew_deadline_s: float = 10.0, retry_period_s: float = 2.0, clock=time.monotonic):
        from kubernetes import client

        if not lease_duration_s > renew_deadline_s:
            raise ValueError(f"the lease duration ({lease_duration_s:g} s) must be longer than the renew deadline ({renew_deadline_s:g} s)")
        if not renew_deadline_s > JITTER * retry_period_s:
            raise ValueError(f"the renew deadline ({renew_deadline_s:g} s) must be longer than {JITTER:g} x the retry period "
                             f"({retry_period_s:g} s)")
        self.api = client.CoordinationV1Api(kube.api_client)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration_s, self.renew_deadline_s, self.retry_period_s = lease_duration_s, renew_deadline_s, retry_period_s
        self.timeout_s = min(kube.timeout_s, retry_period_s)
        self.clock = clock
        self.lock = threading.Lock()
        self.observed: dict | None = None  # the lease spec last seen
        self.observed_at = 0.0  # monotonic time it was first seen
        self.last_renew: float | None = None  # monotonic time of this replica's last successful acquire/renew
        self.leading = False
        self.transitions_seen = 0
        self.last_error = ""
        self.became_leader = 0  # times this replica acquired the lease
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the lease

    def _read(self) -> dict | None:
        from kubernetes.client.rest import ApiException

        try:
            r = self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False, _request_timeout=self.timeout_s)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return json.loads(r.data)

    def try_acquire_or_renew(self) -> bool:
        from kubernetes.client.rest import ApiException

        now = self.clock()
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": int(round(self.lease_duration_s)),
                "acquireTime": micro_time(), "renewTime": micro_time(), "leaseTransitions": 0}
        try:
            lease = self._read()
            if lease is None:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
                self.api.create_namespaced_lease(self.namespace, body, _preload_content=False, _request_timeout=self.timeout_s)
                self._observe(spec, now)
                return True
            old = lease.get("spec") or {}
            if old != self.observed:
                self._observe(old, now)
            holder = old.get("holderIdentity") or ""
            duration = float(old.get("leaseDurationSeconds") or self.lease_duration_s)
            if holder and holder != self.identity and self.observed_at + duration > now:
                return False  # held by another and not expired by this replica's clock
            if holder == self.identity:
                spec["acquireTime"] = old.get("acquireTime") or spec["acquireTime"]
                spec["leaseTransitions"] = int(old.get("leaseTransitions") or 0)
            else:
                spec["leaseTransitions"] = int(old.get("leaseTransitions") or 0) + 1
            lease["spec"] = spec  # metadata.resourceVersion stays: a concurrent write answers 409
            self.api.replace_namespaced_lease(self.name, self.namespace, lease, _preload_content=False,
                                              _request_timeout=self.timeout_s)
            self._observe(spec, now)
            return True
        except ApiException as e:
            self.last_error = f"lease {self.namespace}/{self.name}: the API server answered {e.status}: {e.reason}"
        except Exception as e:  # unreachable, timeout
            self.last_error = f"lease {self.namespace}/{self.name}: {type(e).__name__}: {e}"
        return False

    def _observe(self, spec: dict, now: float) -> None:
        with self.lock:
            self.observed, self.observed_at = dict(spec), now
            self.transitions_seen = int(spec.get("leaseTransitions") or 0)

    # ------------------------------------------------------------------ the loop

    def is_leader(self) -> bool:
        with self.lock:
            return self.leading and self.last_renew is not None and self.clock() - self.last_renew < self.renew_deadline_s

    def holder(self) -> str:
        with self.lock:
            return (self.observed or {}).get("holderIdentity") or ""

    def step(self) -> None:
        ok = self.try_acquire_or_renew()
        now = self.clock()
        with self.lock:
            was = self.leading
            if ok:
                self.last_renew = now
                self.leading = True
            elif self.leading and (self.last_renew is None or now - self.last_renew >= self.renew_deadline_s
                                   or (self.observed or {}).get("holderIdentity") != self.identity):
                self.leading = False
            became, lost = self.leading and not was, was and not self.leading
            if became:
                self.became_leader += 1
        if became:
            log.warning("leader election: %s leads (lease %s/%s)", self.identity, self.namespace, self.name)
        if lost:
            log.warning("leader election: %s lost the lease %s/%s (%s): a follower now", self.identity, self.namespace,
                        self.name, self.last_error or f"held by {self.holder()}")

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.step()
            wait = self.retry_period_s if self.is_leader() else self.retry_period_s * (1 + random.random() * (JITTER - 1))
            self.stop_event.wait(wait)

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self.thread.start()

    def release(self) -> None:
        """Stop, and give the lease up when held (a follower acquires it on its next try)."""
        self.stop_event.set()
        if not self.is_leader():
            return
        try:
            lease = self._read()
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                old = lease["spec"]
                lease["spec"] = {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": micro_time(),
                                 "renewTime": micro_time(), "leaseTransitions": int(old.get("leaseTransitions") or 0)}
                self.api.replace_namespaced_lease(self.name, self.namespace, lease, _preload_content=False,
                                                  _request_timeout=self.timeout_s)
                log.warning("leader election: %s released the lease %s/%s", self.identity, self.namespace, self.name)
        except Exception as e:
            log.warning("leader election: release of %s/%s failed: %s", self.namespace, self.name, e)
        with self.lock:
            self.leading = False

    def info(self) -> dict:
        with self.lock:
            last = None if self.last_renew is None else round(self.clock() - self.last_renew, 3)
            return {"identity": self.identity, "lease": f"{self.namespace}/{self.name}",
                    "leader": self.leading and last is not None and last < self.renew_deadline_s,
                    "holder": (self.observed or {}).get("holderIdentity") or "", "lease_transitions": self.transitions_seen,
                    "seconds_since_renew": last, "acquired": self.became_leader, "last_error": self.last_error,
                    "lease_duration_s": self.lease_duration_s, "renew_deadline_s": self.renew_deadline_s,
                    "retry_period_s": self.retry_period_s}
