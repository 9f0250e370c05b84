"""Choosing the torch device for training, evaluation and export."""

import torch


def _torch_build() -> str:
    """Describe the installed torch, for error messages: 'torch 2.13.0+cpu, CPU build'."""
    build = "CPU build" if torch.version.cuda is None else f"CUDA {torch.version.cuda} build"
    return f"torch {torch.__version__}, {build}"


def resolve_device(spec: str = "auto") -> torch.device:
    """Turn a ``--device`` value into a ``torch.device``, failing before any work is done.

    ``spec``: "auto" (the current CUDA device when there is one, else the CPU), "cpu",
    "cuda" or "cuda:N". Raises ``ValueError`` for any other value, and for a CUDA request that
    this machine cannot honour, so a run never silently falls back to the CPU.
    """
    name = spec.strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type != "cuda":
        raise ValueError(f"--device {spec!r} is not understood; use auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise ValueError(
            f"--device {spec} requested but no CUDA device is available ({_torch_build()})"
        )
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(
            f"--device {spec} requested but only {count} CUDA device(s) are visible "
            f"(cuda:0..cuda:{count - 1})"
        )
    return device
