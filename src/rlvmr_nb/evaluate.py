"""Evaluate a policy on a fixed split: Episodes + metrics with confidence intervals → a traceable results file
(docs/method.md, 'Evaluation').

Unlike the official validation (128 random draws with replacement), evaluation iterates over the
split's full, fixed task list in a deterministic order — or a seeded subset of it — once per task,
at temperature 0.4 with sampling. `evaluate_seeds` repeats that list under several sampling seeds and
`write_seed_results` writes each seed and their aggregate.

A policy that a training run made is evaluated with the settings it was trained with (`eval_config_for`): the
prompt it learnt to read and the text it learnt to write come from the run's ``config.json``, so a GRPO run is not
silently scored on RLVMR's meta-think prompt (paper Table 1's baselines write ``<think>``; docs/method.md,
'Evaluation').
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tqdm.auto import tqdm

from .atomic_io import atomic_write_text
from .devices import check_device_spec, place
from .envs import slots
from .envs.alfworld import seeded_subset  # light import; the same nested-subset rule for every env
from .envs.base import TaskSpec
from .envs.registry import get_env
from .records import Episode, write_episodes
from .rollout.generation import EngineConfig, EngineSettings, Generator, make_rollout_generator
from .rollout.loop import RolloutConfig, run_rollouts
from .runs.machine import provenance
from .runs.policy import training_run_settings
from .runs.reporters import check_report_to, report_once
from .scoring.method import MethodConfig
from .scoring.metrics import metric_intervals, summarize
from .scoring.stats import spread
from .settings import build_config, require_positive

RESULTS_PATH = "runs/eval/results.json"
"""Where `rlvmr-nb eval` writes its results file unless told (--out)."""


def _eval_rollout() -> RolloutConfig:
    return RolloutConfig(group_size=1, temperature=0.4, prompt_style="meta_think")


@dataclass
class EvalConfig:
    """What to evaluate and how. The rollout and engine branches are the same classes a `TrainConfig` holds
    (`rollout.RolloutConfig`, `rollout.generation.EngineConfig`), with evaluation's defaults: each task played
    once, at temperature 0.4 (official validation), with the meta-think prompt."""

    seed: int = 0
    """Subset choice and sampling seed."""
    device: str = "auto"
    """Where the policy generates (`devices`): 'auto' (CUDA when available, else CPU), 'cuda', 'cuda:N' or 'cpu'."""
    report_to: tuple[str, ...] = ()
    """Also send the summary to these services: 'wandb', 'trackio' (`runs.reporters`; off by default)."""
    max_tasks: int | None = None
    """Evaluate a seeded subset of this many tasks (None: the whole split, e.g. 140 ALFWorld L0 games)."""
    batch_tasks: int = 8
    """Episodes stepped together (generation is batched across them)."""
    rollout: RolloutConfig = field(default_factory=_eval_rollout)
    """World, level, budgets, prompt style (say the one the policy was trained with) and temperature."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """The rollout engine."""

    def __post_init__(self) -> None:
        if self.report_to:  # imported only when used: the runs package loads torch

            self.report_to = check_report_to(self.report_to)
        self.report_to = tuple(self.report_to)
        require_positive(self, ["batch_tasks"])
        if self.max_tasks is not None:
            require_positive(self, ["max_tasks"])
        if self.rollout.prompt_style is None:
            raise ValueError("EvalConfig.rollout.prompt_style must name the format the policy writes (prompts.STYLES)")
        if self.rollout.group_size != 1:
            raise ValueError(f"evaluation plays each task once per seed (rollout.group_size 1), got "
                             f"{self.rollout.group_size}; several plays: several seeds (evaluate_seeds)")
        check_device_spec(self.device)

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any], source: str = "EvalConfig") -> "EvalConfig":
        """A config from settings named by field (``"temperature"``), dotted path (``"rollout.temperature"``) or as
        branches (``{"rollout": {...}}``), on evaluation's defaults (`settings.build_config`)."""
        return build_config(cls, settings, source=source)

    @property
    def engine_settings(self) -> EngineSettings:
        """Seeded with `seed`; no sleep: nothing else needs the engine's memory between evaluation batches."""
        return self.engine.engine_settings(seed=self.seed, sleeps=False)


