"""A learned policy anchored to a heuristic: the model's choice where its logit beats the logit of
the heuristic's choice by more than a margin, the heuristic's choice otherwise.

    python -m agents.anchor runs/NAME [runs/NAME2 ...] [--margins 0,0.5,1,2,4] [--model model.zip]
                            [--baseline NAME] [--seeds 100-119] [--scenario NAME] [--wait-guards off,2] [--workers 2]

The honest lookahead teacher keeps its base rule's choice unless a departure's estimated gain
beats one standard error; a student distilled from it departs wherever its argmax says so. The
anchor puts the same kind of threshold on the student, in its own units (logits), against the
heuristic the run was selected against. Margin 0 is the model alone; a margin above every logit
gap is the heuristic alone. It is one forward pass and one heuristic pick per decision, both on
the decision state only, so it is as honest and as servable as the model.

The command scores the run's model (`--model`, default model.zip) anchored at each margin on the
run's validation seeds (or `--seeds`, checked like a train config's: never a test seed), by the
run's own selection rule (agents.selection: `setting_result`, `validation_score`). It keeps the
smallest margin listed (0 by default: the model alone) unless another margin's mean gain over it,
paired per validation seed, exceeds one standard error of that mean, the teacher's own test for
leaving its base rule; among the margins that pass, the lowest score (the smaller margin on a
tie). On 20 seeds a plain lowest-score rule chose a margin that won by 0.3 points on validation
and lost 1.2 on the test seeds (docs/research/2026-12-03-anchor.md). It writes
RUN/anchor.json: the baseline, the margins with every margin's score, per-seed objectives and
paired gain, the chosen margin and the model it was chosen for.

`evaluate.py --policies anchored=RUN/model.zip` then evaluates the model with that anchor (and
the bound on WAIT the file records, or else the run's, as `ppo=` does); `agents.export` puts it
in policy.json, and the scoring service applies it (docs/service.md).

`--wait-guards off,2` also chooses the bound on WAIT (envs.decision.candidates.WaitGuard) deployed with
the margin: every margin is scored under each bound listed, the first bound with the smallest
margin is the reference, and the same rule keeps it unless another setting's paired gain beats
one standard error. The file records the bound chosen (`wait_guard`); `anchored=` and
`agents.export --anchor` then apply it instead of the run's own (docs/research/2026-12-03-wait-guard-per-run.md). Without the option the run's own bound is scored and
recorded.

The baseline is the run's best heuristic on its validation seeds (summary.json's `baseline`,
recomputed the way train.py does); a run with several settings (`env_mix`) needs `--baseline`.

Deploying a model where it was not trained: `--scenario NAME` chooses the margin on that
scenario's validation seeds instead (never its test seeds), anchored to its best heuristic there
(among eval.baselines' default list; `--baseline` names another), with the run's bound on WAIT
and nothing else of the run's env options; it writes RUN/anchor-NAME.json, which
`evaluate.py --policies anchored=RUN/anchor-NAME.json` and `agents.export --anchor
RUN/anchor-NAME.json` take. Add `inf` to `--margins` to let the choice fall back to the
heuristic alone where the model does not carry over.

The rule itself (`Anchor`, `anchored_choice`, `anchored_actor`) is agents/anchor_rule.py, and the
readers of the anchor files agents/run_dir.py; this module chooses the margin.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from agents.anchor_rule import Anchor, anchored_actor
from agents.run_dir import anchor_file_name

DEFAULT_MARGINS = (0.0, 0.5, 1.0, 2.0, 4.0)


def _margin_result(task: tuple) -> dict:
    """The model anchored at one margin on one setting's validation seeds (a worker task)."""
    import torch as th

    from agents.policy import load_model
    from agents.selection import Validation, eval_setting, setting_result

    th.set_num_threads(1)
    path, baseline, margin, name, env_kwargs, seeds, best, best_objective = task
    v = Validation(name, env_kwargs, tuple(seeds), eval_setting(env_kwargs), best, best_objective)
    return setting_result(load_model(path, device="cpu"), v, actor=lambda m: anchored_actor(m, Anchor(baseline, margin)),
                          per_seed=True)


def paired_gain(reference: list[dict], other: list[dict]) -> tuple[float, float]:
    """(mean, standard error) over the validation seeds of `other`'s objective minus
    `reference`'s (negative: `other` is better), each `setting_result(..., per_seed=True)` of
    every setting; with several settings, per seed as a share of the setting's best baseline's
    objective (as `validation_score` scores them)."""
    diffs = []
    for r, o in zip(reference, other):
        scale = 1.0 if len(reference) == 1 else r["baseline_objective"]
        diffs += [(b - a) / scale for a, b in zip(r["objectives"], o["objectives"])]
    d = np.asarray(diffs)
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else math.inf


