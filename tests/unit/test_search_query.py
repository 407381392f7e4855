"""The search query parser: whatever is typed, the engines only see quoted letter-and-digit tokens."""

from __future__ import annotations

import re

import pytest

from search.query import MAX_TERMS, Term, fts5_query, parse_query, tsquery


def test_words_phrases_exclusions_and_or():
    parsed = parse_query('auth "refresh token" -redis a OR b')
    assert fts5_query(parsed) == '(("auth"*) AND ("refresh token") AND ("a"* OR "b"*)) NOT "redis"*'
    assert tsquery(parsed) == "(('auth':*)) & (('refresh' <-> 'token')) & (('a':*) | ('b':*)) & !('redis':*)"


def test_identifiers_become_phrases_with_a_prefix_at_the_end():
    parsed = parse_query("src/auth/login.ts")
    assert fts5_query(parsed) == '(("src auth login ts"*))'
    assert tsquery(parsed) == "(('src' <-> 'auth' <-> 'login' <-> 'ts':*))"


@pytest.mark.parametrize(
    "text",
    ['"', "((", "NEAR(a b)", "col:x", "^a", "a:*", "!a", "a <-> b", "x'y", "a\\b", "\x00", "a" * 10_000, "a." * 5_000],
)
def test_only_safe_tokens_reach_the_engines(text):
    parsed = parse_query(text)
    if parsed.empty:
        return
    for token in re.findall(r'"([^"]*)"', fts5_query(parsed)):
        assert re.fullmatch(r"[^\W_]+( [^\W_]+)*", token)
    for token in re.findall(r"'([^']*)'", tsquery(parsed)):
        assert re.fullmatch(r"[^\W_]+", token)


def test_size_limits():
    parsed = parse_query(" ".join(f"w{i}" for i in range(100)))
    assert len(parsed.groups) == MAX_TERMS
    assert parse_query("-only -excluded").empty
    assert parse_query("OR OR").empty
    assert parse_query("").empty


def test_the_terms_to_mark_are_the_querys_whole_terms_each_once():
    parsed = parse_query('eu-west-1 Login login "refresh token" -redis a OR b')
    assert parsed.terms == (
        Term(("eu", "west", "1"), prefix=True),
        Term(("login",), prefix=True),
        Term(("refresh", "token"), prefix=False),
        Term(("a",), prefix=True),
        Term(("b",), prefix=True),
    )