RUN_SETTINGS = ("prompt_style", "stop", "max_new_tokens", "max_prompt_tokens")
"""Settings an evaluation takes from the policy's training run and does not let a user change unnoticed: they make
the prompt the policy reads (its format, how much history fits) and the text it may write (where a response stops,
how long it may be). Another value measures the policy on an input it never learnt from: a given value that
differs is refused unless the caller overrides the run (then it is used, with a warning, and recorded)."""

RUN_DEFAULTS = ("env", "level", "max_steps")
"""Settings taken from the run only where the user gave none: the world and level it trained on and its episode
budget T (the official validation plays the training's T). Another value is an ordinary question (the other
levels of paper §2.1, a shorter CPU budget), not a mismatch, so a given one simply wins. The temperature is not
taken: evaluation samples at its own 0.4 (the official validation's), not the training's 1.0."""


def settings_from_run(run: Mapping[str, Any]) -> dict[str, Any]:
    """The evaluation settings a run's flat settings (`runs.config.flat_settings_of`) fix: `RUN_SETTINGS` and
    `RUN_DEFAULTS` that it records, its prompt style decided as the trainer decided it (the one set, else its
    algorithm's: `MethodConfig.prompt_style`). A run file that records neither style nor algorithm fixes no style."""
    taken = {name: run[name] for name in (*RUN_SETTINGS, *RUN_DEFAULTS) if name in run}
    if "prompt_style" in run or "algo" in run:
        algo = run.get("algo", MethodConfig.algo)
        taken["prompt_style"] = run.get("prompt_style") or MethodConfig(algo=algo).prompt_style
    return taken


def _warn_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def eval_config_for(model: str | os.PathLike, given: Mapping[str, Any], *, override_run: bool = False,
                    fallback: Mapping[str, Any] | None = None,
                    warn: Callable[[str], None] = _warn_on_stderr) -> tuple[EvalConfig, dict[str, Any]]:
    """The `EvalConfig` to evaluate `model` with, and the record of where its settings came from.

    Precedence, lowest first: evaluation's defaults, `fallback` (what the caller prefers when no run says, e.g. a
    notebook's CPU budget), the training run's settings (`settings_from_run` of `runs.policy.training_run_settings`:
    a run folder, a checkpoint or an export; a model spec has none), then `given` (the user's; settings named as in
    `EvalConfig.from_dict`). A given value of one of `RUN_SETTINGS` that differs from the run's raises ValueError in
    one line, unless `override_run`: then it is used and `warn` gets one line. The record, for the results file:
    ``{"from": the run's settings file or None, "taken": {setting: value} used from the run, "overridden":
    {setting: {"run": ..., "given": ...}}}``."""
    path, run = training_run_settings(model)
    taken = settings_from_run(run)
    clashes = {k: (taken[k], given[k]) for k in RUN_SETTINGS if k in taken and k in given and given[k] != taken[k]}
    if clashes:
        listed = "; ".join(f"{k} {asked!r} given, the run trained with {ran!r}" for k, (ran, asked) in clashes.items())
        if not override_run:
            raise ValueError(f"{listed} ({path}): leave it out to evaluate with the run's setting, or pass "
                             "--override-run-settings (notebook 03: override_run_settings = True)")
        warn(f"warning: {listed} ({path}): evaluating with the value given (--override-run-settings)")
    config = EvalConfig.from_dict({**(fallback or {}), **taken, **given}, source="options")
    record = {"from": str(path) if path else None, "taken": {k: v for k, v in taken.items() if k not in given},
              "overridden": {k: {"run": ran, "given": asked} for k, (ran, asked) in clashes.items()}}
    return config, record


def eval_generator(model: Any, tokenizer: Any, config: EvalConfig) -> Generator:
    """The rollout engine `config` names, loaded with `model`; pass it to `evaluate_policy` to share one engine
    between several calls (levels), and close it when done. `model` is moved to `config.device` first."""
    place(model, config.device)
    return make_rollout_generator(config.engine.rollout_backend, model, tokenizer, config.engine_settings)


def eval_tasks(config: EvalConfig) -> list[TaskSpec]:
    """The evaluation task list for (env, level): full split in a fixed order, or a seeded subset."""
    tasks = get_env(config.rollout.env).tasks("test", config.rollout.level)
    if config.max_tasks is not None and config.max_tasks < len(tasks):
        tasks = seeded_subset(tasks, config.max_tasks, config.seed)
    return tasks


