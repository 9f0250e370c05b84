"""Module layout: the project's import graph has no cycle.

A static scan with `ast` of every module of the project's packages (envs, agents, baselines,
service, benchmarks) and of its top-level scripts (train.py, evaluate.py: modules `train`,
`evaluate`). Every `import` statement counts, wherever it stands: inside functions (a lazy
import does not hide a circle) and under `if TYPE_CHECKING:` alike. Imports by a name computed at
run time (`importlib.import_module(variable)`) are not seen.

How an import resolves to a module of the graph (a package is the module of its `__init__.py`):
- `import a.b.c` is an edge to the longest prefix that is a module (`a.b.c`), not to the parent
  packages Python initialises on the way: a submodule that imports a sibling by its full dotted
  name does not need its package's `__init__` to have finished, so the package's `__init__`
  importing its submodules (re-exporting their names) is no cycle.
- `from a.b import name` is an edge to `a.b.name` when that is a module (a submodule, loaded on
  its own), else to `a.b` itself: for a package, its `__init__`, which imports its submodules.
  So `from agents.evaluation import run_actor` depends on agents/evaluation/__init__.py and,
  through it, on every submodule it imports; a submodule of agents.evaluation that took a name
  from the package that way would close a real cycle, and the scan reports it.
- Relative imports resolve from the importing module's package, one level up per extra dot.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("envs", "agents", "baselines", "service", "benchmarks")
LIBRARY_PACKAGES = ("envs", "agents", "baselines", "service")  # code that a script runs, never the reverse


def module_names(root: Path, packages: tuple[str, ...] = ("envs",), scripts: bool = False) -> dict[str, Path]:
    """Dotted name -> file of every module under root/PACKAGE for each of `packages` (a package
    is its __init__), and with `scripts` every root/*.py (named by its stem)."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    if scripts:
        out.update((path.stem, path) for path in sorted(root.glob("*.py")))
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is one of `modules`."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in modules:
            return prefix
    return None


def import_graph(root: Path, packages: tuple[str, ...] = ("envs",), scripts: bool = False) -> nx.DiGraph:
    """Edges importer -> imported between the modules of `module_names(root, packages, scripts)`,
    resolved as the module's docstring says."""
    modules = module_names(root, packages, scripts)
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


def project_graph(root: Path = ROOT) -> nx.DiGraph:
    return import_graph(root, PROJECT_PACKAGES, scripts=True)


def find_cycle(graph: nx.DiGraph) -> list[str]:
    """One import cycle as [a, b, ..., a], or [] when the graph is acyclic."""
    try:
        edges = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return []
    return [a for a, _ in edges] + [edges[0][0]]


def cycles_report(graph: nx.DiGraph) -> list[str]:
    """One line per circle of modules (a strongly connected component of more than one): its
    modules, and one cycle through them."""
    lines = []
    for component in sorted((sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1), key=lambda c: c[0]):
        cycle = find_cycle(graph.subgraph(component))[:-1]
        first = cycle.index(min(cycle))  # from its first module by name: the same line on every run
        cycle = cycle[first:] + cycle[:first + 1]
        lines.append(f"{len(component)} modules ({', '.join(component)}): {' -> '.join(cycle)}")
    return lines


def test_envs_import_graph_is_acyclic() -> None:
    graph = import_graph(ROOT)
    # The scan sees the edges it must see (a vacuous graph would pass trivially).
    assert graph.has_edge("envs.workload.generator", "envs.workload.traces")
    assert graph.has_edge("envs.workload.traces.replay_options", "envs.workload.capacity")
    cycle = find_cycle(graph)
    if cycle:
        print("import cycle:", " -> ".join(cycle))
    assert not cycle, f"import cycle in envs/: {' -> '.join(cycle)}"


# The layers of envs/ (a sub-package each, or a top-level module) and the layers each may import.
LAYERS = {
    "jobs": set(),
    "core": {"jobs", "cluster"},  # the compiled hot path reads the cluster's arrays
    "cluster": {"jobs", "core"},  # the speed model's compiled twins
    "workload": {"jobs", "cluster", "decision"},  # a job that can never fit: the placement rules' whole-segment counts
    "decision": {"jobs", "cluster", "core"},
    "sim": {"jobs", "cluster", "core", "decision"},
    "scenario": {"jobs", "cluster", "workload", "sim"},
    "gym": {"jobs", "cluster", "core", "workload", "decision", "sim", "scenario"},
}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "envs"


def test_each_layer_of_envs_imports_only_the_layers_below_it() -> None:
    """envs/ is cut into layers (envs/__init__.py): the cluster knows nothing of the others, the
    workload nothing of simulation (only the placement rules' counts, to refuse a job that can
    never fit), the decision layer nothing of the simulator, the workload or the envs, the
    simulator nothing of Gymnasium. Every module lives in a known layer."""
    graph = import_graph(ROOT)
    assert graph.has_edge("envs.sim.simulator", "envs.decision.state")  # the scan sees the layers' edges
    unknown = sorted(m for m in graph if _layer(m) not in LAYERS and m != "envs")
    assert not unknown, f"modules outside every layer of envs/: {unknown}"
    offenders = sorted((a, b) for a, b in graph.edges
                       if a != "envs" and b != "envs" and _layer(b) != _layer(a) and _layer(b) not in LAYERS[_layer(a)])
    assert not offenders, "imports against the layers: " + ", ".join(f"{a} -> {b}" for a, b in offenders)


def test_traces_never_import_workload() -> None:
    """The direction chosen: envs.workload.generator replays traces through envs.workload.traces, never the reverse."""
    graph = import_graph(ROOT)
    trace_modules = [m for m in graph if m == "envs.workload.traces" or m.startswith("envs.workload.traces.")]
    assert len(trace_modules) > 1
    assert not [m for m in trace_modules if nx.has_path(graph, m, "envs.workload.generator")]


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
    for module in ("envs.decision.state", "envs.decision.cache", "envs.decision.placement", "envs.decision.window", "envs.decision.candidates", "envs.decision.features"):
        reachable = nx.descendants(graph, module)
        assert not reachable & {"envs.sim.simulator", "envs.gym.env", "envs.workload.generator", "envs.workload.traces"}, (module, sorted(reachable))
    for path in sorted((ROOT / "baselines").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & {"envs.sim.simulator", "envs.gym.env"}, (path.name, sorted(imported))


def test_simulator_and_candidate_layer_import_without_gymnasium_or_torch() -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['gymnasium'] = None; sys.modules['torch'] = None\n"
            "import envs.sim.simulator, envs.decision.candidates, envs.decision.features, envs.sim.replay, envs.workload.generator, baselines")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_project_import_graph_is_acyclic() -> None:
    graph = project_graph()
    # The scan sees the edges it must see (a vacuous graph would pass trivially): a script's lazy
    # import, a package re-exporting its submodules, an import of a package's re-exported names.
    assert graph.has_edge("train", "agents.config")
    assert graph.has_edge("agents.evaluation", "agents.evaluation.runners")
    assert graph.has_edge("evaluate", "agents.evaluation")
    assert graph.has_edge("service.scoring", "baselines")
    cycles = cycles_report(graph)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_library_code_never_imports_a_script() -> None:
    """train.py and evaluate.py run the library; no module of envs, agents, baselines or
    service imports them (a script's helpers that the library needs live in the library)."""
    graph = project_graph()
    scripts = {path.stem for path in ROOT.glob("*.py")}
    assert {"train", "evaluate"} <= scripts
    offenders = sorted((m, s) for m, s in graph.edges if s in scripts and m.split(".")[0] in LIBRARY_PACKAGES)
    assert not offenders, offenders


def test_a_package_reexporting_its_submodules_is_no_cycle(tmp_path: Path) -> None:
    """The rule of the module's docstring on a package `pkg`: its __init__ imports its
    submodules; a submodule importing a sibling by its dotted name, or `from pkg import a` (a
    submodule), depends on that submodule only; `from pkg import A` (a name the __init__
    re-exports) depends on the __init__, and so closes a cycle when the __init__ imports it."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import A\nfrom pkg.b import B\nfrom pkg.c import f\n")
    (pkg / "a.py").write_text("class A:\n    pass\n")
    (pkg / "b.py").write_text("from pkg.a import A\nfrom pkg import a\nimport pkg.a\n\nclass B(A):\n    pass\n")
    (pkg / "c.py").write_text("def f():\n    from pkg import A\n    return A\n")
    (tmp_path / "script.py").write_text("def main():\n    from pkg import B\n    return B\n")
    graph = import_graph(tmp_path, ("pkg",), scripts=True)
    assert set(graph.edges) == {("pkg", "pkg.a"), ("pkg", "pkg.b"), ("pkg", "pkg.c"), ("pkg.b", "pkg.a"), ("pkg.c", "pkg"),
                                ("script", "pkg")}
    assert cycles_report(graph) == ["2 modules (pkg, pkg.c): pkg -> pkg.c -> pkg"]
    (pkg / "c.py").write_text("def f():\n    from pkg.a import A\n    return A\n")
    assert cycles_report(import_graph(tmp_path, ("pkg",), scripts=True)) == []
