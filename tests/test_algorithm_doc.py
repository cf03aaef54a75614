"""Every "spec N" citation in the code names a section of docs/algorithm.md, and every section there is cited.

Citations come in these forms, in comments, docstrings and strings: `spec 14`, `Spec 16`, `spec §5`, `§9` alone,
lists (`spec 9, 10`, `spec 1, §9`, `specs 3 and 4`), ranges (`spec 8-9` is 8 and 9, `spec sections 2-9`), items of a
section's numbered list (`spec 3.4` is item 4 of section 3; `spec 3.1-3.2`), the older `spec/ALGORITHMS.md §5`, and a
citation broken across two lines. Words that merely contain "spec" (inspect, respec, specification, `spec.origin`)
are not citations.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "algorithm.md"
HEADING = re.compile(r"^#{1,3} *([0-9]+)\.", re.M)

# Sections no code can cite, each with its reason. Keep this small: a section the code implements is cited there.
DOC_ONLY = {
    12: "the published method's headline numbers; no code computes them",
}

_NUMBER = r"§?[ \t]*\d+(?:\.\d+)?"
_ITEM = rf"{_NUMBER}(?:[ \t]*-[ \t]*{_NUMBER})?"
_BREAK = r"(?:\n[ \t]*(?:#[ \t]*)?)?"  # the citation goes on at the next line (of a comment or a docstring)
_SEPARATOR = rf"[ \t]*(?:,|\band\b){_BREAK}[ \t]*"
_LIST = rf"{_ITEM}(?:{_SEPARATOR}{_ITEM})*"
CITATION = re.compile(
    rf"\bspecs?\b(?:/ALGORITHMS\.md)?[ \t]*{_BREAK}(?:sections?[ \t]+)?(?P<listed>{_LIST})"
    rf"|(?P<bare>§[ \t]*\d+(?:\.\d+)?(?:[ \t]*-[ \t]*{_NUMBER})?(?:{_SEPARATOR}{_ITEM})*)",
    re.I)


@dataclass(frozen=True)
class Citation:
    """One citation found in a source file: where, its text, the sections and the list items (section, item) named."""

    path: str
    line: int
    text: str
    sections: tuple[int, ...]
    items: tuple[tuple[int, int], ...]

    def where(self) -> str:
        return f"{self.path}:{self.line}: {' '.join(self.text.split())!r}"


def _number(text: str) -> tuple[int, int | None]:
    """`§ 3.4` -> (3, 4); `9` -> (9, None)."""
    section, _, item = text.replace("§", "").strip().partition(".")
    return int(section), int(item) if item else None


def parse(text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """The sections and the list items one citation's list names, in order: `9, 10` -> [9, 10]; `8-9` -> [8, 9];
    `3.1-3.2` -> [3] and items [(3, 1), (3, 2)]; `2, 3.4` -> [2, 3] and [(3, 4)]."""
    sections: list[int] = []
    items: list[tuple[int, int]] = []
    for part in re.split(_SEPARATOR, text.strip(), flags=re.I):
        ends = [_number(end) for end in part.split("-")]
        (first, first_item), (last, last_item) = ends[0], ends[-1]
        if first == last and first_item is not None and last_item is not None:  # items of one section: 3.1-3.2
            items += [(first, i) for i in range(first_item, last_item + 1)]
            sections.append(first)
            continue
        items += [(s, i) for s, i in ends if i is not None]
        sections += list(range(first, last + 1)) if first <= last else [first, last]
    return list(dict.fromkeys(sections)), list(dict.fromkeys(items))


def citations(path: str, source: str) -> Iterator[Citation]:
    """Every citation in one file's text."""
    for m in CITATION.finditer(source):
        sections, items = parse(m.group("listed") or m.group("bare"))
        yield Citation(path, source.count("\n", 0, m.start()) + 1, m.group(0), tuple(sections), tuple(items))


