"""The watch row (playground/bench/watch.py) on the tiny model: the Watch view in a presenter's Chromium while API
clients stream; figures are not asserted, only that they were measured and judged by the row's own targets."""
import pytest

from playground.bench.watch import long_task_figures, meets, watch_row
from tests.helpers import require_browser

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]


def test_the_watch_row_measures_the_view_while_clients_stream():
    require_browser()
    row = watch_row(model="tiny", clients=2, window_s=3.0).to_json()
    assert row["row"] == "watch" and row["clients"] == 2 and row["window_s"] == 3.0
    assert row["answers_streamed"] > 0   # the clients streamed while the view was watched
    assert 0.0 <= row["long_task_share"] <= 1.0 and row["task_p99_ms"] >= 0 and row["long_tasks"] >= 0
    assert row["task_p99_ms"] <= row["longest_task_ms"] or row["long_tasks"] == 0
    assert len(row["screenshot_s"]) == 2 and all(s > 0 for s in row["screenshot_s"])
    assert row["meets_targets"] == meets(row["task_p99_ms"], row["long_task_share"], row["screenshot_s"])
    assert row["load"]["cores"] >= 1 and row["targets"]["task_p99_ms"] == 200.0


def test_long_tasks_outside_the_window_do_not_count():
    assert long_task_figures([[0.0, 500.0], [40_000.0, 900.0]], 1_000.0, 30_000.0) == (0.0, 0.0)
    assert long_task_figures([[500.0, 1_000.0]], 1_000.0, 10_000.0)[1] == 0.05   # clipped to its 500 ms inside
