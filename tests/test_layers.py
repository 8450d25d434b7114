"""The stages of tracer/ import downwards only: core, then kernel / tracedir / gpu, then ui /
sinks / render, then live, then the commands on top (cli, api, attach, demo, doctor, report);
no import cycle; one module uses ctypes.

Every import counts, including those inside functions and those only for type checking: a lazy
import upwards is still a dependency on the higher stage.
"""

from __future__ import annotations

import ast
from pathlib import Path

TRACER = Path(__file__).resolve().parent.parent / "tracer"
LEVEL = {"core": 0, "errors": 0, "kernel": 1, "tracedir": 1, "gpu": 1, "ui": 2, "sinks": 2,
         "render": 2, "live": 3, "cli": 4, "api": 4, "attach": 4, "demo": 4, "doctor": 4,
         "report": 4}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "tracer" and len(parts) > 1 and parts[1] in LEVEL else None


def _imports() -> list[tuple[str, str]]:
    out = []
    for path in sorted(TRACER.rglob("*.py")):
        module = ".".join(("tracer", *path.relative_to(TRACER).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.append((module.removesuffix(".__init__"), node.module))
            elif isinstance(node, ast.Import):
                out.extend((module.removesuffix(".__init__"), a.name) for a in node.names)
    return out


def test_the_stages_are_known() -> None:
    stages = {p.name.removesuffix(".py") for p in TRACER.iterdir()
              if p.name not in ("__init__.py", "__pycache__", "workloads", "bpf")}
    assert stages <= set(LEVEL), sorted(stages - set(LEVEL))


def test_no_import_goes_up() -> None:
    up = [f"{src} imports {dst}" for src, dst in _imports()
          if _stage(src) and _stage(dst)
          and LEVEL[_stage(dst)] > LEVEL[_stage(src)]]
    assert up == []


def _runtime_graph() -> dict[str, set[str]]:
    """Module -> the tracer modules it imports when it runs (not those under TYPE_CHECKING)."""
    modules = {".".join(("tracer", *p.relative_to(TRACER).with_suffix("").parts)).removesuffix(
        ".__init__"): p for p in TRACER.rglob("*.py")}
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