def evaluate_policy(
    model: Any,
    tokenizer: Any,
    config: EvalConfig,
    tasks: Sequence[TaskSpec] | None = None,
    make_env_slots: Any = None,
    progress: bool = True,
    generator: Generator | None = None,
) -> tuple[list[Episode], dict]:
    """Run one episode per task and return (episodes, metrics summary). `model` is moved to `config.device`.

    `generator`: an engine from `eval_generator` to reuse (left open); None builds `config`'s and closes it."""
    tasks = list(tasks if tasks is not None else eval_tasks(config))
    if not tasks:
        raise ValueError("no evaluation tasks")
    device = place(model, config.device)  # before any env starts: a missing GPU fails fast
    own_generator = generator is None
    if generator is None:
        generator = eval_generator(model, tokenizer, config)
    rollout = config.rollout
    env_slots = make_env_slots() if make_env_slots else slots.rollout_env_slots(
        rollout, min(config.batch_tasks, len(tasks)) * rollout.group_size, on_cuda=device.type == "cuda")
    episodes: list[Episode] = []
    try:
        bar = tqdm(total=len(tasks), desc=f"eval {rollout.env} {rollout.level}", disable=None if progress else True)
        for i in range(0, len(tasks), config.batch_tasks):
            chunk = tasks[i : i + config.batch_tasks]
            episodes += run_rollouts(chunk, env_slots, generator, tokenizer, rollout, seed=config.seed,
                                     group_indices=range(i, i + len(chunk)))
            bar.update(len(chunk))
        bar.close()
    finally:
        if own_generator:
            generator.close()
        if hasattr(env_slots, "close"):
            env_slots.close()
    for ep in episodes:
        ep.info["eval"] = {"level": rollout.level, "temperature": rollout.temperature}
    summary = summarize(episodes)
    if config.report_to:
        report_once(config.report_to, summary, run_name=f"eval-{rollout.env}-{rollout.level}", config=asdict(config))
    return episodes, summary


def evaluate_seeds(
    model: Any,
    tokenizer: Any,
    config: EvalConfig,
    seeds: Sequence[int],
    tasks: Sequence[TaskSpec] | None = None,
    make_env_slots: Any = None,
    progress: bool = True,
    generator: Generator | None = None,
) -> dict[int, tuple[list[Episode], dict]]:
    """`evaluate_policy` once per sampling seed on ONE task list (that of `config.seed`, or `tasks`), so the
    seeds differ only in the policy's samples. Returns ``{seed: (episodes, summary)}`` (`aggregate_seeds`).
    One rollout engine serves every seed (each call seeds its own samples); `generator` as in `evaluate_policy`."""
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one, got {list(seeds)}")
    tasks = list(tasks if tasks is not None else eval_tasks(config))
    engine = generator if generator is not None else eval_generator(model, tokenizer, config)
    try:
        return {seed: evaluate_policy(model, tokenizer, replace(config, seed=seed), tasks, make_env_slots, progress,
                                      generator=engine)
                for seed in seeds}
    finally:
        if generator is None:
            engine.close()


SEED_SPREAD_METRICS = ("success", "invalid", "invalid_malformed", "invalid_non_admissible", "repetitive",
                       "repetitive_consecutive", "episode_length")
"""Scalar metrics whose per-seed values are listed and summarised (mean, std, min, max) across seeds."""


def aggregate_seeds(runs: Mapping[int, tuple[Sequence[Episode], dict]]) -> dict:
    """Several seeds' evaluations as one: metrics over all their episodes, confidence intervals with each
    task's episodes resampled together (`metrics.metric_intervals`), each seed's numbers and their spread."""
    pooled = [ep for episodes, _ in runs.values() for ep in episodes]
    by_seed = {str(seed): {k: summary[k] for k in SEED_SPREAD_METRICS} for seed, (_, summary) in runs.items()}
    return {"metrics": summarize(pooled), "metrics_ci": metric_intervals(pooled), "seeds": list(runs),
            "by_seed": by_seed,
            "seed_spread": {k: spread([summary[k] for _, summary in runs.values()]) for k in SEED_SPREAD_METRICS}}


