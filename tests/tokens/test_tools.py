"""Tool calls the model can make (playground/tokens/tools.py): the tools block in the system prompt, the call form
read from the answer however it is cut into pieces, and what stays text."""
from __future__ import annotations

import json

import pytest

from playground.tokens.tools import CallReader, ToolCall, call_text, response_text, tools_block, with_tools

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
CLOCK = {"type": "function", "function": {"name": "now", "description": "The time"}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def read_all(pieces) -> list:
    reader = CallReader()
    out = [x for p in pieces for x in reader.feed(p)] + reader.end()
    joined: list = []
    for x in out:   # adjacent text pieces from separate feeds, as one
        if isinstance(x, str) and joined and isinstance(joined[-1], str):
            joined[-1] += x
        else:
            joined.append(x)
    return joined


def test_the_tools_block_lists_each_tool_as_one_json_line_in_the_order_sent():
    block = tools_block([WEATHER, CLOCK])
    lines = block.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].split("\n")
    assert [json.loads(line)["function"]["name"] for line in lines] == ["get_weather", "now"]
    assert tools_block([CLOCK, WEATHER]) != block   # another order is another prompt (and another cache prefix)
    assert block.startswith("# Tools\n") and block.endswith("</tool_call>")
    assert '"name": <function-name>, "arguments": <args-json-object>' in block
    assert with_tools("Be brief.", [WEATHER]) == "Be brief.\n\n" + tools_block([WEATHER])
    assert with_tools("Be brief.", []) == "Be brief." and tools_block([]) == ""


@pytest.mark.parametrize("cut", range(0, len("Sure. " + CALL + " Done."), 3))
def test_a_call_is_read_whole_wherever_the_stream_cuts_it(cut):
    text = "Sure. " + CALL + " Done."
    assert read_all([text[:cut], text[cut:]]) == ["Sure. ", ToolCall("get_weather", '{"city": "Paris"}'), " Done."]
    assert read_all(list(text)) == read_all([text])   # one character at a time, the same


def test_no_text_that_becomes_a_call_is_shown_before_the_call():
    reader = CallReader()
    assert reader.feed("Look <tool") == ["Look "]   # the piece that may open a tag is held back
    assert reader.feed("s are fun") == ["<tools are fun"]   # not a tag after all: shown as written


def test_two_calls_in_a_row_and_arguments_sent_as_a_json_string():
    text = CALL + "\n" + '<tool_call>{"name": "now", "arguments": "{}"}</tool_call>'
    assert read_all([text]) == [ToolCall("get_weather", '{"city": "Paris"}'), "\n", ToolCall("now", "{}")]


@pytest.mark.parametrize("inner", ["not json", '{"arguments": {}}', '{"name": "f", "arguments": [1]}', '["f"]',
                                   '{"name": "", "arguments": {}}'])
def test_what_is_not_a_call_stays_text_tags_and_all(inner):
    text = f"<tool_call>{inner}</tool_call>"
    assert read_all([text]) == [text]


def test_a_call_whose_closing_tag_never_came_is_read_at_the_end():
    assert read_all(['<tool_call>\n{"name": "now"}\n']) == [ToolCall("now", "{}")]
    assert read_all(["<tool_call>\n{\"name\": "]) == ['<tool_call>\n{"name": ']   # cut short: text


def test_the_history_writes_a_call_and_a_result_as_the_model_would_read_them():
    written = call_text("get_weather", '{"city": "Paris"}')
    assert written == CALL and read_all([written]) == [ToolCall("get_weather", '{"city": "Paris"}')]
    assert response_text("18 C") == "<tool_response>\n18 C\n</tool_response>"
