"""Reliability Tracking"""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string

from chat.selectors.context import session_reliability
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.messages import message_create
from chat.services.sessions import session_create
from chat.web.panels import context_panel
from engine.core.aging import Level
from engine.core.reliability import (
    LEVEL_PRIOR_RETENTION,
    WARNING_HEADING,
    CheckpointRetention,
    Reliability,
    ReliabilityLevel,
    compression_penalty,
    compute_reliability,
    context_confidence,
    context_line,
    low_reliability_warning,
    model_factor,
    parameter_size_from_tag,
    reliability_level,
)


@pytest.mark.parametrize(
    ("size", "factor"),
    [
        (405, 0.95),
        (70, 0.95),
        (69.9, 0.85),
        (30, 0.85),
        (29, 0.70),
        (13, 0.70),
        (12.9, 0.50),
        (7, 0.50),
        (6.9, 0.30),
        (3, 0.30),
        (0.135, 0.30),
        (None, 0.30),
    ],
)
def test_model_factor(size, factor):
    """Spec: "modelSize >= 70 ? 0.95 // 70B+ models : modelSize >= 30 ? 0.85 // 30B models : modelSize >= 13 ? 0.7
    // 13B models : modelSize >= 7 ? 0.5 // 7B models : 0.3; // 3B and below"."""
    assert model_factor(size) == factor


@pytest.mark.parametrize(
    ("count", "penalty"), [(0, 1.0), (1, 0.85), (2, 0.70), (3, 0.55), (4, 0.40), (5, 0.3), (9, 0.3)]
)
def test_compression_penalty(count, penalty):
    """Spec: "// Compression penalty (15% per compression)" and "0.3 // Never go below 30%"."""
    assert compression_penalty(count) == pytest.approx(penalty)


def test_score_is_the_product():
    """Spec: "const score = modelFactor * compressionPenalty * contextConfidence;"."""
    checkpoints = [CheckpointRetention(tokens=100, level=Level.RECENT, retention=0.8)]
    result = compute_reliability(parameter_size_b=13, compression_count=2, checkpoints=checkpoints)
    assert result.model_factor == 0.70
    assert result.compression_penalty == pytest.approx(0.70)
    assert result.context_confidence == pytest.approx(0.8)
    assert result.score == pytest.approx(0.70 * 0.70 * 0.8)


def test_context_confidence_is_token_weighted_retention():
    """Spec: "const score = modelFactor * compressionPenalty * contextConfidence;".

    Differs, see docs/conformance.md: "Context confidence" — the spec leaves it undefined; here it is
    Σ(tokens × retention) / Σ tokens over the active checkpoints, 1.0 without any, and a level's prior
    (recent 0.9, old 0.75, ancient 0.6, ultra 0.45) until a retention is measured."""
    assert context_confidence([]) == 1.0
    measured = [
        CheckpointRetention(tokens=300, level=Level.ANCIENT, retention=0.5),
        CheckpointRetention(tokens=100, level=Level.RECENT, retention=1.0),
    ]
    assert context_confidence(measured) == pytest.approx((300 * 0.5 + 100 * 1.0) / 400)
    assert LEVEL_PRIOR_RETENTION == {Level.RECENT: 0.9, Level.OLD: 0.75, Level.ANCIENT: 0.6, Level.ULTRA: 0.45}
    unmeasured = [CheckpointRetention(tokens=50, level=level) for level in Level]
    assert context_confidence(unmeasured) == pytest.approx((0.9 + 0.75 + 0.6 + 0.45) / 4)


@pytest.mark.parametrize(
    ("score", "level", "emoji"),
    [
        (1.0, "High", "🟢"),
        (0.85, "High", "🟢"),
        (0.84, "Medium", "🟡"),
        (0.60, "Medium", "🟡"),
        (0.59, "Low", "🟠"),
        (0.40, "Low", "🟠"),
        (0.39, "Critical", "🔴"),
        (0.0, "Critical", "🔴"),
    ],
)
def test_reliability_levels(score, level, emoji):
    """Spec: "85-100%" -> "🟢 High", "60-84%" -> "🟡 Medium", "40-59%" -> "🟠 Low", "<40%" -> "🔴 Critical"."""
    result = reliability_level(score)
    assert (result.label, result.emoji) == (level, emoji)


