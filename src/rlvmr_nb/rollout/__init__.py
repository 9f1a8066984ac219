"""Stage 2, rollout: the policy acts in the environments and every step is recorded.

`generation` (the engines that sample: HF or vLLM) → `prompts` (the agent's memory rendered as a chat) → `loop`
(B tasks × G rollouts × up to T steps, `run_rollouts`) → `Episode`s of `Step`s (`rlvmr_nb.records`, the record every
stage reads, kept at the ground floor). `tags` parses one output into its tag, reasoning and action: the loop needs the action to act,
and the scoring stage reads the same parse."""

from .loop import EnvSlots, LocalEnvs, RolloutConfig, run_rollouts

__all__ = ["EnvSlots", "LocalEnvs", "RolloutConfig", "run_rollouts"]
