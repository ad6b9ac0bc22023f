"""Every comparative word the Serve tab writes agrees with the figures it names, on runs made to come out each way.

The runs are hand-made records (no model): each sentence is checked on a run where B wins and on one where it
loses, so a word fixed in the text would fail one of the two.
"""
from __future__ import annotations

import re

import pytest

from playground.config import GenerationSettings
from playground.serve.agreement import NEAR_TIE, Agreement, Parting, span
from playground.serve.presets import PRESETS, chunk_finding, pressure_finding
from playground.serve.records import Preemption, RequestRecord, WorkloadResult
from playground.serve.summary import compare, lesson
from playground.serve.sweeps import ChunkPoint, chunk_sentence
from playground.serve.workload import Request, Workload
from playground.trace import Step, Trace

WORDS = {"more": 1, "fewer": -1, "longer": 1, "shorter": -1, "higher": 1, "lower": -1, "rose": 1, "fell": -1,
         "the same": 0}
NUMBER = r"(\d[\d,]*(?:\.\d+)?)(?: ms| s)?"


def record(req_id, cls, arrival, admitted, times, rows=1, prompt=10, ids=None, chunks=(), preempted=False):
    trace = Trace("p", "p", [1] * prompt, GenerationSettings(), "fake", "cpu", "float32", "m", None)
    prev = 0.0
    for i, t in enumerate(times):
        trace.steps.append(Step(index=i, token_id=(ids or [5] * len(times))[i], text="x", special=False,
                                phase="decode" if i else "prefill", time=t - admitted, latency=t - admitted - prev,
                                prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None, rows=rows))
        prev = t - admitted
    trace.stop_reason = "length"
    rec = RequestRecord(Request(req_id, cls, "p", 8, arrival), prompt, admitted, trace, list(chunks), times[-1],
                        "length")
    if preempted:
        rec.preemptions.append(Preemption(times[0], 1, prompt + 1, times[0] + 0.1, 0, None, [(times[0], times[0] + 0.1,
                                                                                           prompt + 1)]))
    return rec


def run(records, scheduler="batching", **pool) -> WorkloadResult:
    return WorkloadResult(scheduler, scheduler, "fake source", Workload(tuple(r.request for r in records)), records,
                          done=True, pool=pool or None)


def chats(tpot: float, rows: int, n=4, ids=None, preempted=()) -> WorkloadResult:
    """`n` chats all at once, each `tpot` s a token, every forward pass carrying `rows` requests."""
    return run([record(i, "chat", 0.0, 0.0, [0.5 + tpot * k for k in range(8)], rows, ids=(ids or {}).get(i),
                       preempted=i in preempted) for i in range(n)], kv_budget=256)


def checked_words(text: str) -> int:
    """Assert each '<word> … : <b> … against <a>' agrees with its two figures; the number of words checked."""
    pattern = (r"\b(more|fewer|longer|shorter|higher|lower|the same)\b[^:;()]*?: " + NUMBER + r"[^;()]*? against "
               + NUMBER)
    found = 0
    for word, b, a in re.findall(pattern, text.replace("served the same", "served")):
        b, a = float(b.replace(",", "")), float(a.replace(",", ""))
        assert WORDS[word] == (b > a) - (b < a), (word, b, a, text)
        found += 1
    return found


def verdicts(text: str) -> list[str]:
    return re.findall(r"not as expected|as expected|came out the other way|against the expectation", text)


# --- memory pressure: B under a KV budget is expected slower, since fewer requests fit

@pytest.mark.parametrize("b_tpot, b_rows, agreed", [(0.3, 2, True), (0.05, 2, False), (0.3, 6, True)])
def test_memory_pressure_headline_computes_its_words_and_says_whether_the_run_agreed(b_tpot, b_rows, agreed):
    a, b = chats(0.1, 4), chats(b_tpot, b_rows)
    preset = PRESETS["memory pressure"]
    for text in (compare(a, b, named=True, expect=preset.expect), preset.finding(a, b)):
        assert checked_words(text) >= 2, text
        assert "carries more requests" not in text
        assert verdicts(text) == (["as expected"] if agreed else ["came out the other way"]), text
    headline = compare(a, b, named=True, expect=preset.expect)
    assert f"forward passes carried {'fewer' if b_rows < 4 else 'more'} requests: {b_rows:.1f}" in headline


