"""Training configuration: YAML in configs/train/, validated at start (unknown keys and wrong
types are errors naming the key), overridable from the command line."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.cluster.config import ConfigError, Fields, parse_seeds, read_yaml, resolve_config
from envs.sim.objective import objective_from_dict

PPO_DEFAULTS: dict[str, Any] = {
    "n_steps": 256,
    "batch_size": 512,
    "n_epochs": 4,
    "learning_rate": 3e-4,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "target_kl": None,
}
POLICY_DEFAULTS: dict[str, Any] = {
    "d_model": 64,
    "n_heads": 4,
    "n_layers": 2,
    "encoder_hidden": [128],
    "head_hidden": [64],
    "value_hidden": [64],
}
VEC_ENVS = ("dummy", "subproc", "batched")
ENV_KEYS = {"queue_window", "max_steps", "objective", "speed_model", "max_checkpoint_s", "num_jobs", "wait_guard"}
BC_DEFAULTS: dict[str, Any] = {
    "baseline": "auto",  # a baseline name, or "auto": the best baseline on the validation seeds
    "episodes": 0,  # 0 disables the behaviour-cloning warm start
    "epochs": 10,
    "batch_size": 256,
    "learning_rate": 1e-3,
}
DISTILL_DEFAULTS: dict[str, Any] = {
    "teacher": "auto",  # "lookahead", a baseline name, or "auto": the lookahead where it beats the best heuristic on the validation seeds
    "rounds": 0,  # 0 disables distillation; round 0 follows the teacher, later rounds the student (DAgger)
    "episodes": 8,  # labelled episodes per round
    "beta_decay": 0.5,  # round r follows the teacher's action with probability beta_decay ** r, else the student's
    "temperature": 0.0,  # > 0: soft labels, softmax of the lookahead's estimated gains / this (objective units); 0: its choice (docs/training.md)
    "epochs": 10,
    "batch_size": 256,
    "learning_rate": 1e-3,
    "workers": 2,  # labelling processes (agents.parallel.run_tasks)
    "backend": "local",  # "ray": each labelled episode a Ray task (on the Ray session of a --backend ray run, else Ray started here)
    "lookahead": {},  # the teacher's search (k, preempt_k, samples, horizon_s, ...) where it differs from each scenario's `lookahead:`
    "check_cache": True,  # reuse a teacher check that ran before with the same inputs (agents.distill.check_cache_dir)
}
EVAL_DEFAULTS: dict[str, Any] = {
    "every_timesteps": 50_000,
    "seeds": "auto",  # validation workloads ("auto": the scenario's, else 500-504): never training seeds (>= 1e6) nor test seeds (0-9)
    "baseline": "auto",  # "auto": the best baseline on the validation seeds
    "baselines": ["binpack", "spread", "topology", "sjf", "sect", "easy", "priority", "tiresias"],
}


DEFAULT_VALIDATION_SEEDS = "500-504"


def torch_threads_problem(value: Any) -> str | None:
    """What is wrong with a torch_threads setting ("auto" or an int >= 1), or None."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return f"must be 'auto' or an integer >= 1, got {value!r}"


@dataclass(frozen=True)
class Setting:
    """One setting a run is distilled on and selected on: a name for logs, the env arguments,
    and the validation seeds."""

    name: str
    env_kwargs: dict
    seeds: tuple[int, ...]


