"""The conversation charts drawn from cache records made by `explain` on token sequences built here."""
from __future__ import annotations

from playground.charts.conversation import COLOURS, KINDS, LABELS, ROWS, plot_reuse, plot_ribbon, segments
from playground.serve.cache_miss import Previous, explain
from playground.tokens.chat import MessageSpan

SPANS = (MessageSpan(0, 20, 0, "system", "content"), MessageSpan(20, 44, 1, "user", "content"),
         MessageSpan(44, 60, None, "assistant", "generation prompt"))


def _turns():
    """Turn 1 (new), turn 2 continuing it with 32 found, turn 3 parting at token 21 with 16 found."""
    first = explain(list(range(30)), 0, None)
    held = Previous(ids=tuple(range(30)) + tuple(range(100, 110)), prompt=30, turn=1)
    second = explain(list(range(30)) + list(range(100, 110)) + [7] * 10, 32, held, spans=SPANS)
    parted = Previous(ids=tuple(range(60)), prompt=60, turn=2)
    third = explain(list(range(21)) + [999] * 39, 16, parted, spans=SPANS)
    return [first, second, third]


def _heatmap(fig):
    return next(t for t in fig.data if t.type == "heatmap")


def test_the_ribbon_colours_each_token_by_the_records_counts():
    records = _turns()
    fig = plot_ribbon(records)
    z = _heatmap(fig).z
    second = records[1]
    assert second.ribbon == {"cached": 32, "recomputed": 8, "new": 10}
    row = list(z[1])
    assert row[:32] == [KINDS.index("cached")] * 32
    assert row[32:40] == [KINDS.index("recomputed")] * 8 and row[40:50] == [KINDS.index("new")] * 10
    assert row[50:] == [None] * 10   # past this prompt: nothing drawn
    assert list(z[0]) [:30] == [KINDS.index("new")] * 30
    legend = [t.name for t in fig.data if t.type == "scatter" and t.x == (None,)]
    assert legend == [LABELS[k] for k in KINDS]
    assert {t.marker.color for t in fig.data if t.name in legend} == set(COLOURS.values())


def test_the_hover_names_the_token_and_its_message_escaped():
    records = _turns()
    texts = [None, [f"t{i}" for i in range(50)], ["<script>"] * 60]
    texts[0] = ["a b"] * 30
    hover = _heatmap(plot_ribbon(records, tokens=texts)).text
    assert hover[1][25] == "turn 2 · token 25: t25<br>message 1 (user, content)<br>found in the cache"
    assert hover[1][45] == ("turn 2 · token 45: t45<br>the template's own text (assistant, generation prompt)<br>"
                            "new this turn")
    assert "&lt;script&gt;" in hover[2][30] and "<script>" not in hover[2][30]
    assert hover[0][0].startswith("turn 1 · token 0: a·b<br>message unknown")
    without = _heatmap(plot_ribbon(records)).text
    assert "(text not kept)" in without[1][3]


def test_a_turn_that_parted_is_marked_at_its_first_difference():
    records = _turns()
    assert records[2].first_difference == 21
    marks = next(t for t in plot_ribbon(records).data if t.name == "first difference")
    assert list(marks.x) == [21] and list(marks.y) == ["turn 3"]
    assert segments(records[2]) == [("cached", 0, 16), ("recomputed", 16, 21), ("new", 21, 60)]


def test_the_reuse_chart_draws_ideal_against_actual_per_turn():
    records = _turns()
    fig = plot_reuse(records, current=2)
    ideal, actual, prompt = fig.data
    assert list(ideal.x) == [1, 2, 3]
    assert list(ideal.y) == [r.ideal for r in records] and list(actual.y) == [r.cached for r in records]
    assert list(prompt.y) == [30, 50, 60]
    assert list(actual.marker.line.width) == [0, 3, 0]
    assert records[2].cause.value in actual.customdata[2]


def test_a_record_and_its_json_draw_the_same_figure():
    records = _turns()
    as_json = [r.as_dict(text=False) for r in records]
    assert plot_ribbon(records).to_json() == plot_ribbon(as_json).to_json()
    assert plot_reuse(records).to_json() == plot_reuse(as_json).to_json()


def test_a_long_conversation_draws_its_newest_turns_and_says_so():
    records = []
    held = None
    for turn in range(1, ROWS + 6):
        ids = list(range(20 * turn))
        records.append(explain(ids, 16 * ((20 * turn - 21) // 16) if held else 0, held))
        held = Previous(ids=tuple(ids) + (5000,), prompt=len(ids), turn=turn)
    fig = plot_ribbon(records)
    names = list(_heatmap(fig).y)
    assert names[0] == "turn 6" and names[-1] == f"turn {ROWS + 5}" and len(names) == ROWS
    assert fig.layout.title.subtitle.text == f"the latest {ROWS} turns of {ROWS + 5}"


def test_no_records_gives_an_empty_figure_with_a_hint():
    for fig in (plot_ribbon([]), plot_reuse([])):
        assert fig.data == () and fig.layout.annotations[0].text == "Send a turn to see this chart"
