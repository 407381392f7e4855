from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "contextmgr" / "core"


def test_importing_the_core_loads_no_framework():
    modules = sorted(p.stem for p in CORE.glob("*.py") if p.stem != "__init__")
    code = (
        "import sys\n"
        + "".join(f"import contextmgr.core.{m}\n" for m in modules)
        + "bad = sorted(n for n in sys.modules if n.split('.')[0] in {'django', 'channels', 'celery', 'ninja'})\n"
        + "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=CORE.parents[1], check=True
    )
    assert len(modules) >= 9
    assert result.stdout.strip() == ""


def _importers(pattern: str, *, outside: tuple[str, ...]) -> list[str]:
    """Project modules (tests and benchmarks aside) that import ``pattern``, except under ``outside``."""
    root = CORE.parents[1]
    imports = re.compile(rf"^\s*(?:import|from)\s+(?:{pattern})\b", re.M)
    return [
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if ".venv" not in path.parts
        and path.parts[len(root.parts)] not in {"tests", "bench"}
        and not path.relative_to(root).as_posix().startswith(outside)
        and imports.search(path.read_text(encoding="utf-8"))
    ]


def test_only_the_gateway_imports_the_ollama_client():
    assert _importers("ollama", outside=("contextmgr/llm/",)) == []
    assert _importers("ollama", outside=()) == ["contextmgr/llm/ollama_backend.py"]


def test_only_the_model_server_loads_the_inference_library():
    """llama.cpp runs in the model server's process only: a crash of it never takes the app down."""
    assert _importers("llama_cpp", outside=("modelserver/",)) == []
    assert "modelserver/engine.py" in _importers("llama_cpp", outside=())


def test_the_model_server_imports_nothing_of_the_app():
    app = "django|channels|celery|ninja|contextmgr|chat|accounts|search|ollm_site"
    assert [path for path in _importers(app, outside=()) if path.startswith("modelserver/")] == []