def pick_margin(margins: list[float], results: list[list[dict]], ref: int | None = None) -> tuple[int, list[tuple[float, float]]]:
    """The index of the setting kept (see the module's docstring): the reference (`ref`; by
    default the smallest margin) unless others gain more than one standard error over it, paired
    per seed; then the lowest score among those (the smaller margin on a tie, then the earlier
    listed). Also every setting's `paired_gain` over the reference. `margins[i]` is setting i's
    margin (settings with a bound on WAIT as well repeat margins: `choose_margin`)."""
    from agents.selection import validation_score

    if ref is None:
        ref = min(range(len(margins)), key=margins.__getitem__)
    gains = [paired_gain(results[ref], r) for r in results]
    passing = [i for i, (gain, se) in enumerate(gains) if i != ref and gain < -se]
    if not passing:
        return ref, gains
    return min(passing, key=lambda i: (validation_score(results[i])["score"], margins[i], i)), gains


def parse_margins(text: str) -> list[float]:
    """`0,0.5,1,2,4` (or `inf`): distinct numbers >= 0; ValueError naming --margins."""
    out: list[float] = []
    for part in text.split(","):
        try:
            m = float(part)
        except ValueError:
            raise ValueError(f"--margins: {part.strip()!r} is not a number") from None
        if math.isnan(m) or m < 0:
            raise ValueError(f"--margins: {part.strip()!r} must be >= 0")
        if m in out:
            raise ValueError(f"--margins: {part.strip()!r} is listed twice")
        out.append(m)
    return out


def parse_wait_guards(text: str) -> list:
    """`off,2` (each as --wait-guard takes it: off, K or overdue_factor=K,min_wait_s=S; `;` or `,`
    between them where a guard has its own commas: `off;overdue_factor=2,min_wait_s=0`): distinct
    bounds on WAIT (None: none); ValueError naming --wait-guards."""
    from envs.decision.candidates import wait_guard_of

    parts = text.split(";") if ";" in text else text.split(",")
    out: list = []
    for part in parts:
        try:
            guard = wait_guard_of(part, "--wait-guards")
        except ValueError as e:
            raise ValueError(str(e)) from None
        if guard in out:
            raise ValueError(f"--wait-guards: {part.strip()!r} is listed twice")
        out.append(guard)
    return out


def _guard_text(guard) -> str:
    return "off" if guard is None else str(guard)


