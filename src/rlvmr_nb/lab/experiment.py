"""The lab experiment, stage by stage: one cold start, RL arms over seeds, evaluation on L0/L1/L2.

Every stage calls the library's public API (`coldstart.build_coldstart_dataset`, `sft.train_sft`,
`trainer.train`, `evaluate.evaluate_policy`) with the lab world (`envs.lab_world`) and the lab policy
(`lab.policy`); nothing about the method is special-cased. Each stage writes its files under the run
folder and is skipped when they exist, so an interrupted run resumes (the trainer itself resumes from
its last checkpoint).

Layout of a run folder::

    coldstart/data/        the tagged expert set (samples.jsonl, trajectories.jsonl, manifest.json)
    coldstart/init/        the freshly initialised policy and its word-level tokenizer
    coldstart/sft/         the cold-start checkpoint every arm starts from
    runs/<algo>-seed<s>/   trainer run folders (metrics.jsonl, episodes.jsonl, ckpt-*)
    eval/<arm>-seed<s>/<level>.json (+ .episodes.jsonl)   evaluation results and episodes
    timing.json            wall and CPU seconds of every stage
"""

from __future__ import annotations

import json
import os
import resource
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from .config import LabConfig
from .layout import COLDSTART_ARM, arm_label, coldstart_dir, eval_path  # noqa: F401  (re-exported)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime


class StageTimer:
    """Wall and CPU seconds per stage, kept in ``timing.json`` (the CPU is shared: wall time alone misleads).

    A stage timed again (a resumed or re-summarised run) adds to what the file holds, so resuming never
    replaces the measured time of finished work by the second it takes to skip it."""

    def __init__(self, path: Path):
        self.path = path
        self.stages: dict[str, dict[str, float]] = json.loads(path.read_text()) if path.is_file() else {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), _cpu_seconds()
        yield
        before = self.stages.get(name, {})
        self.stages[name] = {"wall_s": round(before.get("wall_s", 0.0) + time.perf_counter() - wall, 2),
                             "cpu_s": round(before.get("cpu_s", 0.0) + _cpu_seconds() - cpu, 2)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.stages, indent=2) + "\n")


def run_coldstart(config: LabConfig, out: str | os.PathLike, progress: bool = False) -> Path:
    """Tagged expert set (RuleTeacher) → word vocabulary and fresh policy → SFT (paper §3.3). Returns the
    checkpoint folder; skipped when it exists."""
    from ..coldstart import build_coldstart_dataset, load_coldstart_samples
    from ..models import load_model
    from ..coldstart.sft import SFTConfig, train_sft
    from .policy import LabPolicyConfig, build_lab_policy

    root = Path(out) / "coldstart"
    sft_dir = root / "sft"
    if (sft_dir / "sft_log.jsonl").is_file():
        return sft_dir
    data = build_coldstart_dataset("lab", "L0", config.coldstart_trajectories, seed=0, out_dir=root / "data",
                                   progress=progress)
    init = build_lab_policy(data, root / "init", LabPolicyConfig(layers=config.policy_layers,
                                                                  hidden_size=config.policy_hidden))
    model, tokenizer = load_model(str(init))
    samples = load_coldstart_samples(data, tokenizer)
    sft = SFTConfig(epochs=config.sft_epochs, lr=config.sft_lr, batch_size=config.sft_batch_size,
                    micro_batch_size=config.sft_batch_size, weight_decay=0.0, bf16_autocast=False, max_length=512)
    train_sft(model, tokenizer, samples, sft, out_dir=sft_dir, progress=progress)
    return sft_dir


def train_config(config: LabConfig, out: str | os.PathLike, algo: str, seed: int) -> Any:
    """The `trainer.TrainConfig` of one arm. Every arm uses the meta-think prompt and parser, so GRPO is
    the outcome-only ablation from the same cold start (paper Table 3, 'w/o A^MC') and the arms differ
    in their advantage estimator only."""
    from ..scoring.advantages import preset
    from ..update.reference_loss import LossConfig
    from ..trainer import TrainConfig

    return TrainConfig(
        algo=algo, prompt_style="meta_think", env="lab", level="L0", model=str(coldstart_dir(out)),
        out_dir=str(Path(out) / "runs" / f"{algo}-seed{seed}"), seed=seed, iterations=config.iterations,
        tasks_per_iteration=config.tasks_per_iteration, group_size=config.group_size, max_steps=config.max_steps,
        max_new_tokens=config.max_new_tokens, max_prompt_tokens=None, lr=config.lr, temperature=config.temperature,
        advantage=preset(config.advantage_preset), mini_batch_size=config.mini_batch_size,
        micro_batch_size=config.micro_batch_size, loss=LossConfig(kl_coef=config.kl_coef), bf16_autocast=False,
        save_every=config.iterations, keep_checkpoints=1, progress=False, generation_batch_size=config.tasks_per_iteration * config.group_size,
    )


def training_pool(config: LabConfig) -> list:
    """The layouts every RL arm draws its tasks from (`LabConfig.train_pool`), the same for all arms."""
    from ..envs.lab_world import level_tasks

    pool = level_tasks("train", "L0")
    if config.train_pool > len(pool):
        raise ValueError(f"train_pool {config.train_pool} exceeds the lab's {len(pool)} training layouts")
    return pool[: config.train_pool]


