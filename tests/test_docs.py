"""The user docs: every relative link in README.md and docs/**/*.md points to a file that exists,
and a link to a heading (`file.md#anchor`, `#anchor`) to a heading that exists in that file.

Links are Markdown's inline `[text](target)` and `![alt](target)`, outside fenced code blocks
and inline code; `http(s)://` and `mailto:` targets are not checked. Anchors are GitHub's: the
heading lower-cased, every character but letters, digits, spaces, `-` and `_` dropped, spaces
made `-`, and `-1`, `-2`, ... for repeated headings.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def doc_files(root: Path) -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line with inline code removed) for every line outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, re.sub(r"`[^`]*`", "", line)))
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link outside code."""
    return [(n, m.group(1)) for n, line in prose_lines(text) for m in LINK.finditer(line)]


def slug(heading: str) -> str:
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """GitHub's anchors of every heading of a Markdown text (code blocks skipped)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(re.sub(r"`", "", text)):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f"{base}-{k}")
    return out


def broken_links(root: Path) -> list[str]:
    """'FILE:LINE: target (why)' for every relative link that does not resolve."""
    bad = []
    for doc in doc_files(root):
        text = doc.read_text()
        for n, target in links(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            where = f"{doc.relative_to(root)}:{n}: {target}"
            if not dest.exists():
                bad.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                bad.append(f"{where} (no heading #{anchor} in {dest.relative_to(root)})")
    return bad


def test_every_relative_link_in_the_docs_resolves() -> None:
    assert len(doc_files(ROOT)) > 10
    assert sum(len(links(d.read_text())) for d in doc_files(ROOT)) > 50  # the scan finds links at all
    bad = broken_links(ROOT)
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_the_check_finds_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "sub" / "page.md").write_text("# A page: `code` here\n\n## Twice\n\n## Twice\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/sub/page.md) [ok](docs/sub/page.md#a-page-code-here) [ok](docs/sub/page.md#twice-1)\n"
        "[web](https://example.com/x.md) `[in code](nowhere.md)`\n"
        "```\n[in a fence](nowhere.md)\n```\n"
        "[gone](docs/gone.md) ![img](docs/pic.png) [bad anchor](docs/sub/page.md#nope) [self](#nope)\n")
    bad = broken_links(tmp_path)
    assert bad == [
        "README.md:6: docs/gone.md (no such file)",
        "README.md:6: docs/pic.png (no such file)",
        "README.md:6: docs/sub/page.md#nope (no heading #nope in docs/sub/page.md)",
        "README.md:6: #nope (no heading #nope in README.md)",
    ], bad
