"""The HF backend's static decode on a call with one long row and many short ones, on the CPU: what prefilling in
row chunks, dropping finished rows and a KV-cache budget do to peak memory, decode work and wall time
(docs/gpu.md, 'Rollouts at long prompts').

The call: `--short` rows with ~`--short-prompt`-token prompts that end (EOS) after 8 to `--short-ends` tokens, and
one row with a `--long-prompt`-token prompt that runs all `--new-tokens` (the long tail). Prompts are random token
ids; a logits processor (`EndRows`) bans EOS until each row's set length and forces it there, so every variant does
the same work, and seeded sampling draws the rest. Variants of `HFGenerator(decode="static")`:

* ``whole``: the call in one piece: one prefill forward over every row, every row decoded until the last one
  ends (what the static path did before; its dense prefill mask was [B, 1, W, W + T], here [B, 1, W, W]:
  ``dense_mask_bytes_before`` gives the old size);
* ``chunked_prefill``: prefill in row chunks of `--prefill-tokens` prompt tokens;
* ``chunked_prefill_compact``: and finished rows leave the decode batch (the CPU default);
* ``budget``: and a KV-cache budget of `--budget-share` of the whole call's cache (the long row is decoded apart).

Peak memory is the largest sum of live tensor bytes during one call (the dispatch-mode tracker of
`benchmarks/memory_model.py`: allocator caching not included), in a separate untimed call per variant because the
tracker slows every operation. Wall time: one untimed warm-up per variant, then `--rounds` rounds that run the
variants one after another, alternating, so a load change on the shared CPU hits them alike; medians reported.
``decode_row_steps``: rows x decode forwards (the decode work), ``prefill_forwards`` and their largest mask.
CPU timings of a tiny random model: they show where the work goes, not what a GPU gains (`scripts/gpu_steps.py`'s
``generation_budget`` step measures that on a GPU). Writes benchmarks/results/generation_budget.json::

    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=src .venv/bin/python benchmarks/generation_budget.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "generation_budget.json"
MIB = 2**20


class EndRows:
    """Logits processor giving each row a set response length: EOS banned until the row's end, forced there (None:
    never). A row is known by its prompt, since a KV-cache budget decodes a call in parts and finished rows leave
    the batch (`keep_rows`); a decode (a call or one of its parts) begins where the ids stop growing by one."""

    def __init__(self, ends: dict[tuple[int, ...], int | None], pad: int, eos: int) -> None:
        self.ends, self.pad, self.eos = ends, pad, eos
        self.width, self.start, self.row_ends = -1, 0, []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        width = input_ids.shape[1]
        if width != self.width + 1:  # a new decode: its first call sees the prompts alone
            self.start = width
            self.row_ends = [self.ends[tuple(t for t in row if t != self.pad)] for row in input_ids.tolist()]
        self.width = width
        scores[:, self.eos] = float("-inf")
        for row, end in enumerate(self.row_ends):
            if end == width - self.start:
                scores[row] = float("-inf")
                scores[row, self.eos] = 0.0
        return scores

    def keep_rows(self, keep: torch.Tensor, input_ids: torch.Tensor) -> None:
        self.row_ends = [self.row_ends[k] for k in keep.tolist()]


def make_call(tok: Any, rows: int, long_prompt: int, short_prompt: int, short_ends: int, long_rows: int = 1,
              seed: int = 0) -> tuple[list[list[int]], dict[tuple[int, ...], int | None]]:
    """`rows` prompts of random token ids: `long_rows` of `long_prompt` tokens that never end, the others of
    `short_prompt` ± 12 % tokens ending after 8 … `short_ends` tokens (evenly spread); and each prompt's end."""
    gen = torch.Generator().manual_seed(seed)
    banned = {tok.pad_token_id, tok.eos_token_id}
    ids = [i for i in range(100, len(tok)) if i not in banned]
    prompts, ends = [], {}
    for row in range(rows):
        long = row < long_rows
        length = long_prompt if long else int(short_prompt * (0.88 + 0.24 * torch.rand(1, generator=gen).item()))
        prompt = [ids[i] for i in torch.randint(0, len(ids), (length,), generator=gen).tolist()]
        prompts.append(prompt)
        short = row - long_rows
        ends[tuple(prompt)] = None if long else 8 + (short_ends - 8) * short // max(rows - long_rows - 1, 1)
    return prompts, ends


