"""What the update stage receives: `UpdateConfig` (the optimiser, the PPO pass and how log-probs are computed) and
`PlacementConfig` (where the reference lives and how several processes share the policy). With `loss_terms.
LossConfig` (the per-token terms of paper Eq. 5) they are three branches of `TrainConfig`, each handed whole to the
functions that read it (`ppo.ppo_update`, `logprobs.response_logprobs`, `sharding.place_models`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import require_choice, require_non_negative, require_positive

OLD_LOGPROBS: tuple[str, ...] = ("recompute", "sampler")
AUTO_TIS = "auto"
"""`UpdateConfig.tis_cap` value: the correction on exactly when a vLLM engine samples (`resolved_tis_cap`)."""
DEFAULT_TIS_CAP = 2.0
"""The cap 'auto' gives vLLM rollouts: TRL's per-token truncated importance sampling default (docs/method.md,
'Policy loss')."""
REFERENCE_DEVICES: tuple[str, ...] = ("same", "cpu")
"""`PlacementConfig.reference_device`: 'same' (on the training device) or 'cpu' (kept in CPU memory)."""
SHARDINGS: tuple[str, ...] = ("ddp", "fsdp")
"""`PlacementConfig.sharding` under torchrun: a whole copy per rank, or FSDP2 shards (`sharding`)."""
PRECISIONS: tuple[str, ...] = ("fp32-master", "bf16-compute-fp32-master")
"""`UpdateConfig.precision`: what the update's forward and backward multiply with (`precision`)."""


