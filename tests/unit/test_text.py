from __future__ import annotations

from contextmgr.core.text import storable_text


def test_nul_bytes_and_lone_surrogates_become_replacement_characters():
    assert storable_text("a\x00b\ud800c") == "a\ufffdb\ufffdc"


def test_other_text_is_kept_as_written():
    text = "naïve 🙂 \t\n<b>"
    assert storable_text(text) == text
