"""One training run as train.py makes it and as every Ray Tune trial (agents.tuning) makes it:
the command line's overrides of the train config, agents.training's `train`, then the serving
export of the best model (agents.export). Importing this module imports neither torch nor
stable-baselines3: `train_and_export` brings them in.
"""

from __future__ import annotations

from pathlib import Path

from envs.cluster.config import ConfigError


class ExportError(RuntimeError):
    """The run is trained and its model saved, but the serving export failed."""


def apply_overrides(cfg, *, device: str | None = None, seed: int | None = None, total_timesteps: int | None = None,
                    torch_threads: int | None = None):
    """The command line's overrides of a train config (also each Ray Tune trial's)."""
    if device:
        cfg.device = device
    if torch_threads is not None:
        if torch_threads < 1:
            raise ConfigError("--torch-threads", "", f"must be >= 1, got {torch_threads}")
        cfg.torch_threads = torch_threads
    if seed is not None:
        cfg.seed = seed
    if total_timesteps is not None:
        if total_timesteps < 1:
            raise ConfigError("--total-timesteps", "", "must be >= 1")
        cfg.total_timesteps = total_timesteps
    return cfg


def train_and_export(cfg, out: Path, *, resume: bool = False, progress_bar: bool = True, log=print) -> dict:
    """One run, as train.py makes it and as every Ray Tune trial makes it: agents.training's
    `train` into `out`, then the serving files of its best model into out/export (policy.onnx,
    policy.json; docs/export.md). Returns train's summary; ExportError when the export fails."""
    from agents.export import export_model
    from agents.training import train

    summary = train(cfg, out, resume=resume, progress_bar=progress_bar, log=log)
    log(f"trained {summary['timesteps']} steps in {summary['wall_s']:.0f} s ({summary['env_steps_per_s']:.0f} env steps/s) on {summary['device']}")
    log(f"best validation objective {summary['best_validation_objective']:.3f} vs {summary['baseline']} {summary['baseline_objective']:.3f}")
    for key in ("model", "last_model", "config", "tensorboard", "checkpoint"):
        log(f"  {key:11s} {summary[key]}")
    export_dir = out / "export"
    try:
        export_model(summary["model"], export_dir)
    except (ValueError, RuntimeError, ImportError, OSError) as e:
        raise ExportError(f"the model is saved, but exporting it to {export_dir} failed: {e}") from e
    log(f"  {'export':11s} {export_dir} (policy.onnx, policy.json)")
    return summary

