"""The package's shape, checked: no import cycle between modules or between packages (importing a module
runs its package's __init__ first, so that is an edge too), the engine never imports a method, imports at
the top of their modules, and every drafting method named in one place (its own module, and the registry).

`python tests/test_architecture.py` prints the graph with packages as nodes; `python tests/architecture_report.py
[ROOT]` prints issue 64's numbers for this checkout or another (an older commit's worktree)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "speclab"
# Imports that stay inside a function, and why: each is a heavy dependency that only that function needs.
DEFERRED = {
    ("speclab/course/notebook.py", "myst_nb"): "glue into the book's prose: installed where the book is built, "
                                               "not on Colab, where glue does nothing",
    ("speclab/serving/vllm_cpu.py", "vllm"): "vLLM lives in its own environment (its pins differ from the "
                                             "course's); the module says so when it is missing",
    ("speclab/serving/vllm_engine.py", "vllm"): "the same: run in the serving environment (requirements-serving.txt)",
    ("speclab/serving/load_test.py", "aiohttp"): "the serving environment's HTTP client (vLLM's dependency)",
    ("speclab/course/checks.py", "scipy"): "scipy.stats costs each of the grader's kernels, judges and answer "
                                           "workers ~2 s to import; only a distribution check needs it",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(node: ast.AST) -> list[str]:
    """The speclab modules an import statement names (a `from package import submodule` names the
    submodule). speclab imports absolutely: a relative import fails the test that reads them."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "speclab"]
    if not isinstance(node, ast.ImportFrom):
        return []
    assert node.level == 0, f"a relative import of {node.module}: import speclab modules absolutely"
    if (node.module or "").split(".")[0] != "speclab":
        return []
    return [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names]


def runtime_nodes(tree: ast.Module) -> list[ast.AST]:
    """The module's nodes, less those under `if TYPE_CHECKING:` (never run)."""
    skipped = {id(n) for top in ast.walk(tree) if isinstance(top, ast.If)
               and getattr(top.test, "id", getattr(top.test, "attr", None)) == "TYPE_CHECKING"
               for n in ast.walk(top)}
    return [n for n in ast.walk(tree) if id(n) not in skipped]