@dataclass
class TrainConfig:
    cluster: str = "mixed-64gpu"
    workload: str = "llm-mix"
    scenario: str | None = None  # configs/scenarios/: its cluster, workload, objective, seeds and teacher budget
    seed: int = 0
    device: str = "auto"
    # torch's intra-op threads in the training process: "auto" keeps torch's default (the
    # machine's cores). A CPU update's floating-point sums depend on the thread count, so the
    # same config and seed give the same run only with the same count: train() writes the count
    # it used into the run's config.yaml and version.json.
    torch_threads: int | str = "auto"
    total_timesteps: int = 500_000
    n_envs: int = 8
    checkpoint_every_timesteps: int = 50_000
    normalize_reward: bool = True
    vec_env: str = "dummy"  # "dummy": envs step in this process; "subproc": one worker process per env;
    # "batched": envs.gym.vec.BatchedClusterEnv, all episodes in one call, over vec_workers processes (0: this one)
    vec_workers: int = 0
    # Per-episode overrides of the env arguments (scenario, cluster, workload, ...), given to the
    # rollout episodes round-robin: the policy trains on a mix (clusters of several sizes, or
    # several scenarios for a generalist). Distillation labels episodes of every entry, and model
    # selection scores the mean paired difference against each entry's best heuristic on its
    # validation seeds (`settings()`).
    env_mix: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    ppo: dict = field(default_factory=lambda: dict(PPO_DEFAULTS))
    policy: dict = field(default_factory=lambda: copy.deepcopy(POLICY_DEFAULTS))
    eval: dict = field(default_factory=lambda: copy.deepcopy(EVAL_DEFAULTS))
    bc: dict = field(default_factory=lambda: dict(BC_DEFAULTS))
    distill: dict = field(default_factory=lambda: dict(DISTILL_DEFAULTS))
    source: str = "<defaults>"

    def to_dict(self) -> dict:
        where = {"scenario": self.scenario} if self.scenario else {"cluster": self.cluster, "workload": self.workload}
        return {
            **where, "seed": self.seed, "device": self.device, "torch_threads": self.torch_threads,
            "total_timesteps": self.total_timesteps, "n_envs": self.n_envs,
            "checkpoint_every_timesteps": self.checkpoint_every_timesteps, "normalize_reward": self.normalize_reward,
            "vec_env": self.vec_env, "vec_workers": self.vec_workers, "env_mix": self.env_mix, "env": self.env, "ppo": self.ppo, "policy": self.policy, "eval": self.eval, "bc": self.bc,
            "distill": self.distill,
        }

    def env_kwargs(self) -> dict:
        if self.scenario:
            return {"scenario": self.scenario, **self.env}
        return {"cluster": self.cluster, "workload": self.workload, **self.env}

    def mix_env_kwargs(self, entry: dict) -> dict:
        """The env arguments of one env_mix entry: the config's, overridden by the entry's. An
        entry that names a scenario takes that scenario's cluster and workload, not the config's."""
        base = self.env_kwargs()
        if "scenario" in entry:
            base = {k: v for k, v in base.items() if k not in ("scenario", "cluster", "workload")}
        return {**base, **entry}

    def episode_env_kwargs(self) -> list[dict]:
        """The env arguments of each of the n_envs rollout episodes (env_mix round-robin)."""
        if not self.env_mix:
            return [self.env_kwargs()] * self.n_envs
        return [self.mix_env_kwargs(self.env_mix[i % len(self.env_mix)]) for i in range(self.n_envs)]

    def settings(self) -> list[Setting]:
        """What distillation labels and model selection scores: the config's own setting, or with
        env_mix each distinct entry, in order, with its validation seeds."""
        if not self.env_mix:
            return [Setting(self.scenario or f"{self.cluster}/{self.workload}", self.env_kwargs(), tuple(self.validation_seeds()))]
        out: list[Setting] = []
        for entry in self.env_mix:
            kwargs = self.mix_env_kwargs(entry)
            if any(s.env_kwargs == kwargs for s in out):
                continue
            name = ", ".join(f"{k}={v}" for k, v in entry.items()) or (self.scenario or f"{self.cluster}/{self.workload}")
            out.append(Setting(name, kwargs, tuple(self.validation_seeds(kwargs.get("scenario")))))
        return out

    def validation_seeds(self, scenario: str | None = ...) -> list[int]:
        """The model-selection seeds: eval.seeds, or with "auto" the scenario's validation seeds
        (the config's scenario, or the one given)."""
        if self.eval["seeds"] != "auto":
            return parse_seeds(self.eval["seeds"])
        scenario = self.scenario if scenario is ... else scenario
        if scenario:
            from envs.scenario import load_scenario

            return list(load_scenario(scenario).validation_seeds)
        return parse_seeds(DEFAULT_VALIDATION_SEEDS)

    def dump(self, path: Path) -> None:
        path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


