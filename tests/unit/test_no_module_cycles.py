"""No module of the app imports, through any chain, a module that imports it back.

import-linter's layers keep lower layers from importing higher ones; this catches a cycle
between two modules of the same layer too (function-level imports included)."""

from __future__ import annotations

from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ollm_site", "accounts", "chat", "contextmgr", "search", "modelserver")


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module) & modules:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def test_the_app_has_no_import_cycle(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert len(graph.modules) > 100
    assert _cycles(graph, set(graph.modules)) == []


def test_a_cycle_is_found():
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    assert _cycles(graph, set(graph.modules)) == []
    graph.add_import(importer="c", imported="a")
    assert _cycles(graph, set(graph.modules)) == [["a", "b", "c"]]
