"""The conversations row: N chats of T turns at once through our endpoint and llama-server; the fixed script, each
stream read where its server puts the cached tokens, the figures per turn, the ratio over turns 2..T."""
from __future__ import annotations

import re

import httpx
import pytest

from playground.bench import conversations as conv
from playground.bench.conversations import Chat, ConversationsRow, Turn, later_ratios, merge_rounds, path_figures, \
    script, stream_turn, tagged, turn_figures
from playground.bench.results import kind, markdown
from playground.bench.rows import Machine, Stamp

QUIET = {"others_cores": 0.0, "cores": 2}
BUSY = {"others_cores": 1.5, "cores": 2}


def words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text)


def test_the_script_is_fixed_by_its_seed_and_each_question_is_a_drawn_length_of_the_document():
    s = script(8, 6, words, (30, 80))
    assert len(s) == 8 and all(len(c) == 6 for c in s)
    lengths = [len(words(q)) for c in s for q in c]
    assert min(lengths) >= 30 and max(lengths) <= 80 and len(set(lengths)) > 10   # drawn, not one length
    assert s == script(8, 6, words, (30, 80))                                    # the same seed, the same script
    assert s != script(8, 6, words, (30, 80), seed=conv.SEED + 1)
    document = " ".join(conv.long_document().split())
    assert all(q in f"{document} {document}" for c in s for q in c)              # passages, on past its end
    assert len({q for c in s for q in c}) > 40                                   # hardly any question twice


def test_no_conversation_or_round_begins_as_another_does():
    s = script(8, 2, words, (5, 10))
    firsts = [tagged(q, i, r)[0] for r in range(3) for i, q in enumerate(s)]
    assert len(set(firsts)) == len(firsts)
    assert tagged(s[0], 0, 0)[1:] == s[0][1:]   # only the first question carries the tag


@pytest.mark.parametrize("args", [(0, 6, (30, 80)), (8, 0, (30, 80)), (8, 6, (0, 80)), (8, 6, (80, 30))])
def test_a_script_that_cannot_be_made_is_refused(args):
    with pytest.raises(ValueError):
        script(*args[:2], words, args[2])


def test_what_one_conversation_needs_holds_its_questions_answers_and_template_rounded_up():
    need = conv.conversation_tokens([["a " * 80] * 6, ["b " * 30] * 6], lambda t: len(t.split()), 48)
    most = 6 * 80 + 6 * (48 + 2 * conv.MESSAGE_TOKENS) + conv.HEAD_TOKENS
    assert need % conv.CONTEXT_STEP == 0 and most <= need < most + conv.CONTEXT_STEP


def sse(*events) -> bytes:
    import json
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"


def chunk(text):
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def read(payload: bytes, path: str) -> tuple[Turn, str]:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=payload,
                                                                   headers={"content-type": "text/event-stream"}))
    with httpx.Client(transport=transport) as http:
        return stream_turn(http, "http://server/v1/chat/completions", {}, {}, 2, path)


def test_our_stream_gives_the_cached_tokens_of_usage_and_the_cause_of_its_record():
    ours = sse(chunk("Hel"), chunk("lo"), chunk(" there"),
               {"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 3,
                                         "prompt_tokens_details": {"cached_tokens": 96}},
                "timings": {"cache_n": 95, "prompt_n": 25}, "x_playground": {"cache": {"cause": "no miss", "ideal": 112}}})
    turn, answer = read(ours, "ours")
    assert answer == "Hello there" and turn.served and turn.turn == 2
    assert (turn.tokens, turn.prompt_tokens, turn.cached, turn.cause, turn.ideal) == (3, 120, 96, "no miss", 112)
    assert 0 <= turn.ttft <= turn.last <= turn.done


def test_llama_servers_stream_gives_cache_n_and_its_prompt_is_the_computed_and_the_cached():
    theirs = sse(chunk("A"), chunk("B"), {"choices": [], "timings": {"cache_n": 90, "prompt_n": 30}})
    turn, answer = read(theirs, "llama_server")
    assert answer == "AB" and (turn.tokens, turn.prompt_tokens, turn.cached, turn.cause) == (2, 120, 90, None)


def test_a_refused_turn_is_counted_not_raised():
    transport = httpx.MockTransport(lambda request: httpx.Response(429, json={"error": {"message": "busy"}}))
    with httpx.Client(transport=transport) as http:
        turn, answer = stream_turn(http, "http://server/v1/chat/completions", {}, {}, 1, "ours")
    assert turn.status == "429" and not turn.served and answer == "" and turn.cached is None


