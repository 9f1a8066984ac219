"""What the update stage receives: `UpdateConfig` (the optimiser, the PPO pass and how log-probs are computed) and
`PlacementConfig` (where the reference lives and how several processes share the policy). With `loss_terms.
LossConfig` (the per-token terms of paper Eq. 5) they are three branches of `TrainConfig`, each handed whole to the
functions that read it (`ppo.ppo_update`, `logprobs.response_logprobs`, `sharding.place_models`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import require_choice, require_non_negative, require_positive

OLD_LOGPROBS: tuple[str, ...] = ("recompute", "sampler")
REFERENCE_DEVICES: tuple[str, ...] = ("same", "cpu")
"""`PlacementConfig.reference_device`: 'same' (on the training device) or 'cpu' (kept in CPU memory)."""
SHARDINGS: tuple[str, ...] = ("ddp", "fsdp")
"""`PlacementConfig.sharding` under torchrun: a whole copy per rank, or FSDP2 shards (`sharding`)."""


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
    ppo_epochs: int = 1
    """Passes over the iteration's samples (official code: 1)."""
    drop_to_multiple: bool = False
    """Randomly drop samples down to a multiple of mini_batch_size as the official code does (off: keep all)."""
    old_logprobs: str = "recompute"
    """'recompute' with the training model before the update (official) or 'sampler' (rollout log-probs)."""
    tis_cap: float | None = None
    """Truncated importance sampling (TRL-style): weight each token's policy term by
    min(exp(old − sampler log-prob), tis_cap) to correct for the engine/trainer mismatch (`sampler_correction`;
    e.g. 2.0). None: off. Needs old_logprobs='recompute'."""
    fused_loss: bool = True
    """Fused chunked lm_head + loss kernel (never holds [tokens × vocab] logits); False = plain reference."""
    packed_micro_batches: bool = True
    """Pack each micro-batch's samples end to end without pad tokens (`samples.pack_flat`, attention kept
    within each sample; models whose attention is not sdpa keep the padded layout); False right-pads them. Same
    loss and gradients either way (tests/update/test_packing.py)."""
    logprob_chunk_size: int | None = None
    """Tokens per vocabulary chunk of the fused kernel (None: ~256 MiB of fp32 logits per chunk)."""
    bf16_autocast: bool = True
    """bf16 autocast for forward/backward (fp32 master weights)."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (saves memory)."""
    lora: bool = False
    """Train LoRA adapters; the reference policy is then the base with adapters disabled."""
    lora_r: int = 16
    """LoRA rank."""

    def __post_init__(self) -> None:
        require_choice(self, "old_logprobs", OLD_LOGPROBS)
        require_positive(self, ["lr", "mini_batch_size", "micro_batch_size", "ppo_epochs", "lora_r"])
        require_non_negative(self, ["weight_decay", "grad_clip"])
        if self.logprob_chunk_size is not None:
            require_positive(self, ["logprob_chunk_size"])
        if self.mini_batch_size < self.micro_batch_size:
            raise ValueError(f"need micro_batch_size <= mini_batch_size, got {self.micro_batch_size} > "
                             f"{self.mini_batch_size}")
        if self.tis_cap is not None and (self.tis_cap <= 0 or self.old_logprobs != "recompute"):
            raise ValueError(f"tis_cap={self.tis_cap} needs a value > 0 and old_logprobs='recompute' (with "
                             "'sampler' old log-probs every weight would be 1)")


@dataclass
class PlacementConfig:
    """Where the reference policy lives and how several processes (torchrun) share the policy (README, 'GPUs')."""

    reference_device: str = "same"
    """'same': the reference policy lives on the run's device; 'cpu': it is kept in CPU memory and copied to the
    device only for its log-prob pass (FSDP: its shards stay on the CPU), freeing GPU memory for rollouts and update."""
    sharding: str = "ddp"
    """With several processes (torchrun): 'ddp' (a whole copy of weights, gradients and AdamW states per rank)
    or 'fsdp' (FSDP2: all three split across the ranks, for policies that do not fit one GPU; `sharding`)."""

    def __post_init__(self) -> None:
        require_choice(self, "reference_device", REFERENCE_DEVICES)
        require_choice(self, "sharding", SHARDINGS)
