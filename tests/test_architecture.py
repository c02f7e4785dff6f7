"""The package's shape, checked: no import cycle, imports at the top of their modules, and every drafting
method named in one place (its own module, and the registry that lists it)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "speclab"
# Imports that stay inside a function, and why: each is a heavy dependency that only that function needs.
DEFERRED = {
    ("speclab/course/notebook.py", "myst_nb"): "glue into the book's prose: installed where the book is built, "
                                               "not on Colab, where glue does nothing",
    ("speclab/measure/vllm_cpu.py", "vllm"): "vLLM lives in its own environment (its pins differ from the "
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


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        graph[name] = {m for node in ast.walk(tree) for m in imported(node) if m in MODULES and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
