"""Stage 3, scoring: what each step earned and how much better it was than its group's.

`rewards` (the outcome R(τ), the verifiable meta-reasoning step rewards and the format penalty) → `advantages`
(GRPO-MR, GRPO and GiGPO estimators: group-normalised values) → `scored` (`score_episodes`: one `ScoredStep`
per step, carrying its identity, reward, tag class and advantage, without touching the episodes) → `metrics`
(the paper's rates and the mean reward per tag class) with `stats` (their confidence intervals)."""