def test_each_turn_asks_for_a_connection_of_its_own_so_none_goes_out_on_one_the_server_dropped():
    sent = []

    def answer(request):
        sent.append((request.headers.get("connection"), request.headers.get("authorization")))
        return httpx.Response(200, content=sse(chunk("Hi")))
    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        chat = conv.chatter("http://server/v1", "k", ["One?", "Two?", "Three?"], 1, "ours", "c-1")(http)
    assert [t.served for t in chat.turns] == [True, True, True]
    assert sent == [("close", "Bearer k")] * 3


def test_a_turns_figures_say_missing_where_a_server_gave_no_cached_count():
    served = [Turn(3, ttft=0.2, last=1.2, tokens=11, prompt_tokens=200, cached=None)]
    f = turn_figures(served + [Turn(3, status="ReadError")], 3)
    assert f["served"] == "1/3" and f["cached_tokens_p50"] is None and f["cached_share"] is None
    assert f["output_tps_p50"] == 10.0 and f["ttft_p95_s"] == 0.2 and "causes" not in f and "ideal_tokens_p50" not in f


def test_the_later_turns_p95_leaves_out_the_first_turns():
    slow_first = [Chat(0.0, [Turn(1, ttft=5.0, last=6.0, tokens=4), Turn(2, ttft=0.3, last=1.0, tokens=4),
                             Turn(3, ttft=0.2, last=0.9, tokens=4)], ended=9.0) for _ in range(2)]
    f = path_figures(slow_first, 3, QUIET)
    assert f["later_ttft_p95_s"] == 0.3 and f["turns"]["1"]["ttft_p95_s"] == 5.0
    assert (f["served"], f["requests"], f["output_tokens"], f["wall_s"]) == (6, 6, 24, 9.0)
    assert list(f["turns"]) == ["1", "2", "3"] and f["output_tps"] == round(24 / 9.0, 1)


def test_a_conversation_that_stopped_counts_its_later_turns_as_not_served():
    stopped = Chat(0.0, [Turn(1, ttft=0.1, last=0.5, tokens=4), Turn(2, status="500")], ended=1.0)
    whole = Chat(0.0, [Turn(n, ttft=0.1, last=0.5, tokens=4) for n in (1, 2, 3)], ended=2.0)
    f = path_figures([stopped, whole], 3, QUIET)
    assert [t["served"] for t in f["turns"].values()] == ["2/2", "1/2", "1/2"]
    assert f["served"] == 4 and f["requests"] == 6 and f["statuses"] == {"200": 4, "500": 1}


def _round(p95, load=QUIET, turn_p95=1.0):
    return {"served": 2, "requests": 2, "statuses": {"200": 2}, "later_ttft_p95_s": p95, "wall_s": 2.0,
            "output_tokens": 8, "output_tps": 4.0, "load": load,
            "turns": {"1": {"served": "2/2", "ttft_p95_s": turn_p95, "cached_share": 0.1}}}


def test_the_ratio_is_taken_within_each_round_and_only_from_a_quiet_machine():
    ratios, each, check = later_ratios([_round(0.5), _round(0.9), _round(0.3)], [_round(1.0), _round(1.0),
                                                                                   _round(1.0)])
    assert each == [0.5, 0.9, 0.3] and ratios == {"ttft_p95_later_turns_vs_llama": 0.5} and check["valid"]
    busy, each, check = later_ratios([_round(0.5)], [_round(1.0, BUSY)])
    assert busy["ttft_p95_later_turns_vs_llama"] is None and each == [0.5] and "not quiet" in check["reason"]
    missing, _, _ = later_ratios([_round(None)], [_round(1.0)])
    assert missing["ttft_p95_later_turns_vs_llama"] is None


def test_rounds_merge_into_medians_per_turn_and_per_path():
    m = merge_rounds([_round(0.5, turn_p95=1.0), _round(0.9, turn_p95=3.0), _round(0.7, BUSY, turn_p95=2.0)])
    assert m["later_ttft_p95_s"] == 0.7 and m["turns"]["1"]["ttft_p95_s"] == 2.0
    assert m["statuses"] == {"200": 6} and [r["later_ttft_p95_s"] for r in m["rounds"]] == [0.5, 0.9, 0.7]
    assert m["load"] == BUSY and not m["validity"]["valid"]


