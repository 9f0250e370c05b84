"""Module layout: the import graph of envs/ has no cycle.

A static scan with `ast` of every module under envs/ (imports inside functions included, so a
lazy import does not hide a circle). A package counts as its `__init__` module; `from envs.x
import y` is an edge to `envs.x.y` when that is a module, else to `envs.x`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent


def module_names(root: Path, package: str = "envs") -> dict[str, Path]:
    """Dotted name -> file of every module under root/package (a package is its __init__)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is one of `modules`."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in modules:
            return prefix
    return None


def import_graph(root: Path, package: str = "envs") -> nx.DiGraph:
    """Edges importer -> imported between the modules of root/package."""
    modules = module_names(root, package)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, one level up per extra dot
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for target in targets:
                imported = _resolve(target, modules)
                if imported is not None and imported != name:
                    graph.add_edge(name, imported)
    return graph


def find_cycle(graph: nx.DiGraph) -> list[str]:
    """One import cycle as [a, b, ..., a], or [] when the graph is acyclic."""
    try:
        edges = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return []
    return [a for a, _ in edges] + [edges[0][0]]


def test_envs_import_graph_is_acyclic() -> None:
    graph = import_graph(ROOT)
    # The scan sees the edges it must see (a vacuous graph would pass trivially).
    assert graph.has_edge("envs.workload", "envs.traces")
    assert graph.has_edge("envs.traces.replay_options", "envs.capacity")
    cycle = find_cycle(graph)
    if cycle:
        print("import cycle:", " -> ".join(cycle))
    assert not cycle, f"import cycle in envs/: {' -> '.join(cycle)}"


def test_traces_never_import_workload() -> None:
    """The direction chosen: envs.workload replays traces through envs.traces, never the reverse."""
    graph = import_graph(ROOT)
    trace_modules = [m for m in graph if m == "envs.traces" or m.startswith("envs.traces.")]
    assert len(trace_modules) > 1
    assert not [m for m in trace_modules if nx.has_path(graph, m, "envs.workload")]


def test_scan_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "envs"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from envs.sub import b\n    return b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from ..a import f\n")
    graph = import_graph(tmp_path)
    assert set(graph.edges) == {("envs.a", "envs.sub.b"), ("envs.sub.b", "envs.a")}
    assert find_cycle(graph) in (["envs.a", "envs.sub.b", "envs.a"], ["envs.sub.b", "envs.a", "envs.sub.b"])


def test_decisions_are_made_from_the_state_alone() -> None:
    """The candidate layer and the baselines import neither the simulator nor the env: they
    can only see what the decision state holds."""
    graph = import_graph(ROOT)
    for module in ("envs.state", "envs.cache", "envs.placement", "envs.window", "envs.candidates", "envs.features"):
        reachable = nx.descendants(graph, module)
        assert not reachable & {"envs.simulator", "envs.env", "envs.workload", "envs.traces"}, (module, sorted(reachable))
    for path in sorted((ROOT / "baselines").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & {"envs.simulator", "envs.env"}, (path.name, sorted(imported))


def test_simulator_and_candidate_layer_import_without_gymnasium_or_torch() -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['gymnasium'] = None; sys.modules['torch'] = None\n"
            "import envs.simulator, envs.candidates, envs.features, envs.replay, envs.workload, baselines")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
