"""The core opens no file: the adapter (``engine.resources``) reads the vocabulary and the
profile table and hands their data to it. import-linter's "core is pure" contract forbids the
framework and network modules; this looks for what an import contract cannot see."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "engine" / "core"
# Modules through which code reads or writes files besides those the contract forbids.
FILE_MODULES = frozenset({"builtins", "glob", "io", "os", "shutil", "tempfile"})
# Calls that read or write a file whatever module the object came from (a Path, gzip.open).
FILE_METHODS = frozenset({"open", "read_bytes", "read_text", "write_bytes", "write_text"})


def file_access(source: str) -> list[str]:
    """The file modules ``source`` imports and the file calls it makes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in FILE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FILE_MODULES:
            found.append(node.module or "")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
            found.append("open()")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FILE_METHODS:
            found.append(f".{node.func.attr}()")
    return found


def test_the_check_sees_a_file_being_read():
    assert file_access("import os.path\nfrom io import BytesIO\nwith open('x') as f:\n    pass\n") == [
        "os.path",
        "io",
        "open()",
    ]
    assert file_access("import gzip\ngzip.decompress(b'')\n") == []
    # What the core did before the adapter: PROFILES_FILE.read_text(), path.read_bytes().
    assert file_access("data = PROFILES_FILE.read_text(encoding='utf-8')\nraw = path.read_bytes()\n") == [
        ".read_text()",
        ".read_bytes()",
    ]


def test_the_core_opens_no_file():
    modules = sorted(CORE.glob("*.py"))
    assert len(modules) >= 15
    assert {path.name: file_access(path.read_text(encoding="utf-8")) for path in modules} == {
        path.name: [] for path in modules
    }
