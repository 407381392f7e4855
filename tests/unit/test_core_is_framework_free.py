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