def kv_budget(prompts: list[list[int]], new_tokens: int, share: float) -> int:
    """`share` of the static cache the whole call would take: rows x (widest prompt + new tokens)."""
    return int(share * len(prompts) * (max(map(len, prompts)) + new_tokens))


def variant_options(budget: int, prefill_tokens: int) -> dict[str, dict]:
    """The `HFGenerator` options of each variant (see the module docstring)."""
    whole = dict(kv_cache_tokens=None, prefill_tokens=10**9, compact_rows=False)
    return {"whole": whole,
            "chunked_prefill": {**whole, "prefill_tokens": prefill_tokens},
            "chunked_prefill_compact": {**whole, "prefill_tokens": prefill_tokens, "compact_rows": True},
            "budget": dict(kv_cache_tokens=budget, prefill_tokens=prefill_tokens, compact_rows=True)}


@contextlib.contextmanager
def counting_forwards(model: Any) -> Iterator[dict]:
    """Counts of the model's forwards in the block: decode rows x steps, prefill forwards and their largest mask."""
    counts = {"decode_row_steps": 0, "decode_forwards": 0, "prefill_forwards": 0, "largest_prefill_mask_bytes": 0}

    def hook(module: Any, args: Any, kwargs: dict) -> None:
        ids, mask = kwargs["input_ids"], kwargs.get("attention_mask")
        if ids.shape[1] == 1:
            counts["decode_row_steps"] += ids.shape[0]
            counts["decode_forwards"] += 1
        else:
            counts["prefill_forwards"] += 1
            size = mask.numel() * mask.element_size() if mask is not None else 0
            counts["largest_prefill_mask_bytes"] = max(counts["largest_prefill_mask_bytes"], size)

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield counts
    finally:
        handle.remove()


def run_variants(model: Any, tok: Any, prompts: list[list[int]], ends: dict, new_tokens: int,
                 options: dict[str, dict], rounds: int, timer: Callable[[], Any],
                 peak: Callable[[dict], Any] | None = None, seed: int = 0,
                 on_error: Callable[[str, BaseException], dict] | None = None) -> dict[str, dict]:
    """Each variant: one warm-up call that is also measured (`peak(record)`: its peak memory; `counting_forwards`),
    then `rounds` timed calls, the variants alternating. `timer()` returns a context manager that records the
    block's seconds in its ``times``. A variant whose call raises is reported by `on_error(name, error)` (e.g.
    out of CUDA memory) and left out of the rounds. Also: kept tokens per second, and whether every row's tokens
    equal the first variant's."""
    from rlvmr_nb.rollout.generation.base import SamplingConfig
    from rlvmr_nb.rollout.generation.hf import HFGenerator

    sampling = SamplingConfig(temperature=1.0, max_new_tokens=new_tokens, stop=(), seed=seed)
    results: dict[str, dict] = {}
    generators, outputs, timers = {}, {}, {}

    def call(name: str) -> list:
        generators[name].extra_logits_processors = [EndRows(ends, tok.pad_token_id, tok.eos_token_id)]
        return generators[name].generate(prompts, sampling)

    for name, opts in options.items():
        generators[name] = HFGenerator(model, tok, dtype=None, decode="static", cpu_attention=False,
                                       min_shared_prefix=0, max_batch_size=len(prompts), **opts)
        record: dict[str, Any] = {"options": opts}
        try:
            with counting_forwards(model) as counts, (peak(record) if peak else contextlib.nullcontext()):
                outputs[name] = call(name)
        except Exception as err:  # noqa: BLE001 - reported as this variant's result; the others go on
            if on_error is None:
                raise
            results[name] = {**record, **on_error(name, err)}
            continue
        record.update(counts)
        record["kept_tokens"] = sum(len(g.token_ids) for g in outputs[name])
        results[name] = record
        timers[name] = timer()
    for _ in range(rounds):
        for name, measure in timers.items():
            with measure():
                call(name)
    reference = next(iter(outputs.values()), None)
    for name, measure in timers.items():
        seconds = statistics.median(measure.times)
        results[name].update(seconds=[round(s, 3) for s in measure.times], median_s=round(seconds, 3),
                             kept_tokens_per_s=round(results[name]["kept_tokens"] / seconds, 1),
                             rows_identical_to_first=sum(a.token_ids == b.token_ids for a, b in zip(
                                 outputs[name], reference)) / len(reference))
    return results


