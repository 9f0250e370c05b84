"""The policies an evaluation compares: baselines by name, and `PREFIX=ARG` policies loaded by
`POLICY_LOADERS[PREFIX]` that act through the Gymnasium env.

A `PolicySpec` is checked when parsed (unknown names, missing model files raise `UsageError`
with one line) but nothing is loaded then: a loader imports its framework (torch,
stable-baselines3) only in `load`, once per worker process.

A spec may carry a bound on WAIT (`wait_guard`, envs.decision.candidates.WaitGuard) that the masks of its
episodes apply: `with_wait_guards` sets it, from evaluate.py's --wait-guard or, for a `ppo=`
model, from its run's config.yaml (`env: wait_guard:`), so a model is evaluated with the mask it
was trained with.
"""

from __future__ import annotations

import dataclasses
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agents.lookahead import LOOKAHEAD_POLICIES
from baselines import BASELINES
from envs.decision.candidates import WaitGuard


class UsageError(ValueError):
    """Bad command-line input; reported as one line, exit code 2."""


Actor = Callable[[Any, dict], int]  # (env, observation) -> action


class PolicyLoader(Protocol):
    """Loads a `PREFIX=ARG` policy that acts through the Gymnasium env."""

    def check(self, arg: str) -> None:
        """Raise UsageError (one line) when `arg` cannot be loaded; cheap, runs before any work."""

    def load(self, arg: str) -> Actor:
        """The actor; called once per worker process."""

    # Optional: `wait_guard(arg) -> WaitGuard | None`, the bound on WAIT the policy was trained
    # with (raise UsageError for a bad one); a loader without it has none.


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

    def wait_guard(self, arg: str) -> WaitGuard | None:
        """`env.wait_guard` of the config.yaml of the model's run (runs/NAME/model.zip or
        runs/NAME/checkpoints/*.zip), None when there is none."""
        return run_config_wait_guard(arg)


def run_config_wait_guard(model_path: str | Path) -> WaitGuard | None:
    """The `env: wait_guard:` of the training run a model file belongs to
    (`agents.run_dir.run_config_wait_guard`); UsageError naming the file and field when it is not
    valid."""
    from agents.run_dir import run_config_wait_guard as read

    try:
        return read(model_path)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _named(prefix: str, arg: str, read: Callable[[str], Any]) -> Any:
    """`read(arg)`, its ValueError reported as a UsageError naming `PREFIX=ARG`."""
    try:
        return read(arg)
    except ValueError as e:
        raise UsageError(f"{prefix}={arg}: {e}") from None


class AnchoredLoader(MaskablePPOLoader):
    """`anchored=PATH`: a MaskablePPO zip anchored to a heuristic by the margin its run's
    anchor.json holds for it, or `anchored=RUN/anchor-SCENARIO.json`: the model and margin that
    file names (agents.anchor: `python -m agents.anchor RUN [--scenario NAME]` chooses them); with
    the bound on WAIT the file records as chosen with the margin, or else its run's, as `ppo=`."""

    def check(self, arg: str) -> None:
        model, _ = self.anchor(arg)
        super().check(str(model))

    @staticmethod
    def anchor(arg: str):
        from agents.run_dir import anchored_model

        return _named("anchored", arg, anchored_model)

    def load(self, arg: str) -> Actor:
        from agents.anchor_rule import anchored_actor
        from agents.policy import load_model

        model, anchor = self.anchor(arg)
        return anchored_actor(load_model(str(model), device="cpu"), anchor)

    def wait_guard(self, arg: str) -> WaitGuard | None:
        """The bound on WAIT chosen with the margin (`agents.anchor --wait-guards`), else the run's."""
        from agents.run_dir import deployed_wait_guard

        self.anchor(arg)  # a bad argument fails here, named
        return _named("anchored", arg, deployed_wait_guard)


class LearnedLoader:
    """`learned=NAME`: a shipped model (models/NAME, agents.shipped), or `learned=DIR` a model
    folder (model.zip beside its export), evaluated as it is deployed: with the anchor and the
    bound on WAIT its policy.json records, as the scoring service serves it."""

    @staticmethod
    def deployment(arg: str):
        from agents.shipped import deployment

        return _named("learned", arg, deployment)

    def check(self, arg: str) -> None:
        self.deployment(arg)

    def load(self, arg: str) -> Actor:
        from agents.shipped import load_actor

        return load_actor(arg)

    def wait_guard(self, arg: str) -> WaitGuard | None:
        return self.deployment(arg).wait_guard


POLICY_LOADERS: dict[str, PolicyLoader] = {"ppo": MaskablePPOLoader(), "anchored": AnchoredLoader(), "learned": LearnedLoader()}


# Policies that simulate (agents.lookahead): they need the simulator, not only the decision
# state, so they are neither baselines nor env actors. `lookahead-oracle` is a bound.
SIMULATING_POLICIES = LOOKAHEAD_POLICIES
SIMULATING = "simulating"  # PolicySpec.loader of a simulating policy


@dataclass(frozen=True)
class PolicySpec:
    label: str  # as given on the command line; the key in results.json
    loader: str | None  # None for a baseline, SIMULATING for a lookahead, else a key of POLICY_LOADERS
    arg: str  # the baseline or lookahead name, or the loader's argument
    wait_guard: WaitGuard | None = None  # the bound on WAIT its episodes' masks apply (None: none)


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


_UNSET: Any = object()


def with_wait_guards(specs: list[PolicySpec], wait_guard: WaitGuard | None = _UNSET) -> list[PolicySpec]:
    """The specs with their bound on WAIT: `wait_guard` for every one when given (None: no guard
    for any); otherwise a loaded policy's own (its loader's `wait_guard(arg)`, e.g. a ppo model's
    training config) and none for baselines and lookaheads."""
    out = []
    for s in specs:
        if wait_guard is not _UNSET:
            guard = wait_guard
        elif s.loader in POLICY_LOADERS and hasattr(POLICY_LOADERS[s.loader], "wait_guard"):
            guard = POLICY_LOADERS[s.loader].wait_guard(s.arg)
        else:
            guard = None
        out.append(dataclasses.replace(s, wait_guard=guard))
    return out
