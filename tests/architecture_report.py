"""Issue 64's numbers for a tree of speclab, read from its source alone (nothing of it imported, so an older
checkout is measured the same way, with tests/test_architecture.py's readers of this checkout):

    python tests/architecture_report.py [ROOT]      # ROOT: a checkout (default: this one)

- references to a method's NAME outside speclab/methods/ (tests/test_architecture.py's count), by file;
- cache kinds a drafting pass writes: speclab classes named *Cache, transformers caches that speclab/methods
  constructs, and classes that keep their own key and value buffers (self.keys and self.values);
- decoder-layer implementations: the functions that write a layer themselves (call an rms_norm and silu in
  their own body: Medusa's residual blocks have no norm), and the functions named rms_norm;
- docstrings over 15 lines (and of 15 lines or more);
- the import graph with packages as nodes (an edge's count: the module imports behind it) and its cycles;
- files a new method touches: what tests/methods/test_new_method.py patches besides the method's own code,
  and, from git, the files of each commit that added a module to speclab/methods/ after the registry existed.
"""
from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
import subprocess
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the checkout's tests package
from tests.test_architecture import alias_of, cycles, name_references, runtime_nodes  # noqa: E402


def modules(package: Path) -> dict[str, Path]:
    """speclab's modules (dotted name -> file)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def own_nodes(func: ast.AST):
    """The nodes of a function's body, less those of the functions defined inside it."""
    todo = list(ast.iter_child_nodes(func))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def writes_a_layer(func: ast.FunctionDef) -> bool:
    called = {getattr(n.func, "attr", getattr(n.func, "id", "")) for n in own_nodes(func) if isinstance(n, ast.Call)}
    return {"silu", "rms_norm"} <= called


