"""Slurm-style hostlist expressions: `node[01-04,07]`, `s[0-2]`, `gpu[1-2]-ib[0-1]`, `a,b[1-3]`."""

from __future__ import annotations

import re

_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def _split_top_level(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, current = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"hostlist '{expr}': nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"hostlist '{expr}': unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise ValueError(f"hostlist '{expr}': unbalanced '['")
    parts.append("".join(current))
    parts = [p.strip() for p in parts]
    if not all(parts):
        raise ValueError(f"hostlist '{expr}': empty name between commas")
    return parts


def _expand_range(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"hostlist '{expr}': empty range item in '[{body}]'")
        if "-" in item:
            lo, _, hi = item.partition("-")
            if not (lo.isdigit() and hi.isdigit()):
                raise ValueError(f"hostlist '{expr}': bad range '{item}'")
            if int(hi) < int(lo):
                raise ValueError(f"hostlist '{expr}': descending range '{item}'")
            width = len(lo) if lo.startswith("0") or len(lo) == len(hi) else 0
            out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
        else:
            if not item.isdigit():
                raise ValueError(f"hostlist '{expr}': bad range item '{item}'")
            out.append(item)
    return out


def _expand_one(pattern: str, expr: str) -> list[str]:
    m = _BRACKET.search(pattern)
    if m is None:
        if "[" in pattern or "]" in pattern:
            raise ValueError(f"hostlist '{expr}': unbalanced brackets in '{pattern}'")
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end() :]
    return [head + v + rest for v in _expand_range(m.group(1), expr) for rest in _expand_one(tail, expr)]


def expand_hostlist(expr: str) -> list[str]:
    """Expand a hostlist expression into names, in order, keeping zero padding."""
    if not isinstance(expr, str) or not expr.strip():
        raise ValueError(f"hostlist {expr!r}: empty expression")
    names: list[str] = []
    for part in _split_top_level(expr.strip()):
        names.extend(_expand_one(part, expr))
    return names
