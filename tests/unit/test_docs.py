"""The docs hold together: every link between them resolves (file and heading), every repository path
they name in backticks exists, every stored benchmark result they cite is in scripts/results, every
setting has its description, and docs/monitoring/README.md lists exactly the metrics gtidsnap exposes.

(The README's size is the layout's rule: tests/unit/test_layout.py.)"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gtidsnap.config.settings import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "scripts" / "results"
DOCS = sorted([ROOT / "README.md", ROOT / "spark" / "README.md", *(ROOT / "docs").rglob("*.md")])
SCRIPTS = sorted([*ROOT.glob("scripts/*.py"), *ROOT.glob("scripts/bench_lib/*.py")])

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.MULTILINE)
FENCE = re.compile(r"^\s*```.*?^\s*```", re.MULTILINE | re.DOTALL)
# A repository path in backticks: a top folder of the repo, then no placeholder or wildcard.
REPO_PATH = re.compile(r"`((?:gtidsnap|docs|scripts|spark|tests|docker|lock)/[\w./-]*\w)`")
# A stored result: ``bench-s30-dbz-1m.*``, ``scripts/results/merge-dv-s29-*``, ``stream-ab-s33`` (its
# files, whatever their extension), ``stream-ab-delta-decoders-s40.md``; never a template (``<label>``).
CITED_RESULT = re.compile(
    r"(?<![\w./-])(?:scripts/results/)?((?:bench|stream-ab|merge-dv|stream-memory)-[a-z0-9][a-z0-9._*-]*[a-z0-9*])"
)


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def prose(path: Path) -> str:
    """A doc's text without its fenced code (a sample's ``[...]`` is no link)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def anchors(path: Path) -> set[str]:
    """The heading anchors GitHub makes: lower case, punctuation dropped, spaces as hyphens, a repeat
    numbered."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for title in HEADING.findall(prose(path)):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


@pytest.mark.parametrize("doc", DOCS, ids=relative)
def test_links_between_the_docs_resolve(doc: Path) -> None:
    broken = []
    for target in LINK.findall(prose(doc)):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        linked = (doc.parent / file).resolve() if file else doc
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no such heading in {relative(linked)})")
    assert not broken, f"{relative(doc)} links to what is not there: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=relative)
def test_the_paths_the_docs_name_exist(doc: Path) -> None:
    missing = sorted(
        {p for p in REPO_PATH.findall(doc.read_text(encoding="utf-8")) if not (ROOT / p).exists()}
    )
    assert not missing, f"{relative(doc)} names paths that do not exist: {missing}"


def docstrings(path: Path) -> str:
    """A script's docstrings (module, classes, functions): what it says of itself."""
    nodes = ast.walk(ast.parse(path.read_text(encoding="utf-8")))
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return "\n".join(d for n in nodes if isinstance(n, kinds) and (d := ast.get_docstring(n)))


def cited_results() -> Iterator[tuple[str, str]]:
    """(where, glob) for every result cited by the docs and the scripts' docstrings."""
    texts = [(relative(p), p.read_text(encoding="utf-8")) for p in DOCS]
    texts += [(relative(p), docstrings(p)) for p in SCRIPTS]
    for where, text in texts:
        for name in CITED_RESULT.findall(text):
            has_extension = name.endswith("*") or re.search(r"\.(json|md|png)$", name)
            yield where, name if has_extension else f"{name}.*"


def test_the_docs_cite_results_that_are_kept() -> None:
    cited = list(cited_results())
    assert len(cited) > 20, "the citation pattern no longer finds the benchmarks' runs"
    missing = sorted({f"{where}: {glob}" for where, glob in cited if not any(RESULTS.glob(glob))})
    assert not missing, f"cited results missing from scripts/results: {missing}"


def test_every_setting_says_what_it_is() -> None:
    """The README shows a sample; every setting's meaning is its description in config/settings.py."""
    bare = [
        f"{name}.{key}"
        for name, section in SECTIONS.items()
        for key, field in section.model_fields.items()
        if not field.description
    ]
    assert not bare, f"settings without a description in gtidsnap/config/settings.py: {bare}"


def test_the_monitoring_page_lists_exactly_the_metrics() -> None:
    from gtidsnap.observe.metrics import COUNTERS, GAUGES, HISTOGRAMS, METRIC_SAMPLE_NAMES

    page = (ROOT / "docs" / "monitoring" / "README.md").read_text(encoding="utf-8")
    exposed = {*GAUGES, *(f"{c}_total" for c in COUNTERS), *HISTOGRAMS}
    named = set(re.findall(r"\bgtidsnap_[a-z0-9_]+", page))
    assert exposed <= named, f"docs/monitoring/README.md lacks {sorted(exposed - named)}"
    unknown = named - exposed - METRIC_SAMPLE_NAMES
    assert not unknown, f"docs/monitoring/README.md names metrics gtidsnap does not expose: {sorted(unknown)}"
