"""The lab experiment, stage by stage: one cold start, RL arms over seeds, evaluation on L0/L1/L2.

Every stage calls the library's public API (`coldstart.build_coldstart_dataset`, `sft.train_sft`,
`trainer.train`, `evaluate.evaluate_policy`) with the lab world (`envs.lab_world`) and the lab policy
(`lab.policy`); nothing about the method is special-cased. Each stage writes its files under the run
folder and is skipped when they exist, so an interrupted run resumes (the trainer itself resumes from
its newest checkpoint, taken every `ARM_CHECKPOINT_EVERY` iterations).

Layout of a run folder::
    coldstart/data/        the tagged expert set (samples.jsonl, trajectories.jsonl, manifest.json)
    coldstart/init/        the freshly initialised policy and its word-level tokenizer
    coldstart/sft/         the cold-start checkpoint every arm starts from
    runs/<algo>-seed<s>/   trainer run folders (metrics.jsonl, episodes.jsonl, ckpt-*)
    eval/<arm>-seed<s>/<level>.json (+ .episodes.jsonl)   evaluation results and episodes
    timing.json            wall and CPU seconds of every stage
    sessions.jsonl         one line per start of the run: commit, machine, what was finished before it
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import resource
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from ..atomic_io import atomic_write_text
from ..coldstart import build_coldstart_dataset, load_coldstart_samples, read_samples
from ..coldstart.lab_dagger import dagger_samples, draw_samples
from ..coldstart.sft import SFTConfig, train_sft
from ..envs.alfworld_data import rlvmr_cache_dir
from ..envs.lab_world import ENV_NAME
from ..evaluate import EvalConfig, evaluate_policy, write_results
from ..evaluate import eval_tasks as eval_task_list
from ..models import load_model
from ..rollout.generation import EngineConfig
from ..rollout.tags import META_TAGS
from ..runs.checkpoints import checkpoint_path, is_checkpoint
from ..runs.lock import RunFolderLock
from ..runs.machine import provenance, same_machine
from ..runs.ownership import refuse_leftover_workers, start_owned_worker
from ..runs.policy import load_policy
from ..scoring.metrics import summarize
from ..train_config import TrainConfig
from ..trainer import train
from .config import LabConfig
from .layout import (  # noqa: F401
    COLDSTART_ARM,
    HELDIN,
    REFERENCE_LEVEL,
    REFERENCE_SEED,
    arm_label,
    coldstart_dir,
    eval_path,  # (re-exported)
    lab_tasks,  # (re-exported)
)
from .policy import LabPolicyConfig, build_lab_policy
from .reference import reference_result
from .report import preregistered_markdown
from .stats import lab_summary


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


COLDSTART_FIELDS: tuple[str, ...] = ("coldstart_trajectories", "policy_layers", "policy_hidden", "sft_epochs", "sft_lr",
                                     "sft_batch_size", "sft_prompt_loss_weight", "coldstart_dagger_rounds")
"""The `LabConfig` fields a cold start depends on (its cache key)."""
DAGGER_FIELDS: tuple[str, ...] = ("max_steps", "max_new_tokens", "temperature")
"""The training settings (`LabConfig.train`'s rollout) a DAgger round's play reads as well: part of the key only when
`coldstart_dagger_rounds` > 0, so a plain cold start stays shared by configurations that differ in them."""
COLDSTART_SOURCES: tuple[str, ...] = ("envs/lab_world.py", "envs/lab_expert.py", "envs/lab_record.py",
                                      "envs/rooms.py",
                                      "rollout/prompts/families.py", "rollout/prompts/memory.py",
                                      "rollout/prompts/render.py", "rollout/prompts/budget.py",
                                      "coldstart/lab_world_rules.py", "coldstart/phrasing.py", "coldstart/mistakes.py",
                                      "coldstart/teachers.py", "coldstart/dataset.py", "lab/policy.py",
                                      "coldstart/sft.py", "coldstart/sft_config.py", "rollout/tags.py",
                                      "coldstart/lab_dagger.py")
"""Package files whose text decides what a cold start learns (world, expert, prompt, tags, SFT): a change to any
of them changes the cache key, so a stale checkpoint is never reused."""


def coldstart_key(config: LabConfig) -> str:
    """A hash of the cold-start settings and of the code that makes a cold start (`COLDSTART_SOURCES`)."""
    package = Path(__file__).resolve().parents[1]
    values = {f: getattr(config, f) for f in COLDSTART_FIELDS}
    if config.train.rollout.env != ENV_NAME:  # the small house's keys stay what they were before the larger one
        values["env"] = config.train.rollout.env
    if config.coldstart_dagger_rounds:
        values.update({f: getattr(config.train.rollout, f) for f in DAGGER_FIELDS})
    digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode())
    for name in COLDSTART_SOURCES:
        path = package / name
        digest.update(name.encode() + (path.read_bytes() if path.is_file() else b"(missing)"))
    return digest.hexdigest()[:16]


def coldstart_cache_dir(config: LabConfig) -> Path:
    """Where a finished cold start of `config` is kept for every later run: ``$RLVMR_CACHE/lab-coldstart/<key>``
    (``~/.cache/rlvmr-nb`` when unset; the Makefile sets it). ``RLVMR_LAB_COLDSTART_CACHE=0`` turns the cache off."""
    root = rlvmr_cache_dir()
    return root / "lab-coldstart" / coldstart_key(config)


def _coldstart_done(root: Path) -> bool:
    return (root / "sft" / "sft_log.jsonl").is_file() and (root / "data" / "manifest.json").is_file()


def run_coldstart(config: LabConfig, out: str | os.PathLike, progress: bool = False) -> Path:
    """Tagged expert set (RuleTeacher) → word vocabulary and fresh policy → SFT (paper §3.3). Returns the
    checkpoint folder; skipped when it exists. A cold start is cached per configuration and code
    (`coldstart_cache_dir`): a rerun, the notebook and the tests copy it (a few MB) instead of rebuilding it
    (minutes of the classroom's 20)."""
    root = Path(out) / "coldstart"
    sft_dir = root / "sft"
    if _coldstart_done(root):
        return sft_dir
    use_cache = os.environ.get("RLVMR_LAB_COLDSTART_CACHE", "1") != "0"
    cached = coldstart_cache_dir(config)
    if use_cache and _coldstart_done(cached):
        shutil.copytree(cached, root, dirs_exist_ok=True)
        return sft_dir
    _build_coldstart(config, root, progress)
    if use_cache:
        staging = cached.with_name(cached.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(root, staging)
        try:
            staging.rename(cached)  # atomic: a concurrent run sees a whole cold start or none
        except OSError:  # another run cached the same key first
            shutil.rmtree(staging, ignore_errors=True)
    return sft_dir


def _build_coldstart(config: LabConfig, root: Path, progress: bool) -> None:
    data = build_coldstart_dataset(config.train.rollout.env, "L0", config.coldstart_trajectories, seed=0, out_dir=root / "data",
                                   progress=progress)
    if not config.coldstart_dagger_rounds:
        train_coldstart_policy(config, data, root, progress)
    else:
        dagger_coldstart(config, data, root, progress)


DAGGER_SEED = 7
"""Sampling seed of the first DAgger round's play (round r plays with `DAGGER_SEED` + r): used by no other run."""
DAGGER_PLAY_BATCH = 60
"""Episodes generated side by side in a round's play. Part of what the play samples (a batch draws from one random
stream), so changing it changes the cold start."""


def dagger_coldstart(config: LabConfig, data: Path, root: Path, progress: bool = False) -> Path:
    """The cold start with `config.coldstart_dagger_rounds` DAgger rounds (`coldstart.lab_dagger`): SFT on the
    demonstrations for half the epochs (`root`/demos), then per round a play of every demonstrated task at the
    training temperature, its steps labelled by the expert (`root`/dagger-r<k>, a dataset folder with its counts in
    dagger.json), and SFT over demonstrations + every labelled step so far for an equal share of the other half's
    samples (`coldstart.lab_dagger.draw_samples`). The last round's checkpoint is `root`/sft (returned)."""
    rounds = config.coldstart_dagger_rounds
    first = config.sft_epochs // 2
    checkpoint = train_coldstart_policy(replace(config, sft_epochs=first, coldstart_dagger_rounds=0), data,
                                        root / "demos", progress)
    play_rollout = replace(config.train.rollout, group_size=1, branch_roots=0)  # one play per task: no tree
    demos = read_samples(data)
    demo_tasks = {s["task_id"] for s in demos}
    tasks = [t for t in lab_tasks(config, "train", "L0") if t.task_id in demo_tasks]
    per_round = (config.sft_epochs - first) * len(demos) // rounds
    labelled: list[dict] = []
    for r in range(rounds):
        model, tokenizer = load_model(str(checkpoint))
        play = EvalConfig(seed=DAGGER_SEED + r, rollout=play_rollout, batch_tasks=DAGGER_PLAY_BATCH,
                          engine=EngineConfig(generation_batch_size=DAGGER_PLAY_BATCH))
        episodes, _ = evaluate_policy(model, tokenizer, play, tasks=tasks, progress=progress)
        rows, counts = dagger_samples(episodes)
        labelled += rows
        folder = root / f"dagger-r{r + 1}"
        folder.mkdir(parents=True, exist_ok=True)
        drawn = draw_samples([*demos, *labelled], per_round, seed=r)
        (folder / "samples.jsonl").write_text("".join(json.dumps(row) + "\n" for row in drawn))
        shutil.copy(data / "manifest.json", folder / "manifest.json")
        counts.update({"round": r + 1, "play_seed": DAGGER_SEED + r, "demo_samples": len(demos),
                       "labelled_so_far": len(labelled), "trained_samples": len(drawn),
                       "tags": {t: sum(row["tag"] == t for row in rows) for t in META_TAGS}})
        (folder / "dagger.json").write_text(json.dumps(counts, indent=2) + "\n")
        checkpoint = root / "sft" if r == rounds - 1 else folder / "sft"
        train_sft(model, tokenizer, load_coldstart_samples(folder, tokenizer), coldstart_sft_config(config, epochs=1),
                  out_dir=checkpoint, progress=progress)
    return checkpoint


def coldstart_sft_config(config: LabConfig, epochs: int | None = None) -> Any:
    """The cold start's `SFTConfig` (`epochs` overrides `config.sft_epochs`)."""
    return SFTConfig(epochs=config.sft_epochs if epochs is None else epochs, lr=config.sft_lr,
                     batch_size=config.sft_batch_size, micro_batch_size=config.sft_batch_size, weight_decay=0.0,
                     bf16_autocast=False, max_length=512, prompt_loss_weight=config.sft_prompt_loss_weight)


def train_coldstart_policy(config: LabConfig, data: Path, root: Path, progress: bool = False) -> Path:
    """A fresh lab policy with the vocabulary of the dataset folder `data` (`root`/init), trained on its samples
    with the configuration's SFT settings (`root`/sft, returned). `_build_coldstart`'s second half; the benchmarks
    that train a cold start on other data (`benchmarks/lab_coldstart_epochs.py`) call it too."""
    init = build_lab_policy(data, root / "init", LabPolicyConfig(layers=config.policy_layers,
                                                                  hidden_size=config.policy_hidden),
                            env_name=config.train.rollout.env)
    model, tokenizer = load_model(str(init))
    samples = load_coldstart_samples(data, tokenizer)
    train_sft(model, tokenizer, samples, coldstart_sft_config(config), out_dir=root / "sft", progress=progress)
    return root / "sft"


ARM_CHECKPOINT_EVERY = 4
"""Iterations between an arm's checkpoints. A larger-house arm-seed trains ~25 CPU-min; with one checkpoint at the end
a stopped lab run restarted each unfinished arm from iteration 0. The trainer resumes a checkpoint bit for bit
(tests/trainer/test_trainer.py, kill and resume), so the cadence changes what a stop costs, never what an arm
learns. The lab keeps the newest one (`keep_checkpoints` 1; ~6 MB for the larger house's policy)."""


def train_config(config: LabConfig, out: str | os.PathLike, algo: str, seed: int) -> TrainConfig:
    """The `trainer.TrainConfig` of one arm: the lab's training settings (`LabConfig.train`) with the arm's algo and
    seed, the cold start as the model, its run folder, a checkpoint every `ARM_CHECKPOINT_EVERY` iterations and at
    the end, and every rollout of an iteration in one generate call. Every arm uses the same prompt and parser
    (`lab_train_defaults`), so GRPO is the outcome-only ablation from the same cold start (paper Table 3, 'w/o A^MC')
    and the arms differ in their advantage estimator only."""
    base = config.train
    return replace(base, model=str(coldstart_dir(out)), seed=seed, method=replace(base.method, algo=algo),
                   run=replace(base.run, out_dir=str(Path(out) / "runs" / f"{algo}-seed{seed}"),
                               save_every=min(ARM_CHECKPOINT_EVERY, base.run.iterations)),
                   engine=replace(base.engine, generation_batch_size=base.run.tasks_per_iteration * base.rollout.group_size))


def training_pool(config: LabConfig) -> list:
    """The layouts every RL arm draws its tasks from (`LabConfig.train_pool`), the same for all arms."""
    pool = lab_tasks(config, "train", "L0")
    if config.train_pool > len(pool):
        raise ValueError(f"train_pool {config.train_pool} exceeds the lab's {len(pool)} training layouts")
    return pool[: config.train_pool]


def final_checkpoint(config: LabConfig, out: str | os.PathLike, algo: str, seed: int) -> Path:
    """The checkpoint of an arm's last iteration, the one every evaluation of the arm plays. Named, not "the newest
    intact one": with checkpoints along the way an older one must never stand in for a missing or damaged last."""
    cfg = train_config(config, out, algo, seed)
    return checkpoint_path(cfg.run.out_dir, cfg.run.iterations - 1)


def run_arm(config: LabConfig, out: str | os.PathLike, algo: str, seed: int) -> Path:
    """Train one arm from the cold-start checkpoint and return its run folder. An arm is finished when its last
    iteration's checkpoint is complete (`final_checkpoint`); otherwise the trainer resumes from the newest
    checkpoint (its logs cut back to it), or starts afresh when there is none."""
    cfg = train_config(config, out, algo, seed)
    if not is_checkpoint(final_checkpoint(config, out, algo, seed)):
        train(cfg, tasks=training_pool(config))
    return Path(cfg.run.out_dir)


def eval_config(config: LabConfig, level: str, seed: int) -> EvalConfig:
    """The `evaluate.EvalConfig` of one (level, seed): the arms' rollout settings at `level` and the evaluation
    temperature, the same seeded task subset for every arm, all of it in one batch."""
    return EvalConfig(seed=seed, max_tasks=config.eval_tasks, batch_tasks=config.eval_tasks,
                      rollout=replace(config.train.rollout, level=level, temperature=config.eval_temperature, group_size=1,
                                      branch_roots=0),
                      engine=EngineConfig(generation_batch_size=config.eval_tasks))


def play_sampling_seed(seed: int, play: int) -> int:
    """Sampling seed of a test task's `play`-th episode in seed `seed`'s evaluation (`LabConfig.eval_episodes`):
    play 0 is the seed itself (one play = the evaluation as it always was), play k > 0 is 1,000,000 + 1000 * seed +
    k, never another seed's play for seeds below 1000 and plays below 1000."""
    return seed if play == 0 else 1_000_000 + 1000 * seed + play


def heldin_tasks(config: LabConfig) -> list:
    """The fixed training layouts of the fairness check: the first `heldin_tasks` of the training pool."""
    return training_pool(config)[: config.heldin_tasks]


def run_evaluation(config: LabConfig, out: str | os.PathLike, arm: str, seed: int, model_dir: Path,
                   levels: tuple[str, ...] | None = None) -> list[Path]:
    """Evaluate one policy on `levels` (default: every level of the configuration and the held-in training
    layouts, `HELDIN`), skipping what is written. Every arm of a seed plays the same tasks with the same sampling
    seed, so arms pair episode by episode."""
    levels = (*config.levels, HELDIN) if levels is None else tuple(levels)
    todo = [level for level in levels if not eval_path(out, arm, seed, level).is_file()]
    if todo:
        model, tokenizer, described = load_policy(str(model_dir))
        for level in todo:
            if level == HELDIN:
                cfg = eval_config(config, "L0", seed)
                plays = heldin_tasks(config) * config.heldin_episodes  # the k-th plays pair up (lab.paired)
                episodes, summary = evaluate_policy(model, tokenizer, cfg, tasks=plays, progress=False)
            else:
                cfg = eval_config(config, level, seed)
                tasks = eval_task_list(cfg)  # the seed's subset: every play and every arm plays these
                episodes = []
                for play in range(config.eval_episodes):  # the k-th plays pair up (lab.paired)
                    play_cfg = replace(cfg, seed=play_sampling_seed(seed, play))
                    episodes += evaluate_policy(model, tokenizer, play_cfg, tasks=tasks, progress=False)[0]
                summary = summarize(episodes)  # evaluate_policy's own summary, over every play
            for ep in episodes:
                ep.info["method"] = arm_label(arm)
            write_results(eval_path(out, arm, seed, level), summary, cfg, episodes,
                          extra={"arm": arm, "seed": seed, "policy": described})
    return [eval_path(out, arm, seed, level) for level in levels]


def play_reference(config: LabConfig, folder: Path) -> list:
    """Every L0 test layout played `config.reference_plays` times by the policy in `folder` (`lab.reference`): the
    lab's evaluation settings at `REFERENCE_SEED`'s sampling seeds, the whole split rather than a seed's subset."""
    cfg = replace(eval_config(config, REFERENCE_LEVEL, REFERENCE_SEED), max_tasks=None)
    tasks = eval_task_list(cfg)
    cfg = replace(cfg, batch_tasks=len(tasks), engine=replace(cfg.engine, generation_batch_size=len(tasks)))
    model, tokenizer, _ = load_policy(str(folder))
    episodes: list = []
    for play in range(config.reference_plays):
        episodes += evaluate_policy(model, tokenizer, replace(cfg, seed=play_sampling_seed(REFERENCE_SEED, play)),
                                    tasks=tasks, progress=False)[0]
    return episodes


def run_reference(config: LabConfig, out: str | os.PathLike, log: Callable[[str], None] = print) -> dict | None:
    """The fairness gate's pinned reference played on all L0 layouts for this run folder (`lab.reference`; played
    once per hash and settings, cached); None when the configuration names no reference."""
    if config.reference_checkpoint is None:
        return None

    record = reference_result(config, out, play_reference)
    log(f"reference {record['sha256'][:12]}: {100 * record['success']:.1f} % on {record['layouts']} unseen L0 "
        f"layouts x {record['plays']} plays")
    return record


def replay(config: LabConfig, out: str | os.PathLike, seed: int, tasks: list,
           temperature: float | None = None, sampling_seed: int | None = None) -> dict[str, list]:
    """The cold start and GRPO's final checkpoint of one seed of a finished run, each playing `tasks` with that
    seed's evaluation settings (`eval_config`; `temperature` overrides the evaluation temperature, `sampling_seed`
    the sampling seed) and the same sampling seed, so the two pair episode by episode. Returns {arm: episodes} and
    writes nothing: the benchmarks that re-measure a finished run (other tasks, another temperature, more plays)
    without touching its files."""
    cfg = eval_config(config, "L0", seed)
    if temperature is not None:
        cfg = replace(cfg, rollout=replace(cfg.rollout, temperature=temperature))
    if sampling_seed is not None:
        cfg = replace(cfg, seed=sampling_seed)
    played = {}
    for arm, folder in ((COLDSTART_ARM, coldstart_dir(out)), ("grpo", final_checkpoint(config, out, "grpo", seed))):
        model, tokenizer, _ = load_policy(str(folder))
        played[arm], _ = evaluate_policy(model, tokenizer, cfg, tasks=tasks, progress=False)
    return played


def run_unit(config: LabConfig, out: str | os.PathLike, seed: int, arm: str,
             log: Callable[[str], None] = print) -> dict:
    """One independent piece of a seed after the cold start: the cold start's evaluation (`arm` =
    `COLDSTART_ARM`) or one RL arm trained and evaluated. Returns the wall and CPU seconds of its stages."""
    timer = StageTimer(Path(out) / f"timing-seed{seed}-{arm.replace(' ', '_')}.json")
    if arm == COLDSTART_ARM:
        with timer.stage(f"eval {COLDSTART_ARM} seed{seed}"):
            run_evaluation(config, out, COLDSTART_ARM, seed, coldstart_dir(out))
        return timer.stages
    with timer.stage(f"train {arm} seed{seed}"):
        run_dir = run_arm(config, out, arm, seed)
    with timer.stage(f"eval {arm} seed{seed}"):
        run_evaluation(config, out, arm, seed, final_checkpoint(config, out, arm, seed))
    log(f"{arm} seed {seed}: {run_dir}")
    return timer.stages


def run_seed(config: LabConfig, out: str | os.PathLike, seed: int, log: Callable[[str], None] = print) -> dict:
    """Everything of one seed after the cold start: the cold start's evaluation, then every arm trained and
    evaluated. Returns the wall and CPU seconds of each stage."""
    stages: dict = {}
    for arm in (COLDSTART_ARM, *config.algos):
        stages.update(run_unit(config, out, seed, arm, log))
    return stages


def _unit_in_worker(config: dict, out: str, seed: int, arm: str) -> dict:
    torch.set_num_threads(config["threads_per_worker"])  # several workers share the cores
    return run_unit(LabConfig.from_dict(config), out, seed, arm, log=lambda _: None)


def run_seeds(config: LabConfig, out: str | os.PathLike, log: Callable[[str], None] = print) -> dict:
    """Every seed after the cold start. With `config.workers` > 1 the pieces that do not wait on each other —
    per seed the cold start's evaluation and each arm's training and evaluation (`run_unit`) — run
    `config.workers` at a time in spawned processes with `config.threads_per_worker` torch threads each, the longest
    (training) first, so a machine with more cores than seeds keeps them all busy; 1: one after the other in this
    process. Returns every stage's wall and CPU seconds."""
    if config.workers == 1:
        stages = [run_seed(config, out, seed, log) for seed in config.seeds]
    else:
        units = [(seed, arm) for arm in (*config.algos, COLDSTART_ARM) for seed in config.seeds]
        context = multiprocessing.get_context("spawn")
        # the workers die with this process (SIGKILL and SIGTERM included) and hold the folder while alive
        with ProcessPoolExecutor(min(config.workers, len(units)), mp_context=context,
                                 initializer=start_owned_worker, initargs=(os.getpid(), str(out))) as pool:
            stages = list(pool.map(_unit_in_worker, [config.to_dict()] * len(units), [str(out)] * len(units),
                                   [seed for seed, _ in units], [arm for _, arm in units]))
    return {k: v for stage in stages for k, v in stage.items()}


def finished_units(config: LabConfig, out: str | os.PathLike) -> dict[str, list[str]]:
    """What a run folder already holds: the arms whose last checkpoint is complete (`final_checkpoint`) and the
    policies evaluated on every level, as ``<arm>-seed<s>``."""
    policies = (COLDSTART_ARM, *config.algos)
    return {"arms": [f"{a}-seed{s}" for a in config.algos for s in config.seeds
                     if is_checkpoint(final_checkpoint(config, out, a, s))],
            "evaluations": [f"{a.replace(' ', '_')}-seed{s}" for a in policies for s in config.seeds
                            if all(eval_path(out, a, s, lv).is_file() for lv in (*config.levels, HELDIN))]}


def record_session(config: LabConfig, out: str | os.PathLike) -> list[dict[str, Any]]:
    """Append this start of the run to ``sessions.jsonl`` and return every start so far. A long lab run is stopped
    and resumed, possibly at another commit or on another machine; its results carry the provenance of the
    session that wrote them, so without this line per start nobody could tell which commit trained which arm, or
    that a resume crossed machines (then the run is no longer bit-reproducible anywhere: docs/verification.md)."""
    facts = provenance()
    entry = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_sha": facts["git_sha"],
             "command": facts["command"], "machine_facts": facts["machine_facts"],
             "finished_before": finished_units(config, out)}
    path = Path(out) / "sessions.jsonl"
    sessions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    sessions.append(entry)
    # rewritten whole and atomically: a run killed while logging its start leaves the earlier log intact
    atomic_write_text(path, "".join(json.dumps(x) + "\n" for x in sessions))
    return sessions


def run_lab(config: LabConfig, out: str | os.PathLike, log: Callable[[str], None] = print,
            progress: bool = False) -> dict[str, Any]:
    """The whole experiment: cold start, then per seed the cold start's evaluation and every arm trained
    and evaluated on every level (`run_seeds`: `config.workers` pieces at a time), then the summary with
    confidence intervals (`lab.stats.lab_summary`). Timing: ``timing.json`` (wall and CPU seconds)."""
    out = Path(out)
    with RunFolderLock(out, "lab"):  # one lab run per folder, and none while an earlier run's workers live
        refuse_leftover_workers(out)
        return _run_lab(config, out, log, progress)


def _run_lab(config: LabConfig, out: Path, log: Callable[[str], None], progress: bool) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "lab_config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    sessions = record_session(config, out)
    one_machine = all(same_machine(sessions[0]["machine_facts"], x["machine_facts"]) for x in sessions)
    if len(sessions) > 1:
        done = sessions[-1]["finished_before"]
        log(f"session {len(sessions)} of this run (commits {', '.join(str(x['git_sha'])[:7] for x in sessions)}): "
            f"{len(done['arms'])} arms and {len(done['evaluations'])} evaluations already finished")
        if not one_machine:
            log("the sessions of this run ran on more than one machine: the run's numbers are no longer "
                "bit-reproducible on any one machine (docs/verification.md, 'Numbers across machines')")
    timer = StageTimer(out / "timing.json")
    with timer.stage("coldstart"):
        sft_dir = run_coldstart(config, out, progress)
    log(f"cold start: {sft_dir}")
    if config.reference_checkpoint is not None:
        with timer.stage("reference"):
            run_reference(config, out, log)
    with timer.stage("seeds"):
        seed_stages = run_seeds(config, out, log)
    timing = {**timer.stages, **seed_stages}
    summary = lab_summary(config, out)
    summary["timing"] = timing
    summary["sessions"] = sessions
    summary["sessions_one_machine"] = one_machine
    (out / "lab_results.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")

    log(preregistered_markdown(summary))
    return summary
