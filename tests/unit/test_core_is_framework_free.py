from __future__ import annotations

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


def test_only_the_gateway_imports_the_llm_clients():
    import re

    root = CORE.parents[1]
    pattern = re.compile(r"^\s*(?:import|from)\s+(?:ollama|llama_cpp)\b", re.M)
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if ".venv" not in path.parts
        and path.parts[len(root.parts)] not in {"tests", "bench"}
        and "contextmgr/llm" not in path.as_posix()
        and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
    assert pattern.search((root / "contextmgr" / "llm" / "ollama_backend.py").read_text(encoding="utf-8"))
