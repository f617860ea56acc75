"""The command line's own behaviour, without servers: one line per error, markup never interpreted."""

from __future__ import annotations

import pytest

from gtidsnap import cli


def boom(args: list[str]) -> None:
    raise RuntimeError("a [bold]bug[/] in\nthree\nlines")


def test_an_unexpected_exception_is_one_line_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "app", lambda args: boom(args))
    with pytest.raises(SystemExit) as stopped:
        cli.main(["status"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1
    assert err.count("\n") == 1 and err.startswith("error: unexpected RuntimeError: a [bold]bug[/] in three")
    assert "--verbose" in err and "Traceback" not in err


def test_verbose_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "app", lambda args: boom(args))
    with pytest.raises(RuntimeError, match="bug"):
        cli.main(["run", "--verbose"])


def test_user_text_is_printed_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    cli.error_line("table db.[/x] and [sorce] and [bold red]")
    assert capsys.readouterr().err == "error: table db.[/x] and [sorce] and [bold red]\n"
