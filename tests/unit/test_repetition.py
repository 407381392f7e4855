from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core.repetition import (
    LOOP_REPEATS,
    PHRASE_REPEATS,
    PHRASE_WORDS,
    RepeatedPhrase,
    most_repeated_phrase,
    repetition,
)

# Loops SmolLM2-135M wrote at temperature 0 without a repeat penalty (summary prompts on tests/data/retention).
SMOLLM_LOOP = (
    "This is a plan for a login service. The team will have a 15-minute token lifetime, and the token lifetime "
    "will be 12 rounds. The team will have a 15-minute token lifetime, and the token lifetime will be 12 rounds. "
    "The team will have a 15-minute token lifetime, and the token lifetime will be 12 rounds. The team will have "
    "a 15-minute token lifetime, and the token"
)
SMOLLM_LOOP_2 = "The conversation history is quoted data, not instructions." + (
    " The conversation is quoted as a summary of the discussion." * 11
)

# What summaries should look like, and must pass.
NORMAL = [
    "",
    "Logins are validated and audited.",
    "The handler validates the form, hashes the password with argon2 and compares it in constant time. "
    "It then issues a short-lived token and records the login in the audit log for later review.",
    # Bullets that share a prefix.
    "- Decided: use argon2 for passwords\n- Decided: use JWT for authentication\n- Decided: keep tokens for 15 min\n"
    "- Decided: rate-limit logins to 5 a minute\n- Decided: log every failed login",
    # A list of facts with a five-word shared prefix.
    "The user asked about the login form. The user asked about password hashing. The user asked about JWT expiry. "
    "The user asked about refresh tokens. The user asked about rate limits. The user asked about audit logs.",
    # Files in one deep folder: a path is one word.
    "Created src/components/auth/forms/login/LoginForm.tsx\nCreated src/components/auth/forms/login/Signup.tsx\n"
    "Created src/components/auth/forms/login/Reset.tsx\nCreated src/components/auth/forms/login/Verify.tsx",
    # A phrase twice, a line twice: copying is not looping.
    "We agreed to keep the token lifetime short. Later we agreed to keep the token lifetime short again.\n"
    "Next: write the tests\nNext: write the tests",
    # Words that follow themselves a few times.
    "It was very very very slow, so we cached it.",
    "Numbered steps:\n1. Hash the password\n2. Issue the token\n3. Log the login",
]


@pytest.mark.parametrize("text", NORMAL)
def test_ordinary_summaries_do_not_repeat_themselves(text):
    assert repetition(text) is None


def test_a_clause_the_model_loops_on_is_found_whole():
    assert repetition(SMOLLM_LOOP) == (
        "a phrase of 11 words repeated 4 times: “the team will have a 15-minute token lifetime …”"
    )
    assert repetition(SMOLLM_LOOP_2) == (
        "a phrase of 10 words repeated 11 times: “the conversation is quoted as a summary of …”"
    )


def test_a_phrase_repeated_apart_counts_as_well():
    text = (
        "We chose argon2 for the password hashes. Tokens last 15 minutes. "
        "We chose argon2 for the password hashes. Refresh tokens rotate. "
        "We chose argon2 for the password hashes."
    )
    assert repetition(text) == "a phrase of 7 words repeated 3 times: “we chose argon2 for the password hashes”"


def test_a_short_unit_repeated_back_to_back_is_a_loop():
    assert repetition("padding " * 400) == "“padding” repeated 400 times in a row"
    assert repetition("Summary: and so on, and so on, and so on, and so on.") == (
        "“and so on” repeated 4 times in a row"
    )
    assert repetition("and so on, and so on, and so on.") is None


def test_a_line_repeated_is_a_loop_even_when_short():
    text = "Decisions:\n- Use argon2 everywhere\n- Use argon2 everywhere\n- Use argon2 everywhere\nNext: tests"
    assert repetition(text) == "a line repeated 3 times: “use argon2 everywhere”"
    numbered = "1. Use argon2 everywhere\n2. Use argon2 everywhere\n3. Use argon2 everywhere"
    assert repetition(numbered) == "a line repeated 3 times: “use argon2 everywhere”"
    assert repetition("Key points:\nKey points:\nKey points:") is None, "two-word lines are headings"


def test_the_thresholds():
    clause = "the service keeps every login in the audit log. "
    assert repetition(clause * (PHRASE_REPEATS - 1)) is None
    assert repetition(clause * PHRASE_REPEATS) is not None
    unit = "on and "
    assert repetition("go " + unit * (LOOP_REPEATS - 1)) is None
    assert repetition("go " + unit * LOOP_REPEATS) == f"“on and” repeated {LOOP_REPEATS} times in a row"
    prefix = " ".join(f"w{i}" for i in range(PHRASE_WORDS - 1))
    assert repetition(" ".join(f"{prefix} fact{n}." for n in range(PHRASE_REPEATS + 2))) is None
    assert repetition(" ".join(f"{prefix} fact. x{n}" for n in range(PHRASE_REPEATS))) is not None


def test_case_and_punctuation_do_not_hide_a_loop():
    text = "Use JWT, not cookies! use jwt not cookies. USE “JWT” — NOT COOKIES… use jwt not cookies"
    assert repetition(text) == "“use jwt not cookies” repeated 4 times in a row"


def test_the_most_repeated_phrase_of_a_size_of_ones_choosing():
    assert most_repeated_phrase(SMOLLM_LOOP_2, words=5) == RepeatedPhrase(
        ("the", "conversation", "is", "quoted", "as", "a", "summary", "of", "the", "discussion"), 11
    )
    twice = "Cats sleep most of the day. Dogs bark. Cats sleep most of the day."
    assert most_repeated_phrase(twice, words=5) == RepeatedPhrase(("cats", "sleep", "most", "of", "the", "day"), 2)
    assert most_repeated_phrase(twice) == most_repeated_phrase(twice, words=PHRASE_WORDS)
    assert most_repeated_phrase(twice, words=7) is None
    assert most_repeated_phrase("Every phrase here is said once only.", words=5) is None
    assert most_repeated_phrase("too short", words=5) is None


@given(st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "\n", "- "]), max_size=60))
def test_any_text_gets_an_answer(words):
    reason = repetition(" ".join(words))
    assert reason is None or "repeated" in reason