def run_arm(config: LabConfig, out: str | os.PathLike, algo: str, seed: int) -> Path:
    """Train one arm from the cold-start checkpoint (resumes; a finished run returns at once)."""
    from ..runs import read_metrics
    from ..trainer import train

    cfg = train_config(config, out, algo, seed)
    if len(read_metrics(cfg.out_dir)) < config.iterations:
        train(cfg, tasks=training_pool(config))
    return Path(cfg.out_dir)


def eval_config(config: LabConfig, level: str, seed: int) -> Any:
    """The `evaluate.EvalConfig` of one (level, seed): the same seeded task subset for every arm."""
    from ..evaluate import EvalConfig

    return EvalConfig(env="lab", level=level, max_tasks=config.eval_tasks, seed=seed,
                      temperature=config.eval_temperature, max_steps=config.max_steps,
                      max_new_tokens=config.max_new_tokens, max_prompt_tokens=None, prompt_style="meta_think",
                      batch_tasks=config.eval_tasks, generation_batch_size=config.eval_tasks)


def run_evaluation(config: LabConfig, out: str | os.PathLike, arm: str, seed: int, model_dir: Path) -> list[Path]:
    """Evaluate one policy on every level (skipping levels already written)."""
    from ..evaluate import evaluate_policy, write_results
    from ..runs import load_policy

    todo = [level for level in config.levels if not eval_path(out, arm, seed, level).is_file()]
    if todo:
        model, tokenizer, described = load_policy(str(model_dir))
        for level in todo:
            cfg = eval_config(config, level, seed)
            episodes, summary = evaluate_policy(model, tokenizer, cfg, progress=False)
            for ep in episodes:
                ep.info["method"] = arm_label(arm)
            write_results(eval_path(out, arm, seed, level), summary, cfg, episodes,
                          extra={"arm": arm, "seed": seed, "policy": described})
    return [eval_path(out, arm, seed, level) for level in config.levels]


def run_seed(config: LabConfig, out: str | os.PathLike, seed: int, log: Callable[[str], None] = print) -> dict:
    """Everything of one seed after the cold start: the cold start's evaluation, then every arm trained and
    evaluated. Returns the wall and CPU seconds of each stage."""
    timer = StageTimer(Path(out) / f"timing-seed{seed}.json")
    sft_dir = coldstart_dir(out)
    with timer.stage(f"eval {COLDSTART_ARM} seed{seed}"):
        run_evaluation(config, out, COLDSTART_ARM, seed, sft_dir)
    for algo in config.algos:
        with timer.stage(f"train {algo} seed{seed}"):
            run_dir = run_arm(config, out, algo, seed)
        with timer.stage(f"eval {algo} seed{seed}"):
            run_evaluation(config, out, algo, seed, run_dir)
        log(f"{algo} seed {seed}: {run_dir}")
    return timer.stages


def _seed_in_worker(config: dict, out: str, seed: int) -> dict:
    import torch

    torch.set_num_threads(1)  # several workers share the cores
    return run_seed(LabConfig.from_dict(config), out, seed, log=lambda _: None)


def run_lab(config: LabConfig, out: str | os.PathLike, log: Callable[[str], None] = print,
            progress: bool = False) -> dict[str, Any]:
    """The whole experiment: cold start, then per seed the cold start's evaluation and every arm trained
    and evaluated on every level (`run_seed`; `config.workers` seeds at a time), then the summary with
    confidence intervals (`lab.stats.lab_summary`). Timing: ``timing.json`` (wall and CPU seconds)."""
    from ..runs.lock import RunFolderLock
    from ..runs.ownership import refuse_leftover_workers

    out = Path(out)
    with RunFolderLock(out, "lab"):  # one lab run per folder, and none while an earlier run's workers live
        refuse_leftover_workers(out)
        return _run_lab(config, out, log, progress)


def _run_lab(config: LabConfig, out: Path, log: Callable[[str], None], progress: bool) -> dict[str, Any]:
    from ..runs.ownership import start_owned_worker
    from .stats import lab_summary

    out.mkdir(parents=True, exist_ok=True)
    (out / "lab_config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    timer = StageTimer(out / "timing.json")
    with timer.stage("coldstart"):
        sft_dir = run_coldstart(config, out, progress)
    log(f"cold start: {sft_dir}")
    with timer.stage("seeds"):
        if config.workers == 1:
            stages = [run_seed(config, out, seed, log) for seed in config.seeds]
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            context = multiprocessing.get_context("spawn")
            # the workers die with this process (SIGKILL and SIGTERM included) and hold the folder while alive
            with ProcessPoolExecutor(config.workers, mp_context=context, initializer=start_owned_worker,
                                     initargs=(os.getpid(), str(out))) as pool:
                stages = list(pool.map(_seed_in_worker, [config.to_dict()] * len(config.seeds),
                                       [str(out)] * len(config.seeds), config.seeds))
    timing = {**timer.stages, **{k: v for s in stages for k, v in s.items()}}
    summary = lab_summary(config, out)
    summary["timing"] = timing
    (out / "lab_results.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")
    return summary