_TOP = {"cluster", "workload", "scenario", "seed", "device", "torch_threads", "total_timesteps", "n_envs", "checkpoint_every_timesteps", "normalize_reward", "vec_env", "vec_workers", "env_mix", "env", "ppo", "policy", "eval", "bc", "distill", "description"}
_PPO_TYPES: dict[str, tuple] = {
    "n_steps": (int,), "batch_size": (int,), "n_epochs": (int,), "learning_rate": (float,), "gamma": (float,),
    "gae_lambda": (float,), "clip_range": (float,), "ent_coef": (float,), "vf_coef": (float,), "max_grad_norm": (float,),
    "target_kl": (float, type(None)),
}
_POLICY_TYPES: dict[str, tuple] = {
    "d_model": (int,), "n_heads": (int,), "n_layers": (int,), "encoder_hidden": (list,), "head_hidden": (list,),
    "value_hidden": (list,), "ffn_dim": (int, type(None)), "dropout": (float,), "packed": (bool,),
}
_BC_TYPES: dict[str, tuple] = {"baseline": (str,), "episodes": (int,), "epochs": (int,), "batch_size": (int,), "learning_rate": (float,)}
_DISTILL_TYPES: dict[str, tuple] = {
    "teacher": (str,), "rounds": (int,), "episodes": (int,), "beta_decay": (float,), "temperature": (float,), "epochs": (int,), "batch_size": (int,),
    "learning_rate": (float,), "workers": (int,), "backend": (str,), "lookahead": (dict,),
    "check_cache": (bool,),
}
_EVAL_TYPES: dict[str, tuple] = {"every_timesteps": (int,), "seeds": (str, int, list), "baseline": (str,), "baselines": (list,)}


def _typed_section(f: Fields, types: dict[str, tuple], defaults: dict) -> dict:
    f.check_keys(set(types))
    out = dict(defaults)
    for key, typ in types.items():
        if key in f.data:
            out[key] = f.get(key, typ if len(typ) > 1 else typ[0])
    return out


def _env_mix(top: Fields, cfg: TrainConfig) -> list[dict]:
    """`env_mix:` checked entry by entry: known keys, no queue window (every episode of a batch
    has the same observation space), and an env that can be made with them."""
    entries = top.get("env_mix", list, [])
    if entries and len(entries) > cfg.n_envs:
        raise top.error("env_mix", f"{len(entries)} entries for {cfg.n_envs} envs (n_envs): some would never run")
    out = []
    from envs.gym.env import GpuClusterEnv

    window = GpuClusterEnv(**cfg.env_kwargs()).queue_window if entries else None
    for i, entry in enumerate(entries):
        f = Fields(entry, top.source, f"env_mix[{i}]")
        f.check_keys((ENV_KEYS | {"scenario", "cluster", "workload"}) - {"queue_window"})
        if "scenario" in f.data and ({"cluster", "workload"} & set(f.data)):
            raise f.error("scenario", "conflicts with cluster and workload in the same entry (the scenario fixes them)")
        try:
            env = GpuClusterEnv(**cfg.mix_env_kwargs(f.data))
        except (ConfigError, ValueError, KeyError) as e:
            raise top.error(f"env_mix[{i}]", str(e)) from None
        if env.queue_window != window:
            raise f.error("scenario", f"its queue window is {env.queue_window}, the config's {window}: every episode of a batch "
                                      "needs the same observation space")
        out.append(dict(f.data))
    return out


