"""The grader's rooms import each other one way: no module of the sandbox, and neither
sanitize.py nor the report's pictures, is part of an import cycle (lazy and type-checking
imports included: a cycle hidden in a function is still a cycle)."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

PACKAGE = ROOT / "grader"


def _imports() -> dict[str, set[str]]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    if target in modules and target != name:
                        edges[name].add(target)
            elif isinstance(node, ast.Import):
                edges[name] |= {alias.name for alias in node.names if alias.name in modules and alias.name != name}
    return edges


def _reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        current = todo.pop()
        for nxt in edges[current]:
            if nxt == goal:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def test_no_cycle_through_the_sandbox_sanitize_or_pictures() -> None:
    edges = _imports()
    watched = [m for m in edges if m.startswith("grader.sandbox.") or m in ("grader.sanitize", "grader.report.pictures")]
    assert "grader.sandbox.client" in watched and "grader.sandbox.warm" in watched
    assert [m for m in watched if _reaches(edges, m, m)] == []
    assert "grader.sandbox.client" in edges["grader.sandbox.warm"]  # the template depends on the client
    assert "grader.report.pictures" in edges["grader.sanitize"]  # sanitize uses the renderers' schema
