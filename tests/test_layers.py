"""The stages of tracer/ import downwards only: core, then kernel / tracedir / gpu, then ui /
sinks / render, then live, then the commands on top (cli, api, attach, demo, doctor, report)
and the package root (`tracer/__init__.py`, whose public names are the API's); no import cycle;
one module uses ctypes.

Every import counts, including those inside functions and those only for type checking: a lazy
import upwards is still a dependency on the higher stage. So do imports by name
(`importlib.import_module`, `__import__`): in a module that makes one, every string naming a
tracer module counts as an import of it, as the name may come from a table (tracer.__init__'s
lazy names, the session's preloaded modules).
"""

from __future__ import annotations

import ast
from pathlib import Path

TRACER = Path(__file__).resolve().parent.parent / "tracer"
# "": the package root, tracer/__init__.py (tracer.load, tracer.trace): on top, with the API.
LEVEL = {"": 4, "core": 0, "errors": 0, "kernel": 1, "tracedir": 1, "gpu": 1, "ui": 2, "sinks": 2,
         "render": 2, "live": 3, "cli": 4, "api": 4, "attach": 4, "demo": 4, "doctor": 4,
         "report": 4, "mcp_server": 4}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "tracer":
        return None
    if len(parts) == 1:
        return ""
    return parts[1] if parts[1] in LEVEL else None


def _modules() -> dict[str, Path]:
    return {".".join(("tracer", *p.relative_to(TRACER).with_suffix("").parts)).removesuffix(
        ".__init__"): p for p in TRACER.rglob("*.py")}


def _imports_by_name(tree: ast.AST, modules: set[str]) -> set[str]:
    """The tracer modules a module may import by name: none unless it calls
    importlib.import_module or __import__; then each string constant that names one."""
    calls = any(isinstance(n, ast.Call) and (
        (isinstance(n.func, ast.Attribute) and n.func.attr == "import_module")
        or (isinstance(n.func, ast.Name) and n.func.id in ("__import__", "import_module")))
        for n in ast.walk(tree))
    if not calls:
        return set()
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in modules}


def _imports() -> list[tuple[str, str]]:
    out = []
    modules = _modules()
    for module, path in sorted(modules.items()):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from tracer import errors` imports tracer.errors, `from tracer import x` tracer
                subs = [f"{node.module}.{a.name}" for a in node.names
                        if f"{node.module}.{a.name}" in modules]
                out.extend((module, d) for d in subs or [node.module])
            elif isinstance(node, ast.Import):
                out.extend((module, a.name) for a in node.names)
        out.extend((module, d) for d in sorted(_imports_by_name(tree, set(modules))))
    return out


def test_the_stages_are_known() -> None:
    stages = {p.name.removesuffix(".py") for p in TRACER.iterdir()
              if p.name not in ("__init__.py", "__pycache__", "workloads", "bpf")}
    assert stages <= set(LEVEL), sorted(stages - set(LEVEL))


def test_no_import_goes_up() -> None:
    up = [f"{src} imports {dst}" for src, dst in _imports()
          if _stage(src) is not None and _stage(dst) is not None
          and LEVEL[_stage(dst)] > LEVEL[_stage(src)]]
    assert up == []


def test_the_check_sees_the_root_and_imports_by_name() -> None:
    """The package root and importlib's imports are in what the check reads (else a stage could
    climb back up through `from tracer import ...` or a module name in a string)."""
    pairs = set(_imports())
    assert ("tracer", "tracer.api") in pairs  # the root's lazy names, by importlib
    assert ("tracer.live.session", "tracer.sinks.parquet") in pairs  # preloaded by name
    assert LEVEL[_stage("tracer")] == max(LEVEL.values())


def _runtime_graph() -> dict[str, set[str]]:
    """Module -> the tracer modules it imports when it runs (not those under TYPE_CHECKING)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree)
                       if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                       for n in ast.walk(node)}
        deps: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from tracer.gpu import idle` imports the submodule, `from tracer.x import f` x
                subs = {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
                deps |= subs or {node.module}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        deps |= _imports_by_name(tree, set(modules))
        # a module's own packages are imported before it, whatever it imports
        graph[module] = {d for d in deps if d in modules and not (module + ".").startswith(d + ".")}
    return graph


def test_no_import_cycle() -> None:
    graph: dict[str, set[str]] = _runtime_graph()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(module):], module]))
        if module not in done:
            for dep in sorted(graph[module]):
                visit(dep, [*path, module])
            done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_one_module_uses_ctypes() -> None:
    users = sorted({src for src, dst in _imports() if dst.split(".")[0] == "ctypes"})
    assert users == ["tracer.kernel.libbpf"]
