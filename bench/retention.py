"""Facts that survive compression, with their meaning, on conversations the extractor was not tuned on.

The evaluation set is tests/data/heldout/ (see its README): conversations in
other domains and styles than the project's own data, each assistant turn
annotated by hand with its facts (a verbatim span) and the content words that
say what each fact is about. It was written without reading the extractor and
is split in two halves: ``tune/`` may guide changes, ``test/`` only measures.
This benchmark reports on ``test/`` unless told otherwise.

Each conversation is stored turn by turn in a fresh session of each size (the
product's own compression at the tier's settings, the real SmolLM2 model in a
model server of the benchmark's own). After the turns, turns that state no
fact follow until the session has compressed ``--compressions`` more times.
After every compression the next prompt is read, and every annotated fact of
every message that has left the active context is looked for:

- kept: the fact stands in the prompt as sent (summary and ledger);
- summary alone: the same prompt without the checkpoints' ledgers;
- meant: the fact stands in a clause of the prompt (split at line ends, ``;``
  and sentence ends) that also holds one of its annotated content words.

Also: the retention the product shows (``Checkpoint.retention``, measured on its
own reference of specific tokens) beside this benchmark's share kept, the
tokens each compression freed per second it took, and any compression that
did not shrink the context (there must be none).

    .venv/bin/python bench/retention.py [--sizes 2048 4096 8192 16384] [--set heldout/test]
        [--conversations N] [--compressions 2] [--strategy summarize|truncate]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import ROOT, setup_django, use_model_server

setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from model_server import BenchModelServer  # noqa: E402
from report import Report  # noqa: E402

import chat.services.compression as compression  # noqa: E402
from chat.models import ContextEvent, EventType, Message, Session  # noqa: E402  # noqa: E402
from chat.selectors.context import active_checkpoints, checkpoint_view, session_budget, session_window  # noqa: E402
from chat.services.messages import message_create  # noqa: E402
from chat.services.sessions import session_create  # noqa: E402
from engine.core.window import chat_messages, render_checkpoint  # noqa: E402
from engine.llm.embedded import MODEL_NAME, EmbeddedBackend  # noqa: E402
from engine.llm.gateway import Gateway  # noqa: E402

DATA = ROOT / "tests" / "data"
# The targets at 2K on the held-out half: facts kept, facts kept with their meaning, and how far the
# product's figure may be from this benchmark's (issue 45: within 0.1 on this set and the everyday one).
KEPT_TARGET = 0.95
# At 8K (Tier 2, where checkpoints age): the share kept.
KEPT_TARGET_8K = 0.90
MEANT_TARGET = 0.80
FIGURE_GAP = 0.1
FILLER_USER = "Go on, and keep it general."
FILLER_ASSISTANT = (
    "Sure. In general it helps to keep each step small, to write down what was agreed and why, "
    "and to check the result with the people who depend on it before moving on. When something "
    "is unclear, it is better to ask early than to guess, and when a plan changes, everyone should "
    "hear about it at the same time. Most delays come from waiting on answers rather than from the "
    "work itself, so short and frequent check-ins tend to pay off over a long project."
)
# The benchmark's own clause split of a prompt: deliberately not the product's (core.clauses).
_PROMPT_CLAUSE_END = re.compile(r"\n+|;\s+|(?<=[.!?])\s+")


@dataclass
class Tally:
    total: int = 0
    kept: int = 0
    summary_alone: int = 0
    meant: int = 0
    compressions: int = 0
    not_shrunk: int = 0
    freed_tokens: int = 0
    seconds: float = 0.0
    gaps: list[float] = field(default_factory=list)
    turns_between: list[int] = field(default_factory=list)
    shown: list[float] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)
    missed: dict[str, set[str]] = field(default_factory=dict)  # per conversation, the facts a prompt lacked

    def share(self, count: int) -> float:
        return count / self.total if self.total else 1.0


def _flat(text: str) -> str:
    return " ".join(text.casefold().replace("*", "").replace("`", "").split())


def _found(fact: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(_flat(fact))}(?!\w)", _flat(text)) is not None


def _meant(fact: dict[str, Any], prompt: str) -> bool:
    about = [word.casefold() for word in fact["about"]]
    for clause in _PROMPT_CLAUSE_END.split(prompt):
        if _found(fact["text"], clause):
            words = set(re.findall(r"\w+", clause.casefold()))
            if any(word in words for word in about):
                return True
    return False


def _prompt(session: Session, *, ledger: bool) -> str:
    if ledger:
        return "\n".join(content for _, content in chat_messages(session_window(session=session)))
    blocks = [b for b in session_window(session=session) if b.kind != "checkpoint"]
    without = [render_checkpoint(replace(checkpoint_view(cp), ledger=())) for cp in active_checkpoints(session=session)]
    return "\n".join([blocks[0].content, *without, *(b.content for b in blocks[1:])])


def _measure(session: Session, facts_by_content: dict[str, list[dict[str, Any]]], tally: Tally) -> None:
    left = Message.objects.filter(session=session, compressed_into__isnull=False)
    facts = [fact for message in left for fact in facts_by_content.get(message.content, [])]
    if not facts:
        return
    prompt, alone = _prompt(session, ledger=True), _prompt(session, ledger=False)
    found = [_found(f["text"], prompt) for f in facts]
    kept = sum(found)
    missed = (f["text"] for f, ok in zip(facts, found, strict=True) if not ok)
    tally.missed.setdefault(session.title, set()).update(missed)
    tally.total += len(facts)
    tally.kept += kept
    tally.summary_alone += sum(_found(f["text"], alone) for f in facts)
    tally.meant += sum(_meant(f, prompt) for f in facts)
    checkpoints = [cp for cp in active_checkpoints(session=session) if cp.retention is not None and cp.facts]
    if checkpoints:
        shown = sum((cp.retention or 0.0) * len(cp.facts) for cp in checkpoints) / sum(
            len(cp.facts) for cp in checkpoints
        )
        tally.shown.append(shown)
        tally.measured.append(kept / len(facts))
        tally.gaps.append(abs(shown - kept / len(facts)))


def run(
    size: int, gateway: Gateway, owner: Any, conversation: dict[str, Any], tally: Tally, target: int, strategy: str
) -> None:
    session = session_create(
        owner=owner,
        model=MODEL_NAME,
        context_size=size,
        title=conversation["name"],
        settings={"compression": {"strategy": strategy}},
    )
    facts_by_content = {turn["assistant"]: turn["facts"] for turn in conversation["turns"]}

    turns_since = 0

    def compress_if_due() -> None:
        nonlocal turns_since
        turns_since += 1
        if not session_budget(session=session).compression_due:
            return
        before = session_budget(session=session).used
        last_event = ContextEvent.objects.filter(session=session).order_by("-id").values_list("id", flat=True).first()
        outcome = compression.compression_run(session_id=session.pk, reason="due", gateway=gateway)
        if outcome.status not in ("compressed", "rolled-over"):
            return
        after = session_budget(session=session).used
        tally.compressions += 1
        tally.turns_between.append(turns_since)
        turns_since = 0
        tally.not_shrunk += after >= before
        tally.freed_tokens += max(0, before - after)
        events = ContextEvent.objects.filter(
            session=session,
            id__gt=last_event or 0,
            type__in=[EventType.COMPRESSED, EventType.ROLLOVER_COMPLETE],
        )
        tally.seconds += sum(event.payload.get("duration_ms", 0) for event in events) / 1000
        _measure(session, facts_by_content, tally)

    for turn in conversation["turns"]:
        message_create(session=session, role="user", content=turn["user"])
        message_create(session=session, role="assistant", content=turn["assistant"])
        compress_if_due()
    done = Session.objects.get(pk=session.pk).compression_count
    for _ in range(200):
        if Session.objects.get(pk=session.pk).compression_count >= done + target:
            break
        message_create(session=session, role="user", content=FILLER_USER)
        message_create(session=session, role="assistant", content=FILLER_ASSISTANT)
        compress_if_due()


def _share(value: float) -> str:
    return f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    parser.add_argument("--set", default="heldout/test", help="a folder of tests/data/")
    parser.add_argument("--conversations", type=int, help="only the first N conversations (a quick check)")
    parser.add_argument("--compressions", type=int, default=2, help="compressions after the conversation's turns")
    parser.add_argument("--misses", action="store_true", help="print the facts a prompt lacked (for the tune half)")
    parser.add_argument(
        "--strategy",
        default="summarize",
        choices=["summarize", "truncate"],
        help="truncate: the extract without the model's summaries (a quick check while tuning)",
    )
    args = parser.parse_args()
    report = Report("retention")
    paths = sorted((DATA / args.set).glob("*.json"))[: args.conversations]
    conversations = [json.loads(path.read_text()) for path in paths]
    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user("bench")
    failed = []
    with BenchModelServer(n_ctx=max(args.sizes)) as server:
        use_model_server(server.url)
        gateway = Gateway(mode="embedded", embedded=EmbeddedBackend(host=server.url), ollama=None)
        report.print(
            f"Annotated facts of the messages that left the context, looked for in the next prompt after every "
            f"compression: {len(paths)} conversations of tests/data/{args.set}/ "
            f"({sum(len(t['facts']) for c in conversations for t in c['turns'])} facts), "
            f"{args.compressions} compressions after their turns, strategy {args.strategy}, {MODEL_NAME}"
        )
        report.print(
            "| size | compressions | kept (with the ledger) | summary alone | meant | product's figure "
            "| gap to kept (mean, max) | did not shrink | turns between compressions (median) "
            "| tokens freed per second | time |"
        )
        report.print("|---|---|---|---|---|---|---|---|---|---|---|")
        for size in args.sizes:
            started = time.perf_counter()
            tally = Tally()
            for conversation in conversations:
                run(size, gateway, owner, conversation, tally, args.compressions, args.strategy)
            gap_mean = statistics.mean(tally.gaps) if tally.gaps else 0.0
            gap_max = max(tally.gaps, default=0.0)
            shown = statistics.mean(tally.shown) if tally.shown else 1.0
            rate = tally.freed_tokens / tally.seconds if tally.seconds else 0.0
            report.print(
                f"| {size} | {tally.compressions} | {_share(tally.share(tally.kept))} ({tally.kept}/{tally.total}) "
                f"| {_share(tally.share(tally.summary_alone))} | {_share(tally.share(tally.meant))} "
                f"| {_share(shown)} | {gap_mean:.3f}, {gap_max:.3f} | {tally.not_shrunk} "
                f"| {statistics.median(tally.turns_between or [0]):g} | {rate:.0f} "
                f"| {time.perf_counter() - started:.0f} s |"
            )
            if args.misses:
                for name, missed in sorted(tally.missed.items()):
                    print(f"missed at {size}, {name}: " + " | ".join(sorted(missed)))
            if size == 2048:
                if tally.share(tally.kept) < KEPT_TARGET:
                    failed.append(f"{tally.share(tally.kept):.2f} of the facts kept at 2K, under {KEPT_TARGET}")
                if tally.share(tally.meant) < MEANT_TARGET:
                    failed.append(f"{tally.share(tally.meant):.2f} of the facts meant at 2K, under {MEANT_TARGET}")
            if size == 8192 and tally.share(tally.kept) < KEPT_TARGET_8K:
                failed.append(f"{tally.share(tally.kept):.2f} of the facts kept at 8K, under {KEPT_TARGET_8K}")
            if abs(shown - statistics.mean(tally.measured or [1.0])) > FIGURE_GAP:
                failed.append(f"the product's figure is {shown:.2f} at {size}, the benchmark's kept share another")
            if tally.not_shrunk:
                failed.append(f"{tally.not_shrunk} compressions at {size} did not shrink the context")
    report.print(
        f"targets at 2K: kept >= {KEPT_TARGET}, meant >= {MEANT_TARGET}; at 8K: kept >= {KEPT_TARGET_8K}; "
        f"at every size: the product's figure "
        f"within {FIGURE_GAP} of the benchmark's kept share (means over the compressions), every compression shrinks"
    )
    for failure in failed:
        report.print(f"requirement not met: {failure}")
    report.save()
    if failed:
        raise SystemExit("; ".join(failed))


if __name__ == "__main__":
    main()
