"""transformers `generate` backend: batched, left-padded, KV-cached, stops after ``</action>``.

Defaults follow ml_stack_probe §1: the sampling copy of the model is bf16 (AMX makes batched bf16
prefill ~2.5x faster than fp32 on this CPU), batches of 8. The trainer keeps its fp32 master model;
`HFGenerator.update_weights` copies its weights into the sampling copy after each update.

Sampler log-probs. ``generate`` applies user logits processors BEFORE its own temperature/top-k/top-p
warpers, so a recorder passed by the user would see unscaled logits. We therefore pass temperature,
top-k and top-p ourselves as explicit processors, followed by the recorder, and give ``generate`` a
clean greedy config (nothing inherited from the model's generation config) so it adds no warpers
of its own. The recorder keeps one step of log-softmax and gathers the
sampled token's log-prob on the next call, so memory stays O(batch x vocab) instead of keeping every
step's scores.

Sampling. ``generate``'s own sampler is ``torch.multinomial``, whose exponential variates cost ~8 ms
per decode step for 8 rows x 49k tokens on this CPU (the whole model step is ~70 ms).
`ExponentialRaceSampler` (the last processor) makes the same kind of draw from uniforms in ~2.6 ms
and hands ``generate``, run in greedy mode, scores whose argmax is the drawn token.

Shared-prefix prefill. A rollout group is G copies of one task: at step 0 the G prompts are
identical, later they share the instructions, the task and the first observation. Prefill (not
decoding) dominates on CPU with ~1k-token prompts, so each chunk's longest common token prefix is
run once at batch size 1 and only the per-row suffixes are prefilled,
laid out as ``prefix | pad | suffix`` (middle padding; transformers derives position ids from the
attention mask's cumulative sum, so every suffix continues at the prefix's length). Mathematically
the same computation; tested token-for-token against the unshared path. With `cpu_attention` the
prefix's KV cache is kept once and attended by cascade attention (`shared_prefix`); otherwise it is
repeated G times.
"""

from __future__ import annotations

import contextlib
import copy
import os
from typing import Any, Iterator, Sequence

