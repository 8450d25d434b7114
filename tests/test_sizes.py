"""Sizes in tracer/ stay readable: no function over 80 lines, no class over 400, no module over
800 (lines from `def`/`class` to the last line of the body, decorators not counted). None is
exempt."""

from __future__ import annotations

import ast
from pathlib import Path

TRACER = Path(__file__).resolve().parent.parent / "tracer"
MOST_FUNCTION, MOST_CLASS, MOST_MODULE = 80, 400, 800


def _sources() -> list[tuple[str, str]]:
    return [(str(p.relative_to(TRACER.parent)), p.read_text()) for p in sorted(TRACER.rglob("*.py"))]


def _too_long(kinds: tuple[type, ...], most: int) -> list[str]:
    found = []
    for name, source in _sources():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, kinds) and node.end_lineno - node.lineno + 1 > most:
                found.append(f"{name}:{node.lineno} {node.name}: "
                             f"{node.end_lineno - node.lineno + 1} lines")
    return found


def test_no_function_over_80_lines() -> None:
    long = _too_long((ast.FunctionDef, ast.AsyncFunctionDef), MOST_FUNCTION)
    assert not long, "\n".join(long)


def test_no_class_over_400_lines() -> None:
    long = _too_long((ast.ClassDef,), MOST_CLASS)
    assert not long, "\n".join(long)


def test_no_module_over_800_lines() -> None:
    long = [f"{name}: {len(source.splitlines())} lines" for name, source in _sources()
            if len(source.splitlines()) > MOST_MODULE]
    assert not long, "\n".join(long)
