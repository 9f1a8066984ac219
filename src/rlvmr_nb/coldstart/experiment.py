"""Cold-start SFT and its measurement: format validity and admissible-action rate before vs after (paper §3.3; docs/method.md, 'Cold start').

`coldstart_sft_experiment` evaluates the base model on held-out ALFWorld games through `evaluate.py`
(the same rollout and prompt code as RL), fine-tunes it on a cold-start dataset with `sft.train_sft`,
evaluates again and writes one results file with both sets of figures and their provenance.

On a CPU the paper's SFT budget (5 epochs over ~2,000 step samples of up to 2,048 tokens) is out of
reach, so the experiment exposes the knobs that bound it: `max_samples` (seeded subset),
`max_sample_tokens` (drop the longest samples: later steps of long trajectories), and the SFT config.
Whatever is chosen is recorded in the results file next to the numbers.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..evaluate import EvalConfig, eval_tasks, evaluate_policy
from ..runs.machine import provenance
from ..models import describe_model
from ..records import write_episodes
from ..rollout.generation.base import SamplingConfig
from ..rollout.generation.hf import HFGenerator
from ..rollout.loop import RolloutConfig
from ..rollout.tags import parse_output
from .dataset import build_coldstart_dataset, load_coldstart_samples, read_manifest
from .sft import SFTConfig, SFTSample, load_sft_model, tokenize_sample, train_sft


@dataclass
class ColdStartExperimentConfig:
    """What `coldstart_sft_experiment` runs. Defaults: SmolLM2 with the paper's SFT (`SFTConfig`) on every sample;
    benchmarks/coldstart_sft.py sets the CPU-sized run (160 samples, 1 epoch at lr 1e-4, batch 1)."""

    model: str = "embedded:smollm2-135m-instruct"
    """Model spec for `models.load_model`."""
    dataset: str | None = None
    """Cold-start dataset folder; built with `build_coldstart_dataset(env, level, n_trajectories, seed)` if None."""
    env: str = "alfworld"
    level: str = "L0"
    n_trajectories: int = 200
    seed: int = 0
    max_samples: int | None = None
    """Train on a seeded subset of this many samples (None: all that pass `max_sample_tokens`)."""
    max_sample_tokens: int | None = None
    """Drop samples whose chat-formatted prompt + response exceed this many tokens (None: keep all)."""
    stratify_tags: bool = True
    """Keep the dataset's tag shares in the `max_samples` subset (see `select_samples`)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """SFT hyper-parameters; `sft.backend` picks the trainer: 'transformers' (CPU/GPU) or 'unsloth' (CUDA), and
    `sft.device` is where the whole experiment runs (both evaluations and the SFT)."""
    eval_games: int = 16
    """Held-out games evaluated before and after (seeded subset of the level's test split)."""
    eval_max_steps: int = 8
    eval_max_new_tokens: int = 128
    eval_temperature: float = 0.4
    eval_stop: str = "action"
    """Stop policy of the before/after evaluation (`generation.base.STOP_POLICIES`). 'action' (stop after
    </action>) keeps this CPU measurement's token budget and the recorded cold-start results comparable;
    'none' is the official setting."""
    eval_batch_tasks: int = 8
    train_prompt_probe: int = 0
    """Also measure the greedy format-valid rate on this many training prompts before and after (0: skip)."""
    train_probe_max_new_tokens: int = 96
    run_eval: bool = True
    """Run the held-out evaluation (False: only the training-prompt probe, for quick checks)."""
    results_path: str | None = "benchmarks/results/coldstart.json"
    model_out_dir: str | None = None
    """Save the fine-tuned model here (loadable by the trainer via `load_model(dir)`)."""
    episodes_dir: str | None = None
    """Save the held-out evaluation episodes here (``eval_before`` / ``eval_after.episodes.jsonl``) to read
    what the model wrote; None: next to `results_path` when that is set."""


def select_samples(
    samples: Sequence[SFTSample], tokenizer: Any, max_samples: int | None, max_tokens: int | None, seed: int,
    stratify_tags: bool = True,
) -> tuple[list[SFTSample], dict[str, Any]]:
    """Keep samples within `max_tokens`, then a seeded subset of `max_samples`; returns them and counts.

    A length cap alone favours first steps (short prompts, all ``<planning>``), so with `stratify_tags`
    the subset keeps the tag shares of the whole dataset: each tag gets its share of `max_samples`
    from the samples that fit, and what a tag cannot fill goes to the others.
    """
    lengths = [len(tokenize_sample(tokenizer, s, 1 << 30)[0]) for s in samples]
    fits = [i for i, n in enumerate(lengths) if max_tokens is None or n <= max_tokens]
    rng = random.Random(seed)
    if max_samples is None or max_samples >= len(fits):
        kept = fits
    elif not stratify_tags:
        kept = sorted(rng.sample(fits, max_samples))
    else:
        kept = sorted(_stratified(samples, fits, max_samples, rng))
    chosen = [samples[i] for i in kept]
    stats = {
        "available": len(samples),
        "within_token_cap": len(fits),
        "used": len(chosen),
        "stratified_by_tag": stratify_tags and max_samples is not None and max_samples < len(fits),
        "tokens_used": sum(lengths[i] for i in kept),
        "max_tokens_used": max((lengths[i] for i in kept), default=0),
        "mean_tokens_available": round(sum(lengths) / max(1, len(lengths)), 1),
        "tags_available": dict(sorted(Counter(_tag(s) for s in samples).items())),
        "tags_used": dict(sorted(Counter(_tag(s) for s in chosen).items())),
    }
    return chosen, stats


def _tag(sample: SFTSample) -> str:
    return sample.meta.get("tag") or "none"


def _stratified(samples: Sequence[SFTSample], pool: Sequence[int], n: int, rng: random.Random) -> list[int]:
    share = Counter(_tag(s) for s in samples)
    by_tag: dict[str, list[int]] = {}
    for i in pool:
        by_tag.setdefault(_tag(samples[i]), []).append(i)
    for members in by_tag.values():
        rng.shuffle(members)
    quota = {t: round(n * share[t] / len(samples)) for t in sorted(by_tag)}
    chosen = [i for t in sorted(by_tag) for i in by_tag[t][: quota[t]]]
    leftovers = [i for t in sorted(by_tag) for i in by_tag[t][quota[t]:]]
    rng.shuffle(leftovers)
    chosen += leftovers[: max(0, n - len(chosen))]  # tags short of their quota leave room to the others
    return chosen[:n]


def format_valid_rate(model: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int = 96,
                      mode: str = "strict", batch_size: int = 8) -> float:
    """Share of greedy responses to chat-formatted `prompts` that are format-valid (docs/method.md, 'Validity rules')."""
    generator = HFGenerator(model, tokenizer)
    try:
        valid = 0
        for i in range(0, len(prompts), batch_size):
            outs = generator.generate(list(prompts[i : i + batch_size]),
                                      SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens))
            valid += sum(parse_output(o.text, mode=mode).valid for o in outs)
    finally:
        generator.close()
    return valid / len(prompts) if prompts else float("nan")


