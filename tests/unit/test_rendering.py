from __future__ import annotations

from chat.selectors.presentation import announce_event, describe_event, describe_message_state, reliability_chart
from chat.web.rendering import render_markdown, sanitize_html


def test_everything_is_escaped_before_markup_is_added():
    html = render_markdown('<script>alert("x")</script> **bold** `a<b`')
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "<strong>bold</strong>" in html
    assert "<code>a&lt;b</code>" in html


COPY_BUTTON = (
    '<div class="code-block"><button type="button" class="icon-button copy-code" data-action="copy-code"'
    ' title="Copy this code">Copy code</button>'
)


def test_code_blocks_keep_their_text_and_language_highlighted_with_a_copy_button():
    html = render_markdown("Here:\n```python\nif a < b:\n    print('<x>')  # \"c\"\n```\nDone.")
    assert f'{COPY_BUTTON}<pre><code class="language-python"><span class="k">if</span> <span class="n">a</span>' in html
    assert '<span class="o">&lt;</span>' in html, "the code's text escaped inside Pygments' spans"
    assert '<span class="s1">&#x27;&lt;x&gt;&#x27;</span>' in html
    assert '<span class="c1"># &quot;c&quot;</span>\n</code></pre></div>' in html
    assert html.startswith("<p>Here:</p>")
    assert html.endswith("<p>Done.</p>\n")


def test_a_block_without_a_known_language_is_plain_escaped_text():
    html = render_markdown("```nosuchlang\n<b>x</b>\n```\n\n```\n<i>y</i>\n```")
    assert f'{COPY_BUTTON}<pre><code class="language-nosuchlang">&lt;b&gt;x&lt;/b&gt;\n</code></pre></div>' in html
    assert f"{COPY_BUTTON}<pre><code>&lt;i&gt;y&lt;/i&gt;\n</code></pre></div>" in html
    assert "<span" not in html


def test_a_pre_tag_in_the_text_stays_text_and_gets_no_button():
    html = render_markdown("<pre>x</pre> and `<pre>`")
    assert "copy-code" not in html
    assert "&lt;pre&gt;x&lt;/pre&gt;" in html


def test_only_pygments_token_classes_survive_on_spans():
    html = sanitize_html('<span class="k">if</span><span class="evil thing">x</span><span onclick="a()">y</span>')
    assert html == '<span class="k">if</span><span>x</span><span>y</span>'


def test_markdown_inside_a_code_block_stays_text():
    html = render_markdown("```\n# not a heading\n- [link](https://example.com) <b>x</b> **y**\n```")
    assert html == (
        f"{COPY_BUTTON}<pre><code># not a heading\n- [link](https://example.com) &lt;b&gt;x&lt;/b&gt; **y**\n"
        "</code></pre></div>\n"
    )


def test_an_unclosed_fence_runs_to_the_end_and_a_hostile_language_is_escaped():
    html = render_markdown('```"><img src=x>\ncode')
    assert "<img" not in html
    assert "<pre><code" in html


def test_paragraphs_and_line_breaks():
    assert render_markdown("a\nb\n\nc") == "<p>a<br>\nb</p>\n<p>c</p>\n"


def test_lists_headings_and_emphasis_render():
    html = render_markdown("## Plan\n\n- one\n- *two*\n\n3. three\n4. four\n\n> quoted\n\n---")
    assert "<h2>Plan</h2>" in html
    assert "<ul>\n<li>one</li>\n<li><em>two</em></li>\n</ul>" in html
    assert '<ol start="3">\n<li>three</li>\n<li>four</li>\n</ol>' in html
    assert "<blockquote>\n<p>quoted</p>\n</blockquote>" in html
    assert "<hr>" in html


def test_tables_render_with_their_alignment():
    html = render_markdown("| name | size |\n|:--|--:|\n| pier | 240 m |\n| `a<b` | 3 |")
    assert '<thead>\n<tr>\n<th style="text-align:left">name</th>\n<th style="text-align:right">size</th>' in html
    assert '<td style="text-align:left">pier</td>\n<td style="text-align:right">240 m</td>' in html
    assert '<td style="text-align:left"><code>a&lt;b</code></td>' in html


