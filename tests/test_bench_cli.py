"""`python -m playground.bench`: a command by name from the COMMANDS table, else `all` with the arguments as given."""
import json

import pytest

from playground.backends import BACKENDS
from playground.bench import __main__ as cli
from playground.bench.rows import BackendRow, ErrorRow, say


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