def write_seed_results(path: str | Path, runs: Mapping[int, tuple[Sequence[Episode], dict]], config: EvalConfig,
                       extra: dict | None = None) -> tuple[Path, dict]:
    """Results of `evaluate_seeds`: with one seed, one ordinary results file; with several, one file per seed
    (``<stem>.seed<k>.json`` with its episodes) and the aggregate (`aggregate_seeds`) at `path`.
    Returns (the path of the file to cite, the aggregate)."""
    path = Path(path)
    aggregate = aggregate_seeds(runs)
    if len(runs) == 1:
        ((seed, (episodes, summary)),) = runs.items()
        return write_results(path, summary, replace(config, seed=seed), episodes, extra,
                             intervals=aggregate["metrics_ci"]), aggregate
    per_seed = {}
    for seed, (episodes, summary) in runs.items():
        seed_path = path.with_name(f"{path.stem}.seed{seed}{path.suffix}")
        per_seed[str(seed)] = write_results(seed_path, summary, replace(config, seed=seed), episodes, extra).name
    doc_extra = {**(extra or {}), **{k: aggregate[k] for k in ("seeds", "by_seed", "seed_spread")},
                 "seed_files": per_seed}
    return write_results(path, aggregate["metrics"], config, extra=doc_extra, intervals=aggregate["metrics_ci"]), aggregate


TABLE_COLUMNS = ("env", "level", "tasks", "episodes", "success [95% CI]", "format-valid", "invalid action",
                 "mean steps")
"""The columns of `summary_table`: success per episode; format-valid = the share of steps whose output parses (1 −
``invalid_malformed``); invalid action = malformed or not admissible (``invalid``, the paper's rate most plausibly;
`scoring.metrics.invalid_action_rates`); mean steps per episode."""


def table_row(rollout: RolloutConfig, episodes: Sequence[Episode], metrics: Mapping[str, Any],
              intervals: Mapping[str, Any] | None = None) -> dict[str, str]:
    """One evaluation (one level, every seed) as the cells of `summary_table`; `intervals`: its ``metrics_ci``
    (none: success without its interval)."""
    success = f"{metrics['success']:.1%}"
    if intervals:
        low, high = intervals["intervals"]["success"]
        success += f" [{low:.1%}, {high:.1%}]"
    cells = (rollout.env, rollout.level, len({ep.task_id for ep in episodes}), metrics["episodes"], success,
             f"{1 - metrics['invalid_malformed']:.1%}", f"{metrics['invalid']:.1%}", f"{metrics['episode_length']:.1f}")
    return dict(zip(TABLE_COLUMNS, map(str, cells)))


def summary_table(rows: Sequence[Mapping[str, str]]) -> str:
    """A few aligned lines a person reads at a glance (the results file holds every metric): a header and one line
    per `table_row`."""
    widths = {c: max(len(c), *(len(row[c]) for row in rows)) for c in TABLE_COLUMNS}
    lines = [dict(zip(TABLE_COLUMNS, TABLE_COLUMNS)), *rows]
    return "\n".join("  ".join(line[c].ljust(widths[c]) for c in TABLE_COLUMNS).rstrip() for line in lines)


def write_results(path: str | Path, summary: dict, config: Any, episodes: Sequence[Episode] | None = None,
                  extra: dict | None = None, intervals: dict | None = None) -> Path:
    """Write a results JSON (metrics + their confidence intervals + config + provenance) and, optionally,
    the episodes beside it.

    ``metrics_ci`` holds `intervals` when given (e.g. a combined file's ``{method: {level: ...}}``),
    else `metrics.metric_intervals` of `episodes` (Wilson for success, bootstrap otherwise; `stats`).
    Both files are replaced atomically (`atomic_io`): a reader polling the results sees the previous
    file or the new one, never a partial one. The episodes are written first, so a results file never
    points at episodes that are not there yet.
    """
    path = Path(path)
    cfg = asdict(config) if hasattr(config, "__dataclass_fields__") else dict(config)
    if intervals is None and episodes is not None:
        intervals = metric_intervals(episodes)
    doc = {"metrics": summary, **({"metrics_ci": intervals} if intervals is not None else {}), "config": cfg,
           "provenance": provenance(cfg.get("seed")), **(extra or {})}
    text = json.dumps(doc, indent=2, default=float)
    if episodes is not None:
        write_episodes(path.with_suffix(".episodes.jsonl"), episodes)
    atomic_write_text(path, text)
    return path