def test_links_open_beside_the_chat_without_referrer_or_opener():
    html = render_markdown(
        '[docs](https://example.com/a?b=1&c=2 "the docs"), <http://example.org>, [me](mailto:me@example.com)'
    )
    rel = 'rel="noopener noreferrer nofollow" target="_blank"'
    assert f'<a href="https://example.com/a?b=1&amp;c=2" {rel} title="the docs">docs</a>' in html
    assert f'<a href="http://example.org" {rel}>http://example.org</a>' in html
    assert f'<a href="mailto:me@example.com" {rel}>me</a>' in html


def test_links_that_are_not_http_https_or_mailto_lose_their_target():
    html = render_markdown(
        "[a](javascript:alert(1)) [b](JaVaScRiPt:alert(1)) [c](data:text/html,x) [d](vbscript:x) "
        "[e](/admin/) [f](file:///etc/passwd) [g](ftp://example.com)"
    )
    assert "href" not in html
    assert "javascript:" not in html.replace("(javascript:alert(1))", "")


def test_raw_html_stays_text():
    html = render_markdown(
        '<script>alert(1)</script>\n\n<img src=x onerror=alert(1)>\n\n<a href="javascript:x">y</a> '
        '<div onclick="x">z</div> <iframe src="https://example.com"></iframe> <!-- c -->'
    )
    for raw in ("<script", "<img", "<a ", "<div", "<iframe", "<!--"):
        assert raw not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;a href=&quot;javascript:x&quot;&gt;y&lt;/a&gt;" in html


def test_images_show_their_alt_text_and_load_nothing():
    html = render_markdown('![a *pier* <b>](https://example.com/pier.png "t") and ![](http://example.com/x.gif)')
    assert html == "<p>a pier &lt;b&gt; and </p>\n"


def test_the_sanitizer_keeps_only_the_allow_list_whatever_the_renderer_hands_it():
    """The second line: markup the markdown renderer should never make is still taken out."""
    html = sanitize_html(
        '<p onclick="x" style="color:red" class="c">t</p><a href="javascript:alert(1)" onmouseover="x">a</a>'
        '<a href="https://example.com" target="_self" rel="opener">b</a><img src="https://example.com/x.png" '
        'onerror="alert(1)"><script>alert(1)</script><style>p{}</style><svg onload="x"></svg>'
        '<td style="text-align:right;background:url(https://example.com)">c</td><code class="x y">d</code>'
        '<pre><code class="language-py">e</code></pre>'
    )
    assert html == (
        '<p>t</p><a rel="noopener noreferrer nofollow" target="_blank">a</a>'
        '<a href="https://example.com" rel="noopener noreferrer nofollow" target="_blank">b</a>'
        'c<code>d</code><pre><code class="language-py">e</code></pre>'
    )


def test_events_read_as_sentences():
    assert (
        describe_event(
            "compressed",
            {
                "compression": 2,
                "messages": 12,
                "tokens_before": 1500,
                "tokens_after": 600,
                "duration_ms": 2500,
                "how": "summarize",
            },
        )
        == "Compression #2: 12 messages, 1,500 → 600 tokens in context, 2.5 s (summarize)"
    )
    assert describe_event("compression-skipped", {"reason": "not needed"}) == "not needed"
    assert describe_event(
        "checkpoint-aged", {"number": 1, "from_level": 3, "to_level": 2, "tokens_before": 90, "tokens_after": 40}
    ) == ("Checkpoint #1 aged from level 3 (recent) → level 2 (old): 90 → 40 tokens")
    assert describe_event("unknown-type", None) == "unknown-type"


