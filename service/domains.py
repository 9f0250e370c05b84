"""Topology domains of Kubernetes nodes: NVLink cliques (GPU Feature Discovery) and the levels of
Kueue Topology Aware Scheduling, checked against the cluster topology file.

Contract:
* `CLIQUE_LABEL` (`nvidia.com/gpu.clique`) is GFD's label of a node whose fabric-attached GPUs
  all report one fabric cluster UUID and one clique ID: `<ClusterUUID>.<CliqueId>`, one value per
  NVLink partition (a node whose GPUs disagree gets no label).
* `level_key(cluster, level, i, labels, qualifiers)`: the domain of topology node `i` (the
  Kubernetes node with `labels`) at a topology level, a hashable key, or None (the node has no
  domain at that level):
  - `kubernetes.io/hostname`: the node itself;
  - `nvidia.com/gpu.clique`: the topology file's NVLink domain of the node (the node alone when
    it is in none) intersected with its clique label (absent: None), so a domain of this level
    is both one NVLink domain of the file and one clique of the labels;
  - any other label key (a rack or block label): the label's value, qualified by the values of
    the labels after it in `qualifiers` (the `--topology-labels` order, most specific first):
    Kueue assumes a rack label unique only inside its block. No label: None.
* `clique_conflicts(cluster, entries)`: the nodes whose clique label contradicts the topology
  file, one message each, for (Kubernetes node, topology node, clique value) entries: a node
  whose clique is not the one most nodes of its NVLink domain carry (the fabric is partitioned
  where the file has one domain), a node outside the NVLink domain most nodes of its clique sit in
  (or outside any, while others share its clique), and a node whose clique value names another
  NVLink domain of the file.
* `clique_domains(cluster, entries)`: clique value -> NVLink domain index, for mapping nodes by
  their clique label: the domain named like the value, else the one domain every mapped node of
  that clique is in (none when they disagree).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

CLIQUE_LABEL = "nvidia.com/gpu.clique"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_TOPOLOGY_LABELS = ("cloud.provider.com/topology-rack", "cloud.provider.com/topology-block")


def level_key(cluster, level: str, i: int, labels: dict[str, str], qualifiers: tuple[str, ...] = DEFAULT_TOPOLOGY_LABELS):
    """The domain of topology node `i` at `level` (see the module docstring), or None."""
    if level == HOSTNAME_LABEL:
        return ("node", cluster.node_names[i])
    if level == CLIQUE_LABEL:
        d = int(cluster.node_domain[i])
        return (cluster.domain_names[d] if d >= 0 else f"node {cluster.node_names[i]}", labels.get(CLIQUE_LABEL) or None)
    value = labels.get(level)
    if not value:
        return None
    above = qualifiers[qualifiers.index(level) + 1:] if level in qualifiers else ()
    return (value, *(labels.get(q, "") for q in above))


def describe_key(level: str, key) -> str:
    """A domain key in words, for reasons and logs."""
    if level == HOSTNAME_LABEL:
        return f"node {key[1]}"
    if level == CLIQUE_LABEL:
        where = key[0] if key[0].startswith("node ") else f"NVLink domain {key[0]}"
        return f"{where}, clique {key[1]}" if key[1] else f"{where} (no {CLIQUE_LABEL} label)"
    return f"{level}={key[0]}" + "".join(f" in {v}" for v in key[1:] if v)


def _majority(counter: Counter):
    """The most common value (the smallest on ties, for a stable answer)."""
    top = max(counter.values())
    return min((v for v, n in counter.items() if n == top), key=str)


def clique_conflicts(cluster, entries: Iterable[tuple[str, int, str | None]]) -> list[str]:
    """The nodes whose clique label contradicts the topology file (see the module docstring)."""
    entries = [(n, int(i), c) for n, i, c in entries if c]
    names = {d: k for k, d in enumerate(cluster.domain_names)}
    by_domain: dict[int, Counter] = {}
    by_clique: dict[str, Counter] = {}
    for _, i, c in entries:
        d = int(cluster.node_domain[i])
        if d >= 0:
            by_domain.setdefault(d, Counter())[c] += 1
        by_clique.setdefault(c, Counter())[d] += 1
    out = []
    for name, i, c in sorted(entries):
        d = int(cluster.node_domain[i])
        where = f"NVLink domain {cluster.domain_names[d]}" if d >= 0 else "no NVLink domain"
        at = f"node {name} (topology node {cluster.node_names[i]}, {where})"
        named = names.get(c)
        if named is not None and named != d:
            out.append(f"{at}: {CLIQUE_LABEL}={c} names NVLink domain {c} of the topology")
            continue
        if d >= 0 and len(by_domain[d]) > 1 and c != _majority(by_domain[d]):
            out.append(f"{at}: {CLIQUE_LABEL}={c}, while most nodes of {cluster.domain_names[d]} carry "
                       f"{_majority(by_domain[d])}: the fabric is partitioned where the topology has one domain")
            continue
        home = by_clique[c]
        if sum(home.values()) > 1 and (d < 0 or (len(home) > 1 and d != _majority(home))):
            others = sorted(cluster.domain_names[x] if x >= 0 else "none" for x in home if x != d)
            out.append(f"{at}: {CLIQUE_LABEL}={c} is also carried by nodes in NVLink domain {', '.join(others)}: "
                       "the topology does not put them in one NVLink domain")
    return out


def clique_domains(cluster, entries: Iterable[tuple[str, int, str | None]]) -> dict[str, int]:
    """Clique value -> NVLink domain index (see the module docstring)."""
    seen: dict[str, set[int]] = {}
    for _, i, c in entries:
        if c:
            seen.setdefault(c, set()).add(int(cluster.node_domain[i]))
    out = {c: d for c, ds in seen.items() if len(ds) == 1 and (d := next(iter(ds))) >= 0}
    out.update({name: d for d, name in enumerate(cluster.domain_names)})
    return out
