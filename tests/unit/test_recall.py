from datetime import date

from engine.core.recall import (
    RECALL_HEADING,
    Recall,
    RecallCandidate,
    recall,
    recall_budget,
    recall_index,
    with_recall,
)


def words(text: str) -> int:
    return len(text.split())


HISTORY = [
    RecallCandidate(1, 1, "user", "Hey there!", date(2023, 5, 1)),
    RecallCandidate(
        2, 2, "user", "I moved here from Leeds two years ago. The weather is awful. But I love my new flat.",
        date(2023, 5, 2),
    ),
    RecallCandidate(3, 3, "assistant", "My dog Max loves the beach.", date(2023, 5, 3)),
    RecallCandidate(4, 4, "assistant", "We watched Dune last Saturday.", None),
]  # fmt: skip
INDEX = recall_index(HISTORY)


def test_the_messages_that_share_the_new_messages_words_come_back_dated_and_oldest_first():
    # Verbatim, with their relative dates made absolute against the day each was said.
    found = recall("Where did you move from, and how is Max?", INDEX, budget_tokens=200, cost=words)
    assert [item.candidate.position for item in found.items] == [2, 3]
    assert found.items[0].words == ("move",)
    assert found.items[1].words == ("Max",)
    assert found.text.splitlines() == [
        RECALL_HEADING,
        "[#2 user, 2 May 2023] I moved here from Leeds two years ago (2 May 2021). The weather is awful. "
        "But I love my new flat.",
        "[#3 assistant, 3 May 2023] My dog Max loves the beach.",
    ]


def test_a_message_without_a_date_says_who_said_it():
    found = recall("what did we watch?", INDEX, budget_tokens=200, cost=words)
    assert found.text.splitlines()[1] == "[#4 assistant] We watched Dune last Saturday."


def test_a_long_message_is_cut_to_the_sentences_that_hold_the_words():
    found = recall("the weather", INDEX, budget_tokens=words(RECALL_HEADING) + 24, cost=words)
    assert [item.text for item in found.items] == ["The weather is awful."]


def test_nothing_is_recalled_without_a_shared_word_or_room():
    assert recall("ok, thanks", INDEX, budget_tokens=200, cost=words) == Recall()
    assert recall("Leeds", INDEX, budget_tokens=words(RECALL_HEADING), cost=words) == Recall()
    assert recall("Leeds", recall_index([]), budget_tokens=200, cost=words) == Recall()
    assert recall("the of and", INDEX, budget_tokens=200, cost=words) == Recall()
    assert Recall().text == ""


def test_items_past_the_budget_are_left_out():
    found = recall("Leeds Max Dune", INDEX, budget_tokens=words(RECALL_HEADING) + 15, cost=words)
    # Dune's line (8 words with its separator) ranks first and fits; Max's (11) would not fit beside it, and
    # Leeds' message has no sentence of the 5 words one item may take.
    assert [item.candidate.position for item in found.items] == [4]
    assert sum(words(line) + 1 for line in found.text.splitlines()[1:]) <= 15


def test_the_block_goes_before_the_new_message():
    found = recall("Leeds", INDEX, budget_tokens=200, cost=words)
    assert with_recall(found, "Remind me?") == found.text + "\n\nRemind me?"
    assert with_recall(Recall(), "Remind me?") == "Remind me?"


def test_the_budget_is_a_share_of_the_context_and_never_the_replys_room():
    assert recall_budget(max_tokens=6800, prompt_tokens=4000, reply_tokens=1020) == 1020
    assert recall_budget(max_tokens=6800, prompt_tokens=5500, reply_tokens=1020) == 280
    assert recall_budget(max_tokens=6800, prompt_tokens=6000, reply_tokens=1020) == 0


def test_an_index_answers_every_query_alike():
    # Built once and queried turn after turn: the same answers as a fresh index each time.
    for query in ("Where did you move from?", "Max", "the weather"):
        assert recall(query, INDEX, budget_tokens=200, cost=words) == recall(
            query, recall_index(HISTORY), budget_tokens=200, cost=words
        )