def _row(**llama) -> ConversationsRow:
    path = {**_round(0.5), "turns": {"1": {"served": "2/2", "ttft_p95_s": 1.0}, "2": {"served": "2/2",
                                                                                       "ttft_p95_s": 0.5}}}
    return ConversationsRow(backend="onnx-gguf4", model="m.gguf", conversations=2, turns=2, answer_tokens=48,
                            question_tokens=[30, 80], seed=57, schedule="2 conversations at once", threads=2,
                            rounds=1, conversation_tokens=512, prefix_cache_positions=4096, prefix_cache_evictions=0,
                            limits={"in_flight": 64}, ours=path, llama_server=llama or {**path, "parallel": 4},
                            ratios={"ttft_p95_later_turns_vs_llama": 0.5}, round_ratios=[0.5],
                            llama_validity={"valid": True}, cpu_flags={"avx2": True},
                            targets={"ttft_p95_later_turns_vs_llama": "<= 0.8"},
                            targets_met={"ttft_p95_later_turns_vs_llama": True})


def test_the_rows_json_and_its_place_on_the_results_page():
    out = _row().to_json()
    assert list(out)[:2] == ["bench", "backend"] and out["bench"] == "conversations" and kind(out) == "conversations"
    for key in ("conversations", "turns", "answer_tokens", "schedule", "prefix_cache_positions", "cpu_flags",
                "conversation_tokens", "ours", "llama_server", "ratios", "round_ratios", "targets_met"):
        assert key in out
    stamp = Stamp("abc", False, Machine("CPU", 2, 8.0, "Linux", "3.11", {"avx2": True}), "2026-12-06 22:00 UTC",
                  [0.1]).to_json()
    page = markdown([stamp, out])
    assert "## conversations" in page and "| ours.turns.2.ttft_p95_s | 0.5 |" in page
    assert "| llama_server.turns.1.ttft_p95_s | 1.0 |" in page
    assert "| prefix_cache_positions | 4096 |" in page


@pytest.mark.subprocess
def test_the_conversations_row_serves_every_turn_through_the_app_and_reads_its_cached_tokens():
    """The tiny model: the app started with --openai-api and a key a conversation; llama-server skipped (it runs
    the bundled GGUF only)."""
    row = conv.conversations_row("tiny", conversations=2, turns=2, tokens=3, lengths=(4, 8), rounds=2).to_json()
    assert row["bench"] == "conversations" and row["rounds"] == 2 and row["prefix_cache_positions"] > 0
    ours = row["ours"]
    assert (ours["served"], ours["requests"], ours["statuses"]) == (4, 4, {"200": 8}), ours
    assert ours["output_tokens"] == 2 * 2 * 3   # EOS ignored: every answer its 3 tokens
    assert [t["served"] for t in ours["turns"].values()] == ["2/2", "2/2"] and len(ours["rounds"]) == 2
    first, second = ours["turns"]["1"], ours["turns"]["2"]
    assert second["prompt_tokens_p50"] > first["prompt_tokens_p50"]   # the conversation came back whole
    # turn 2 finds turn 1's history in the cache: more than the first turns found, a larger share of the prompt
    assert second["cached_tokens_p50"] > first["cached_tokens_p50"], ours
    assert second["cached_share"] > first["cached_share"], ours
    assert first["causes"] == {"new conversation": 4}, ours
    assert second["ideal_tokens_p50"] >= second["cached_tokens_p50"] > 0, ours   # the most it could have found
    assert sum(second["causes"].values()) == 4 and "new conversation" not in second["causes"], ours
    assert 0 < ours["later_ttft_p95_s"] == second["ttft_p95_s"]   # with two turns, the later turns are turn 2
    assert "skipped" in row["llama_server"] and row["ratios"]["ttft_p95_later_turns_vs_llama"] is None


@pytest.mark.server
def test_llama_server_keeps_a_conversation_and_says_so_in_cache_n():
    from playground.llamacpp import LlamaServer, llama_available
    if not llama_available():
        pytest.skip("llama-server is not installed (make llama)")
    with LlamaServer(threads=2, parallel=2, ctx=2 * 512) as server:
        questions = script(2, 2, conv.tokenizer_pieces(server.url.removesuffix("/v1")), (8, 12))
        f = conv.run_round(server.url, [None, None], questions, 4, "llama_server", 0, ())
    assert (f["served"], f["requests"], f["output_tokens"]) == (4, 4, 4 * 4), f
    first, second = f["turns"]["1"], f["turns"]["2"]
    assert second["prompt_tokens_p50"] > first["prompt_tokens_p50"]
    assert second["cached_tokens_p50"] >= first["prompt_tokens_p50"], f   # its slot kept the first turn