def policy_figures(summary: dict[str, Any]) -> dict[str, float]:
    """The measured rates from an `evaluate_policy` summary."""
    return {
        "format_valid_rate": 1.0 - float(summary["invalid_malformed"]),
        "admissible_action_rate": 1.0 - float(summary["invalid_non_admissible"]),
        "success_rate": float(summary["success"]),
        "episode_length": float(summary["episode_length"]),
        "tag_distribution": summary["tag_distribution"],
    }


def coldstart_sft_experiment(config: ColdStartExperimentConfig | None = None, progress: bool = True) -> dict[str, Any]:
    """Evaluate -> SFT -> evaluate; returns (and writes to `config.results_path`) the results document."""
    config = config or ColdStartExperimentConfig()

    t_start, cpu_start = time.time(), time.process_time()
    dataset = Path(config.dataset) if config.dataset else build_coldstart_dataset(
        config.env, config.level, config.n_trajectories, config.seed, progress=progress)
    manifest = read_manifest(dataset)
    # the SFT backend decides the loader: models.load_model, or Unsloth's on a CUDA GPU (config.sft.backend)
    model, tokenizer = load_sft_model(config.model, config.sft, seed=config.seed)
    # without the held-out evaluation (run_eval False, e.g. eval_games 0) no game is drawn
    eval_cfg = EvalConfig(seed=config.seed, device=config.sft.device,
                          max_tasks=config.eval_games if config.run_eval else None,
                          batch_tasks=config.eval_batch_tasks,
                          rollout=RolloutConfig(env=config.env, level=config.level, group_size=1,
                                                max_steps=config.eval_max_steps, stop=config.eval_stop,
                                                max_new_tokens=config.eval_max_new_tokens, prompt_style="meta_think",
                                                temperature=config.eval_temperature))
    tasks = eval_tasks(eval_cfg) if config.run_eval else []

    samples, sample_stats = select_samples(load_coldstart_samples(dataset, tokenizer), tokenizer,
                                           config.max_samples, config.max_sample_tokens, config.seed,
                                           config.stratify_tags)
    probe = [s.prompt for s in samples[: config.train_prompt_probe]]

    episodes_dir = config.episodes_dir or (str(Path(config.results_path).with_suffix("")) + ".episodes"
                                           if config.results_path else None)

    def measure(name: str) -> tuple[dict | None, float | None, float]:
        t = time.time()
        summary = None
        if config.run_eval:
            episodes, summary = evaluate_policy(model, tokenizer, eval_cfg, tasks=tasks, progress=progress)
            if episodes_dir:
                write_episodes(Path(episodes_dir) / f"{name}.episodes.jsonl", episodes)
        rate = format_valid_rate(model, tokenizer, probe, config.train_probe_max_new_tokens) if probe else None
        return summary, rate, time.time() - t

    before, probe_before, before_s = measure("eval_before")
    t0, c0 = time.time(), time.process_time()
    model, records = train_sft(model, tokenizer, samples, config.sft, out_dir=config.model_out_dir, progress=progress)
    sft_s, sft_cpu_s = time.time() - t0, time.process_time() - c0
    after, probe_after, after_s = measure("eval_after")

    doc = {
        "what": "cold-start SFT: strict format-valid and admissible-action rates on held-out games, before vs after",
        "before": policy_figures(before) if before else None,
        "after": policy_figures(after) if after else None,
        "training_prompt_probe": {"prompts": len(probe), "format_valid_before": probe_before,
                                  "format_valid_after": probe_after, "decoding": "greedy"} if probe else None,
        "eval": {**asdict(eval_cfg), "tasks": [t.task_id for t in tasks], "split": tasks[0].split if tasks else None,
                 "episodes_dir": episodes_dir if config.run_eval else None},
        "sft": {
            "config": asdict(config.sft),
            "samples": sample_stats,
            "optimizer_steps": len(records),
            "loss_first": records[0]["loss"] if records else None,
            "loss_last": records[-1]["loss"] if records else None,
            "mean_tokens_per_s": round(sum(r["tokens_per_s"] for r in records) / max(1, len(records)), 1),
        },
        "dataset": {"path": str(dataset), "manifest": {k: manifest[k] for k in ("env", "level", "seed", "teacher",
                                                                            "source", "prompt", "counts", "tags")}},
        "model": {"spec": config.model, **describe_model(model)},
        "experiment_config": {k: v for k, v in asdict(config).items() if k != "sft"},
        "seconds": {"eval_before": round(before_s, 1), "sft": round(sft_s, 1), "eval_after": round(after_s, 1),
                    "total": round(time.time() - t_start, 1), "sft_cpu": round(sft_cpu_s, 1),
                    "total_cpu": round(time.process_time() - cpu_start, 1),
                    "note": "wall seconds on a shared machine; *_cpu is this process's CPU time (all threads)"},
        "provenance": provenance(config.seed),
        "raw_metrics": {"before": before, "after": after},
    }
    if config.results_path:
        path = Path(config.results_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    return doc