def train_config_from_dict(data: dict, source: str) -> TrainConfig:
    top = Fields(data, source, "")
    top.check_keys(_TOP)
    cfg = TrainConfig(source=source)
    cfg.scenario = top.get("scenario", (str, type(None)), None)
    if cfg.scenario is not None:
        for key in ("cluster", "workload"):
            if key in data:
                raise top.error(key, "conflicts with scenario (the scenario fixes its cluster and workload)")
        from envs.scenario import load_scenario

        try:
            sc = load_scenario(cfg.scenario)
        except ConfigError as e:
            raise top.error("scenario", str(e)) from None
        cfg.cluster, cfg.workload = sc.cluster, sc.workload
    cfg.cluster = top.get("cluster", str, cfg.cluster)
    cfg.workload = top.get("workload", str, cfg.workload)
    cfg.seed = top.get("seed", int, cfg.seed, min_value=0)
    cfg.device = top.get("device", str, cfg.device)
    cfg.torch_threads = top.data.get("torch_threads", cfg.torch_threads)
    problem = torch_threads_problem(cfg.torch_threads)
    if problem:
        raise top.error("torch_threads", problem)
    cfg.total_timesteps = top.get("total_timesteps", int, cfg.total_timesteps, min_value=1)
    cfg.n_envs = top.get("n_envs", int, cfg.n_envs, min_value=1)
    cfg.checkpoint_every_timesteps = top.get("checkpoint_every_timesteps", int, cfg.checkpoint_every_timesteps, min_value=1)
    cfg.normalize_reward = top.get("normalize_reward", bool, cfg.normalize_reward)
    cfg.vec_env = top.get("vec_env", str, cfg.vec_env)
    if cfg.vec_env not in VEC_ENVS:
        raise top.error("vec_env", f"{cfg.vec_env!r} is not one of {', '.join(VEC_ENVS)}")
    cfg.vec_workers = top.get("vec_workers", int, cfg.vec_workers, min_value=0)
    if cfg.vec_workers and cfg.vec_env != "batched":
        raise top.error("vec_workers", f"only the batched vec env has workers (vec_env is {cfg.vec_env!r})")
    if cfg.vec_workers > cfg.n_envs:
        raise top.error("vec_workers", f"{cfg.vec_workers} workers for {cfg.n_envs} envs (n_envs): at most one per env")
    env = top.sub("env", {})
    env.check_keys(ENV_KEYS)
    cfg.env = dict(env.data)
    if "objective" in env.data:
        objective_from_dict(env.data["objective"], source, "env.objective")  # errors name the file and field now
    if "wait_guard" in env.data:
        from envs.decision.candidates import wait_guard_of

        try:
            wait_guard_of(env.data["wait_guard"], "env.wait_guard")
        except ValueError as e:  # the message starts with the field's path
            path, _, message = str(e).partition(": ")
            raise ConfigError(source, path, message) from None
    cfg.env_mix = _env_mix(top, cfg)
    cfg.ppo = _typed_section(top.sub("ppo", {}), _PPO_TYPES, PPO_DEFAULTS)
    cfg.policy = _typed_section(top.sub("policy", {}), _POLICY_TYPES, POLICY_DEFAULTS)
    cfg.bc = _typed_section(top.sub("bc", {}), _BC_TYPES, BC_DEFAULTS)
    dist = top.sub("distill", {})
    cfg.distill = _typed_section(dist, _DISTILL_TYPES, DISTILL_DEFAULTS)
    if "lookahead" in dist.data:  # checked as a scenario's is; only the fields given override
        from envs.scenario import lookahead_from_fields

        la = dist.sub("lookahead")
        parsed = lookahead_from_fields(la)
        cfg.distill["lookahead"] = {key: getattr(parsed, key) for key in la.data}
    for key in ("rounds", "episodes", "epochs", "batch_size", "workers"):
        if cfg.distill[key] < (0 if key == "rounds" else 1):
            raise dist.error(key, f"must be >= {0 if key == 'rounds' else 1}, got {cfg.distill[key]}")
    if cfg.distill["backend"] not in ("local", "ray"):
        raise dist.error("backend", f"{cfg.distill['backend']!r} is not one of local, ray")
    if cfg.distill["temperature"] < 0:
        raise dist.error("temperature", f"must be >= 0, got {cfg.distill['temperature']}")
    if not 0.0 <= cfg.distill["beta_decay"] <= 1.0:
        raise dist.error("beta_decay", f"must be in [0, 1], got {cfg.distill['beta_decay']}")
    if cfg.distill["rounds"] > 0 and cfg.bc["episodes"] > 0:
        raise dist.error("rounds", "distillation and bc are two warm starts: set bc.episodes to 0 or distill.rounds to 0")
    teacher = cfg.distill["teacher"]
    from agents.lookahead import LOOKAHEAD_POLICIES
    from baselines import BASELINES

    if teacher in LOOKAHEAD_POLICIES and teacher != "lookahead":
        raise dist.error("teacher", "the oracle sees the future: it is a bound, never a teacher")
    if teacher not in ("auto", "lookahead", *BASELINES):
        raise dist.error("teacher", f"{teacher!r} is not 'auto', 'lookahead' or a baseline ({', '.join(BASELINES)})")
    ev = top.sub("eval", {})
    cfg.eval = _typed_section(ev, _EVAL_TYPES, EVAL_DEFAULTS)
    try:
        seeds = cfg.validation_seeds()
    except ValueError as e:
        raise ev.error("seeds", str(e)) from None
    if any(s >= 1_000_000 for s in seeds):
        raise ev.error("seeds", "evaluation seeds must be < 1,000,000 (training draws its workloads from there)")
    if cfg.eval["seeds"] != "auto":  # "auto" takes a scenario's validation seeds, disjoint from its test seeds
        from envs.scenario import load_scenario

        for name in dict.fromkeys(st.env_kwargs.get("scenario") for st in cfg.settings()):  # what selection scores
            shared = sorted(set(seeds) & set(load_scenario(name).test_seeds)) if name else []
            if shared:
                raise ev.error("seeds", f"shares seeds with scenario {name}'s test seeds: {shared} (selecting on them would make "
                                        "its test results worthless)")
    if cfg.ppo["batch_size"] > cfg.ppo["n_steps"] * cfg.n_envs:
        raise top.error("ppo.batch_size", f"{cfg.ppo['batch_size']} exceeds n_steps x n_envs = {cfg.ppo['n_steps'] * cfg.n_envs}")
    return cfg


