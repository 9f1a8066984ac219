"""Step samples: one training sample per agent step, and the per-token log-probs of their responses.

Every active step of a rollout is its own sample (paper App. A.2: prompt = the whole serialised context,
response = that step's output). `ResponseScorer` runs the decoder and keeps only the hidden states that
predict response tokens; the vocabulary projection happens afterwards, in the fused chunked kernel
(`kernels.fused_grpo_loss`) or the plain reference (`loss.reference_logprobs_from_hidden`), so prompt
positions never meet ``lm_head`` and the fused path never holds [tokens × vocab] logits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch

from .devices import autocast_context, module_device
from .loss import LossConfig, grpo_loss, reference_logprobs_from_hidden
from .trajectory import Episode


@dataclass
class StepSample:
    """One step as a training sample."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    """The step's advantage, broadcast to every response token (paper Eq. 5)."""
    sampler_logprobs: list[float]
    """Per-token log-probs the rollout engine reported when it sampled the response."""
    old_logprobs: torch.Tensor | None = None
    """Per-token log-probs of the policy before this iteration's update, recomputed by the trainer."""
    ref_logprobs: torch.Tensor | None = None
    """Per-token log-probs of the frozen reference policy (the KL term's anchor)."""


@dataclass(frozen=True)
class ScoringOptions:
    """How response log-probs and the loss are computed (from `trainer.TrainConfig`)."""

    temperature: float = 1.0
    """Logits are divided by the sampling temperature before the softmax, as the sampler did."""
    chunk_size: int | None = None
    """Tokens per vocabulary chunk of the fused kernel (None: automatic)."""
    autocast: bool = True
    """bf16 autocast of the decoder (fp32 master weights)."""
    fused: bool = True
    """Fused chunked lm_head + loss (True) or the plain reference that materialises the logits (False)."""
    micro_batch_size: int = 16
    """Samples per forward pass when log-probs are computed without gradient."""
    packed: bool = True
    """Feed each micro-batch as one packed row of its real tokens (`pack_flat`; sequences kept apart by
    `kernels.packed_attention`) instead of right-padding it: the same loss and gradients without pad tokens.
    Models whose attention is not sdpa keep the padded layout."""


def episodes_to_samples(episodes: Sequence[Episode], advantages: Sequence[float]) -> list[StepSample]:
    """One sample per step that produced response tokens; `advantages` holds one value per step of
    `episodes` in flat order (as `advantages.compute_advantages` returns it)."""
    n_steps = sum(len(ep.steps) for ep in episodes)
    if len(advantages) != n_steps:
        raise ValueError(f"{len(advantages)} advantages for {n_steps} steps")
    out, i = [], 0
    for ep in episodes:
        for s in ep.steps:
            if s.response_token_ids:
                out.append(StepSample(list(s.prompt_token_ids), list(s.response_token_ids), float(advantages[i]),
                                      list(s.response_logprobs or [])))
            i += 1
    return out


class Packed(NamedTuple):
    """A right-padded micro-batch: input ids/attention [B, L], response targets/mask [B, Tr], and the
    positions whose hidden states predict each response token [B, Tr]."""

    ids: torch.Tensor
    attn: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    index: torch.Tensor


def pack(samples: Sequence[StepSample], pad_id: int, device: torch.device | str = "cpu") -> Packed:
    """Right-pad `samples` into tensors on `device` (see `Packed`)."""
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    resp = max(len(s.response_ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(samples), width), dtype=torch.long)
    targets = torch.zeros((len(samples), resp), dtype=torch.long)
    mask = torch.zeros((len(samples), resp), dtype=torch.bool)
    index = torch.zeros((len(samples), resp), dtype=torch.long)
    for i, s in enumerate(samples):
        seq = s.prompt_ids + s.response_ids
        n = len(s.response_ids)
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        targets[i, :n] = torch.tensor(s.response_ids)
        mask[i, :n] = True
        # hidden state p predicts token p + 1; response token j sits at len(prompt) + j
        index[i, :n] = torch.arange(n) + len(s.prompt_ids) - 1
    return Packed(*(t.to(device) for t in (ids, attn, targets, mask, index)))


