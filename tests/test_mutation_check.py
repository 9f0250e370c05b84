"""tests/mutation.py's verdict on a group's result: a survivor that is not listed with its reason
fails, a listed one (matched by module, function and changed line, whatever mutmut's running
number) passes, and a score under the group's minimum fails. The mutmut runs themselves are
`make mutation` (docs/testing.md)."""

from __future__ import annotations

import json

from tests.mutation import GROUPS, SURVIVORS, _function, check

SURVIVOR = {"module": "baselines/easy.py", "function": "baselines.easy.x_reservation", "change": '- a >= b / + a > b'}


def result(*survivors, score=0.95):
    return {"modules": {}, "survivors": list(survivors), "score": score, "seconds": 1.0}


def test_a_listed_survivor_passes_and_an_unlisted_one_fails():
    known = {"g": {"min_score": 0.9, "survivors": [{**SURVIVOR, "reason": "equivalent"}]}}
    assert check("g", result(SURVIVOR), known) == []
    other = {**SURVIVOR, "change": "- a + b / + a - b"}
    problems = check("g", result(SURVIVOR, other), known)
    assert len(problems) == 1 and "new surviving mutant in baselines/easy.py" in problems[0] and "a - b" in problems[0]
    assert check("g", result(other), {}) != []  # nothing listed for a group: every survivor is new


def test_a_score_under_the_minimum_fails():
    known = {"g": {"min_score": 0.9, "survivors": []}}
    assert check("g", result(score=0.9), known) == []
    assert "below the group's minimum" in check("g", result(score=0.89), known)[0]


def test_a_survivor_is_named_without_mutmuts_running_number():
    assert _function("baselines.easy.x_reservation__mutmut_12") == "baselines.easy.x_reservation"
    assert _function("envs.decision.placement.xǁCandidateǁgpus__mutmut_3") == "envs.decision.placement.xǁCandidateǁgpus"


def test_the_recorded_survivors_are_reviewed_and_belong_to_known_groups():
    known = json.loads(SURVIVORS.read_text())
    assert set(known) <= set(GROUPS)
    for group, entry in known.items():
        assert 0.0 < entry["min_score"] <= 1.0
        for s in entry["survivors"]:
            assert s["reason"] and s["reason"] != "unreviewed", (group, s)
