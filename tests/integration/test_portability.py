"""The bundled inference library (and nh3, the HTML sanitizer's native code) asks no more of a CPU than AVX2.

An AMD development machine runs AVX-512 code happily, and no machine here has
AMX: a library built for the building CPU would pass every other test here and
die with SIGILL on an Intel server. So the machine code itself is inspected.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from modelserver.portability import REQUIRED_CPU_FLAGS, native_libraries, violations, wheel_violations

# One AVX-512 and one AMX instruction, as llama.cpp's native build on a Sapphire Rapids Xeon emits them.
BEYOND_AVX2 = """
void avx512(void) { __asm__ volatile("vpxorq %zmm1, %zmm1, %zmm1"); }
void amx(void) { __asm__ volatile("tilezero %tmm0"); }
"""


def installed_xllamacpp() -> Path:
    spec = importlib.util.find_spec("xllamacpp")  # found, not imported: the check needs no CPU support
    assert spec is not None, "xllamacpp is not installed"
    assert spec.origin is not None
    return Path(str(spec.origin)).parent


def test_the_installed_inference_library_holds_nothing_beyond_avx2():
    """The wheel links llama.cpp, ggml and its CPU backend into one extension, with no variants
    (``libggml-cpu-*.so``) picked at run time: that one library is what every CPU runs."""
    libraries = native_libraries(installed_xllamacpp())
    assert [library.name for library in libraries] == ["xllamacpp.abi3.so"], libraries
    assert violations(libraries) == {}


def test_the_start_up_check_asks_for_every_extension_the_library_was_built_for():
    """``python -m modelserver`` refuses a CPU that lacks one (modelserver/portability.py's
    REQUIRED_CPU_FLAGS) rather than let the library die of SIGILL mid-reply."""
    import xllamacpp

    built = dict(re.findall(r"(\w+) = (\d)", xllamacpp.get_system_info()))
    # SSE3 and SSSE3 come with every CPU that has AVX; the rest are not instruction sets.
    extensions = {name.lower() for name, on in built.items() if on == "1"} - {
        "sse3",
        "ssse3",
        "llamafile",
        "openmp",
        "repack",
    }
    assert {"avx", "avx2", "fma", "f16c"} <= extensions, built
    assert extensions <= set(REQUIRED_CPU_FLAGS), built


def test_the_html_sanitizer_holds_nothing_beyond_avx2():
    """nh3 is a native wheel too (Rust); its AVX2 code is memchr's, chosen at run time by CPUID."""
    spec = importlib.util.find_spec("nh3")
    assert spec is not None, "nh3 is not installed"
    assert spec.origin is not None
    libraries = native_libraries(Path(str(spec.origin)).parent)
    assert [library.name for library in libraries] == ["nh3.abi3.so"]
    assert violations(libraries) == {}


@pytest.fixture
def native_build(tmp_path: Path) -> Path:
    """A shared library holding AVX-512 and AMX code, as ``-DGGML_NATIVE=ON`` makes on such a CPU."""
    assert shutil.which("cc"), "a C compiler is needed to build the sample library"
    source = tmp_path / "native.c"
    source.write_text(BEYOND_AVX2)
    library = tmp_path / "libggml-cpu.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def test_the_check_finds_avx512_and_amx_code(native_build):
    assert violations([native_build]) == {str(native_build): {"AVX-512": 1, "AMX": 1}}


def test_the_check_finds_them_inside_a_wheel(native_build, tmp_path):
    wheel = tmp_path / "xllamacpp-2026.10.11549-cp310-abi3-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(native_build, "xllamacpp/xllamacpp.abi3.so")
        archive.writestr("xllamacpp/__init__.py", "")
    found = wheel_violations(wheel, tmp_path / "unpacked")
    assert list(found.values()) == [{"AVX-512": 1, "AMX": 1}]


def test_the_command_refuses_a_wheel_beyond_avx2(native_build, tmp_path):
    """``python -m modelserver.portability``, as run on a new xllamacpp wheel before its version is pinned."""
    wheel = tmp_path / "xllamacpp-2026.10.11549-cp310-abi3-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(native_build, "xllamacpp/xllamacpp.abi3.so")
    checked = subprocess.run(
        [sys.executable, "-m", "modelserver.portability", str(wheel)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 1
    assert "1 AVX-512 instructions, 1 AMX instructions" in checked.stdout
