"""The room row: N people pressing at once through the page, the endpoint, both, and llama-server; its figures
from the clients' answers, the ratios the issue names, the ratios to llama-server only from a quiet machine."""
from __future__ import annotations

import pytest

from playground.bench import attendees
from playground.bench.attendees import Answer, path_figures, question, room_ratios
from playground.metrics import NEAREST_RANK, percentile

QUIET = {"others_cores": 0.0, "cores": 2}
BUSY = {"others_cores": 1.5, "cores": 2}


def test_every_person_on_every_path_asks_a_question_of_its_own():
    asked = [question(path, i) for path in ("page", "endpoint", "mixed", "llama-server") for i in range(30)]
    assert len(set(asked)) == len(asked)
    assert len({len(question("page", i)) - len(attendees.TOPICS[i]) for i in range(30)}) == 1   # one shape, one tag


def test_a_paths_figures_come_from_the_served_answers_and_the_first_press():
    answers = [Answer(10.0, ttft=1.0, done=3.0, tokens=48), Answer(10.5, ttft=2.0, done=4.0, tokens=48),
               Answer(10.2, done=0.1, status="429"), Answer(10.1, ttft=None, done=5.0, tokens=0, status="ReadError")]
    f = path_figures(answers, 10.0, QUIET)
    assert (f["served"], f["people"]) == (2, 4)
    assert f["statuses"] == {"200": 2, "429": 1, "ReadError": 1}
    assert (f["ttft_p50_s"], f["ttft_p95_s"]) == (1.5, 2.0)
    assert f["last_done_s"] == 4.5   # the second answer ends 10.5 + 4.0, the first press was at 10.0
    assert f["output_tokens"] == 96 and f["output_tps"] == round(96 / 4.5, 1)
    assert f["validity"]["valid"] and "server_queued_p95_s" not in f


def test_the_page_adds_the_servers_wait_and_the_rows_its_steps_shared():
    answers = [Answer(0.0, ttft=1.0, done=2.0, tokens=4, queued=0.5, rows=3),
               Answer(0.0, ttft=1.5, done=2.5, tokens=4, queued=0.9, rows=5)]
    f = path_figures(answers, 0.0, BUSY)
    assert (f["server_queued_p50_s"], f["server_queued_p95_s"], f["max_rows"]) == (0.7, 0.9, 5)
    assert not f["validity"]["valid"]


def test_nearest_rank_is_the_ceil_rank():
    assert percentile(list(range(1, 25)), 95, NEAREST_RANK) == 23   # 24 values: the 23rd
    assert percentile([5.0], 95, NEAREST_RANK) == 5.0 and percentile([], 50, NEAREST_RANK) is None


def _path(ttft_p95, last_done, tps, load=QUIET, served=4):
    return {"served": served, "people": 4, "ttft_p95_s": ttft_p95, "last_done_s": last_done, "output_tps": tps,
            "load": load}


def test_the_ratios_are_the_figures_own_and_those_to_llama_server_need_a_quiet_machine():
    paths = {"page": _path(3.0, 6.0, 30.0), "endpoint": _path(2.0, 5.0, 40.0), "mixed": _path(2.2, 5.5, 35.0)}
    ratios, check = room_ratios(paths, _path(4.0, 10.0, 10.0, served=3))
    assert ratios == {"page_vs_endpoint_ttft_p95": 1.5, "page_vs_endpoint_last_done": 1.2,
                      "mixed_vs_endpoint_ttft_p95": 1.1, "mixed_vs_endpoint_last_done": 1.1,
                      "browser_vs_endpoint_ttft_p95": None, "browser_vs_endpoint_last_done": None,
                      "attendee_vs_mixed_ttft_p95": None,
                      "endpoint_vs_llama_ttft_p95": 0.5, "endpoint_vs_llama_tps": 4.0, "served_share_min": 0.75}
    assert check["valid"]
    busy, check = room_ratios(paths, _path(4.0, 10.0, 10.0, load=BUSY))
    assert busy["endpoint_vs_llama_ttft_p95"] is None and busy["endpoint_vs_llama_tps"] is None
    assert busy["page_vs_endpoint_ttft_p95"] == 1.5 and "not quiet" in check["reason"]
    skipped, check = room_ratios(paths, {"skipped": "llama-server runs the bundled GGUF only"})
    assert check is None and skipped["endpoint_vs_llama_tps"] is None and skipped["served_share_min"] == 1.0