def choose_margin(run: Path, margins: list[float], model: str = "model.zip", baseline: str | None = None,
                  seeds: str | None = None, workers: int = 1, log=print, scenario: str | None = None,
                  wait_guards: list | None = None) -> dict:
    """Score `run`'s `model` anchored at each margin on its validation seeds (or `seeds`; with
    `scenario`, on that scenario's), write RUN/anchor.json (RUN/anchor-SCENARIO.json) and return
    its content (see the module's docstring). With `wait_guards` (bounds on WAIT, None for none;
    see `parse_wait_guards`) every margin is scored under each, the first listed with the smallest
    margin being the reference, and the file records the bound chosen with the margin
    (`wait_guard`), which `anchored=` and `agents.export --anchor` then apply; without, the
    run's own bound. ConfigError names a bad run directory, model, baseline, seeds or scenario."""
    from agents.config import train_config_from_dict
    from agents.parallel import run_tasks
    from agents.selection import validation_score, validations
    from envs.cluster.config import ConfigError, read_yaml

    config = run / "config.yaml"
    if not config.is_file():
        raise ConfigError(str(run), "", "not a run directory (no config.yaml)")
    if not (run / model).is_file():
        raise ConfigError(str(run), "--model", f"{model} is not in the run directory")
    data = read_yaml(config)
    if scenario is not None:  # the scenario as evaluate.py runs it, with the run's bound on WAIT
        guard = (data.get("env") or {}).get("wait_guard")
        data = {k: v for k, v in data.items() if k not in ("cluster", "workload", "env_mix", "env", "eval")}
        data.update(scenario=scenario, env={} if guard is None else {"wait_guard": guard})
    if seeds is not None:
        data.setdefault("eval", {})["seeds"] = seeds
    cfg = train_config_from_dict(data, f"{config}{' with --scenario ' + scenario if scenario is not None else ''}"
                                       f"{' with --seeds ' + seeds if seeds is not None else ''}")
    vals = validations(cfg)
    if baseline is None:
        names = sorted({v.baseline for v in vals})
        if len(names) > 1:
            raise ConfigError(str(run), "--baseline", f"the run's settings have different best heuristics ({', '.join(names)}): name one")
        baseline = names[0]
    try:
        Anchor(baseline, 0.0)
    except ValueError as e:
        raise ConfigError(str(run), "--baseline", str(e).split(": ", 1)[1]) from None
    for v in vals:
        log(f"{run}: {v.name}: validation seeds {v.seeds[0]}-{v.seeds[-1]} ({len(v.seeds)}), best baseline '{v.baseline}' "
            f"{v.baseline_objective:.4g}; anchoring {model} to '{baseline}'")
    own = [vals[0].setting.wait_guard]  # the run's own bound (every setting of a run has the config's env)
    guards = own if wait_guards is None else list(wait_guards)
    settings = [(g, m) for g in guards for m in margins]  # the reference: the first bound, the smallest margin
    ref = min(range(len(margins)), key=margins.__getitem__)
    tasks = [(str(run / model), baseline, m, v.name, {**v.env_kwargs, "wait_guard": g}, list(v.seeds), v.baseline,
              v.baseline_objective) for g, m in settings for v in vals]
    t0 = time.perf_counter()
    results = run_tasks(_margin_result, tasks, workers=workers, desc=f"anchor {run.name}")
    n = len(vals)
    per_setting = [results[i * n:(i + 1) * n] for i in range(len(settings))]
    best, gains = pick_margin([m for _, m in settings], per_setting, ref)
    entries = [{"margin": m if math.isfinite(m) else "inf", "wait_guard": None if g is None else g.to_dict(),
                **validation_score(per_setting[i]), "objectives": {r["name"]: r["objectives"] for r in per_setting[i]},
                "gain_vs_smallest": gains[i][0], "gain_se": gains[i][1]} for i, (g, m) in enumerate(settings)]
    chosen_guard = settings[best][0]
    out = {"config": str(config), "model": model, "scenario": scenario, "seeds": {v.name: list(v.seeds) for v in vals},
           **Anchor(baseline, settings[best][1]).to_dict(), "wait_guard": None if chosen_guard is None else chosen_guard.to_dict(),
           "margins": entries, "wall_s": time.perf_counter() - t0}
    (run / anchor_file_name(scenario)).write_text(json.dumps(out, indent=1))
    for i, e in enumerate(entries):
        guard = f"  wait guard {_guard_text(settings[i][0]):<32}" if len(guards) > 1 else ""
        log(f"  margin {e['margin']!s:>4}{guard}  score {e['score']:.4f}  vs baseline {e['rel_diff']:+.1%}  "
            f"paired gain vs the reference {e['gain_vs_smallest']:+.4f} (se {e['gain_se']:.4f}){'   <- chosen' if i == best else ''}")
    return out


def main(argv: list[str] | None = None) -> int:
    from envs.cluster.config import ConfigError

    ap = argparse.ArgumentParser(prog="python -m agents.anchor", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories written by train.py")
    ap.add_argument("--margins", default=",".join(f"{m:g}" for m in DEFAULT_MARGINS), help="logit margins to score (0,0.5,1,2,4)")
    ap.add_argument("--model", default="model.zip", help="the run's model to anchor, relative to the run (model.zip)")
    ap.add_argument("--baseline", default=None, help="the heuristic to anchor to (default: the run's best on its validation seeds)")
    ap.add_argument("--seeds", help="validation seeds (100-119, ...); default: the run's own (or the scenario's)")
    ap.add_argument("--scenario", help="choose the margin for deploying on this scenario, on its validation seeds "
                                       "(writes RUN/anchor-SCENARIO.json)")
    ap.add_argument("--wait-guards", help="also choose the bound on WAIT deployed with the margin, among these "
                                          "(off,2 or off;overdue_factor=K,min_wait_s=S; the first is the reference); "
                                          "default: the run's own")
    ap.add_argument("--workers", type=int, default=1, help="worker processes (1)")
    args = ap.parse_args(argv)
    try:
        margins = parse_margins(args.margins)
        guards = None if args.wait_guards is None else parse_wait_guards(args.wait_guards)
        for run in args.runs:
            out = choose_margin(run, margins, args.model, args.baseline, args.seeds, args.workers, scenario=args.scenario,
                                wait_guards=guards)
            guard = "" if guards is None else f", wait guard {out['wait_guard'] or 'off'}"
            print(f"{run}: margin {out['margin']} over '{out['baseline']}'{guard} -> {run / anchor_file_name(args.scenario)}")
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
