"""The files of a training run directory that a model file is read with: which run a model
belongs to, the bound on WAIT its run config sets, and the anchor files `python -m agents.anchor`
writes there (anchor.json, anchor-SCENARIO.json).

One reader of each, for evaluation (`ppo=`, `anchored=`), export and the margin search alike.
Nothing here imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents.anchor_rule import Anchor

ANCHOR_FILE = "anchor.json"  # the margin chosen on the run's own validation seeds

# Folders of a run directory that hold models too: the checkpoint, every evaluated stage
# (agents.training) and each distillation round's student (agents.distill).
RUN_SUBDIRS = ("checkpoints", "stages", "distill")


def anchor_file_name(scenario: str | None = None) -> str:
    """RUN/anchor.json, or with `scenario` (a margin chosen on another scenario) anchor-SCENARIO.json."""
    return ANCHOR_FILE if scenario is None else f"anchor-{scenario}.json"


def model_run_dir(model_path: str | Path) -> Path | None:
    """The run directory holding the model (runs/NAME/model.zip, or a model in its checkpoints/,
    stages/ or distill/), if any: the nearest of those with a config.yaml."""
    parent = Path(model_path).resolve().parent
    for d in (parent, parent.parent) if parent.name in RUN_SUBDIRS else (parent,):
        if (d / "config.yaml").is_file():
            return d
    return None


def run_config_wait_guard(model_path: str | Path):
    """The `env: wait_guard:` (envs.decision.candidates.WaitGuard) of the training run a model file
    belongs to (`model_run_dir`'s config.yaml); None without one. ValueError naming the file and
    field when it is not valid. The one reader: evaluation and export both take a model's guard here."""
    import yaml

    from envs.decision.candidates import wait_guard_of

    run_dir = model_run_dir(model_path)
    if run_dir is None:
        return None
    config = run_dir / "config.yaml"
    try:
        data = yaml.safe_load(config.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{config}: not valid YAML ({str(e).splitlines()[0]})") from None
    env = data.get("env") if isinstance(data, dict) else None
    try:
        return wait_guard_of(env.get("wait_guard") if isinstance(env, dict) else None, "env.wait_guard")
    except ValueError as e:
        raise ValueError(f"{config}: {e}") from None


def read_anchor(model_path: str | Path, file: str | Path | None = None) -> Anchor:
    """The anchor that `python -m agents.anchor` chose for this model file: its run's
    anchor.json, or `file` (an anchor-SCENARIO.json). ValueError naming the file when there is
    none, or it was chosen for another of the run's models, or a field is bad."""
    path = Path(model_path)
    if file is None:
        run = model_run_dir(path)
        if run is None:
            raise ValueError(f"{model_path}: not in a run directory (no config.yaml beside it), so no {ANCHOR_FILE}")
        file = run / ANCHOR_FILE
        if not file.is_file():
            raise ValueError(f"{file}: not found; choose the margin first: python -m agents.anchor {run}")
    file = Path(file)
    model, anchor = read_anchor_file(file)
    if model.resolve() != path.resolve():
        hint = (f"; run python -m agents.anchor {file.parent} --model {path.resolve().relative_to(file.parent.resolve())}"
                if file.name == ANCHOR_FILE else "")  # the run's own file: the model is in that run
        raise ValueError(f"{file}: the margin was chosen for {model.relative_to(file.parent)}, not {path}{hint}")
    return anchor


def read_anchor_file(file: str | Path) -> tuple[Path, Anchor]:
    """(the model it was chosen for, the anchor) of an anchor file that `python -m agents.anchor`
    wrote in a run directory (anchor.json, anchor-SCENARIO.json). ValueError naming the file."""
    file = Path(file)
    if not file.is_file():
        raise ValueError(f"{file}: not found")
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{file}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{file}: must be a JSON object")
    model = data.get("model")
    if not isinstance(model, str):
        raise ValueError(f"{file}: model: must name the run's model file it was chosen for, got {model!r}")
    return file.parent / model, Anchor.from_dict(data, f"{file}: anchor")


def anchored_model(arg: str | Path) -> tuple[Path, Anchor]:
    """`anchored=`'s and `agents.export --anchor`'s argument: a model file (its run's
    anchor.json, chosen for it) or an anchor file (.json: the model it names). ValueError naming
    the file."""
    path = Path(arg)
    if path.suffix == ".json":
        model, anchor = read_anchor_file(path)
        if not model.is_file():
            raise ValueError(f"{path}: model: {model} is not there")
        return model, anchor
    return path, read_anchor(path)


def read_file_wait_guard(file: str | Path) -> tuple[bool, Any]:
    """(whether the anchor file records a bound on WAIT chosen with its margin, that bound or
    None); files written before --wait-guards existed record none. ValueError naming the file."""
    from envs.decision.candidates import wait_guard_of

    file = Path(file)
    try:
        data = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{file}: cannot be read ({e})") from None
    if not isinstance(data, dict) or "wait_guard" not in data:
        return False, None
    return True, wait_guard_of(data["wait_guard"], f"{file}: wait_guard")


def deployed_wait_guard(arg: str | Path):
    """The bound on WAIT an anchored deployment of `arg` (what `anchored_model` takes) applies:
    the one its anchor file records as chosen with the margin, else the run config's
    (`env: wait_guard:`). ValueError naming the file."""
    model, _ = anchored_model(arg)
    path = Path(arg)
    file = path if path.suffix == ".json" else model_run_dir(path) / ANCHOR_FILE
    recorded, guard = read_file_wait_guard(file)
    return guard if recorded else run_config_wait_guard(model)

