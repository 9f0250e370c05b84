"""The anchor to a heuristic: a learned policy's choice where its logit beats the logit of the
heuristic's choice by more than a margin, the heuristic's choice otherwise.

`Anchor` (baseline, margin) is what anchor.json and policy.json record; `anchored_choice` is the
one rule, which evaluation (`anchored_actor`) and the scoring service apply. Choosing the margin
on a run's validation seeds is `python -m agents.anchor` (agents/anchor.py); reading the anchor
files of a run directory is agents/run_dir.py. Nothing here imports torch or another module of
agents: torch comes in with `policy_logits`, the heuristics with `Anchor` and `anchored_actor`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Anchor:
    """Take the model's choice only where its logit beats the logit of `baseline`'s choice by
    more than `margin` (>= 0; inf: always the baseline)."""

    baseline: str
    margin: float

    def __post_init__(self):
        from baselines import BASELINES

        if self.baseline not in BASELINES:
            raise ValueError(f"anchor.baseline: unknown baseline {self.baseline!r} (known: {', '.join(BASELINES)})")
        m = self.margin
        if isinstance(m, bool) or not isinstance(m, (int, float)) or math.isnan(m) or m < 0:
            raise ValueError(f"anchor.margin: must be a number >= 0 (or inf), got {m!r}")
        object.__setattr__(self, "margin", float(m))

    def to_dict(self) -> dict:
        return {"baseline": self.baseline, "margin": self.margin if math.isfinite(self.margin) else "inf"}

    @classmethod
    def from_dict(cls, data: Any, where: str = "anchor") -> Anchor:
        """From policy.json's or anchor.json's plain form; ValueError naming `where` and the field."""
        if not isinstance(data, dict) or "baseline" not in data or "margin" not in data:
            raise ValueError(f"{where}: must be a mapping with baseline and margin, got {data!r}")
        margin = data["margin"]
        if margin == "inf":
            margin = math.inf
        try:
            return cls(str(data["baseline"]), margin)
        except ValueError as e:
            raise ValueError(f"{where}{str(e)[len('anchor'):]}") from None


def anchored_choice(logits: np.ndarray, mask: np.ndarray, base_choice: int, margin: float) -> int:
    """The one rule: the arg-max of `logits` over the valid candidates (`mask`; the first of
    equals, as MaskablePPO's deterministic predict), unless it is not `base_choice` and its logit
    is no more than `margin` above base_choice's; then base_choice. An invalid base_choice (a
    heuristic never makes one, but a guard may have masked WAIT) leaves the model's choice."""
    valid = np.flatnonzero(mask)
    best = int(valid[np.argmax(logits[valid])])
    if best == base_choice or not mask[base_choice]:
        return best
    return best if logits[best] - logits[base_choice] > margin else int(base_choice)


def policy_logits(model, obs: dict, mask: np.ndarray) -> np.ndarray:
    """A MaskablePPO model's logits for one observation, masked as its distribution masks them."""
    import torch as th

    with th.no_grad():
        tensor, _ = model.policy.obs_to_tensor(obs)
        dist = model.policy.get_distribution(tensor, action_masks=mask)
        return dist.distribution.logits[0].cpu().numpy().astype(np.float64)


def anchored_actor(model, anchor: Anchor):
    """An evaluation actor (env, observation) -> action: `model` anchored to `anchor`'s baseline,
    which picks on the env's own candidate set (envs.gym.env.GpuClusterEnv.cset)."""
    from baselines import make_baseline

    rule = make_baseline(anchor.baseline)

    def act(env: Any, obs: dict) -> int:
        u = env.unwrapped
        mask = u.action_masks()
        return anchored_choice(policy_logits(model, obs, mask), mask, int(rule.select(u.cset.state, u.cset)), anchor.margin)

    return act

