"""Supervised fine-tuning for the cold start (paper §3.3, App. A.2; docs/method.md, 'Cold start').

Response-only next-token cross-entropy on step-level (prompt, response) pairs (the paper's; a weighted
prompt term is an option, `SFTConfig.prompt_loss_weight`, for policies trained from scratch); the prompt is the
chat-formatted user message, the response the tagged step (``<tag>…</tag>\\n<action>…</action>\\n``)
followed by the end-of-turn token. Defaults are the paper's: 5 epochs, lr 1e-5, cosine schedule with
10 % warm-up, AdamW (0.9, 0.95), weight decay 0.01, grad-clip 1.0.

Logits are computed only at response positions (the hidden states of prompt tokens never meet the
vocabulary projection unless the prompt term is on), which is what keeps SFT of long prompts in memory on CPU.

Two backends share ONE training loop (`run_sft_loop`): ``transformers`` (CPU or GPU; peft LoRA when
asked) and ``unsloth`` (CUDA only, optional dependency: the model is loaded and LoRA-wrapped through
Unsloth's `FastLanguageModel`, see `sft_unsloth`). Load the model with `load_sft_model(spec, config)`
so that it comes from the loader the backend needs.
"""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..devices import autocast_context, place, upcast
from ..models import load_model
from ..runs.policy import save_pretrained_policy
from . import sft_unsloth
from .sft_config import BACKENDS, SFTConfig, check_config, write_sft_run_files  # noqa: F401  (re-exported)
from .sft_unsloth import load_unsloth_model


def load_sft_model(spec: str, config: SFTConfig, seed: int = 0) -> tuple:
    """``(model, tokenizer)`` for `train_sft` with `config.backend`: `models.load_model(spec)` for
    'transformers', `FastLanguageModel.from_pretrained` for 'unsloth' (which patches the model it loads)."""
    check_config(config)
    if config.backend == "unsloth":
        return load_unsloth_model(spec, config)

    return load_model(spec, seed=seed)


@dataclass
class SFTSample:
    """One step-level training pair, already chat-formatted."""

    prompt: str
    response: str
    meta: dict = field(default_factory=dict)


