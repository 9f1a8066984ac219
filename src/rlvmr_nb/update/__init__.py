"""Stage 4, update: from scored steps to a gradient step of the policy (paper Eq. 5).

`samples` (one `StepSample` per scored step, and its packing into micro-batch tensors) → `logprobs` (the
decoder's hidden states at the response positions; no-grad log-probs of the old and reference policies,
`reference_policy`) → `sampler_correction` (how far the sampler's log-probs are, and the truncated importance
weight) → `loss_terms` (`LossConfig` and the per-token PPO-clip, KL and entropy terms) → `reference_loss` (the
plain-PyTorch loss) or `kernels` (the same loss fused and chunked over the vocabulary) → `ppo` (the micro-batch
loss and one PPO pass over mini-batches). `distributed` schedules the work over processes and `sharding` places
the models (DDP or FSDP2)."""