def test_ui_display_string():
    """Spec: "Context: 5,234/13,600  🟡 65%  (2 compressions)".

    The product separates the parts with single spaces (the spec's sample has two); the text is otherwise the same."""
    reliability = Reliability(score=0.65, model_factor=0.95, compression_penalty=0.7, context_confidence=0.65 / 0.665)
    line = context_line(used=5_234, max_tokens=13_600, reliability=reliability, compression_count=2)
    assert " ".join(line.split()) == " ".join(["Context:", "5,234/13,600", "🟡", "65%", "(2", "compressions)"])
    one = context_line(used=941, max_tokens=1_700, reliability=reliability, compression_count=1)
    assert one.endswith("(1 compression)")


SPEC_WARNING = """⚠️ Context Compression Warning
Your model (llama3.2:3b) has compressed the conversation 3 times.
Small models may lose context accuracy after multiple compressions.

Recommendations:
- Continue if making good progress
- Start new conversation if seeing hallucinations
- Use larger model for complex long-term tasks"""


def test_low_reliability_warning_text():
    """Spec: "⚠️ Context Compression Warning" / "Your model (llama3.2:3b) has compressed the conversation 3 times." /
    "Small models may lose context accuracy after multiple compressions." and the three recommendations.

    The page draws the ⚠️ as an inline SVG, so the function gives the text in parts (the heading is
    ``WARNING_HEADING``) and adds the band's recommendation from "Compression Quality by Model Size"."""
    warning = low_reliability_warning(model="llama3.2:3b", parameter_size_b=3.0, compression_count=3)
    assert warning is not None
    first, second, band_line = warning.lines
    rebuilt = "\n".join(
        [f"⚠️ {WARNING_HEADING}", first, second, "", "Recommendations:", *(f"- {r}" for r in warning.recommendations)]
    )
    assert rebuilt == SPEC_WARNING
    assert band_line == "Recommend: 2-3 compressions max (small models, 3B-7B)."


@pytest.mark.django_db
def test_the_page_shows_the_specs_warning_escaped(user):
    """Spec: "**Warning for Low Reliability:**" — its text on the chat page, from ``low_reliability_warning``,
    with an inline SVG for the ⚠️ and every part escaped."""
    session = session_create(owner=user, model="llama3.2:3b<b>", context_size=16384, parameter_size_b=3.0)
    for n in range(2):
        reply = message_create(session=session, role="assistant", content=f"Answer {n}. " * 30)
        compression_commit(session=session, message_ids=[reply.id], draft=CheckpointDraft(summary=f"Answer {n}."))
    session.refresh_from_db()
    html = render_to_string("chat/_warning.html", {**context_panel(session), "session": session, "can_write": True})
    assert "icon-warning" in html
    assert "⚠" not in html
    assert "Your model (llama3.2:3b&lt;b&gt;) has compressed the conversation 2 times." in html
    assert "<b>" not in html
    assert "Small models may lose context accuracy after multiple compressions." in html
    assert "Recommend: 2-3 compressions max (small models, 3B-7B)." in html
    assert html.count("<li>") == 3
    assert "Use larger model for complex long-term tasks" in html
    assert "Start a new conversation from here" in html


def test_model_size_is_read_from_the_tag():
    """Spec: "The system tracks conversation reliability based on model size and compression count." with the
    example model "llama3.2:3b"."""
    assert parameter_size_from_tag("llama3.2:3b") == 3.0
    assert parameter_size_from_tag("llama3:70b") == 70.0
    assert parameter_size_from_tag("embedded/smollm2-135m") == pytest.approx(0.135)


@pytest.mark.django_db
def test_session_reliability_falls_with_each_compression(user):
    """Spec: "The system tracks conversation reliability based on model size and compression count."."""
    from chat.services.messages import message_create

    session = session_create(owner=user, model="llama3:70b", context_size=16384)
    assert session.reliability_score == pytest.approx(0.95)
    scores = [session.reliability_score]
    for index in range(3):
        reply = message_create(session=session, role="assistant", content=f"Answer {index}. " * 40)
        compression_commit(session=session, message_ids=[reply.id], draft=CheckpointDraft(summary=f"Answer {index}."))
        session.refresh_from_db()
        scores.append(session.reliability_score)
        assert session.reliability_score == pytest.approx(session_reliability(session=session).score)
    assert scores == sorted(scores, reverse=True)
    assert len(set(scores)) == 4
    assert session_reliability(session=session).compression_penalty == pytest.approx(0.55)
    assert reliability_level(scores[0]) is ReliabilityLevel.HIGH
