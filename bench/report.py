"""Benchmark tables into docs/benchmarks.md: written by ``make bench``, never by hand.

Each benchmark owns one section of ``docs/benchmarks.md``, between the markers
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``. A benchmark prints its
table through a :class:`Report`, as it printed it before; when the run ends,
:meth:`Report.save` replaces that section with what was printed, under a line
that says when, by which script and on which machine it was measured. The
prose around the markers (what a benchmark measures and why) stays as written.

Only ``make bench`` writes: it sets ``BENCH_REPORT`` to the file. A benchmark
run by hand prints its tables and leaves the file alone, unless ``BENCH_REPORT``
is set (``BENCH_REPORT=docs/benchmarks.md .venv/bin/python bench/streaming.py``).
"""

from __future__ import annotations

import os
import platform
import re
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

REPORT_ENV = "BENCH_REPORT"
NAME = re.compile(r"[a-z0-9_-]+")


def start_marker(name: str) -> str:
    return f"<!-- bench:{name} -->"


def end_marker(name: str) -> str:
    return f"<!-- /bench:{name} -->"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def physical_cores() -> int:
    """Cores, not hardware threads, of the CPUs this process may use."""
    usable = os.sched_getaffinity(0)
    cores: set[tuple[str, str]] = set()
    for cpu in usable:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topology / "physical_package_id").read_text(), (topology / "core_id").read_text()))
        except OSError:
            return len(usable)
    return max(1, len(cores))


def machine_line(load_at_start: float | None = None) -> str:
    """The machine a table was measured on, and how busy it was (the 1-minute load average)."""
    load = os.getloadavg()[0]
    busy = f"load average {load:.1f} at the end"
    if load_at_start is not None:
        busy = f"load average {load_at_start:.1f} at the start, {load:.1f} at the end"
    return (
        f"{platform.machine()}, {cpu_model()}, {physical_cores()} physical / {os.cpu_count()} logical cores, "
        f"Python {platform.python_version()}, {busy}"
    )


def markdown(lines: Sequence[str]) -> str:
    """The lines as markdown: a table's rows stay together, every other line is a paragraph of its own.

    A line right after a table would otherwise be read as one more row of it."""
    out: list[str] = []
    for line in (raw.strip("\n") for raw in lines):
        if not line.strip():
            continue
        if out and not (line.startswith("|") and out[-1].startswith("|")):
            out.append("")
        out.append(line)
    return "\n".join(out)


def replace_section(document: str, name: str, body: str) -> str:
    """``document`` with the section ``name`` holding ``body``; a section not there yet is added at the end."""
    if not NAME.fullmatch(name):
        raise ValueError(f"a section name is lower-case letters, digits, '_' and '-': {name!r}")
    start, end = start_marker(name), end_marker(name)
    block = f"{start}\n{body.strip()}\n{end}"
    begin = document.find(start)
    if begin < 0:
        return f"{document.rstrip()}\n\n{block}\n"
    if document.find(start, begin + len(start)) >= 0:
        raise ValueError(f"{start} appears twice")
    finish = document.find(end, begin)
    if finish < 0:
        raise ValueError(f"{start} has no {end} after it")
    return document[:begin] + block + document[finish + len(end) :]


def write_section(
    name: str,
    lines: Sequence[str],
    *,
    path: Path,
    script: str,
    machine: str,
    when: datetime | None = None,
) -> None:
    """Replace the section ``name`` of the file at ``path`` with ``lines`` under the measured-on line."""
    stamp = (when or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    body = f"_Measured {stamp} by `{script}` on {machine}._\n\n{markdown(lines)}"
    document = path.read_text() if path.exists() else ""
    updated = replace_section(document, name, body)
    # Written whole or not at all: a benchmark killed halfway leaves the file as it was.
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(updated)
    os.chmod(handle.name, path.stat().st_mode if path.exists() else 0o644)
    os.replace(handle.name, path)


class Report:
    """What a benchmark prints for docs/benchmarks.md: printed as it comes, written by ``save``.

    A console heading's leading ``== `` is left out of the file."""

    def __init__(self, name: str, script: str | None = None) -> None:
        if not NAME.fullmatch(name):
            raise ValueError(f"a section name is lower-case letters, digits, '_' and '-': {name!r}")
        self.name = name
        self.script = script or f"bench/{Path(sys.argv[0]).name}"
        self.lines: list[str] = []
        self.load_at_start = os.getloadavg()[0]

    def print(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text.strip("\n").removeprefix("== "))

    def note(self, text: str) -> None:
        """A line for the file only, where the console has its own (aligned columns, say)."""
        self.lines.append(text)

    def save(self, path: Path | None = None) -> Path | None:
        """Write the section into ``path`` (default: ``$BENCH_REPORT``); without either, write nothing."""
        target = path or (Path(os.environ[REPORT_ENV]) if os.environ.get(REPORT_ENV) else None)
        if target is None:
            print(machine_line(self.load_at_start), flush=True)  # how busy the machine was, for the console
            return None
        write_section(self.name, self.lines, path=target, script=self.script, machine=machine_line(self.load_at_start))
        print(f"(table written into {target}, section {self.name})", flush=True)
        return target
