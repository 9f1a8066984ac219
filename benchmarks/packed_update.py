"""Packed against right-padded update micro-batches on the CPU: padding removed, tokens/s, and equal gradients.

Samples: every step of the recorded SmolLM2-on-ALFWorld episodes in benchmarks/results (real prompt and response
token ids: prompts of 605-1,957 tokens, responses of 10-64), cut into micro-batches by the trainer's own schedule
(`distributed.schedule_update`: shuffled, then consecutive). The model has SmolLM2-135M's shape and tokenizer with
random weights and `--layers` decoder layers (the layout change is the same at any depth; fewer layers keep a
2-core run short). For each layout, `--timed` micro-batches go through `micro_batch_loss` forward + backward (fused
loss, fp32, as the CPU trainer runs) after one warm-up; the first micro-batch's gradients are compared between
layouts. The layouts alternate micro-batch by micro-batch. Writes benchmarks/results/packed_update_cpu.json::

    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=src .venv/bin/python benchmarks/packed_update.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from rlvmr_nb.update import distributed as dist  # noqa: E402
from rlvmr_nb.update.loss_terms import LossConfig  # noqa: E402
from rlvmr_nb.models import resolve_tokenizer  # noqa: E402
from rlvmr_nb.update.config import UpdateConfig  # noqa: E402
from rlvmr_nb.update.logprobs import ResponseLogprobModel  # noqa: E402
from rlvmr_nb.update.ppo import micro_batch_loss  # noqa: E402
from rlvmr_nb.update.samples import StepSample  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EPISODE_FILES = ("smollm2_alfworld_30_steps.episodes.jsonl", "stop_string_action.episodes.jsonl",
                 "stop_string_none.episodes.jsonl", "coldstart.episodes/eval_after.episodes.jsonl")
SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
                    rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=8192)


def smollm2_shaped(tok, layers: int, seed: int):
    """SmolLM2-135M's architecture (`layers` of its 30 decoder layers), random weights, sdpa attention."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(**SMOLLM2_135M, num_hidden_layers=layers, vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, attn_implementation="sdpa")
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def recorded_samples(seed: int) -> list[StepSample]:
    """One sample per recorded step with a response; advantages drawn with `seed`, old = sampler log-probs."""
    rng = random.Random(seed)
    samples = []
    for name in EPISODE_FILES:
        for line in (REPO / "benchmarks/results" / name).read_text().splitlines():
            for step in json.loads(line)["steps"]:
                response = step.get("response_token_ids") or []
                if response:
                    old = torch.tensor(step.get("response_logprobs") or [-1.0] * len(response), dtype=torch.float32)
                    samples.append(StepSample(list(step["prompt_token_ids"]), list(response), rng.uniform(-1, 1),
                                              old.tolist(), old_logprobs=old, ref_logprobs=old.clone()))
    return samples


def time_layouts(model, micro_batches, samples, pad_id) -> tuple[dict[str, list[float]], dict[bool, dict]]:
    """Seconds per micro-batch of each layout, the two interleaved micro-batch by micro-batch (this 2-core machine
    is shared: a slow spell then hits both alike); the first micro-batch warms up and gives the gradients."""
    logprob_model = ResponseLogprobModel(model, autocast=False)
    times: dict[str, list[float]] = {"padded": [], "packed": []}
    first_grads: dict[bool, dict] = {}
    for k, micro in enumerate(micro_batches):
        batch = [samples[i] for i in micro.indices]
        for packed in ((False, True) if k % 2 else (True, False)):
            t0 = time.perf_counter()
            loss, _ = micro_batch_loss(logprob_model, batch, pad_id, LossConfig(),
                                       UpdateConfig(bf16_autocast=False, packed_micro_batches=packed), 1.0)
            loss.backward()
            if k:
                times["packed" if packed else "padded"].append(time.perf_counter() - t0)
            else:
                first_grads[packed] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            model.zero_grad(set_to_none=True)
    return times, first_grads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--micro-batch-size", type=int, default=8, help="samples per micro-batch (the paper's config)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--timed", type=int, default=3, help="timed micro-batches per layout (after one warm-up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/packed_update_cpu.json")
    args = parser.parse_args(argv)

    tok = resolve_tokenizer("tiny-random:llama")
    samples = recorded_samples(args.seed)
    plan = dist.schedule_update(len(samples), len(samples), args.micro_batch_size, 1, random.Random(args.seed))
    micro_batches = [m for mb in plan for m in mb.micro_batches]
    lengths = [[len(samples[i].prompt_ids) + len(samples[i].response_ids) for i in m.indices] for m in micro_batches]
    real, padded = sum(map(sum, lengths)), sum(len(ls) * max(ls) for ls in lengths)
    model = smollm2_shaped(tok, args.layers, args.seed).train()
    chosen = micro_batches[: args.timed + 1]
    timed_tokens = sum(sum(ls) for ls in lengths[1 : args.timed + 1])
    times, grads = time_layouts(model, chosen, samples, tok.pad_token_id)
    result = {name: {"seconds": [round(t, 3) for t in ts], "real_tokens_per_s": round(timed_tokens / sum(ts), 1)}
              for name, ts in times.items()}
    print(result, flush=True)
    worst = max(float((grads[True][n] - grads[False][n]).abs().max() / (grads[False][n].abs().max() + 1e-30))
                for n in grads[False])
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    doc = {"benchmark": "update micro-batch forward + backward, packed vs right-padded (CPU)",
           "command": " ".join(["benchmarks/packed_update.py", *(argv if argv is not None else sys.argv[1:])]),
           "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git_sha": sha,
           "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__},
           "model": f"SmolLM2-135M shape, {args.layers} layers, random weights, fp32",
           "samples": len(samples), "micro_batch_size": args.micro_batch_size, "micro_batches": len(micro_batches),
           "padding_fraction_padded": round(1 - real / padded, 4), "tokens_real": real, "tokens_padded": padded,
           "timed_micro_batches": args.timed, **result,
           "speedup_packed": round(result["packed"]["real_tokens_per_s"] / result["padded"]["real_tokens_per_s"], 2),
           "max_relative_gradient_difference": worst}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("padding_fraction_padded", "speedup_packed", "max_relative_gradient_difference")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