def self_assigned(cls: ast.ClassDef) -> set[str]:
    targets = [t for n in ast.walk(cls) if isinstance(n, (ast.Assign, ast.AnnAssign))
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
    names = {t.attr for t in targets if isinstance(t, ast.Attribute) and getattr(t.value, "id", "") == "self"}
    buffers = {n.args[0].value for n in ast.walk(cls) if isinstance(n, ast.Call)
               and getattr(n.func, "attr", "") == "register_buffer" and n.args and isinstance(n.args[0], ast.Constant)}
    return names | buffers


def measure(root: Path) -> dict:
    package = root / "speclab"
    mods = modules(package)
    trees = {name: ast.parse(path.read_text()) for name, path in mods.items()}
    rel = {name: str(path.relative_to(root)) for name, path in mods.items()}
    methods_dir = package / "methods"

    refs = {rel[m]: name_references(t) for m, t in trees.items() if mods[m].parent != methods_dir}
    refs = {f: n for f, n in refs.items() if n}

    defined = {n.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}
    caches = set()
    for m, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                if node.name.endswith("Cache") or {"keys", "values"} <= self_assigned(node):
                    caches.add(f"{node.name} ({rel[m]})")
            elif (isinstance(node, ast.Call) and m.startswith("speclab.methods")
                  and getattr(node.func, "id", "").endswith("Cache") and node.func.id not in defined):
                caches.add(f"{node.func.id} (transformers, built in {rel[m]})")

    layers, norms = set(), set()
    for m, tree in trees.items():
        for top in tree.body:
            inside = [n for n in ast.walk(top) if isinstance(n, ast.FunctionDef)]
            for node in inside:
                where = f"{top.name}.{node.name}" if isinstance(top, ast.ClassDef) else node.name
                if writes_a_layer(node):
                    layers.add(f"{where} ({rel[m]})")
                if node.name.lstrip("_") == "rms_norm":
                    norms.add(f"{where} ({rel[m]})")

    docs = Counter()
    long_docs = []
    for m, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                lines = len(doc.splitlines()) if doc else 0
                docs["over 15"] += lines > 15
                docs["15 or more"] += lines >= 15
                if lines > 15:
                    long_docs.append(f"{rel[m]}:{getattr(node, 'name', '<module>')} ({lines})")

    def package_of(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 and (package / parts[1]).is_dir() else module

    def imported(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names if a.name.split(".")[0] == "speclab"]
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "speclab" and not node.level:
            return [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                    for a in node.names]
        return []

    aliases = {m: a for m, tree in trees.items() if (a := alias_of(tree))}
    edges = Counter()
    graph: dict[str, set[str]] = {}
    for m, tree in trees.items():
        if m in aliases:  # an old import path that is the same module: not a node
            continue
        named = {aliases.get(i, i) for node in runtime_nodes(tree)
                 for i in imported(node) if i in mods}
        parents = {".".join(i.split(".")[:k]) for i in named for k in range(2, len(i.split(".")))}
        own = {".".join(m.split(".")[:k]) for k in range(2, len(m.split(".")))}
        for target in named | (parents - own):
            a, b = package_of(m), package_of(target)
            if a != b:
                edges[a, b] += 1
                graph.setdefault(a, set()).add(b)

    touched = None
    toy = root / "tests" / "methods" / "test_new_method.py"
    if toy.is_file():
        patched = set()
        for node in ast.walk(ast.parse(toy.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("setitem", "setattr") \
                    and getattr(node.func.value, "id", "") == "monkeypatch" and node.args:
                patched.add(ast.unparse(node.args[0]))
        # REGISTRY is speclab/methods/__init__.py; anything else patched would be another file to touch
        files = {"the method's module (speclab/methods/<name>.py)"} | {
            "speclab/methods/__init__.py (its registry entry)" if p == "REGISTRY" else p for p in patched}
        touched = sorted(files)
    return {"refs": refs, "caches": sorted(caches), "layers": sorted(layers), "norms": sorted(norms), "docs": docs,
            "long_docs": long_docs, "edges": edges, "cycles": cycles(graph), "toy": touched}


def method_commits(root: Path) -> list[str]:
    """Each commit that added a method (a module of speclab/methods/ with its NAME) once the registry
    existed: how many files it touched, and which speclab modules."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True).stdout
    registry = git("log", "--diff-filter=A", "--format=%H", "--", "speclab/methods/__init__.py").split()
    if not registry:
        return []
    log = git("log", "--diff-filter=A", "--format=@%h", "--name-only", f"{registry[-1]}..HEAD", "--",
              "speclab/methods/*.py")
    lines = []
    for block in log.split("@")[1:]:
        commit, *added = block.split()
        methods = [Path(a).stem for a in added if "\nNAME = " in git("show", f"{commit}:{a}")]
        if methods:
            files = git("show", "--name-only", "--format=", commit).split()
            code = [f for f in files if f.startswith("speclab/") and f.endswith(".py")]
            lines.append(f"{commit} added {', '.join(methods)}: {len(files)} files, {len(code)} speclab modules "
                         f"({', '.join(code)})")
    return lines


def report(root: Path) -> None:
    r = measure(root)
    short = lambda p: p.removeprefix("speclab.")  # noqa: E731
    print(f"speclab at {root}")
    print(f"NAME references outside speclab/methods/: {sum(r['refs'].values())} in {len(r['refs'])} files")
    for f, n in sorted(r["refs"].items(), key=lambda x: (-x[1], x[0])):
        print(f"    {n:3} {f}")
    print(f"cache kinds a drafting pass writes: {len(r['caches'])}: " + "; ".join(r["caches"]))
    print(f"decoder-layer implementations (a function writing rms_norm and silu): {len(r['layers'])}: " + "; ".join(r["layers"]))
    print(f"rms_norm written: {len(r['norms'])}: " + "; ".join(r["norms"]))
    print(f"docstrings over 15 lines: {r['docs']['over 15']} (15 or more: {r['docs']['15 or more']})")
    for d in r["long_docs"]:
        print(f"    {d}")
    print(f"package import graph: {len(r['edges'])} edges, cycles: {r['cycles'] or 'none'}")
    for (a, b), n in sorted(r["edges"].items()):
        print(f"    {short(a):22} -> {short(b):22} {n}")
    if r["toy"] is None:
        print("files touched to add a toy method: no toy-method test in this tree")
    else:
        print(f"files touched to add a toy method: {len(r['toy'])}: " + "; ".join(r["toy"]))
    for line in method_commits(root):
        print(f"    {line}")


if __name__ == "__main__":
    report(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