class FlatPacked(NamedTuple):
    """A micro-batch packed without padding: ids/positions [1, N] (positions restart at each sample), the
    samples' ends `bounds` [S + 1] (int, CPU), and, as in `Packed`, response targets/mask [B, Tr] and the flat
    positions whose hidden states predict each response token [B, Tr]."""

    ids: torch.Tensor
    positions: torch.Tensor
    bounds: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    index: torch.Tensor


def pack_flat(samples: Sequence[StepSample], device: torch.device | str = "cpu") -> FlatPacked:
    """Lay `samples` end to end in one row (see `FlatPacked`)."""
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    ids = torch.tensor([t for s in samples for t in s.prompt_ids + s.response_ids], dtype=torch.long)
    positions = torch.from_numpy(np.concatenate([np.arange(n) for n in lengths])).long()
    resp = max(len(s.response_ids) for s in samples)
    targets = torch.zeros((len(samples), resp), dtype=torch.long)
    mask = torch.zeros((len(samples), resp), dtype=torch.bool)
    index = torch.zeros((len(samples), resp), dtype=torch.long)
    for i, s in enumerate(samples):
        n = len(s.response_ids)
        targets[i, :n] = torch.tensor(s.response_ids)
        mask[i, :n] = True
        index[i, :n] = torch.arange(n) + int(starts[i]) + len(s.prompt_ids) - 1  # hidden p predicts token p + 1
    bounds = torch.from_numpy(starts).to(torch.int32)
    return FlatPacked(ids[None].to(device), positions[None].to(device), bounds, targets.to(device), mask.to(device),
                      index.to(device))


_PREPARED_MASKS: dict[torch.device, torch.Tensor] = {}


def _prepared_mask(device: torch.device) -> torch.Tensor:
    """Handed to the decoder with a packed row: transformers takes a 4-D mask as already prepared and builds none (it
    would otherwise build an [N, N] block mask from the restarting positions); the packed attention ignores it. One
    per device, made once (a host-to-device copy per forward would wait for the queued kernels)."""
    if device not in _PREPARED_MASKS:
        _PREPARED_MASKS[device] = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)
    return _PREPARED_MASKS[device]


class ResponseScorer(torch.nn.Module):
    """Final hidden states at the positions that predict response tokens, plus the lm_head weight.

    A module so DDP/FSDP can wrap it (gradients must flow through the wrapper's forward)."""

    def __init__(self, model: Any, autocast: bool = True):
        super().__init__()
        self.model = model
        self.autocast = autocast

    def forward(self, ids: torch.Tensor, attn: torch.Tensor | None, index: torch.Tensor,
                positions: torch.Tensor | None = None, bounds: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded batch: `ids`/`attn` [B, L], `index` [B, Tr]. Packed row (`pack_flat`): `ids`/`positions` [1, N],
        `bounds` the samples' ends, `attn` None, `index` [B, Tr] into the row."""
        decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
        with autocast_context(ids.device, self.autocast):
            if bounds is None:
                hidden = decoder(input_ids=ids, attention_mask=attn).last_hidden_state
            else:
                hidden = decoder(input_ids=ids, position_ids=positions, attention_mask=_prepared_mask(ids.device),
                                 cu_seq_lens_q=bounds).last_hidden_state
                hidden = hidden.expand(index.shape[0], -1, -1)  # one row, gathered once per sample
        h = hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])).float()
        return h, self.model.get_output_embeddings().weight

    def packs(self, options: "ScoringOptions") -> bool:
        """Whether micro-batches go in packed (`ScoringOptions.packed` and an sdpa model, switched to the
        packing-aware sdpa here)."""
        from .kernels.packed_attention import use_packed_attention

        return options.packed and use_packed_attention(self.model)


def _unwrapped(scorer: torch.nn.Module) -> ResponseScorer | None:
    inner = getattr(scorer, "module", scorer)  # DDP keeps the wrapped module as .module
    return inner if isinstance(inner, ResponseScorer) else None


