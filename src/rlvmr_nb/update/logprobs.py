"""Per-token log-probs of step samples' responses: the decoder's hidden states at the response positions.

`ResponseLogprobModel` runs the decoder and keeps only the hidden states that predict response tokens; the
vocabulary projection happens afterwards, in the fused chunked kernel (`kernels.fused_grpo_loss`) or the plain
reference (`reference_loss.reference_logprobs_from_hidden`), so prompt positions never meet ``lm_head`` and the
fused path never holds [tokens × vocab] logits. `response_logprobs` is the no-grad pass that gives the old
policy's and the reference's log-probs.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..devices import autocast_context, module_device, upcast
from .config import UpdateConfig
from .kernels import chunked_logprobs
from .kernels.packed_attention import use_packed_attention
from .samples import StepSample, pack, pack_flat

_PREPARED_MASKS: dict[torch.device, torch.Tensor] = {}


def _prepared_mask(device: torch.device) -> torch.Tensor:
    """Handed to the decoder with a packed row: transformers takes a 4-D mask as already prepared and builds none (it
    would otherwise build an [N, N] block mask from the restarting positions); the packed attention ignores it. One
    per device, made once (a host-to-device copy per forward would wait for the queued kernels)."""
    if device not in _PREPARED_MASKS:
        _PREPARED_MASKS[device] = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)
    return _PREPARED_MASKS[device]



class ResponseLogprobModel(torch.nn.Module):
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
                # One row: index it directly. Expanding it to [B, N, H] for `gather` made the backward zero-fill
                # and sum a B-times-larger gradient (a sixth of a CPU update, profiled).
                return upcast(hidden[0, index.reshape(-1)].reshape(*index.shape, -1)), self._lm_head_weight()
        h = upcast(hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])))
        return h, self._lm_head_weight()

    def _lm_head_weight(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight

    def packs(self, packed: bool) -> bool:
        """Whether micro-batches go in packed (`packed`, i.e. `UpdateConfig.packed_micro_batches`, and an sdpa model,
        switched to the packing-aware sdpa here)."""
        return packed and use_packed_attention(self.model)


def _unwrapped(logprob_model: torch.nn.Module) -> ResponseLogprobModel | None:
    inner = getattr(logprob_model, "module", logprob_model)  # DDP keeps the wrapped module as .module
    return inner if isinstance(inner, ResponseLogprobModel) else None


def micro_batch_hidden_states(logprob_model: torch.nn.Module, samples: Sequence[StepSample], pad_id: int,
                              packed: bool, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states predicting every response token [B, Tr, H], the lm_head weight, targets and mask [B, Tr]:
    the micro-batch packed (`pack_flat`) where `packed` and the wrapped model can take it, else right-padded
    (`pack`)."""
    inner = _unwrapped(logprob_model)
    if inner is not None and inner.packs(packed):
        flat = pack_flat(samples, device)
        h, weight = logprob_model(flat.ids, None, flat.index, flat.positions, flat.bounds)
        return h, weight, flat.targets, flat.mask
    batch = pack(samples, pad_id, device)
    h, weight = logprob_model(batch.ids, batch.attn, batch.index)
    return h, weight, batch.targets, batch.mask


@torch.no_grad()
def response_logprobs(model: Any, samples: Sequence[StepSample], pad_id: int, update: UpdateConfig,
                      temperature: float) -> list[torch.Tensor]:
    """No-grad per-token log-probs of every sample's response under `model` (old policy or reference; a
    causal LM, or a `ResponseLogprobModel` such as the FSDP-sharded one) at the sampling `temperature`, chunked
    over the vocabulary, `update.micro_batch_size` samples per pass; computed on the model's device, returned on
    the CPU, one tensor per sample."""
    logprob_model = model if isinstance(model, ResponseLogprobModel) else ResponseLogprobModel(model,
                                                                                               update.bf16_autocast)
    device = module_device(logprob_model)
    out: list[torch.Tensor] = []
    for i in range(0, len(samples), update.micro_batch_size):
        chunk = samples[i : i + update.micro_batch_size]
        h, weight, targets, mask = micro_batch_hidden_states(logprob_model, chunk, pad_id,
                                                             update.packed_micro_batches, device)
        logp = chunked_logprobs(h, upcast(weight), targets, temperature, update.logprob_chunk_size, mask=mask)
        out += [logp[row, : len(s.response_ids)].cpu().clone() for row, s in enumerate(chunk)]
    return out