def test_memory_pressure_explains_changed_outputs_and_names_no_unmeasured_figure():
    a = chats(0.1, 4)
    parted = chats(0.3, 2, ids={0: [5, 6, 7, 8, 9, 9, 9, 9]}, preempted={0, 1})
    text = pressure_finding(a, parted)
    assert "3 of 4 requests gave the very tokens A gave them; 1 parted (1 of them preempted)" in text
    assert "multi-row prefill pass" in text and "nearly tied" in text
    assert "Teacher-forced agreement after a recompute is not measured in this run" in text
    assert not re.search(r"agreement[^.]*\d+(\.\d+)?%(?! of positions)", text)   # no figure but the suite's gate
    same = pressure_finding(a, chats(0.3, 2, preempted={0}))
    assert "4 of 4 requests gave the very tokens A gave them." in same and "nearly tied" not in same


def measured(margins=(), partings=(0.01,), positions=480, median=2.0) -> Agreement:
    """A replay's figures: `margins` where the two passes' top-1 differed, one parting per margin in `partings`."""
    return Agreement(positions, positions - len(margins), tuple(margins), median,
                     tuple(Parting(i, 40 + i, m, True) for i, m in enumerate(partings)))


@pytest.mark.parametrize("margins, partings", [
    ((), (0.01,)),                        # every position agreed; the one change began at a near-tie
    ((0.01, 0.2, 0.03), (0.01, 0.2)),     # some differed, each a near-tie
    ((0.01, 0.9, 1.5), (0.01, 1.5)),      # some differed past a near-tie
    ((0.6,), (0.6, 2.0)),                 # no change began at a near-tie
    ((0.6,), (0.6,)),                     # the one change did not begin at a near-tie
])
def test_memory_pressure_gives_the_recompute_agreement_beside_the_changed_outputs(margins, partings):
    a = chats(0.1, 4)
    parted = chats(0.3, 2, ids={0: [5, 6, 7, 8, 9, 9, 9, 9]}, preempted={0, 1})
    text = pressure_finding(a, parted, agreement=measured(margins, partings))
    assert "3 of 4 requests gave the very tokens A gave them; 1 parted" in text
    assert "not measured" not in text
    agreed = 480 - len(margins)
    if not margins:
        assert "agreed with the one-at-a-time pass at all 480 positions" in text, text
    else:
        share = float(re.search(r"one-at-a-time pass at (\d+\.\d)% of 480 positions", text).group(1))
        assert share == round(100 * agreed / 480, 1), text
        widest = float(re.search(r"at most (\d+\.\d+) apart", text).group(1))
        assert widest == round(max(margins), 3)
        assert ("every one a near-tie" in text) == (max(margins) < NEAR_TIE), text
    tied, wide = [m for m in partings if m < NEAR_TIE], [m for m in partings if m >= NEAR_TIE]
    if not wide:
        assert re.search(r"(every|the) change began at a near-tie", text), text
    elif len(partings) == 1:
        assert f"the change began where its top two logits were {partings[0]:.3f} apart, not a near-tie" in text
    else:
        assert f"{len(tied) or 'none'} of {len(partings)} changes began at a near-tie" in text, text
        assert f"top two logits were {span(wide)} apart" in text, text
        assert "every change" not in text


def test_a_share_short_of_all_never_reads_as_all():
    a = chats(0.1, 4)
    parted = chats(0.3, 2, ids={0: [5, 6, 7, 8, 9, 9, 9, 9]}, preempted={0})
    text = pressure_finding(a, parted, agreement=measured((0.01,), positions=5000))
    assert "at over 99.9% of 5,000 positions" in text and "100.0%" not in text and "at all" not in text


def test_a_stopped_replay_says_the_agreement_was_not_measured():
    a = chats(0.1, 4)
    parted = chats(0.3, 2, ids={0: [5, 6, 7, 8, 9, 9, 9, 9]}, preempted={0})
    stopped = Agreement(0, 0, (), None, (), cancelled=True)
    assert "is not measured in this run" in pressure_finding(a, parted, agreement=stopped)
    nothing = Agreement(0, 0, (), None, ())   # the requests that parted were never preempted
    assert "no recompute to replay" in pressure_finding(a, chats(0.3, 2, ids={0: [5, 6, 7, 8, 9, 9, 9, 9]}),
                                                        agreement=nothing)


# --- one at a time against batching: more tokens/s expected

@pytest.mark.parametrize("b_tpot, agreed", [(0.02, True), (1.0, False)])
def test_batching_against_one_at_a_time_says_whether_it_agreed(b_tpot, agreed):
    alone = run([record(i, "chat", 0.0, 0.8 * i, [0.8 * i + 0.1 * k for k in range(1, 9)]) for i in range(4)],
                "one-at-a-time")
    text = compare(alone, chats(b_tpot, 4), named=True)
    assert checked_words(text) >= 2
    assert verdicts(text) == (["as expected"] if agreed else ["came out the other way"]), text


