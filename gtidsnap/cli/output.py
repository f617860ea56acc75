"""The command line's two consoles and the one way it prints: user text is never read as rich markup.

Table names, paths, signal ids and server messages can hold ``[`` and ``]``; printed as markup, ``db.[/x]``
raises rich's MarkupError and ``[sorce]`` vanishes. :func:`say` assembles plain text with explicit
styles instead.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

err = Console(stderr=True)
out = Console()


def say(console: Console, *parts: str | tuple[str, str]) -> None:
    """Print ``parts`` (plain strings, or (text, style) pairs) without reading any of them as markup."""
    console.print(Text.assemble(*parts), highlight=False, soft_wrap=True)  # one line stays one line


def error_line(text: str, console: Console = err) -> None:
    """``error: <text>``, the form of every error the command line prints."""
    say(console, ("error: ", "bold red"), text)
