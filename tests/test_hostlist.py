"""Slurm hostlist expansion: padding, ranges, bracket groups, comma lists, and errors."""

import pytest

from envs.cluster.hostlist import expand_hostlist


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("node7", ["node7"]),
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),  # zero padding kept across a digit change
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),  # no padding asked for
        ("n[001-003]", ["n001", "n002", "n003"]),
        ("n[1-2,5,7-8]", ["n1", "n2", "n5", "n7", "n8"]),
        ("gpu[1-2]-ib[0-1]", ["gpu1-ib0", "gpu1-ib1", "gpu2-ib0", "gpu2-ib1"]),
        ("a,b[1-3]", ["a", "b1", "b2", "b3"]),
        ("rack[1-2]-n[01-02],login", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02", "login"]),
        (" h100-[0-1] ", ["h100-0", "h100-1"]),
        ("n[3-3]", ["n3"]),
    ],
)
def test_expands(expr: str, expected: list[str]) -> None:
    assert expand_hostlist(expr) == expected


@pytest.mark.parametrize(
    "expr, message",
    [
        ("node[01-04", "unbalanced '['"),
        ("node01-04]", "unbalanced ']'"),
        ("n[5-3]", "descending range '5-3'"),
        ("n[]", "empty range item"),
        ("n[1,,2]", "empty range item"),
        ("n[a-b]", "bad range 'a-b'"),
        ("n[x]", "bad range item 'x'"),
        ("n[[1]]", "nested '['"),
        ("a,,b", "empty name between commas"),
        ("n[1-3],", "empty name between commas"),
        ("", "empty expression"),
    ],
)
def test_errors(expr: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        expand_hostlist(expr)
