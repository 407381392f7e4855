"""The imports inside a function are the few docs/architecture.md names, each for its reason: a new one fails
here until it is named there (and here), so the doc stays true."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("accounts", "chat", "engine", "search", "contextmgr", "ollm_site", "modelserver")
DOC = ROOT / "docs" / "architecture.md"

# (file, function, the import), as docs/architecture.md says why.
NAMED = {
    ("chat/apps.py", "ChatConfig.ready", "from chat import signals, tasks"),
    ("chat/apps.py", "ChatConfig.ready", "from chat.web import channel_events"),
    (
        "search/selectors.py",
        "_PostgresMatches.__init__",
        "from django.contrib.postgres.search import SearchQuery, SearchVectorField",
    ),
    ("modelserver/native.py", "start_server", "import xllamacpp"),
    ("chat/web/consumers.py", "ChatConsumer.still_logged_in", "import_module(settings.SESSION_ENGINE)"),
}


def _imports_in_functions(path: Path) -> Iterator[tuple[str, str]]:
    """(function, import) of each import statement, or import_module call, inside a function of ``path``."""

    def walk(node: ast.AST, scope: list[str], in_function: bool) -> Iterator[tuple[str, str]]:
        for child in ast.iter_child_nodes(node):
            dynamic = isinstance(child, ast.Call) and ast.unparse(child.func) in ("import_module", "__import__")
            if in_function and (isinstance(child, ast.Import | ast.ImportFrom) or dynamic):
                yield ".".join(scope), ast.unparse(child)
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from walk(child, [*scope, child.name], True)
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, [*scope, child.name], in_function)
            else:
                yield from walk(child, scope, in_function)

    yield from walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), [], False)


def test_the_imports_inside_functions_are_the_named_ones():
    found = {
        (str(path.relative_to(ROOT)), function, module)
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
        for function, module in _imports_in_functions(path)
    }
    assert found == NAMED, (
        f"not named in docs/architecture.md (say why there, then here): {sorted(found - NAMED)}; "
        f"gone: {sorted(NAMED - found)}"
    )


def test_the_doc_names_each_of_them():
    text = DOC.read_text(encoding="utf-8")
    missing = [
        (file, function) for file, function, _ in NAMED if f"`{file}`" not in text or function.split(".")[0] not in text
    ]
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_starting_the_model_server_loads_no_native_library_before_it_checks_the_cpu():
    """``python -m modelserver`` checks the CPU first: its modules import xllamacpp only in ``start_server``."""
    code = "import sys, modelserver.__main__; assert 'xllamacpp' not in sys.modules, 'loaded at import'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