@dataclass
class UpdateConfig:
    """The update of one iteration: AdamW, the PPO pass over mini-batches of micro-batches, the importance ratio's
    denominator, and how the decoder and the loss are computed (precision, packing, the fused kernel, LoRA)."""

    lr: float = 1e-6
    """AdamW learning rate, constant (official code: 1e-6)."""
    weight_decay: float = 0.01
    """AdamW weight decay (verl's actor default, which the official runs inherit: 0.01)."""
    grad_clip: float = 1.0
    """Max global grad norm (official code: 1.0)."""
    mini_batch_size: int = 256
    """Step samples per optimiser update (official code: 256 → several updates per iteration)."""
    micro_batch_size: int = 16
    """Step samples per forward/backward (official code: 16 per GPU); also per no-grad log-prob pass."""
    micro_batch_tokens: int | None = None
    """Cut the update's micro-batches by tokens instead: each mini-batch's samples, longest first, fill micro-batches of
    at most this many prompt + response tokens (a longer sample goes alone), so every forward/backward carries about
    the same work and memory where a sample count varies ~5x in tokens. Each micro-batch's loss then counts for its
    share of the mini-batch (its response tokens' share under token_mean, its samples' share otherwise), so a
    mini-batch's gradient is its samples' as one micro-batch, however they are cut (`distributed.schedule_update`).
    None: `micro_batch_size` samples, each micro-batch counting 1 / their number (the official code's accumulation).
    The no-grad log-prob passes keep `micro_batch_size`. 8 packed samples per micro-batch instead of 4 gave +17 %
    tokens/s on an H200 (benchmarks/results/gpu_update.json)."""
    ppo_epochs: int = 1
    """Passes over the iteration's samples (official code: 1)."""
    drop_to_multiple: bool = False
    """Randomly drop samples down to a multiple of mini_batch_size as the official code does (off: keep all)."""
    old_logprobs: str = "recompute"
    """'recompute' with the training model before the update (official) or 'sampler' (rollout log-probs)."""
    tis_cap: float | str | None = AUTO_TIS
    """Truncated importance sampling: weight each token's policy term by min(exp(old − sampler log-prob), tis_cap)
    to correct for the engine/trainer mismatch (`sampler_correction`; docs/method.md, 'Policy loss'). 'auto'
    (default): `DEFAULT_TIS_CAP` (2.0) when a vLLM engine samples the rollouts, whose kernels are not the trainer's,
    as TRL's GRPO trainer corrects vLLM rollouts by default (``vllm_importance_sampling_correction=True``, cap 2 in
    its per-token form); off with the HF backend and with old_logprobs='sampler' (`resolved_tis_cap`). A number:
    that cap (needs old_logprobs='recompute'); None: off."""
    fused_loss: bool = True
    """Fused chunked lm_head + loss kernel (never holds [tokens × vocab] logits); False = plain reference."""
    packed_micro_batches: bool = True
    """Pack each micro-batch's samples end to end without pad tokens (`samples.pack_flat`, attention kept
    within each sample; models whose attention is not sdpa keep the padded layout); False right-pads them. Same
    loss and gradients either way (tests/update/test_packing.py)."""
    logprob_chunk_size: int | None = None
    """Tokens per vocabulary chunk of the fused kernel (None: ~256 MiB of fp32 logits per chunk)."""
    bf16_autocast: bool = True
    """bf16 autocast for forward/backward (fp32 master weights); precision='fp32-master' only."""
    precision: str = "fp32-master"
    """What the update's forward and backward compute with (`PRECISIONS`). 'fp32-master': the fp32 weights
    themselves, each cast to bf16 at every use under `bf16_autocast` (fp32 residual stream). 'bf16-compute-fp32-master':
    a bf16 copy of the weights (bf16 activations, no per-use casts, no autocast); each micro-batch's gradient is
    added into fp32, AdamW steps the fp32 master weights, which then refresh the copy; the old log-probs come from the
    copy too (`update.precision`; FSDP: FSDP2's bf16 mixed precision with fp32 reduce-scatter). +2 bytes per parameter
    without FSDP; +23 % tokens/s on an H200 (gpu_update.json, 'packed_bf16_weights'). Not with LoRA."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (saves memory), in every `checkpoint_every_n_layers`-th decoder layer."""
    checkpoint_every_n_layers: int = 1
    """With gradient_checkpointing: recompute layers 0, k, 2k, ... only (transformers' ``every_n_layers``), the others
    keep their activations. 1 checkpoints every layer, the memory floor, at a price: 19.7 % against 25.5 % MFU
    without checkpointing (H200, gpu_update.json); k > 1 buys speed back with memory that would otherwise go unused."""
    lora: bool = False
    """Train LoRA adapters; the reference policy is then the base with adapters disabled."""
    lora_r: int = 16
    """LoRA rank."""

    def __post_init__(self) -> None:
        require_choice(self, "old_logprobs", OLD_LOGPROBS)
        require_choice(self, "precision", PRECISIONS)
        require_positive(self, ["lr", "mini_batch_size", "micro_batch_size", "ppo_epochs", "lora_r",
                                "checkpoint_every_n_layers"])
        if self.micro_batch_tokens is not None:
            require_positive(self, ["micro_batch_tokens"])
        if self.lora and self.precision != "fp32-master":
            raise ValueError(f"precision={self.precision!r} with lora=True: LoRA trains small fp32 adapters on the "
                             "frozen base; use precision='fp32-master'")
        require_non_negative(self, ["weight_decay", "grad_clip"])
        if self.logprob_chunk_size is not None:
            require_positive(self, ["logprob_chunk_size"])
        if self.mini_batch_size < self.micro_batch_size:
            raise ValueError(f"need micro_batch_size <= mini_batch_size, got {self.micro_batch_size} > "
                             f"{self.mini_batch_size}")
        if isinstance(self.tis_cap, str) and self.tis_cap != AUTO_TIS:
            raise ValueError(f"UpdateConfig.tis_cap must be a number > 0, {AUTO_TIS!r} or None, got {self.tis_cap!r}")
        if self.tis_cap not in (None, AUTO_TIS) and (self.tis_cap <= 0 or self.old_logprobs != "recompute"):
            raise ValueError(f"tis_cap={self.tis_cap} needs a value > 0 and old_logprobs='recompute' (with "
                             "'sampler' old log-probs every weight would be 1)")

    def resolved_tis_cap(self, own_kernels: bool) -> float | None:
        """The cap the update applies: `tis_cap` itself, or for 'auto' `DEFAULT_TIS_CAP` when the rollouts come from
        an engine with kernels of its own (`own_kernels`: vLLM, `generation.Backend.own_kernels`) and the old
        log-probs are recomputed (with the sampler's own, every weight would be 1), else None (off)."""
        if self.tis_cap != AUTO_TIS:
            return self.tis_cap
        return DEFAULT_TIS_CAP if own_kernels and self.old_logprobs == "recompute" else None


@dataclass
class PlacementConfig:
    """Where the reference policy lives and how several processes (torchrun) share the policy (README, 'GPUs')."""

    reference_device: str = "same"
    """'same': the reference policy lives on the run's device; 'cpu': it is kept in CPU memory and copied to the
    device only for its log-prob pass (FSDP: its shards stay on the CPU), freeing GPU memory for rollouts and update."""
    sharding: str = "ddp"
    """With several processes (torchrun): 'ddp' (a whole copy of weights, gradients and AdamW states per rank)
    or 'fsdp' (FSDP2: all three split across the ranks, for policies that do not fit one GPU; `sharding`)."""
    collective_timeout_s: float = 1800.0
    """With several processes: how long a rank waits in one collective (a gather, a checkpoint's barrier) before the
    job fails (`init_process_group(timeout=...)`). NCCL's own default, 10 minutes, is shorter than a 7B checkpoint
    or a long validation may keep one rank busy while the others wait."""

    def __post_init__(self) -> None:
        require_choice(self, "reference_device", REFERENCE_DEVICES)
        require_choice(self, "sharding", SHARDINGS)
        require_positive(self, ["collective_timeout_s"])
