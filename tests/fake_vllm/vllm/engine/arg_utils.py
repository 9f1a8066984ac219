"""`vllm.engine.arg_utils.EngineArgs` of the stand-in: a few of the real dataclass's fields, the options `LLM` passes
on through ``**kwargs``."""

from dataclasses import dataclass


@dataclass
class EngineArgs:
    model: str = ""
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    enable_sleep_mode: bool = False
    logprobs_mode: str = "raw_logprobs"