class WallTimer:
    """perf_counter seconds of each block (CPU)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.times.append(time.perf_counter() - t0)


@contextlib.contextmanager
def live_tensor_peak(record: dict) -> Iterator[None]:
    """Peak bytes of the tensors created in the block (`memory_model.LiveTensorBytes`), into `record`."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from memory_model import LiveTensorBytes

    with LiveTensorBytes() as tracker:
        yield
    record["peak_tensor_mib"] = round(tracker.peak / MIB, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", type=int, default=15, help="short rows (besides the one long row)")
    parser.add_argument("--long-prompt", type=int, default=1536, help="the long row's prompt tokens")
    parser.add_argument("--short-prompt", type=int, default=128, help="the short rows' prompt tokens (± 12 %%)")
    parser.add_argument("--short-ends", type=int, default=64, help="the last short row ends after this many tokens")
    parser.add_argument("--new-tokens", type=int, default=256, help="max_new_tokens: the long row's response")
    parser.add_argument("--prefill-tokens", type=int, default=2048, help="prompt tokens per prefill forward")
    parser.add_argument("--budget-share", type=float, default=0.25, help="KV budget: this share of the whole cache")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (each runs every variant once)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from rlvmr_nb.models import load_model
    from rlvmr_nb.rollout.generation.kv_budget import kv_bytes_per_token

    model, tok = load_model("tiny-random:llama", seed=0)
    prompts, ends = make_call(tok, args.short + 1, args.long_prompt, args.short_prompt, args.short_ends)
    budget = kv_budget(prompts, args.new_tokens, args.budget_share)
    options = variant_options(budget, args.prefill_tokens)
    with torch.no_grad():
        variants = run_variants(model, tok, prompts, ends, args.new_tokens, options, args.rounds, WallTimer,
                                live_tensor_peak)
    width = max(map(len, prompts))
    token_bytes = kv_bytes_per_token(model)
    whole = variants["whole"]
    for record in variants.values():  # the time ratio round by round: a load change hits a round's variants alike
        by_round = [t / w for t, w in zip(record["seconds"], whole["seconds"])]
        record["vs_whole"] = {"peak_memory": round(record["peak_tensor_mib"] / whole["peak_tensor_mib"], 3),
                              "decode_row_steps": round(record["decode_row_steps"] / whole["decode_row_steps"], 3),
                              "seconds_round_ratios": [round(r, 3) for r in by_round],
                              "seconds_median_of_round_ratios": round(statistics.median(by_round), 3)}
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    report = {
        "benchmark": "generation_budget", "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git_sha": sha,
        "machine": {"device": "cpu", "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "threads": torch.get_num_threads()},
        "model": "tiny-random:llama (2 layers, hidden 64, fp32, 49k vocabulary)",
        "call": {"rows": len(prompts), "long_rows": 1, "prompt_tokens": sorted(map(len, prompts), reverse=True),
                 "response_tokens": sorted((e if e is not None else args.new_tokens) + (e is not None)
                                           for e in ends.values()),
                 "new_tokens": args.new_tokens, "prefill_tokens": args.prefill_tokens, "kv_cache_budget_tokens": budget,
                 "whole_cache_tokens": len(prompts) * (width + args.new_tokens),
                 "kv_bytes_per_token": token_bytes,
                 "dense_mask_bytes_before": len(prompts) * width * (width + args.new_tokens)},
        "variants": variants,
        "notes": ["CPU wall times of a tiny random model (2 layers, hidden 64): per decode step the 49k-vocabulary "
                  "logits processors weigh as much as the model, so these times do not predict a GPU's; the GPU "
                  "measurement is scripts/gpu_steps.py's generation_budget step",
                  "peak_tensor_mib: live tensor bytes (no allocator caching), the model's weights not included",
                  "whole prefills with a [B, 1, W, W] mask; the static path before prefill chunking used "
                  "[B, 1, W, W + T] (dense_mask_bytes_before)"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for name, record in variants.items():
        print(f"{name:24s} peak {record['peak_tensor_mib']:8.1f} MiB  row-steps {record['decode_row_steps']:6d}  "
              f"prefill forwards {record['prefill_forwards']:3d}  median {record['median_s']:.3f} s  "
              f"identical rows {record['rows_identical_to_first']:.2f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
