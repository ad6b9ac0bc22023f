"""The dated results pages are rendered from the bench's JSON lines, stamped with commit, machine and date."""
import json

import pytest

from playground.bench.results import main, markdown, page_name
from playground.bench.rows import Stamp

STAMP = {"row": "stamp", "commit": "abc123def456", "uncommitted_changes": False, "date": "2026-12-03 21:00 UTC",
         "machine": {"cpu": "Some CPU", "cores": 2}, "load_average": [0.5, 0.4, 0.3], "command": "python -m playground.bench"}
BACKENDS = [{"backend": "onnx", "engine_decode_tps": 26.1, "peak_rss_mb": 1790, "greedy_agreement": None},
            {"backend": "onnx-gguf4", "engine_decode_tps": 61.9, "peak_rss_mb": 690}]
UI = {"row": "ui", "backend": "onnx", "with_chromium_on_its_own_cpu": {"chip_in_dom_p95_ms": 61}}


def test_the_stamp_names_the_commit_the_machine_and_the_date():
    row = Stamp.now("python -m playground.bench --speed onnx").to_json()
    assert row["row"] == "stamp" and len(row["commit"]) == 12 and row["machine"]["cores"] >= 1
    assert row["date"].endswith("UTC") and len(row["load_average"]) == 3


def test_the_page_holds_every_row_as_printed_under_its_stamp():
    page = markdown([STAMP, *BACKENDS, UI])
    assert page.startswith("# `make bench` results: 2026-12-03 21:00 UTC, commit abc123def456")
    assert "- machine: cpu Some CPU, cores 2" in page and "- command: `python -m playground.bench`" in page
    assert "| figure | onnx | onnx-gguf4 |" in page   # consecutive rows of one kind: one table
    assert "| engine_decode_tps | 26.1 | 61.9 |" in page
    assert "| greedy_agreement | missing |  |" in page   # null is missing; a figure a row lacks is blank
    assert "## ui" in page and "| with_chromium_on_its_own_cpu.chip_in_dom_p95_ms | 61 |" in page
    assert page_name([STAMP, *BACKENDS]) == "2026-12-03-abc123def456.md"


def test_a_later_commands_stamp_heads_its_rows_and_names_its_cpu_view():
    """A file of two commands' lines (the second run in a CPU view): the second's rows under its own command and
    view, in a table of their own even where the kind repeats."""
    view = {**STAMP, "command": "python -m playground.bench gap", "cpu_view": "avx2: AVX-512 hidden, on this CPU",
            "llama_cpu_variant": "haswell"}
    page = markdown([STAMP, *BACKENDS, view, *BACKENDS])
    assert page.count("| figure | onnx | onnx-gguf4 |") == 2
    assert "### The rows below: `python -m playground.bench gap`" in page
    assert "**CPU view** (not this CPU kind: its kernels, on this machine): avx2: AVX-512 hidden" in page
    assert "haswell" in page.split("### The rows below")[1]
    assert page.index("### The rows below") > page.index("| engine_decode_tps | 26.1 | 61.9 |")


def test_rows_without_a_stamp_are_refused():
    with pytest.raises(ValueError, match="no commit, machine, date"):
        markdown(BACKENDS)


def test_rows_that_carry_their_own_stamp_need_no_stamp_row():
    rows = [{**r, "commit": "0123456789ab", "machine": "m", "date": "2026-12-04 01:00 UTC"} for r in BACKENDS]
    assert page_name(rows) == "2026-12-04-0123456789ab.md"


def test_the_cli_writes_the_page_of_a_jsonl_file(tmp_path, capsys):
    rows = tmp_path / "bench.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in [STAMP, *BACKENDS]) + "\nnot json: a log line\n")
    assert main(["markdown", str(rows), "--out", str(tmp_path / "results")]) == 0
    page = tmp_path / "results" / "2026-12-03-abc123def456.md"
    assert capsys.readouterr().out.strip() == str(page) and "| peak_rss_mb | 1790 | 690 |" in page.read_text()
