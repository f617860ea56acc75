"""The command line's two consoles and the one way it prints: user text is never read as rich markup,
and never reaches a terminal or a log with its control characters.

Table names, paths, signal ids and server messages can hold ``[`` and ``]``; printed as markup, ``db.[/x]``
raises rich's MarkupError and ``[sorce]`` vanishes. :func:`say` assembles plain text with explicit
styles instead. They can hold control characters too: a newline in a signal id forged a whole log line,
``ESC[2J`` cleared the operator's screen. :func:`printable` escapes them where user text is shown
(errors, ``status``, progress), and :class:`EscapedLog` in every log line.
"""

from __future__ import annotations

import logging

from rich.console import Console
from rich.text import Text

err = Console(stderr=True)
out = Console()


def say(console: Console, *parts: str | tuple[str, str]) -> None:
    """Print ``parts`` (plain strings, or (text, style) pairs) without reading any of them as markup."""
    console.print(Text.assemble(*parts), highlight=False, soft_wrap=True)  # one line stays one line


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every character that is not printable escaped: ``\\n``, ``\\x1b``, ``\\u202e``."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _ESCAPES.get(ch) or _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class EscapedLog(logging.Filter):
    """Every log record's message on one line, control characters escaped (see :func:`printable`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = printable(record.getMessage()), None  # formatted once, not again
        return True


def error_line(text: str, console: Console = err, lines: bool = False) -> None:
    """``error: <text>``, the form of every error the command line prints, control characters escaped
    (``lines``: but its newlines kept, for an error that lists its problems a line each)."""
    shown = "\n".join(map(printable, text.split("\n"))) if lines else printable(text)
    say(console, ("error: ", "bold red"), shown)
