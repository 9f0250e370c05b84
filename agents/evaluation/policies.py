"""The policies an evaluation compares: baselines by name, and `PREFIX=ARG` policies loaded by
`POLICY_LOADERS[PREFIX]` that act through the Gymnasium env.

A `PolicySpec` is checked when parsed (unknown names, missing model files raise `UsageError`
with one line) but nothing is loaded then: a loader imports its framework (torch,
stable-baselines3) only in `load`, once per worker process.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agents.lookahead import LOOKAHEAD_POLICIES
from baselines import BASELINES


class UsageError(ValueError):
    """Bad command-line input; reported as one line, exit code 2."""


Actor = Callable[[Any, dict], int]  # (env, observation) -> action


class PolicyLoader(Protocol):
    """Loads a `PREFIX=ARG` policy that acts through the Gymnasium env."""

    def check(self, arg: str) -> None:
        """Raise UsageError (one line) when `arg` cannot be loaded; cheap, runs before any work."""

    def load(self, arg: str) -> Actor:
        """The actor; called once per worker process."""


def model_actor(model: Any, deterministic: bool = True) -> Actor:
    """An actor from an in-memory MaskablePPO model."""

    def act(env: Any, obs: dict) -> int:
        action, _ = model.predict(obs, action_masks=env.unwrapped.action_masks(), deterministic=deterministic)
        return int(action)

    return act


class MaskablePPOLoader:
    """`ppo=PATH`: a zip saved by sb3-contrib's MaskablePPO, acting deterministically."""

    def check(self, arg: str) -> None:
        path = Path(arg)
        if not path.is_file():
            raise UsageError(f"ppo model file not found: {arg}")
        if not zipfile.is_zipfile(path):
            raise UsageError(f"ppo model file is not a MaskablePPO zip: {arg}")

    def load(self, arg: str) -> Actor:
        from agents.policy import load_model  # torch only where a model is loaded

        return model_actor(load_model(arg, device="cpu"))


POLICY_LOADERS: dict[str, PolicyLoader] = {"ppo": MaskablePPOLoader()}


# Policies that simulate (agents.lookahead): they need the simulator, not only the decision
# state, so they are neither baselines nor env actors. `lookahead-oracle` is a bound.
SIMULATING_POLICIES = LOOKAHEAD_POLICIES
SIMULATING = "simulating"  # PolicySpec.loader of a simulating policy


@dataclass(frozen=True)
class PolicySpec:
    label: str  # as given on the command line; the key in results.json
    loader: str | None  # None for a baseline, SIMULATING for a lookahead, else a key of POLICY_LOADERS
    arg: str  # the baseline or lookahead name, or the loader's argument


def parse_policy(text: str) -> PolicySpec:
    """`NAME` (a baseline, or `lookahead` / `lookahead-oracle`) or `PREFIX=ARG` (a loaded
    policy), checked without loading it."""
    text = text.strip()
    if "=" in text:
        prefix, arg = text.split("=", 1)
        if prefix not in POLICY_LOADERS:
            raise UsageError(f"unknown policy loader '{prefix}=' in '{text}' (known: {', '.join(p + '=PATH' for p in POLICY_LOADERS)})")
        POLICY_LOADERS[prefix].check(arg)
        return PolicySpec(text, prefix, arg)
    if text in SIMULATING_POLICIES:
        return PolicySpec(text, SIMULATING, text)
    if text not in BASELINES:
        known = ", ".join([*BASELINES, *SIMULATING_POLICIES, *(p + "=PATH" for p in POLICY_LOADERS)])
        raise UsageError(f"unknown policy '{text}' (known: {known})")
    return PolicySpec(text, None, text)


def parse_policies(text: str) -> list[PolicySpec]:
    """A comma list of policies: at least one, none twice."""
    specs = [parse_policy(p) for p in text.split(",") if p.strip()]
    if not specs:
        raise UsageError("--policies needs at least one policy")
    labels = [s.label for s in specs]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise UsageError(f"policy '{dup[0]}' is listed twice")
    return specs
