"""`python -m playground.bench`: a command by name from the COMMANDS table, else `all` with the arguments as given."""
import ast
import json
from pathlib import Path

import pytest

from playground.backends import BACKENDS
from playground.bench import __main__ as cli
from playground.bench import rows
from playground.bench.backends import BackendRow
from playground.bench.process import CHILD
from playground.bench.rows import ErrorRow, Stamp, say, say_timed
from playground.bench.serve import ServeRow
from playground.bench.ui import UiRow

BENCH = Path(rows.__file__).parent


def test_no_backend_name_is_a_command():
    """`python -m playground.bench onnx` must mean `all` on onnx, never a command of that name."""
    assert not set(BACKENDS) & set(cli.COMMANDS)


def test_a_command_by_name_gets_the_rest_and_anything_else_runs_all(monkeypatch):
    calls = []
    for name in ("serve", "all"):
        monkeypatch.setitem(cli.COMMANDS, name, (lambda argv, name=name: calls.append((name, argv)), ""))
    cli.main(["serve", "--model", "tiny"])
    cli.main(["--speed", "onnx"])
    cli.main([])
    assert calls == [("serve", ["--model", "tiny"]), ("all", ["--speed", "onnx"]), ("all", [])]


def test_the_help_lists_every_command(capsys):
    cli.main(["--help"])
    out = capsys.readouterr().out
    assert all(f"    {name} " in out or f"    {name}\n" in out for name in cli.COMMANDS), out


def test_a_command_that_fails_exits_with_its_code(tmp_path):
    rows = tmp_path / "bench.jsonl"
    rows.write_text('{"backend": "onnx"}\n')   # no stamp: results refuses to write a page
    with pytest.raises(SystemExit) as exit_:
        cli.main(["results", "markdown", str(rows), "--out", str(tmp_path)])
    assert exit_.value.code == 2 and not list(tmp_path.glob("*.md"))


def test_a_typed_row_prints_the_keys_it_always_had_and_leaves_out_what_it_lacks(capsys):
    row = BackendRow("onnx", "cpu", "float32", "m", 46, 8, 8, 1, 0.1, 20.0, 0.1, 21.0, 1.0, 1.5, 900.0, 800.0,
                     0.952, 1.0)
    say(row)
    printed = json.loads(capsys.readouterr().out)
    assert list(printed)[:3] == ["backend", "device", "dtype"] and "agreement_with_fp32" not in printed
    assert say(ErrorRow("onnx-int4", "no model")) == {"backend": "onnx-int4", "error": "no model"}


def test_say_refuses_a_row_that_has_no_type(capsys):
    """A new row printed as a dict fails loudly, so every row the bench prints is a Row (rows.py)."""
    with pytest.raises(TypeError, match="rows.py"):
        say({"row": "batch", "backend": "onnx"})
    with pytest.raises(TypeError, match="rows.py"):
        say_timed(lambda: {"bench": "serve"})
    assert capsys.readouterr().out == ""


def test_no_row_is_printed_from_a_dict_literal():
    """Every say()/say_timed() call in the bench's modules passes a typed row, never a dict it builds."""
    found = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("say", "say_timed"):
                for arg in node.args:
                    body = arg.body if isinstance(arg, ast.Lambda) else arg
                    if isinstance(body, (ast.Dict, ast.DictComp)) or getattr(getattr(body, "func", None), "id", "") == "dict":
                        found.append(f"{path.name}:{node.lineno}")
    assert found == []


def one_row(argv: list[str]) -> None:
    say(ErrorRow("onnx", "boom"))


def test_a_command_that_prints_rows_prints_the_stamp_first(monkeypatch, capsys):
    monkeypatch.delenv(CHILD, raising=False)
    monkeypatch.setitem(cli.COMMANDS, "serve", (one_row, ""))
    cli.main(["serve", "--model", "tiny"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line.get("row") for line in lines] == ["stamp", None] and lines[1] == {"backend": "onnx", "error": "boom"}
    assert lines[0]["command"] == "python -m playground.bench serve --model tiny" and lines[0]["machine"]["cores"] >= 1


def test_a_child_bench_and_a_command_without_rows_print_no_stamp(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(cli.COMMANDS, "serve", (one_row, ""))
    monkeypatch.setenv(CHILD, "1")   # as process.row_in_subprocess starts it: the parent has stamped the run
    cli.main(["serve"])
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [{"backend": "onnx", "error": "boom"}]
    monkeypatch.delenv(CHILD)
    (tmp_path / "bench.jsonl").write_text(json.dumps(Stamp.now().to_json()) + "\n")
    cli.main(["results", "markdown", str(tmp_path / "bench.jsonl"), "--out", str(tmp_path)])
    assert capsys.readouterr().out.strip().endswith(".md")   # the page's path alone


def test_outside_a_git_checkout_the_commit_is_none(monkeypatch, tmp_path):
    monkeypatch.setattr(rows, "ROOT", tmp_path)
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    stamp = Stamp.now("python -m playground.bench")
    assert stamp.commit is None and stamp.uncommitted_changes is False and stamp.to_json()["commit"] is None


def test_a_row_with_fields_it_has_only_sometimes_keeps_its_key_order():
    serve = dict(backend="onnx", requests=4, mix={"short": 0.8}, max_new_tokens=6, seed=0, batch_config={},
                 single_stream={}, rate_rps=1.0, one_at_a_time={}, batching={}, throughput_ratio=None,
                 short_p95_ttft_ratio=None, throughput_ratio_ceiling=1.2, targets={}, targets_met={},
                 llama_server={"skipped": "bundled only"})
    unsaturated, saturated = ServeRow(**serve).to_json(), ServeRow(**serve, saturated={"bounds": {}}).to_json()
    assert list(unsaturated)[:2] == ["bench", "backend"] and "saturated" not in unsaturated
    assert unsaturated["throughput_ratio"] is None   # a ratio it could not take is printed, as null
    assert list(saturated)[-2:] == ["saturated", "llama_server"] and list(saturated)[9] == "rate_meaning"
    ui = dict(backend="onnx", model="m", prompt="p", new_tokens=8, same_tokens=True, repeats=1,
              headless_decode_tps=20.0, ui_decode_tps=19.0, wire_bytes=1e4, sse_events=9.0,
              all_bytes_with_downloads=2e4, server_cpu_s_per_token=0.01, model_cpu_s_per_token=0.009,
              server_cpu_outside_model_s_per_token=0.001, decode_cpu_s_per_s_server_vs_headless=[1.0, 0.9],
              client_cpu_s_per_run=0.1, decode_ratio_ui_vs_headless=0.95)
    assert "with_chromium_on_its_own_cpu" not in UiRow(**ui).to_json()
    watched = UiRow(**ui, with_chromium_on_its_own_cpu={"chip_in_dom_p95_ms": 61}).to_json()
    assert list(watched)[0] == "row" and list(watched)[-1] == "with_chromium_on_its_own_cpu"
