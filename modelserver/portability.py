"""What the bundled inference library may ask of a CPU: x86-64 with AVX2 (x86-64-v3), nothing more.

llama.cpp built for the building CPU (``-march=native``) holds whatever that CPU
has: AVX-512 and AMX on a recent Xeon, which dies with SIGILL on a CPU or a
hypervisor without them. The xllamacpp wheel is built with ``GGML_NATIVE=OFF``
for AVX2, FMA, F16C and BMI2, in one library with no variants chosen at run
time; these checks look at its machine code itself (``python -m
modelserver.portability WHEEL`` before a new version is pinned), so an AMD
machine catches what only an Intel one would show.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

# Registers only AVX-512 (zmm) and AMX (tmm, and the tile instructions) use, as objdump's
# AT&T syntax prints them; each matching line is one instruction.
BEYOND_BASELINE = {"AVX-512": re.compile(r"%zmm\d"), "AMX": re.compile(r"%tmm\d|\btile(?:zero|loadd|stored|release)\b")}
# What the inference library needs: the flags of /proc/cpuinfo its build uses (xllamacpp's
# ``get_system_info()`` lists them; a hypervisor may offer AVX2 and hide BMI2).
REQUIRED_CPU_FLAGS = ("avx", "avx2", "fma", "f16c", "bmi2")


def beyond_baseline(library: Path) -> dict[str, int]:
    """How many instructions of each extension beyond the AVX2 baseline ``library`` contains."""
    disassembly = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True, check=True
    ).stdout
    lines = disassembly.splitlines()
    return {name: sum(1 for line in lines if pattern.search(line)) for name, pattern in BEYOND_BASELINE.items()}


def native_libraries(package_dir: Path) -> list[Path]:
    return sorted(path for path in package_dir.rglob("*.so*") if path.is_file())


def violations(libraries: Iterable[Path]) -> dict[str, dict[str, int]]:
    """Each library that holds instructions beyond the baseline, with their counts.

    A wheel may hold ``libggml.so``, ``.so.0`` and ``.so.0.25.3`` as three copies of one file:
    each content is disassembled once."""
    found: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    for library in libraries:
        digest = hashlib.sha256(library.read_bytes()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        counts = {name: n for name, n in beyond_baseline(library).items() if n}
        if counts:
            found[str(library)] = counts
    return found


def wheel_violations(wheel: Path, scratch: Path) -> dict[str, dict[str, int]]:
    """``violations`` of the native libraries inside a wheel file."""
    with zipfile.ZipFile(wheel) as archive:
        members = [name for name in archive.namelist() if re.search(r"\.so(\.|$)", name)]
        archive.extractall(scratch, members)
    return violations(scratch / name for name in members)


def missing_cpu_flags(cpuinfo: str) -> list[str]:
    """The flags of ``REQUIRED_CPU_FLAGS`` that /proc/cpuinfo's text does not list."""
    match = re.search(r"^flags\s*:(.*)$", cpuinfo, re.M)
    flags = set(match.group(1).split()) if match else set()
    return [flag for flag in REQUIRED_CPU_FLAGS if flag not in flags]


def main(argv: list[str]) -> int:
    """``python -m modelserver.portability WHEEL_OR_DIR...``: exit 1 and say what, when anything exceeds AVX2."""
    found: dict[str, dict[str, int]] = {}
    for arg in argv:
        path = Path(arg)
        if path.suffix == ".whl":
            with tempfile.TemporaryDirectory() as scratch:
                found |= {f"{path.name}:{Path(k).name}": v for k, v in wheel_violations(path, Path(scratch)).items()}
        else:
            found |= violations(native_libraries(path) if path.is_dir() else [path])
    for library, counts in found.items():
        print(f"{library}: " + ", ".join(f"{n} {name} instructions" for name, n in counts.items()))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