def merge_config(base: dict, override: dict) -> dict:
    """`override` over `base`: mappings merge key by key, at every depth; any other value
    (a list, a number, null) replaces the base's."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_config(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def read_train_yaml(path: Path, _chain: tuple[Path, ...] = ()) -> dict:
    """A train config's mapping with its `base:` resolved. `base: NAME` (a config name as
    resolve_config takes it: `distill-default`, `research/distill-default-s8`) or `base: PATH` (a YAML file, relative to this file's folder) names the
    config this one changes: its keys are merged over the base's (merge_config), so a variant
    states only what it varies. Bases may have bases; a cycle is an error naming the chain."""
    data = read_yaml(path)
    if "base" not in data:
        return data
    base_name = data.pop("base")
    if not isinstance(base_name, str) or not base_name:
        raise ConfigError(str(path), "base", f"must be a train config's name or a YAML path, got {base_name!r}")
    local = path.parent / base_name
    try:
        base_path = resolve_config(local if local.suffix in (".yaml", ".yml") else base_name, "train")
    except ConfigError as e:
        raise ConfigError(str(path), "base", str(e)) from None
    chain = _chain + (path.resolve(),)
    if base_path.resolve() in chain:
        raise ConfigError(str(path), "base", "a cycle: " + " -> ".join(str(p) for p in chain + (base_path.resolve(),)))
    return merge_config(read_train_yaml(base_path, chain), data)


def load_train_config(name_or_path: str | Path) -> TrainConfig:
    path = resolve_config(name_or_path, "train")
    return train_config_from_dict(read_train_yaml(path), str(path))


__all__ = ["ConfigError", "Setting", "TrainConfig", "load_train_config", "merge_config", "parse_seeds", "read_train_yaml",
           "train_config_from_dict"]