def alias_of(tree: ast.Module) -> str | None:
    """The module a module replaces itself with (`sys.modules[__name__] = m`, after `from p import m`): an
    old import path that is the same module (speclab.checks is speclab.course.checks)."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)
                and ast.unparse(node.targets[0]) == "sys.modules[__name__]" and isinstance(node.value, ast.Name)):
            return next((f"{i.module}.{a.name}" for i in tree.body if isinstance(i, ast.ImportFrom)
                         for a in i.names if (a.asname or a.name) == node.value.id), None)
    return None


ALIASES = {name: target for name, path in MODULES.items() if (target := alias_of(ast.parse(path.read_text())))}


def parents(module: str) -> list[str]:
    """The packages whose __init__ runs before `module` (speclab's own is lazy: PEP 562)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def import_graph() -> dict[str, set[str]]:
    """module -> the modules importing it runs: those it imports and, for a module of another package,
    that package's __init__ (a package's own modules run inside its __init__, not after it); an alias
    module stands for the module it is."""
    graph = {}
    for name, path in MODULES.items():
        if name in ALIASES:
            continue
        named = {m for node in runtime_nodes(ast.parse(path.read_text())) for m in imported(node) if m in MODULES}
        named = {ALIASES.get(m, m) for m in named}
        graph[name] = (named | {p for m in named for p in parents(m) if p not in parents(name)}) - {name}
    return graph


def package_of(module: str) -> str:
    """A subpackage's modules are one node (speclab.methods); a top-level module is its own node."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else module


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, imports in import_graph().items():
        graph.setdefault(package_of(name), set()).update(package_of(m) for m in imports)
    return {p: imports - {p} for p, imports in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):  # a node without edges out may be no key
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_packages_import_one_way():
    assert cycles(package_graph()) == []


def test_a_module_depends_on_its_package():
    graph = import_graph()
    assert "speclab.methods" in graph["speclab.serving.export"]  # it imports speclab.methods.checkpoints
    assert "speclab.methods" not in graph["speclab.methods.eagle"]  # its own package


def test_the_package_cycle_check_sees_the_parent_package():
    """decoding importing speclab.methods.draft_model runs speclab.methods' __init__, which imports every
    method: a cycle between the engine and the methods that module edges alone would miss."""
    graph = {"speclab.decoding": {"speclab.methods.draft_model", "speclab.methods"},
             "speclab.methods": {"speclab.methods.draft_model", "speclab.decoding"},
             "speclab.methods.draft_model": {"speclab.methods"}}
    assert cycles(graph) == [["speclab.decoding", "speclab.methods", "speclab.methods.draft_model"]]


ENGINE = ("speclab.decoding", "speclab.runner", "speclab.verification", "speclab.sampling", "speclab.drafting",
          "speclab.trees", "speclab.adaptive", "speclab.stats", "speclab.fast_model")


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def test_the_engine_never_imports_a_method():
    """The loop takes a Drafter; a bare draft model is wrapped by the registry, looked up when passed."""
    graph = import_graph()
    for module in ENGINE:
        above = {m for m in reachable(graph, module) if package_of(m) != m}
        assert not above, f"{module} imports {sorted(above)}"


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_method_modules_never_import_the_registry():
    graph = import_graph()
    methods = [m for m in MODULES if m.startswith("speclab.methods.")]
    assert methods and all("speclab.methods" not in graph[m] for m in methods)


def function_level_imports() -> list[tuple[str, str]]:
    """(file, imported module) for every import inside a function or method."""
    found = []
    for path in MODULES.values():
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(func):
                    if isinstance(node, ast.Import):
                        found += [(str(path.relative_to(PACKAGE.parent)), a.name) for a in node.names]
                    elif isinstance(node, ast.ImportFrom):
                        found.append((str(path.relative_to(PACKAGE.parent)), node.module or ""))
    return sorted(set(found))


def test_imports_live_at_the_top_of_their_modules():
    hidden = [f"{file}: {module}" for file, module in function_level_imports()
              if (file, module.split(".")[0]) not in DEFERRED]
    assert hidden == [], "import these at the top of the module (or add a heavy optional dependency to DEFERRED)"


def test_a_method_name_is_written_in_its_module_and_the_registry_only():
    from speclab.methods import REGISTRY
    registry = PACKAGE / "methods" / "__init__.py"
    where: dict[str, set[Path]] = {name: set() for name in REGISTRY}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in where:
                where[node.value].add(path)
    for name, method in REGISTRY.items():
        own = {path for path in where[name] if path.parent == PACKAGE / "methods" and path != registry}
        assert len(own) == 1, f"{name!r} should be written in exactly one method module, found {own}"
        outside = where[name] - own - {registry}
        assert not outside, f"{name!r} is written outside its module and the registry: {outside}"


def method_name_references(path: Path) -> int:
    """How often a module names a method by its module's NAME (draft_model.NAME, eagle.NAME3, or NAME imported
    under another name): a table keyed by method outside speclab/methods/ reads this way."""
    return name_references(ast.parse(path.read_text()))


def name_references(tree: ast.Module) -> int:
    """method_name_references of a parsed module."""
    aliases = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("speclab.methods.") for a in node.names if a.name in ("NAME", "NAME3")}
    return sum(1 for node in ast.walk(tree)
               if (isinstance(node, ast.Attribute) and node.attr in ("NAME", "NAME3") and isinstance(node.value, ast.Name))
               or (isinstance(node, ast.Name) and node.id in aliases))


# References to a method's NAME outside speclab/methods/: 126 when counted first (issue 64), 84 once the
# engines' settings and the command line's flags moved into the registry, 46 once the model card's sections,
# generate's older names, flags and --then, and the converted card's head did, 37 once evaluate, the train
# command and PARD's trainer read the registry, 18 once what vLLM serves of each method, the load test's methods
# and the export's check did (Method.vllm_drafts, load_test, export_check), 12 once chapters 8, 11 and 12 did.
# It may only go down. Those left outside the chapters and measure: each trainer names the method it trains
# (train/eagle.py both EAGLE versions), and serving/vllm_cpu.py compares prompt lookup alone with vLLM's.
NAME_REFERENCES_OUTSIDE_METHODS = 12


def test_methods_are_named_outside_their_package_less_and_less():
    counts = {str(p.relative_to(PACKAGE.parent)): method_name_references(p) for p in MODULES.values()
              if p.parent != PACKAGE / "methods"}
    total = sum(counts.values())
    assert total <= NAME_REFERENCES_OUTSIDE_METHODS, sorted(((n, f) for f, n in counts.items() if n), reverse=True)


def test_the_report_counts_the_references_as_this_test_does():
    from tests.architecture_report import measure
    counted = sum(method_name_references(p) for p in MODULES.values() if p.parent != PACKAGE / "methods")
    assert sum(measure(PACKAGE.parent)["refs"].values()) == counted


def test_importing_the_loop_loads_no_method():
    code = "import sys, speclab.decoding; print(sorted(m for m in sys.modules if m.startswith('speclab.methods')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


if __name__ == "__main__":
    for package, imports in sorted(package_graph().items()):
        print(f"{package} -> {', '.join(sorted(imports)) or '(nothing in speclab)'}")
    print("cycles:", cycles(package_graph()) or "none")
