"""The trained policies shipped in the repository's `models/` folder, found by name.

Each shipped model is a folder `models/NAME/` holding:

    model.zip       the MaskablePPO model (agents.policy.load_model)
    policy.onnx     its export, and
    policy.json     the export's metadata (agents.policy_file), with the settings it is deployed
                    with: the bound on WAIT (`wait_guard`) and the anchor to a heuristic (`anchor`)
    MODEL_CARD.md   what it was trained on, the exact command and commit, its measured results,
                    where it must not be used
    SHA256SUMS      the sha256 of every other file of the folder, in `sha256sum` format

`model_dir("generalist")` is `models/generalist`; a path to a folder that holds policy.json is
taken as it is, so every command that takes a model name also takes a folder. Nothing here
imports torch: the scoring service resolves names with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from agents.policy_file import sha256_file

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
SUMS_FILE = "SHA256SUMS"
MODEL_FILE = "model.zip"
CARD_FILE = "MODEL_CARD.md"


class ModelNotFound(ValueError):
    """A name that is neither a shipped model nor a model folder; the message lists the known names."""


def shipped_models() -> list[str]:
    """The names of the models under models/, sorted."""
    if not MODELS_DIR.is_dir():
        return []
    return sorted(p.name for p in MODELS_DIR.iterdir() if (p / "policy.json").is_file())


def model_dir(name_or_path: str | Path) -> Path:
    """The folder of a shipped model by name (`generalist`), or a folder path that holds policy.json."""
    path = Path(name_or_path)
    if (path / "policy.json").is_file():
        return path
    text = str(name_or_path)
    if "/" not in text and "\\" not in text and text and (MODELS_DIR / text / "policy.json").is_file():
        return MODELS_DIR / text
    known = ", ".join(shipped_models()) or "none"
    raise ModelNotFound(f"{text!r} is neither a shipped model (known: {known}) nor a folder holding policy.json")


def read_sums(directory: str | Path) -> dict[str, str]:
    """SHA256SUMS of a model folder as {file name: sha256}; ValueError naming the file and line
    when a line is not `<64 hex digits>  <name>`."""
    path = Path(directory) / SUMS_FILE
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name or "/" in name:
            raise ValueError(f"{path}:{n}: not '<sha256>  <file name>': {line!r}")
        out[name] = digest
    return out


def verify(directory: str | Path) -> list[str]:
    """The problems of a model folder's files against its SHA256SUMS (empty: every listed file is
    there with the recorded hash, and every file but SHA256SUMS is listed)."""
    directory = Path(directory)
    try:
        sums = read_sums(directory)
    except (OSError, ValueError) as e:
        return [str(e)]
    problems = []
    for name, digest in sorted(sums.items()):
        f = directory / name
        if not f.is_file():
            problems.append(f"{f}: listed in {SUMS_FILE} but missing")
        elif sha256_file(f) != digest:
            problems.append(f"{f}: sha256 differs from {SUMS_FILE}")
    for f in sorted(directory.iterdir()):
        if f.is_file() and f.name != SUMS_FILE and f.name not in sums:
            problems.append(f"{f}: not listed in {SUMS_FILE}")
    return problems


def write_sums(directory: str | Path) -> dict[str, str]:
    """Write SHA256SUMS over every other file of a model folder; returns what it wrote."""
    directory = Path(directory)
    sums = {f.name: sha256_file(f) for f in sorted(directory.iterdir()) if f.is_file() and f.name != SUMS_FILE}
    (directory / SUMS_FILE).write_text("".join(f"{d}  {n}\n" for n, d in sums.items()))
    return sums


class Deployment(NamedTuple):
    """A model folder as it is deployed: what policy.json records beside the model."""

    model: Path  # model.zip
    anchor: Any  # agents.anchor_rule.Anchor or None
    wait_guard: Any  # envs.decision.candidates.WaitGuard or None
    clusters: list[str] | None  # the clusters it is deployed on (None: all); elsewhere its heuristic alone


def deployment(name_or_path: str | Path) -> Deployment:
    """The settings a model folder's policy.json records, which the scoring service applies too.
    Checks the folder as the service does (agents.policy_file.load_policy_metadata: feature
    schema, names, the ONNX file's hash); ValueError naming the file or field otherwise."""
    from agents.policy_file import load_policy_metadata, policy_anchor, policy_clusters, policy_wait_guard

    directory = model_dir(name_or_path)
    meta = load_policy_metadata(directory)
    model = directory / MODEL_FILE
    if not model.is_file():
        raise ValueError(f"{model}: not found (a model folder holds {MODEL_FILE} beside policy.json)")
    return Deployment(model, policy_anchor(meta), policy_wait_guard(meta), policy_clusters(meta))


def load_actor(name_or_path: str | Path, device: str = "cpu"):
    """A shipped model (or a model folder) as an actor `(env, observation) -> action` over the
    Gymnasium env, deployed as its policy.json says: its anchor to a heuristic applied to the
    model's logits, and on a cluster it is not deployed on (policy.json's `clusters`) the anchor's
    baseline alone (`sect` without an anchor). The bound on WAIT is part of the env's mask: make
    the env with `wait_guard=deployment(name).wait_guard`. Imports torch.

        env = gym.make("gangsched/GpuCluster-v0", scenario="slo-preempt", wait_guard=deployment("generalist").wait_guard)
        act = load_actor("generalist")
        obs, _ = env.reset(seed=0); obs, reward, done, truncated, info = env.step(act(env, obs))
    """
    from agents.anchor_rule import anchored_actor
    from agents.policy import load_model
    from baselines import make_baseline

    d = deployment(name_or_path)
    model = load_model(str(d.model), device=device)
    if d.anchor is not None:
        learned = anchored_actor(model, d.anchor)
    else:
        def learned(env, obs):
            return int(model.predict(obs, action_masks=env.unwrapped.action_masks(), deterministic=True)[0])
    if d.clusters is None:
        return learned
    fallback = make_baseline(d.anchor.baseline if d.anchor is not None else "sect")

    def act(env, obs):
        u = env.unwrapped
        if u.cluster.name in d.clusters:
            return learned(env, obs)
        return int(fallback.select(u.cset.state, u.cset))

    return act