def tokenize_sample(tokenizer, sample: SFTSample, max_length: int, truncate_prompt_left: bool = False) -> tuple[list[int], int]:
    """Token ids of prompt+response+eos and the index where the response starts."""
    prompt_ids = tokenizer(sample.prompt, add_special_tokens=False)["input_ids"]
    response_ids = tokenizer(sample.response, add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        response_ids = response_ids + [tokenizer.eos_token_id]
    total = len(prompt_ids) + len(response_ids)
    if total > max_length:
        if not truncate_prompt_left or len(response_ids) >= max_length:
            raise ValueError(
                f"SFT sample has {total} tokens > max_length={max_length}; raise max_length or set "
                "truncate_prompt_left=True"
            )
        prompt_ids = prompt_ids[total - max_length :]
    return prompt_ids + response_ids, len(prompt_ids)


def token_losses(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels_mask: torch.Tensor,
                 with_prompt: bool) -> tuple[tuple[torch.Tensor, int], tuple[torch.Tensor, int] | None]:
    """``((response CE sum, count), (prompt CE sum, count) or None)`` from one forward pass. The prompt's share
    predicts every prompt token after the first (`SFTConfig.prompt_loss_weight`); padding predicts nothing."""
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    hidden = base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    head = model.get_output_embeddings()

    def summed(predict: torch.Tensor) -> tuple[torch.Tensor, int]:
        # position p predicts token p+1
        targets = input_ids[:, 1:][predict]
        logits = upcast(head(hidden[:, :-1][predict]))
        return F.cross_entropy(logits, targets, reduction="sum"), int(targets.numel())

    response = summed(labels_mask[:, 1:].bool())
    if not with_prompt:
        return response, None
    return response, summed(attention_mask[:, 1:].bool() & ~labels_mask[:, 1:].bool())


def _collate(batch: list[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    lab = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (seq, start) in enumerate(batch):  # right padding: causal LM training needs no left pad
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        lab[i, start : len(seq)] = 1
    return ids, attn, lab


def cosine_with_warmup(step: int, total: int, warmup: int) -> float:
    """LR multiplier: linear warm-up to 1, then cosine decay to 0."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def train_sft(
    model,
    tokenizer,
    samples: Sequence[SFTSample],
    config: SFTConfig = SFTConfig(),
    out_dir: str | os.PathLike | None = None,
    log: Callable[[dict], None] | None = None,
    progress: bool = True,
):
    """Fine-tune `model` on `samples` (response-only loss); saves to `out_dir` if given. Returns the model
    (a peft model when `config.lora`) and a list of per-step log records.

    With ``config.backend='unsloth'`` the model must come from `load_sft_model` (Unsloth's loader); LoRA
    is then added by Unsloth, and the same `run_sft_loop` trains it."""
    check_config(config)
    unsloth = sft_unsloth if config.backend == "unsloth" else None
    if unsloth:
        unsloth.import_fast_language_model()  # the clear error (no CUDA / not installed) comes before any work
    if not samples:
        raise ValueError("no SFT samples")
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    model = unsloth.prepare_for_training(model, config) if unsloth else _prepare_for_training(model, config)
    records = run_sft_loop(model, tokenizer, samples, config, log, progress)
    if unsloth:
        model = unsloth.finish_training(model)
    else:
        model.eval()
    if out_dir is not None:
        (unsloth.save_unsloth_sft if unsloth else save_sft)(model, tokenizer, out_dir, config, records)
    return model, records


def _prepare_for_training(model, config: SFTConfig):
    """transformers backend: the model on `config.device`, peft LoRA on every linear layer but the output head,
    if asked."""
    place(model, config.device)
    if config.lora:
        # peft, needed only with LoRA is loaded here only: importing coldstart.sft needs none of it
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"),
        )
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    return model


def run_sft_loop(
    model,
    tokenizer,
    samples: Sequence[SFTSample],
    config: SFTConfig,
    log: Callable[[dict], None] | None = None,
    progress: bool = True,
) -> list[dict]:
    """The training loop both backends share: seeded shuffles, micro-batch accumulation with a token-mean
    loss over the whole batch, grad clipping, AdamW with cosine warm-up. `model` is ready to train."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    data = [tokenize_sample(tokenizer, s, config.max_length, config.truncate_prompt_left) for s in samples]
    params = [p for p in model.parameters() if p.requires_grad]
    device = next(model.parameters()).device  # batches go where the weights are (`config.device`; Unsloth's GPU)
    opt = torch.optim.AdamW(params, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(data) / config.batch_size)
    total = steps_per_epoch * config.epochs
    warmup = int(round(config.warmup_ratio * total))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_with_warmup(s, total, warmup))
    records: list[dict] = []
    rng = random.Random(config.seed)
    bar = tqdm(total=total, desc="SFT", disable=None if progress else True)
    step = 0
    for epoch in range(config.epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        for b in range(0, len(order), config.batch_size):
            batch = [data[i] for i in order[b : b + config.batch_size]]
            n_tokens = sum(len(ids) - start for ids, start in batch)
            n_prompt_tokens = max(1, sum(start - 1 for _, start in batch))
            t0 = time.perf_counter()
            total_loss = total_prompt_loss = 0.0
            for m in range(0, len(batch), config.micro_batch_size):
                ids, attn, lab = (t.to(device) for t in _collate(batch[m : m + config.micro_batch_size], pad))
                with autocast_context(device, config.bf16_autocast):
                    (loss_sum, _), prompt = token_losses(model, ids, attn, lab, with_prompt=config.prompt_loss_weight > 0)
                loss = loss_sum / n_tokens  # token-mean over the whole batch
                if prompt is not None:  # the prompt's own token-mean, weighted beside the response's
                    loss = loss + config.prompt_loss_weight * prompt[0] / n_prompt_tokens
                    total_prompt_loss += float(prompt[0].detach())
                loss.backward()
                total_loss += float(loss_sum.detach())
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.grad_clip))
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            rec = {"step": step, "epoch": epoch, "loss": total_loss / n_tokens, "grad_norm": grad_norm,
                   "lr": sched.get_last_lr()[0], "tokens_per_s": n_tokens / (time.perf_counter() - t0)}
            if config.prompt_loss_weight > 0:
                rec["prompt_loss"] = total_prompt_loss / n_prompt_tokens
            records.append(rec)
            if log:
                log(rec)
            bar.update(1)
            bar.set_postfix(loss=f"{rec['loss']:.3f}")
            step += 1
    bar.close()
    return records


def save_sft(model, tokenizer, out_dir: str | os.PathLike, config: SFTConfig, records: list[dict]) -> Path:
    """Save weights (merged when LoRA, so the trainer loads a plain model), tokenizer, config and log."""
    out = save_pretrained_policy(model, tokenizer, out_dir)
    return write_sft_run_files(out, config, records)