def test_two_runs_of_one_scheduler_without_a_preset_name_no_expectation():
    text = compare(chats(0.1, 4), chats(0.2, 4), named=True)
    assert checked_words(text) >= 2 and verdicts(text) == []


# --- the prefix-cache presets: a shorter TTFT expected

@pytest.mark.parametrize("b_first, agreed", [(0.2, True), (0.9, False)])
def test_cache_finding_words_follow_the_ttft(b_first, agreed):
    a = run([record(i, "question", 0.0, 0.0, [0.5, 0.6]) for i in range(3)])
    b = run([record(i, "question", 0.0, 0.0, [b_first, b_first + 0.1]) for i in range(3)], cached=300,
            looked_up=1000)
    text = PRESETS["shared system prompt"].finding(a, b)
    assert checked_words(text) == 1
    assert verdicts(text) == (["as expected"] if agreed else ["came out the other way"]), text


# --- a long document among chatters: B's smaller chunk expected to lower the ITL p95 and lengthen the TTFT

def interference(chunk: int, stall: float, doc_ttft: float) -> WorkloadResult:
    """Two chatters a token every 0.1 s, one token held `stall` s by the document's chunk; the document's first
    token at `doc_ttft` s."""
    chatter = [0.1, 0.2, 0.3, 0.4, 0.5 + stall, 0.6 + stall, 0.7 + stall]
    doc = record(9, "document", 0.0, 0.0, [doc_ttft], prompt=600, chunks=[(0.41, 0.41 + stall, chunk)])
    return run([record(0, "chat", 0.0, 0.0, chatter), record(1, "chat", 0.0, 0.0, chatter), doc],
               prefill_chunk=chunk)


@pytest.mark.parametrize("b_stall, b_ttft, agreed", [(0.05, 1.2, [True, True]), (0.6, 0.5, [False, False])])
def test_chunk_finding_words_follow_the_itl_and_the_ttft(b_stall, b_ttft, agreed):
    text = chunk_finding(interference(512, 0.3, 0.8), interference(32, b_stall, b_ttft))
    assert checked_words(text) == 2, text
    assert verdicts(text) == ["as expected" if x else "came out the other way" for x in agreed], text


def test_the_chunk_sweep_says_why_the_p95_over_every_token_fell():
    """The sweep said 'the ITL p95 did not rise (0.41×)' with no reason while only the waiting tokens' rose."""
    fell = [ChunkPoint(32, 2.0, 0.200, 0.10, 0.05, 28), ChunkPoint(512, 1.2, 0.081, 0.527, 0.05, 2)]
    text = chunk_sentence(fell)
    assert "did not rise" not in text
    assert "the ITL p95 over every decoding token fell (0.40×, against the expectation)" in text
    assert "that of the tokens that waited for a chunk rose (5.27×)" in text
    assert "took 2 prefill passes against 28 at 32: fewer tokens waited for one" in text
    rose = [ChunkPoint(32, 2.0, 0.05, 0.06, 0.04, 28), ChunkPoint(512, 1.2, 0.11, 0.2, 0.04, 2)]
    text = chunk_sentence(rose)
    assert "over every decoding token rose (2.20×)" in text and "against the expectation" not in text
    assert "fewer tokens waited" not in text


# --- the endpoint's live sentence: it covers the requests so far, and a later figure extends it

def test_the_live_lesson_counts_a_long_prefill_before_its_first_token_and_says_so_far():
    """At 8 s the long request was still prefilling (chunks, no token): the sentence said no short request waited
    for it; later the same shorts were 'delayed'."""
    long = RequestRecord(Request(0, "long", "p", 8, 0.0), 900, 0.0, None, [(0.0, 1.0, 500), (1.0, 2.0, 400)])
    short = record(1, "short", 0.5, 0.5, [1.5, 1.6])
    live = WorkloadResult("batching", "batching", "fake", Workload((long.request, short.request)), [long, short])
    text = lesson(live)
    assert "so far, of the 1 short request with a first token, the long requests' prefill delayed 1 first token" \
        in text, text
    finished = record(0, "long", 0.0, 0.0, [2.5, 2.6], prompt=900, chunks=long.chunks)
    done = WorkloadResult("batching", "batching", "fake", live.workload, [finished, short], done=True)
    assert "of the 1 short request, the long requests' prefill delayed 1 first token" in lesson(done)
    assert "so far" not in lesson(done)