def score_micro_batch(scorer: torch.nn.Module, samples: Sequence[StepSample], pad_id: int, options: "ScoringOptions",
                      device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states predicting every response token [B, Tr, H], the lm_head weight, targets and mask [B, Tr]:
    the micro-batch packed (`pack_flat`) where the scorer's model can take it, else right-padded (`pack`)."""
    inner = _unwrapped(scorer)
    if inner is not None and inner.packs(options):
        flat = pack_flat(samples, device)
        h, weight = scorer(flat.ids, None, flat.index, flat.positions, flat.bounds)
        return h, weight, flat.targets, flat.mask
    batch = pack(samples, pad_id, device)
    h, weight = scorer(batch.ids, batch.attn, batch.index)
    return h, weight, batch.targets, batch.mask


@torch.no_grad()
def response_logprobs(model: Any, samples: Sequence[StepSample], pad_id: int, options: ScoringOptions) -> list[torch.Tensor]:
    """No-grad per-token log-probs of every sample's response under `model` (old policy or reference; a
    causal LM, or a `ResponseScorer` such as the FSDP-sharded one), chunked over the vocabulary; computed
    on the model's device, returned on the CPU, one tensor per sample."""
    from .kernels import chunked_logprobs

    scorer = model if isinstance(model, ResponseScorer) else ResponseScorer(model, options.autocast)
    device = module_device(scorer)
    out: list[torch.Tensor] = []
    for i in range(0, len(samples), options.micro_batch_size):
        chunk = samples[i : i + options.micro_batch_size]
        h, weight, targets, mask = score_micro_batch(scorer, chunk, pad_id, options, device)
        logp = chunked_logprobs(h, weight.float(), targets, options.temperature, options.chunk_size, mask=mask)
        out += [logp[row, : len(s.response_ids)].float().cpu().clone() for row, s in enumerate(chunk)]
    return out


def with_logprobs(samples: Sequence[StepSample], attr: str, values: Sequence[torch.Tensor]) -> list[StepSample]:
    """Copies of `samples` with `attr` ('old_logprobs' or 'ref_logprobs') set from `values`."""
    if len(values) != len(samples):
        raise ValueError(f"{len(values)} log-prob rows for {len(samples)} samples")
    return [replace(s, **{attr: v}) for s, v in zip(samples, values)]


def _stack(samples: Sequence[StepSample], attr: str, width: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros((len(samples), width))
    for i, s in enumerate(samples):
        v = getattr(s, attr)
        v = torch.as_tensor(np.asarray(v, dtype=np.float32)) if not isinstance(v, torch.Tensor) else v
        out[i, : len(v)] = v
    return out.to(device)


def micro_batch_loss(
    scorer: torch.nn.Module, samples: Sequence[StepSample], pad_id: int, loss_config: LossConfig,
    options: ScoringOptions, old_attr: str = "old_logprobs", tis_cap: float | None = None,
) -> tuple[torch.Tensor, dict]:
    """GRPO-MR loss of one micro-batch (paper Eq. 5): the fused chunked kernel, or the plain reference.

    `tis_cap`: weight each token's policy term by min(exp(old − sampler), tis_cap), folded into a per-token
    advantage (`sampler_correction`)."""
    device = module_device(scorer)
    h, weight, targets, mask = score_micro_batch(scorer, samples, pad_id, options, device)
    width = mask.shape[1]
    old = _stack(samples, old_attr, width, device)
    ref = _stack(samples, "ref_logprobs", width, device) if loss_config.kl_coef else None
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device)
    if tis_cap is not None:
        from .sampler_correction import truncated_is_weights

        adv = adv[:, None] * truncated_is_weights(old, _stack(samples, "sampler_logprobs", width, device), tis_cap)
    if options.fused:
        from .kernels import fused_grpo_loss

        out = fused_grpo_loss(h, weight, targets, old, ref, adv, mask, config=loss_config,
                              temperature=options.temperature, chunk_size=options.chunk_size)
        return out.loss, out.metrics
    logp, entropy = reference_logprobs_from_hidden(h, weight.float(), targets, options.temperature,
                                                   return_entropy=True)
    return grpo_loss(logp, old, ref, adv, mask, entropy if loss_config.entropy_coef else None, loss_config)