def test_a_compression_error_says_whether_and_when_it_is_tried_again():
    failed = {"reason": "Ollama timed out", "error": "LLMTimeout"}
    assert describe_event("compression-error", failed) == "Ollama timed out"
    assert (
        describe_event("compression-error", {**failed, "attempt": 2, "attempts": 4, "retry_in": 30.0})
        == "Ollama timed out (attempt 2 of 4); retrying in 30 s"
    )
    assert describe_event("compression-error", {**failed, "attempt": 4, "attempts": 4, "gave_up": True}) == (
        "Ollama timed out (attempt 4 of 4); no more retries: the next message or Compress now tries again"
    )
    assert describe_event("compression-error", {**failed, "attempt": 1, "attempts": 2}) == (
        "Ollama timed out (attempt 1 of 2)"
    )
    assert describe_event("compression-error", {**failed, "attempt": "2", "retry_in": "soon"}) == "Ollama timed out"


def test_event_lines_say_what_the_ledger_and_the_prompt_kept():
    rollover = describe_event(
        "rollover-complete",
        {
            "compression": 3,
            "messages": 6,
            "user_messages": 2,
            "tokens_before": 1300,
            "tokens_after": 500,
            "duration_ms": 4000,
            "how": "summarize",
            "ledger_entries": 9,
            "ledger_dropped": 1,
        },
    )
    assert rollover == (
        "Rollover (compression) #3: 6 messages (2 of them yours), 1,300 → 500 tokens in context, 4.0 s "
        "(summarize); ledger 9 facts, 1 dropped"
    )
    created = describe_event(
        "checkpoint-created",
        {"number": 1, "range": "Messages 1-4", "original_tokens": 900, "tokens": 200, "retention": 0.875},
    )
    assert created == "Checkpoint #1 created for Messages 1-4: 900 → 200 tokens; 88% of its facts in the prompt"


def test_a_compression_says_what_its_summary_changed_in_the_goal():
    line = describe_event(
        "compressed",
        {
            "compression": 2,
            "messages": 3,
            "duration_ms": 500,
            "how": "summarize",
            "goal_updates": ["checkpoint “Login” completed", "artifact created src/a.py"],
        },
    )
    assert line == (
        "Compression #2: 3 messages, 0.5 s (summarize); the summary updated the goal: "
        "checkpoint “Login” completed, artifact created src/a.py"
    )


def test_a_cut_prompt_says_the_model_did_not_see_the_whole_context():
    line = describe_event("prompt-truncated", {"reported_tokens": 350, "sent_tokens": 1040, "max_tokens": 350})
    assert line == (
        "The model server evaluated 350 of about 1,040 prompt tokens: the model did not see the whole context; "
        "this session's context is now 350 tokens"
    )
    assert describe_event("prompt-truncated", {}) == (
        "The model server cut the prompt: the model did not see the whole context"
    )


def test_an_event_that_lacks_a_figure_leaves_it_out_and_counts_in_words():
    # A rollover's aging event of an older version had no from_level and no tokens_before.
    aged = describe_event("checkpoint-aged", {"number": 1, "to_level": 0, "tokens_after": 166})
    assert aged == "Checkpoint #1 aged to ultra: 166 tokens"
    one = describe_event("compressed", {"compression": 1, "messages": 1, "duration_ms": 1000})
    assert one == "Compression #1: 1 message, 1.0 s"
    assert "?" not in describe_event("checkpoint-created", {}) + describe_event("snapshot-restored", {})
    assert describe_event("checkpoint-created", {}) == "Checkpoint created"


def test_reliability_chart_maps_scores_to_the_plot():
    chart = reliability_chart([1.0, 0.5, 0.0, 1.2])
    # Plot: x from 34 to 292, 100% at y 24 and 0% at y 156; a score over 1 stays in the box, and says 100%.
    assert chart.points == "34.0,24.0 120.0,90.0 206.0,156.0 292.0,24.0"
    assert [percent for _, _, percent in chart.dots] == [100, 50, 0, 100]
    stored = reliability_chart([-1e308, float("inf"), float("nan")])
    assert [(y, percent) for _, y, percent in stored.dots] == [(156.0, 0), (24.0, 100), (156.0, 0)]
    assert chart.y_ticks[0] == (156.0, 0)
    assert chart.y_ticks[-1] == (24.0, 100)
    assert chart.x_ticks == ((34.0, 0), (120.0, 1), (206.0, 2), (292.0, 3))