import torch
from tqdm.auto import tqdm
from transformers import (
    GenerationConfig,
    LogitsProcessorList,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from rlvmr_nb.devices import accumulation_dtype
from rlvmr_nb.rollout.generation import shared_prefix
from rlvmr_nb.rollout.generation.base import Generation, Generator, Prompt, SamplingConfig
from rlvmr_nb.rollout.generation.cpu_attention import ATTENTION_NAME, register
from rlvmr_nb.rollout.generation.kv_budget import auto_kv_cache_tokens, kv_bytes_per_token, split_by_kv_budget
from rlvmr_nb.rollout.generation.processors import (
    ExponentialRaceSampler,
    LogprobRecorder,
    StopOnStrings,
    rows_with_stop,
    stop_cut,
)
from rlvmr_nb.rollout.generation.shared_prefix import SharedPrefixCache
from rlvmr_nb.rollout.generation.static_decode import PREFILL_TOKENS, static_decode, supports_static_decode

from ...update.sharding import copy_weights, is_sharded, whole_copy

CPU_BATCH_ROWS = 8
"""Rows per generate call on a CPU when none is given (ml_stack_probe §1: larger batches stop paying there). On a
GPU every row of a call goes in one batch: a decode step reads the weights once for all of them."""


def common_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix shared by every row."""
    return len(os.path.commonprefix([list(r) for r in rows])) if rows else 0


DECODE_PATHS: tuple[str, ...] = ("auto", "static", "generate")
"""How `HFGenerator` decodes: ``generate`` (transformers' loop, dynamic cache), ``static`` (`static_decode`: a static
cache, one CUDA graph per token on a GPU), ``auto`` (static on CUDA where the model supports it, else generate)."""


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    eos = model.generation_config.eos_token_id
    ids = list(eos) if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def _feed_output_head_contiguous(model: Any) -> None:
    """Make the vocabulary projection's input contiguous. With ``logits_to_keep=1`` a batched prefill
    hands it ``hidden[:, -1:, :]``, a strided view that CPU matmul cannot fold into one GEMM: it runs
    a batched GEMM on a copy of the weight expanded per row (for 8 rows x SmolLM2's 49k x 576 head, a
    453 MB copy and ~0.39 s per generate call; 40 ms at one row, whose view counts as contiguous but
    keeps its strides; measured 2026-11-23). Copying the rows x 576 input instead costs nothing and
    gives the same logits."""
    head = model.get_output_embeddings()
    if head is not None:
        head.register_forward_pre_hook(lambda module, args: (args[0].clone(memory_format=torch.contiguous_format), *args[1:]))


class HFGenerator(Generator):
    """Generation with ``model.generate``.

    Args:
        model: a causal LM (e.g. from `rlvmr_nb.models.load_model`). A sharded (FSDP) model is gathered into a
            whole copy in `dtype` (`sharding.whole_copy`): every rank must build its generator together.
        tokenizer: its tokenizer (pad token required; SmolLM2 pads with ``<|im_end|>``).
        dtype: dtype to sample in. If it differs from the model's, a private copy is made and
            `update_weights` must be called after trainer updates; None or the same dtype shares
            the model itself (no sync needed).
        max_batch_size: rows per ``generate`` call (prompts x n are chunked); None: `CPU_BATCH_ROWS` on a CPU,
            all rows on a GPU.
        extra_logits_processors: applied to the raw logits before temperature/top-k/top-p (tests
            use this to script outputs).
        progress: show a tqdm bar over chunks.
        min_shared_prefix: prefill a chunk's common token prefix once when it is at least this long
            (and the chunk has >= 2 rows); 0 disables prefix sharing.
        cpu_attention: on CPU, attend with `cpu_attention`: packed-GQA decoding, and cascade
            attention over a chunk's shared prefix kept once instead of once per row
            (`shared_prefix`). None: only on the generator's private copy, never altering a model
            shared with the caller; True: also on a shared model; False: transformers' ``sdpa``.
        decode: one of `DECODE_PATHS`. The static path prefills without prefix sharing (on the H200 sharing
            measured 0.97x, i.e. no gain, where prefill is cheap next to decoding; benchmarks/results/gpu_rollout.json).
        cuda_graphs: capture the static path's decode step as a CUDA graph (on CUDA only).
        kv_cache_tokens: the KV-cache budget of one decode, in tokens: a chunk of rows whose cache, rows x (widest
            prompt + max_new_tokens), exceeds it is decoded in parts that fit (`split_by_kv_budget`); a chunk that
            fits is decoded as without a budget. ``"auto"``: on CUDA, derived at each call from the free memory
            (`auto_kv_cache_tokens`, `kv_bytes_per_token`), none on a CPU; None: no budget. docs/gpu.md,
            'Rollouts at long prompts'.
        prefill_tokens: the static path's prompt tokens per prefill forward (`static_decode.PREFILL_TOKENS`).
        compact_rows: the static path drops finished rows from the decode batch (`static_decode`); the tokens do
            not change, only the work of the rows that are done.

    Seeding: chunk k of a call is sampled under ``seed + k``, so seeded results are reproducible
    for a fixed ``max_batch_size`` (the vLLM backend seeds per row instead). Each row keeps its place in its
    chunk's random stream (`ExponentialRaceSampler`), so the KV-cache budget and the dropping of finished rows
    leave the draws alone.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        dtype: torch.dtype | None = torch.bfloat16,
        max_batch_size: int | None = None,
        extra_logits_processors: Sequence[Any] = (),
        progress: bool = False,
        min_shared_prefix: int = 64,
        cpu_attention: bool | None = None,
        decode: str = "auto",
        cuda_graphs: bool = True,
        kv_cache_tokens: int | str | None = "auto",
        prefill_tokens: int = PREFILL_TOKENS,
        compact_rows: bool = True,
    ) -> None:
        if tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token; set tokenizer.pad_token = tokenizer.eos_token")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.extra_logits_processors = list(extra_logits_processors)
        self.progress = progress

        model_dtype = next(model.parameters()).dtype
        if is_sharded(model):  # FSDP: sampling needs whole weights; gathered here, every rank together
            self.model = whole_copy(model, next(model.parameters()).device, dtype or model_dtype)
        elif dtype is None or dtype == model_dtype:
            self.model = model
        else:
            self.model = copy.deepcopy(model).to(dtype)
            self.model.requires_grad_(False)
        self.model.eval()
        self.eos_ids = _eos_ids(self.model, tokenizer)
        if min_shared_prefix < 0:
            raise ValueError(f"min_shared_prefix must be >= 0, got {min_shared_prefix}")
        self.min_shared_prefix = min_shared_prefix
        if decode not in DECODE_PATHS:
            raise ValueError(f"decode={decode!r}; choose one of {DECODE_PATHS}")
        self.decode, self.cuda_graphs = decode, cuda_graphs
        if not (kv_cache_tokens in (None, "auto") or (isinstance(kv_cache_tokens, int) and kv_cache_tokens >= 1)):
            raise ValueError(f"kv_cache_tokens must be a positive number of tokens, 'auto' or None, got {kv_cache_tokens!r}")
        if prefill_tokens < 1:
            raise ValueError(f"prefill_tokens must be >= 1, got {prefill_tokens}")
        self.kv_cache_tokens, self.prefill_tokens, self.compact_rows = kv_cache_tokens, prefill_tokens, compact_rows
        on_cpu = next(self.model.parameters()).device.type == "cpu"
        if cpu_attention is None:
            cpu_attention = self.model is not model
        if cpu_attention and on_cpu and getattr(self.model.config, "_attn_implementation", None) == "sdpa":
            self.model.set_attn_implementation(register())
        if self.model is not model and on_cpu:
            _feed_output_head_contiguous(self.model)

    @property
    def uses_static_decode(self) -> bool:
        """Whether chunks decode with `static_decode` (see `DECODE_PATHS`)."""
        if self.decode == "generate":
            return False
        unsupported = supports_static_decode(self.model)
        if self.decode == "static" and unsupported:
            raise ValueError(f"decode='static' is not possible for this model: {unsupported}")
        return self.decode == "static" or (self.device.type == "cuda" and unsupported is None)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        """Where the sampling model lives: prompts, caches and the sampler's random numbers go there."""
        return next(self.model.parameters()).device

    def update_weights(self, model: Any) -> None:
        """Copy `model`'s weights into the sampling copy (cast to its dtype). No-op if shared.

        A sharded (FSDP) source is gathered one tensor at a time, so every rank must call this together."""
        if model is not self.model:
            copy_weights(model, self.model)

    def _encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            # Chat-formatted text already holds its special tokens; adding BOS again would double it.
            return list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        ids = [int(i) for i in prompt]
        if not ids:
            raise ValueError("empty prompt token list")
        return ids

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingConfig) -> list[Generation]:
        if isinstance(prompts, str):
            raise TypeError("generate() takes a list of prompts; wrap a single prompt in a list")
        encoded = [self._encode(p) for p in prompts]
        rows = [ids for ids in encoded for _ in range(sampling.n)]  # prompt-major
        size = self.max_batch_size or (max(len(rows), 1) if self.device.type == "cuda" else CPU_BATCH_ROWS)
        chunks = [rows[i : i + size] for i in range(0, len(rows), size)]
        results: list[Generation] = []
        for index, chunk in enumerate(tqdm(chunks, desc="generate", disable=None if self.progress else True)):
            seed = None if sampling.seed is None else sampling.seed + index
            results.extend(self._generate_within_budget(chunk, sampling, seed))
        return results

    def kv_cache_budget(self, rows: int) -> int | None:
        """This call's KV-cache budget in tokens for a chunk of `rows` rows (see `kv_cache_tokens`); None: none."""
        if self.kv_cache_tokens != "auto":
            return self.kv_cache_tokens  # type: ignore[return-value]
        if self.device.type != "cuda":
            return None
        free, _ = torch.cuda.mem_get_info(self.device)
        # memory the caching allocator holds but no tensor uses is this process's to reuse
        free += torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return auto_kv_cache_tokens(free, rows, self.model.config.vocab_size, kv_bytes_per_token(self.model))

    def _generate_within_budget(self, rows: list[list[int]], sampling: SamplingConfig,
                                seed: int | None) -> list[Generation]:
        """One chunk, decoded in the parts `split_by_kv_budget` makes of it; every row keeps its place in the
        chunk's random stream, so a part draws what the whole chunk would have drawn for its rows."""
        parts = split_by_kv_budget([len(r) for r in rows], sampling.max_new_tokens, self.kv_cache_budget(len(rows)))
        if len(parts) == 1:
            return self._generate_chunk(rows, sampling, seed)
        results: list[Generation | None] = [None] * len(rows)
        for part in parts:
            outs = self._generate_chunk([rows[i] for i in part], sampling, seed, places=(len(rows), part))
            for i, out in zip(part, outs):
                results[i] = out
        return results  # type: ignore[return-value]

    @contextlib.contextmanager
    def _clean_generation_config(self) -> Iterator[Any]:
        """Temporarily give the model a generation config with only bos/eos/pad, so nothing
        (top_k=20, repetition_penalty=1.05, ... from a hub config) alters our sampling."""
        saved = self.model.generation_config
        self.model.generation_config = GenerationConfig(
            bos_token_id=saved.bos_token_id, eos_token_id=self.eos_ids, pad_token_id=self.tokenizer.pad_token_id
        )
        try:
            yield
        finally:
            self.model.generation_config = saved

    def shared_prefix_length(self, rows: Sequence[Sequence[int]]) -> int:
        """Tokens of `rows` prefilled once for the whole chunk (0: no sharing). At least one token of
        every row stays in its suffix so each row has a last prompt position to sample from."""
        if self.min_shared_prefix == 0 or len(rows) < 2:
            return 0
        length = min(common_prefix_length(rows), min(len(r) for r in rows) - 1)  # <= every row minus one
        return length if length >= self.min_shared_prefix else 0

    def _layout(self, rows: list[list[int]], shared: int) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, W] input ids and attention mask: ``prefix | pad | suffix`` (left padding when shared=0)."""
        pad = self.tokenizer.pad_token_id
        suffix_width = max(len(r) - shared for r in rows)
        width = shared + suffix_width
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # the last prompt token of every row sits in the last column
            input_ids[i, :shared] = torch.tensor(r[:shared], dtype=torch.long)
            attention_mask[i, :shared] = 1
            input_ids[i, width - (len(r) - shared) :] = torch.tensor(r[shared:], dtype=torch.long)
            attention_mask[i, width - (len(r) - shared) :] = 1
        return input_ids, attention_mask

    @property
    def _cascade(self) -> bool:
        """Whether the model's attention can read one shared copy of a prefix (`shared_prefix`): our
        CPU attention and full (not sliding-window) attention in every layer."""
        config = self.model.config
        layer_types = getattr(config, "layer_types", None)
        full = all(t == "full_attention" for t in layer_types) if layer_types else getattr(config, "sliding_window", None) is None
        return full and getattr(config, "_attn_implementation", None) == ATTENTION_NAME

    def _prefix_cache(self, prefix: list[int], batch: int, headroom: int = 0) -> Any:
        """KV cache of `prefix` computed once at batch size 1: kept once (`SharedPrefixCache`) when
        the model attends with `cpu_attention`, else repeated `batch` times."""
        ids = torch.tensor([prefix], dtype=torch.long, device=self.device)
        # Only the cache is wanted: run the decoder without the vocabulary head (~20 % of SmolLM2's FLOPs
        # per token, and a [1, P, vocab] fp32 tensor).
        cache = self.model.get_decoder()(input_ids=ids, use_cache=True).past_key_values
        if self._cascade:
            return SharedPrefixCache(cache, headroom=headroom)
        cache.batch_repeat_interleave(batch)
        return cache

    def _generate_chunk(self, rows: list[list[int]], sampling: SamplingConfig, seed: int | None,
                        places: tuple[int, list[int]] | None = None) -> list[Generation]:
        """Generate for `rows` under `seed`; `places`: (rows of the seeded chunk, these rows' places in it), for
        a part of a chunk (the sampler then draws as for the whole chunk)."""
        pad = self.tokenizer.pad_token_id
        static = self.uses_static_decode
        shared = 0 if static else self.shared_prefix_length(rows)
        input_ids, attention_mask = (t.to(self.device) for t in self._layout(rows, shared))
        width = input_ids.shape[1]

        processors: list[Any] = list(self.extra_logits_processors)
        if not sampling.greedy:
            if sampling.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k > 0:
                processors.append(TopKLogitsWarper(top_k=sampling.top_k))
            if sampling.top_p < 1.0:
                processors.append(TopPLogitsWarper(top_p=sampling.top_p))
        recorder = LogprobRecorder(accumulation_dtype(self.dtype))
        processors.append(recorder)
        if not sampling.greedy:  # our sampler draws the token; generate then decodes greedily
            # A private generator: seeding never disturbs the caller's global RNG stream.
            generator = None if seed is None else torch.Generator(device=self.device).manual_seed(seed)
            batch, own = (None, None) if places is None else (
                places[0], torch.tensor(places[1], dtype=torch.long, device=self.device))
            processors.append(ExponentialRaceSampler(generator, accumulation_dtype(self.dtype), batch=batch, rows=own))
        if static:
            with torch.no_grad():
                generated = static_decode(
                    self.model, input_ids, attention_mask, max_new_tokens=sampling.max_new_tokens, pad_token_id=pad,
                    eos_ids=self.eos_ids, processors=processors, use_graph=None if
                    self.cuda_graphs else False, finished=(lambda g: rows_with_stop(self.tokenizer, g, sampling.stop))
                    if sampling.stop else None, prefill_tokens=self.prefill_tokens, compact=self.compact_rows)
            return self._finish_rows(rows, generated, recorder, sampling)
        stopper = StopOnStrings(self.tokenizer, sampling.stop, width)
        config = GenerationConfig(
            do_sample=False,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=self.eos_ids,
            pad_token_id=pad,
            use_cache=True,
        )
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            stack.enter_context(self._clean_generation_config())
            cache = self._prefix_cache(rows[0][:shared], len(rows), sampling.max_new_tokens) if shared else None
            if isinstance(cache, SharedPrefixCache):
                stack.enter_context(shared_prefix.active(cache))
            sequences = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                past_key_values=cache,
                generation_config=config,
                logits_processor=LogitsProcessorList(processors),
                stopping_criteria=StoppingCriteriaList([stopper] if sampling.stop else []),
            )
        return self._finish_rows(rows, sequences[:, width:], recorder, sampling)

    def _finish_rows(self, rows: list[list[int]], generated: torch.Tensor, recorder: LogprobRecorder,
                     sampling: SamplingConfig) -> list[Generation]:
        logprobs = recorder.finish(generated)
        return [
            self._finish_row(rows[i], generated[i].tolist(), logprobs[i].tolist(), sampling) for i in range(len(rows))
        ]

    def _finish_row(
        self, prompt: list[int], tokens: list[int], logprobs: list[float], sampling: SamplingConfig
    ) -> Generation:
        eos_at = next((k for k, tok in enumerate(tokens) if tok in self.eos_ids), None)
        before_eos = tokens if eos_at is None else tokens[:eos_at]
        cut = stop_cut(self.tokenizer, before_eos, sampling.stop)
        if cut is not None:
            keep, reason = cut, "stop"
        elif eos_at is not None:
            keep, reason = eos_at + 1, "eos"  # keep EOS: the trainer must learn to end the turn
        else:
            keep, reason = len(tokens), "length"
        kept = tokens[:keep]
        return Generation(
            text=self.tokenizer.decode(kept, skip_special_tokens=True),
            token_ids=kept,
            logprobs=logprobs[:keep],
            prompt_token_ids=list(prompt),
            finish_reason=reason,
        )
