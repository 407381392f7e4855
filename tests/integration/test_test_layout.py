"""The tests' own layout: helpers live in tests/factories.py (or tests/support), shared fixtures
in tests/conftest.py; a test module never imports from a conftest or from another test module,
and no test module or conftest writes its own copy of a shared helper or fixture.

It lives here, not at the top of tests/, because every target of `make test` collects a folder.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _python_files() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def _is_test_code(path: Path) -> bool:
    return path.name == "conftest.py" or path.name.startswith("test_")


def _imported_modules(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            yield node.lineno, module
            if node.module is None or node.level:
                # ``from . import conftest`` / ``from .pkg import test_x``
                for alias in node.names:
                    yield node.lineno, f"{module}.{alias.name}"


def _top_level_functions(tree: ast.Module) -> set[str]:
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_no_module_imports_from_a_conftest_or_a_test_module():
    wrong = []
    for path in _python_files():
        for line, module in _imported_modules(ast.parse(path.read_text(), str(path))):
            last = module.rsplit(".", 1)[-1]
            if last == "conftest" or last.startswith("test_"):
                wrong.append(f"{path.relative_to(TESTS.parent)}:{line} imports {module}")
    assert not wrong, "helpers belong in tests/factories.py, shared fixtures in tests/conftest.py:\n" + "\n".join(wrong)


def test_no_test_module_or_conftest_copies_a_shared_helper_or_fixture():
    shared = {
        name: owner
        for owner in (TESTS / "factories.py", TESTS / "conftest.py")
        for name in _top_level_functions(ast.parse(owner.read_text(), str(owner)))
    }
    copies = []
    for path in _python_files():
        if not _is_test_code(path) or path == TESTS / "conftest.py":
            continue
        for name in sorted(_top_level_functions(ast.parse(path.read_text(), str(path))) & shared.keys()):
            copies.append(f"{path.relative_to(TESTS.parent)} defines {name} (the one is in tests/{shared[name].name})")
    assert not copies, "\n".join(copies)


def test_the_check_sees_what_it_is_meant_to_refuse():
    """The checks above would pass on any tree if they read nothing: they read these."""
    source = "from tests.spec.conftest import x\nimport tests.integration.test_turn\nfrom .conftest import y\n"
    modules = [module for _, module in _imported_modules(ast.parse(source))]
    assert modules == ["tests.spec.conftest", "tests.integration.test_turn", ".conftest", ".conftest.y"]
    assert {"small_session", "converse", "gateway"} <= _top_level_functions(
        ast.parse((TESTS / "factories.py").read_text())
    ) | _top_level_functions(ast.parse((TESTS / "conftest.py").read_text()))
    assert len(_python_files()) > 50