def test_the_chart_names_the_thresholds_of_the_levels():
    bands = reliability_chart([0.3]).bands
    assert [(band.label, band.kind) for band in bands] == [
        ("High ≥ 85%", "high"),
        ("Low < 60%", "low"),
        ("Critical < 40%", "critical"),
    ]
    assert [band.y for band in bands] == [43.8, 76.8, 103.2]


def test_a_long_history_labels_a_few_compressions_only():
    chart = reliability_chart([0.5] * 31)
    assert [count for _, count in chart.x_ticks] == [0, 5, 10, 15, 20, 25, 30]
    assert reliability_chart([]).x_ticks == ((34, 0),)


def test_a_lone_checkpoint_aging_into_ultra_is_not_called_a_merge():
    line = describe_event(
        "checkpoint-aged",
        {"number": 1, "merged": [7], "from_level": 1, "to_level": 0, "tokens_before": 35, "tokens_after": 29},
    )
    assert line == "Checkpoint #1 aged from level 1 (ancient) → ultra: 35 → 29 tokens"
    merged = describe_event("checkpoint-aged", {"number": 1, "merged": [7, 8], "from_level": 1, "to_level": 0})
    assert merged.startswith("2 checkpoints merged into #1")
    into_ultra = {
        "number": 1,
        "merged": [1, 7],
        "from_level": 0,
        "to_level": 0,
        "tokens_before": 80,
        "tokens_after": 50,
    }
    assert describe_event("checkpoint-aged", into_ultra) == "2 checkpoints merged into #1, still ultra: 80 → 50 tokens"
    again = describe_event("checkpoint-aged", {"number": 1, "from_level": 0, "to_level": 0, "tokens_after": 50})
    assert again == "Checkpoint #1 summarized again, still ultra: 50 tokens"
    assert "ultra → ultra" not in into_ultra


def test_a_message_state_names_its_checkpoint_and_level():
    assert (
        describe_message_state(checkpoint_number=3, checkpoint_level=2, merged=True, excluded=False)
        == "compressed into checkpoint #3, level 2 (old), merged into the ultra checkpoint"
    )
    assert (
        describe_message_state(checkpoint_number=1, checkpoint_level=0, merged=False, excluded=True)
        == "compressed into checkpoint #1, ultra"
    )
    assert (
        describe_message_state(checkpoint_number=None, checkpoint_level=None, merged=False, excluded=True)
        == "history only, not in the context"
    )
    assert (
        describe_message_state(checkpoint_number=None, checkpoint_level=None, merged=False, excluded=False)
        == "in the active context"
    )


def test_the_chat_page_says_what_a_compression_did_in_plain_words():
    """The timeline's figures (strategy, seconds, ledger) stay on the timeline (issue 47, item 3)."""
    compressed = {
        "compression": 1,
        "messages": 75,
        "tokens_before": 6284,
        "tokens_after": 4603,
        "how": "truncate",
        "ledger_entries": 0,
        "ledger_dropped": 0,
        "duration_ms": 600,
    }
    assert announce_event("compressed", compressed) == (
        "Compression #1: 75 older messages became a checkpoint; the context went from 6,284 to 4,603 tokens. "
        "The timeline has the figures."
    )
    rolled = {"compression": 2, "messages": 6, "user_messages": 2, "tokens_before": 1300, "tokens_after": 500}
    assert announce_event("rollover-complete", rolled).startswith(
        "Compression #2: 6 older messages (2 of them yours) and the earlier checkpoints became one summary"
    )
    line = announce_event("rollover-complete", {})
    assert (
        line
        == "Compression: Older messages and the earlier checkpoints became one summary. The timeline has the figures."
    )
    assert announce_event("compression-skipped", {"reason": "not needed"}) == "not needed"