def tracked_sources() -> dict[str, str]:
    """The tracked Python files of the repository (this file left out: its examples are not citations)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "--", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    me = Path(__file__).resolve()
    return {f: (ROOT / f).read_text(encoding="utf-8") for f in out.stdout.splitlines()
            if (ROOT / f).is_file() and (ROOT / f).resolve() != me}


def all_citations(sources: dict[str, str]) -> list[Citation]:
    return [c for path, text in sorted(sources.items()) for c in citations(path, text)]


def sections_of(doc: str) -> dict[int, str]:
    """Section number -> its text (up to the next numbered heading)."""
    marks = list(HEADING.finditer(doc))
    return {int(m.group(1)): doc[m.end():marks[k + 1].start() if k + 1 < len(marks) else len(doc)]
            for k, m in enumerate(marks)}


def unresolved(found: Iterable[Citation], doc: str) -> list[str]:
    """`file:line: text` of each citation naming a section without a heading, or a list item its section lacks."""
    sections = sections_of(doc)
    bad = []
    for c in found:
        missing = [f"section {n}" for n in c.sections if n not in sections]
        missing += [f"item {n}.{i}" for n, i in c.items
                    if n in sections and not re.search(rf"^[ \t]*{i}\. ", sections[n], re.M)]
        if missing:
            bad.append(f"{c.where()} names {', '.join(missing)}")
    return bad


# ---------------------------------------------------------------------------------------------------- the parser

@pytest.mark.parametrize("text, sections, items", [
    ("(spec 14)", [14], []),
    ("Spec 16 through the RPC", [16], []),
    ("the operators of spec §9.", [9], []),
    ("(§9, X1)", [9], []),
    ("M1 (§9): ΔW", [9], []),
    ("spec 9, 10", [9, 10], []),
    ("spec 8-9", [8, 9], []),
    ("spec §5", [5], []),
    ("specs 3 and 4", [3, 4], []),
    ("spec 2-4, 10-11", [2, 3, 4, 10, 11], []),
    ("spec 1, 11, 13, 14, 15", [1, 11, 13, 14, 15], []),
    ("spec §1, §9 notation", [1, 9], []),
    ("spec §8-9", [8, 9], []),
    ("Step t >= 1: spec sections 2-9 in order.", [2, 3, 4, 5, 6, 7, 8, 9], []),
    ("spec 3.4", [3], [(3, 4)]),
    ("spec 3.1-3.2", [3], [(3, 1), (3, 2)]),
    ("Spec 3.5-3.7", [3], [(3, 5), (3, 6), (3, 7)]),
    ("spec 2, 3.4", [2, 3], [(3, 4)]),
    ('(spec 9, "Mixed ranks")', [9], []),
    ("(spec 11, Coverage)", [11], []),
    ("spec 6, default 0.10", [6], []),
    ("spec/ALGORITHMS.md §5, for one", [5], []),
    ("(spec/ALGORITHMS.md section 1: rank-32", [1], []),
    ("rendezvous hashing (populora.placement, spec\n17). The", [17], []),
    ("temperature (spec\n# 16) -> loss", [16], []),
    ("spec 2,\n    10 (a list that goes on)", [2, 10], []),
])
def test_the_parser_reads_every_form_of_citation(text, sections, items):
    found = list(citations("x.py", text))
    assert len(found) == 1, [c.text for c in found]
    assert list(found[0].sections) == sections
    assert list(found[0].items) == items


@pytest.mark.parametrize("text", [
    "inspect 3 modules", "respec 4", "the specification 5", "spec_text 6", "spec.origin", "specs = prompts()",
    "pod_spec(doc)", "the pod spec's containers", 'spec["paths"][0]', "spec: LoadSpec", "for spec in specs:",
    "format(v, spec)", "the spec section it cites",
])
def test_words_that_contain_spec_are_not_citations(text):
    assert list(citations("x.py", text)) == []


def test_the_line_of_a_citation_is_where_it_starts():
    (c,) = citations("a/b.py", 'x = 1\n"""First line,\nthen spec 7: PFSP."""\n')
    assert (c.path, c.line, c.sections) == ("a/b.py", 3, (7,))


def test_a_broken_citation_fails_naming_its_file_and_line():
    doc = "# Title\n\n## 1. One\n\nText.\n\n## 3. Three\n\n1. first\n2. second\n"
    sources = {"pkg/a.py": '"""Fine (spec 1, §3.2)."""\n', "pkg/b.py": "x = 1\n# broken (spec 2-3)\n",
               "pkg/c.py": "# no such item (spec 3.4)\n# no such section (§19)\n"}
    bad = unresolved(all_citations(sources), doc)
    assert len(bad) == 3, bad
    assert bad[0].startswith("pkg/b.py:2: ") and bad[0].endswith("names section 2")
    assert bad[1].startswith("pkg/c.py:1: ") and bad[1].endswith("names item 3.4")
    assert bad[2].startswith("pkg/c.py:2: ") and bad[2].endswith("names section 19")


# ---------------------------------------------------------------------------------------------------- the page

def test_the_page_numbers_its_sections_once_each_in_order():
    numbers = [int(n) for n in HEADING.findall(DOC.read_text(encoding="utf-8"))]
    assert numbers == list(range(1, len(numbers) + 1)), numbers


def test_every_citation_in_the_code_has_its_section():
    bad = unresolved(all_citations(tracked_sources()), DOC.read_text(encoding="utf-8"))
    assert not bad, "cited in the code but not in docs/algorithm.md (add the section, or fix the citation):\n" + \
        "\n".join(bad)


def test_every_section_is_cited_by_the_code_it_describes():
    cited = {n for c in all_citations(tracked_sources()) for n in c.sections}
    sections = set(sections_of(DOC.read_text(encoding="utf-8")))
    uncited = sorted(sections - cited - set(DOC_ONLY))
    assert not uncited, (f"docs/algorithm.md sections {uncited} are cited nowhere: cite them where the code "
                         "implements them, or explain in DOC_ONLY why no code can")
    stale = sorted(set(DOC_ONLY) & cited)
    assert not stale, f"sections {stale} are cited in the code now: remove them from DOC_ONLY"
    assert set(DOC_ONLY) <= sections, f"DOC_ONLY names sections the page does not have: {set(DOC_ONLY) - sections}"
