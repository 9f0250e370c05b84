"""Ship a trained model into the repository: `models/NAME/` (agents.shipped has the layout).

    python -m agents.ship runs/NAME/model.zip --name generalist [--anchor runs/NAME/anchor.json] [--wait-guard K|off]
    python -m agents.ship --sums generalist          # after editing MODEL_CARD.md: SHA256SUMS again

The model is exported (agents.export: policy.onnx and policy.json, with the anchor and bound on
WAIT it is deployed with), model.zip is copied beside them, and SHA256SUMS is written over every
file of the folder. It prints the table of hashes that MODEL_CARD.md states (the card is written
by hand from the measured results; tests/test_shipped_models.py checks that it states them).
A model of another feature schema, or a bad anchor file, is refused before anything is written.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from agents.shipped import CARD_FILE, MODEL_FILE, MODELS_DIR, SUMS_FILE, model_dir, write_sums


def ship(model: str | Path, name: str, anchor: str | None = None, wait_guard: str | None = None,
         models_dir: Path = MODELS_DIR) -> Path:
    """Export `model` into models_dir/NAME (models/NAME) with its deployment settings, copy the
    model beside the export and write SHA256SUMS."""
    from agents.export import export_model

    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"--name {name!r}: a plain folder name under models/")
    out = Path(models_dir) / name
    kwargs = {} if wait_guard is None else {"wait_guard": None if wait_guard == "off" else wait_guard}
    export_model(model, out, anchor=anchor or False, **kwargs)
    shutil.copyfile(model, out / MODEL_FILE)
    write_sums(out)
    return out


def sums_table(directory: Path) -> str:
    """The markdown table of file hashes a MODEL_CARD.md states (every file but the card and SHA256SUMS)."""
    from agents.shipped import read_sums

    rows = [f"| `{f}` | `{d}` |" for f, d in read_sums(directory).items() if f != CARD_FILE]
    return "\n".join(["| file | sha256 |", "|---|---|", *rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agents.ship", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", help="a saved MaskablePPO model, e.g. runs/NAME/model.zip")
    ap.add_argument("--name", help="the folder under models/")
    ap.add_argument("--anchor", default=None, metavar="FILE", help="the anchor file agents.anchor chose for this model (anchor.json)")
    ap.add_argument("--wait-guard", default=None, metavar="K|overdue_factor=K,min_wait_s=S|off",
                    help="the bound on WAIT deployed (default: the anchor file's, else the run config's)")
    ap.add_argument("--sums", metavar="NAME", help="only rewrite models/NAME/SHA256SUMS (after editing the card)")
    args = ap.parse_args(argv)
    try:
        if args.sums:
            directory = model_dir(args.sums)
            write_sums(directory)
        else:
            if not args.model or not args.name:
                ap.error("a model file and --name are needed (or --sums NAME)")
            directory = ship(args.model, args.name, args.anchor, args.wait_guard)
    except (ValueError, FileNotFoundError) as e:
        print(f"python -m agents.ship: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {directory / SUMS_FILE}")
    print(sums_table(directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