def test_the_browser_and_the_attendees_room_are_ratios_of_their_own_paths():
    """The browser's figures against the endpoint's; the room beside an attendee's Serve run against the same room
    without it (each the median of its rounds); a skipped browser path gives no ratio and no served share."""
    paths = {"page": _path(3.0, 6.0, 30.0), "endpoint": _path(2.0, 5.0, 40.0), "mixed": _path(2.0, 5.5, 35.0),
             "attendee": _path(2.4, 6.0, 33.0, served=3), "browser": _path(2.2, 5.5, 36.0)}
    ratios, _ = room_ratios(paths, {"skipped": "llama-server runs the bundled GGUF only"})
    assert (ratios["browser_vs_endpoint_ttft_p95"], ratios["browser_vs_endpoint_last_done"]) == (1.1, 1.1)
    assert ratios["attendee_vs_mixed_ttft_p95"] == 1.2 and ratios["served_share_min"] == 0.75
    skipped, _ = room_ratios({**paths, "browser": {"skipped": "no Chromium"}}, {"skipped": "bundled GGUF only"})
    assert skipped["browser_vs_endpoint_ttft_p95"] is None and skipped["attendee_vs_mixed_ttft_p95"] == 1.2


@pytest.mark.subprocess
def test_the_room_row_serves_every_person_on_the_apps_paths_and_counts_their_tokens():
    """The tiny model: the app started with --openai-api and a key a person; llama-server skipped (bundled only); the
    attendee's Serve run of 2 requests on this app's endpoint beside the mixed room; where Chromium is installed,
    the browser path: one Chromium page, the other person through Gradio's API at the same moment, its figures the
    page's."""
    row = attendees.room_row("tiny", people=2, tokens=3, rounds=2, attendee_requests=2, browser_pages=1).to_json()
    assert row["bench"] == "room" and row["api_keys"] == 2 and row["limits"]["in_flight"] >= 2
    assert row["rounds"] == 2
    browsing = attendees.browser_missing() == ""
    assert ("skipped" in row["browser"]) is not browsing, row["browser"]
    if browsing:
        assert (row["browser"]["browser_pages"], row["browser"]["page_people"]) == (1, 1), row["browser"]
    for name in ("page", "endpoint", "mixed", "attendee") + (("browser",) if browsing else ()):
        p = row[name]
        people = 1 if name == "browser" else 2
        assert (p["served"], p["people"]) == (people, people), p
        assert len(p["rounds"]) == 2 and p["statuses"] == {"200": 2 * people}, p   # both rounds', each answered
        assert p["last_done_s"] == pytest.approx(sum(r["last_done_s"] for r in p["rounds"]) / 2, abs=1e-3)
        assert 0 < p["ttft_p50_s"] <= p["ttft_p95_s"] <= p["last_done_s"]
        for r in p["rounds"]:   # both figures are rounded (last_done_s to 1 ms, output_tps to 0.1): their quotient
            ld = r["last_done_s"]   # agrees within that: t/(ld - 0.0005) - t/ld = t * 0.0005 / (ld (ld - 0.0005))
            slack = 0.05 + r["output_tokens"] * 0.0005 / (ld * (ld - 0.0005)) + 1e-9
            assert abs(r["output_tps"] - r["output_tokens"] / r["last_done_s"]) <= slack, p
    assert row["endpoint"]["output_tokens"] == 2 * 3   # EOS ignored: every token counted
    assert 0 < row["page"]["output_tokens"] <= 2 * 3   # the page may end at EOS
    assert row["page"]["max_rows"] >= 1 and row["page"]["server_queued_p95_s"] >= 0
    parts = row["page"]["ttft_p95_parts_s"]   # the p95 person's first token in parts, on one clock: they add up
    assert set(parts) == {"submit", "queued", "first_token", "delivery"} and min(parts.values()) >= -0.002, parts
    assert sum(parts.values()) == pytest.approx(row["page"]["ttft_p95_s"], abs=0.005), parts
    assert (row["mixed"]["page_people"], row["mixed"]["endpoint_people"]) == (1, 1)
    runs = row["attendee"]["attendee_runs"]   # the attendee's run, in each round, joined the loop without a key
    assert len(runs) == 2 and all(": done" in r["status"] for r in runs), runs
    assert row["ratios"]["attendee_vs_mixed_ttft_p95"] == round(row["attendee"]["ttft_p95_s"]
                                                                / row["mixed"]["ttft_p95_s"], 2)
    assert "live channel" in row["note"]
    assert "skipped" in row["llama_server"] and row["ratios"]["endpoint_vs_llama_tps"] is None
    assert row["ratios"]["page_vs_endpoint_ttft_p95"] == round(row["page"]["ttft_p95_s"]
                                                               / row["endpoint"]["ttft_p95_s"], 2)
    assert row["targets_met"]["served_share_min"] is True


@pytest.mark.server
def test_llama_server_serves_the_room_with_eos_ignored():
    from playground.llamacpp import llama_available
    if not llama_available():
        pytest.skip("llama-server is not installed (make llama)")
    p = attendees.llama_path(people=2, tokens=3, threads=2)
    assert (p["served"], p["people"], p["parallel"]) == (2, 2, 2), p
    assert p["output_tokens"] == 2 * 3 and p["ttft_p95_s"] <= p["last_done_s"]
