from __future__ import annotations

import json

from engine.core.text import StorableJSONEncoder, plural, storable_json, storable_text


def test_nul_bytes_and_lone_surrogates_become_replacement_characters():
    assert storable_text("a\x00b\ud800c") == "a\ufffdb\ufffdc"


def test_other_text_is_kept_as_written():
    text = "naïve 🙂 \t\n<b>"
    assert storable_text(text) == text


def test_every_string_in_a_json_value_is_made_storable_keys_included():
    value = {"path\x00": ["a\x00", {"deep": ("b\ud800", 3, None, True, 1.5)}], 7: "x"}
    assert storable_json(value) == {"path\ufffd": ["a\ufffd", {"deep": ["b\ufffd", 3, None, True, 1.5]}], 7: "x"}


def test_the_json_columns_encoder_writes_no_nul_escape_and_no_lone_surrogate():
    encoded = json.dumps({"args\x00": ["x\x00y", "z\udc00"]}, cls=StorableJSONEncoder)
    assert "\\u0000" not in encoded
    assert "\\udc00" not in encoded
    assert json.loads(encoded) == {"args\ufffd": ["x\ufffdy", "z\ufffd"]}


def test_plurals_follow_the_count():
    assert [plural(n, "checkpoint") for n in (0, 1, 2, 1200)] == [
        "0 checkpoints", "1 checkpoint", "2 checkpoints", "1,200 checkpoints"
    ]  # fmt: skip
