"""User text reaches terminals and logs with its control characters escaped, on one line."""

from __future__ import annotations

import io
import logging

from rich.console import Console

from gtidsnap.cli.output import EscapedLog, error_line, printable


def test_control_characters_are_escaped_and_the_rest_kept() -> None:
    assert printable("db.[red]x é ü 漢") == "db.[red]x é ü 漢"
    assert printable("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert printable("\x1b[2J\x00\x7f") == "\\x1b[2J\\x00\\x7f"
    assert printable("\u202eevil\U000e0001") == "\\u202eevil\\U000e0001"


def test_a_log_line_cannot_be_forged() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(EscapedLog())
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("test_output.forged")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.warning("signal %s refused", "x\nERROR gtidsnap: forged\x1b[2J")
    logger.info("plain %d", 5)
    assert stream.getvalue().splitlines() == [
        "WARNING signal x\\nERROR gtidsnap: forged\\x1b[2J refused",
        "INFO plain 5",
    ]


def test_an_error_is_one_line_unless_it_lists_its_problems() -> None:
    console = Console(file=io.StringIO(), width=200)
    error_line("table db.x\nerror: forged\x1b[31m", console)
    error_line("the replica is not ready:\n- a\x1b\n- b", console, lines=True)
    assert console.file.getvalue().splitlines() == [  # type: ignore[attr-defined]
        "error: table db.x\\nerror: forged\\x1b[31m",
        "error: the replica is not ready:",
        "- a\\x1b",
        "- b",
    ]
