"""What the model server asks of the CPU, read from /proc/cpuinfo's text."""

from __future__ import annotations

import os

from modelserver.__main__ import cpu_problem, physical_cores
from modelserver.portability import missing_cpu_flags

HASWELL = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma f16c bmi2\n"
SANDY_BRIDGE = "processor\t: 0\nflags\t\t: fpu sse sse2 avx\n"
# A hypervisor can pass AVX2 through and hide BMI2, which the library's build uses too.
BMI2_HIDDEN = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma f16c\n"


def test_a_cpu_with_avx2_lacks_nothing():
    assert missing_cpu_flags(HASWELL) == []


def test_a_cpu_without_avx2_is_named_with_what_it_lacks():
    assert missing_cpu_flags(SANDY_BRIDGE) == ["avx2", "fma", "f16c", "bmi2"]
    problem = cpu_problem(SANDY_BRIDGE)
    assert problem is not None
    assert "lacks avx2, fma, f16c, bmi2" in problem
    assert "OLLM_LLM_BACKEND=ollama" in problem
    assert cpu_problem(HASWELL) is None


def test_text_without_flags_lacks_everything():
    assert missing_cpu_flags("") == ["avx", "avx2", "fma", "f16c", "bmi2"]


def test_a_cpu_with_avx2_but_no_bmi2_is_named_too():
    assert missing_cpu_flags(BMI2_HIDDEN) == ["bmi2"]


def test_physical_cores_are_at_least_one_and_at_most_the_usable_cpus():
    assert 1 <= physical_cores() <= len(os.sched_getaffinity(0))
