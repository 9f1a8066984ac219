"""What a paper-scale training step costs in memory, measured on the CPU, and the GPU budgets that follow.

Measured here (CPU), every figure a byte count of the tensors PyTorch holds — a dispatch-mode tracker adds each
new tensor storage when an operation creates it and subtracts it when it is freed, so allocator caching and
fragmentation do not enter (they do on a GPU: the derived budgets keep a margin for them):

1. **Bytes per parameter** of each copy the trainer keeps, by construction: policy weights, gradients and AdamW
   states after one real `trainer` update step, the frozen reference (`reference_policy.frozen_copy`), and the
   rollout generator's copy (`generation.hf.HFGenerator`, bf16).
2. **Parameter counts** of Qwen2.5-1.5B and -7B (built on the meta device from their published configs: exact,
   no memory) and of the trainer's LoRA adapters on them (`runs.wrap_lora`, r = 16, every linear layer), counted
   on 1- and 2-layer models of the real shapes and scaled by layer count.
3. **Activation memory of the decoder**, the trainer's own path (`update.logprobs.ResponseLogprobModel` under
   `devices.autocast_context`), on random-weight models of the real layer shapes with 1 and 2 layers and 512 and
   1,024 tokens, with and without gradient checkpointing (and with LoRA for the 7B shape). Two numbers per case:
   the bytes the forward leaves held for the backward, and the peak above weights and already-accumulated
   gradients over a whole forward + backward (the regime of every micro-batch after the first). A fit
   ``bytes = L * (a + b * T) + c + d * T`` over the four (L, T) points, checked on the held bytes' exactness, gives
   per-layer and per-token costs that scale to 28 layers.
4. **KV-cache bytes per token** of generation, from a real forward's cache on a 1-layer bf16 model, × layers.

Read, not measured here: the fused loss's peak at the Qwen2.5-1.5B shape (``benchmarks/results/fused_loss.json``).

Derived (`derive`, with the per-micro-batch formulas `rlvmr-nb rehearse` plans with: `rlvmr_nb.rehearsal.memory`):
per-GPU budgets for Qwen2.5-1.5B full fine-tuning on one 80 GB GPU, 7B with FSDP on
8 × 80 GB, and 7B with LoRA on one GPU, for micro-batches of 16 samples at 2,048 and at 7,024 tokens (the
6,000-token prompt budget plus 1,024 response tokens: `step_samples.pack` pads a micro-batch to its widest
sample). **Derived from CPU measurements, not measured on a GPU**: `scripts/gpu_check.py` measures peaks there.

    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=src .venv/bin/python benchmarks/memory_model.py   # ~10 min on 2 cores
    ... benchmarks/memory_model.py --derive-only    # recompute the budgets from the saved measurements
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import weakref
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_map_only  # noqa: E402
from torch.utils.weak import WeakIdKeyDictionary  # noqa: E402

from rlvmr_nb.rehearsal.hardware import MODEL_SHAPES  # noqa: E402
from rlvmr_nb.rehearsal.memory import activation_bytes, fused_loss_bytes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "memory_model.json"
GIB = 2**30

QWEN25 = {name: shape.config_fields() for name, shape in MODEL_SHAPES.items()}
"""The published configs of Qwen/Qwen2.5-1.5B-Instruct and Qwen/Qwen2.5-7B-Instruct (`rlvmr_nb.rehearsal.hardware`)."""
TOKENS = (512, 1024)
LAYERS = (1, 2)


class LiveTensorBytes(TorchDispatchMode):
    """Bytes of live tensor storages created under this mode (plus those `track`ed), and their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.current = 0
        self.peak = 0

    def _freed(self, nbytes: int) -> None:
        self.current -= nbytes

    def track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        if storage in self.sizes:  # a view of a storage already counted
            return
        nbytes = storage.nbytes()
        self.sizes[storage] = nbytes
        self.current += nbytes
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._freed, nbytes)

    def reset_peak(self) -> int:
        self.peak = self.current
        return self.current

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tree_map_only(torch.Tensor, self.track, out)
        return out


def qwen_config(shape: str, layers: int | None = None, vocab: int | None = None):
    from transformers import Qwen2Config

    fields = dict(QWEN25[shape], max_position_embeddings=32768)
    if layers is not None:
        fields["num_hidden_layers"] = layers
    if vocab is not None:  # the decoder's activations do not depend on the vocabulary
        fields["vocab_size"] = vocab
    return Qwen2Config(**fields)


# --------------------------------------------------------------------------------------------------
# 1-2: bytes per parameter and parameter counts


def bytes_per_parameter() -> dict:
    """One real update step of the trainer's code on a tiny model, then the bytes of every copy per parameter."""
    from rlvmr_nb.rollout.generation.hf import HFGenerator
    from rlvmr_nb.models import load_model
    from rlvmr_nb.update.reference_policy import frozen_copy
    from rlvmr_nb.update.logprobs import ResponseLogprobModel, response_logprobs
    from rlvmr_nb.update.ppo import micro_batch_loss
    from rlvmr_nb.update.samples import with_logprobs
    from rlvmr_nb.train_config import TrainConfig

    sys.path.insert(0, str(REPO / "tests"))
    from trainer_helpers import random_samples

    model, tok = load_model("tiny-random:qwen2", seed=0)
    config = TrainConfig.from_dict(dict(bf16_autocast=True))
    n = sum(p.numel() for p in model.parameters())
    reference = frozen_copy(model)
    samples = random_samples(4)
    logp = response_logprobs(model, samples, tok.pad_token_id, config.update, config.rollout.temperature)
    samples = with_logprobs(with_logprobs(samples, "old_logprobs", logp), "ref_logprobs", logp)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.update.lr, weight_decay=config.update.weight_decay)
    loss, _ = micro_batch_loss(ResponseLogprobModel(model, True), samples, tok.pad_token_id, config.loss, config.update,
                               config.rollout.temperature)
    loss.backward()
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    optimizer.step()
    states = [t for s in optimizer.state.values() for k, t in s.items() if torch.is_tensor(t)]
    moments = sum(t.numel() * t.element_size() for s in optimizer.state.values() for k, t in s.items() if k != "step")
    steps = sum(t.numel() * t.element_size() for s in optimizer.state.values() for k, t in s.items() if k == "step")
    generator = HFGenerator(model, tok)  # the trainer's rollout copy (bf16 unless LoRA)
    return {
        "model": "tiny-random:qwen2", "parameters": n,
        "weights": sum(p.numel() * p.element_size() for p in model.parameters()) / n,
        "gradients": grads / n,
        "adamw_moments": moments / n,
        "adamw_step_bytes_per_tensor": steps / len(list(model.parameters())),
        "adamw_state_tensors": len(states),
        "reference": sum(p.numel() * p.element_size() for p in reference.parameters()) / n,
        "rollout_copy": sum(p.numel() * p.element_size() for p in generator.model.parameters()) / n,
    }


def parameter_counts() -> dict:
    """Exact parameter counts of the real models (meta device) and of the trainer's LoRA adapters on them."""
    from transformers import AutoModelForCausalLM

    from rlvmr_nb.runs.policy import wrap_lora

    out = {}
    for shape, fields in QWEN25.items():
        with torch.device("meta"):
            full = AutoModelForCausalLM.from_config(qwen_config(shape))
        layer = sum(p.numel() for p in full.model.layers[0].parameters())
        embedding = full.get_input_embeddings().weight.numel()
        head = 0 if fields["tie_word_embeddings"] else full.get_output_embeddings().weight.numel()
        lora_by_layers = {}
        for layers in LAYERS:
            with torch.device("meta"):
                small = AutoModelForCausalLM.from_config(qwen_config(shape, layers))
            lora = wrap_lora(small, 16)
            lora_by_layers[layers] = sum(p.numel() for p in lora.parameters() if p.requires_grad)
        per_layer = lora_by_layers[2] - lora_by_layers[1]
        out[shape] = {
            "parameters": sum(p.numel() for p in full.parameters()),
            "per_layer": layer, "embedding": embedding, "untied_head": head,
            "layers": fields["num_hidden_layers"], "hidden": fields["hidden_size"], "vocab": fields["vocab_size"],
            "kv_heads": fields["num_key_value_heads"],
            "head_dim": fields["hidden_size"] // fields["num_attention_heads"],
            "lora_r16_trainable": {"measured_layers": lora_by_layers, "per_layer": per_layer,
                                   "full_model": lora_by_layers[1] + per_layer * (fields["num_hidden_layers"] - 1)},
        }
    return out


# --------------------------------------------------------------------------------------------------
# 3-4: activations and KV cache


def activation_case(model, layers: int, tokens: int, checkpointing: bool) -> dict:
    """Bytes held from forward to backward, and the peak above weights + gradients over forward + backward."""
    from rlvmr_nb.devices import autocast_context
    from rlvmr_nb.update.logprobs import ResponseLogprobModel

    if checkpointing:
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    for p in trainable:  # gradients already accumulated, as from the second micro-batch on
        p.grad = torch.zeros_like(p)
    gen = torch.Generator().manual_seed(tokens)
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=gen)
    attn = torch.ones_like(ids)
    response = tokens // 4
    index = torch.arange(tokens - response - 1, tokens - 1).unsqueeze(0)
    upstream = torch.randn(1, response, model.config.hidden_size, generator=gen)
    logprob_model = ResponseLogprobModel(model, autocast=True)
    tracker = LiveTensorBytes()
    t0 = time.perf_counter()
    with tracker:
        for t in [*model.parameters(), *[p.grad for p in trainable], ids, attn, index, upstream]:
            tracker.track(t)
        base = tracker.reset_peak()
        with autocast_context(torch.device("cpu"), True):
            hidden, _ = logprob_model(ids, attn, index)
        held = tracker.current - base
        (hidden * upstream).sum().backward()
        del hidden
        peak = tracker.peak - base
    return {"layers": layers, "tokens": tokens, "gradient_checkpointing": checkpointing,
            "held_for_backward_bytes": held, "peak_above_weights_and_grads_bytes": peak,
            "seconds": round(time.perf_counter() - t0, 1)}


def fit(cases: list[dict], key: str) -> dict:
    """Solve ``bytes = L * (a + b * T) + c + d * T`` from the four (L, T) points of one setting."""
    pts = {(c["layers"], c["tokens"]): c[key] for c in cases}
    (l1, l2), (t1, t2) = LAYERS, TOKENS
    per_layer = {t: (pts[(l2, t)] - pts[(l1, t)]) / (l2 - l1) for t in TOKENS}   # a + b T
    rest = {t: pts[(l1, t)] - l1 * per_layer[t] for t in TOKENS}                  # c + d T
    b = (per_layer[t2] - per_layer[t1]) / (t2 - t1)
    d = (rest[t2] - rest[t1]) / (t2 - t1)
    return {"per_layer_bytes": per_layer[t1] - b * t1, "per_layer_per_token_bytes": b,
            "fixed_bytes": rest[t1] - d * t1, "fixed_per_token_bytes": d}


def activations(shapes: list[str]) -> dict:
    from transformers import AutoModelForCausalLM

    from rlvmr_nb.runs.policy import wrap_lora

    out = {}
    settings = [(shape, False) for shape in shapes] + [("qwen2.5-7b", True)] * ("qwen2.5-7b" in shapes)
    for shape, lora in settings:
        cases = []
        for layers in LAYERS:
            model = AutoModelForCausalLM.from_config(qwen_config(shape, layers, vocab=64), dtype=torch.float32)
            if lora:
                model = wrap_lora(model, 16)
                model.enable_input_require_grads()  # checkpointed LoRA layers need a grad-requiring input
            for checkpointing in (False, True):
                for tokens in TOKENS:
                    case = activation_case(model, layers, tokens, checkpointing)
                    print(json.dumps({"shape": shape, "lora": lora, **case}), flush=True)
                    cases.append(case)
            del model
        name = f"{shape}{'+lora' if lora else ''}"
        out[name] = {"cases": cases, "fits": {
            f"{'checkpointing' if ckpt else 'no_checkpointing'}/{key}": fit(
                [c for c in cases if c["gradient_checkpointing"] == ckpt], key)
            for ckpt in (False, True) for key in ("held_for_backward_bytes", "peak_above_weights_and_grads_bytes")}}
    return out


def kv_cache_bytes_per_token(shapes: list[str]) -> dict:
    from transformers import AutoModelForCausalLM

    out = {}
    for shape in shapes:
        model = AutoModelForCausalLM.from_config(qwen_config(shape, 1, vocab=64), dtype=torch.bfloat16)
        with torch.no_grad():
            cache = model(torch.zeros(1, 100, dtype=torch.long), use_cache=True).past_key_values
        layer = cache.layers[0]
        per_layer = (layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()) / 100
        out[shape] = {"bf16_per_token_per_layer": per_layer,
                      "bf16_per_token": per_layer * QWEN25[shape]["num_hidden_layers"]}
    return out


# --------------------------------------------------------------------------------------------------
# derived GPU budgets


def derive(measured: dict) -> dict:
    """Per-GPU budgets of three set-ups at two micro-batch lengths (README, 'GPUs')."""
    per_param = measured["bytes_per_parameter"]
    counts = measured["parameter_counts"]
    kv = measured["kv_cache"]
    fused = measured["fused_loss"]
    micro, rows = 16, 8  # samples per micro-batch (official code: 16 per GPU); HFGenerator rows per generate call
    usable = 0.9 * 80e9  # 10 % of the card kept for the CUDA context, fragmentation, NCCL buffers
    lengths = {"2,048 tokens per sample": 2048, "7,024 tokens per sample (6,000 + 1,024)": 7024}
    setups = []
    for name, shape_name, gpus, lora in (("Qwen2.5-1.5B full fine-tuning, 1 x 80 GB", "qwen2.5-1.5b", 1, False),
                                         ("Qwen2.5-7B full fine-tuning, FSDP on 8 x 80 GB", "qwen2.5-7b", 8, False),
                                         ("Qwen2.5-7B LoRA (r = 16), 1 x 80 GB", "qwen2.5-7b", 1, True)):
        c = counts[shape_name]
        p = c["parameters"]
        act_fits = measured["activations"][f"{shape_name}{'+lora' if lora else ''}"]["fits"]
        trainable = c["lora_r16_trainable"]["full_model"] if lora else p
        always = {  # held through the whole iteration
            "policy weights (fp32)": per_param["weights"] * p / gpus,
            "AdamW moments (fp32)": per_param["adamw_moments"] * trainable / gpus,
            # LoRA: the reference is the base with adapters off (no copy)
            "reference (fp32; 0 with reference_device='cpu')": 0.0 if lora else per_param["reference"] * p / gpus,
            # LoRA samples from the policy itself; otherwise a whole bf16 copy on every GPU (FSDP too)
            "rollout copy (bf16)": 0.0 if lora else per_param["rollout_copy"] * p,
        }
        # rollouts: the KV cache of one generate call (LoRA generates with the fp32 policy: fp32 cache)
        rollout = {"KV cache (8 rows x 7,024 tokens)": kv[shape_name]["bf16_per_token"] * (2 if lora else 1) * rows * 7024}
        update_fixed = {"gradients (fp32)": per_param["gradients"] * trainable / gpus}  # freed after each optimizer step
        if gpus > 1:  # FSDP: the root unit (final norm + untied head) whole from forward to backward, + its gradient,
            # and two whole decoder layers (the one computing, the next prefetched) + one layer's gradient
            root = 4 * (c["untied_head"] + c["hidden"])
            update_fixed["FSDP whole units (root + 2 layers, fp32) and their gradients"] = 2 * root + 3 * 4 * c["per_layer"]
        def peak(samples: int, length: int, checkpointing: bool) -> tuple[float, dict]:
            update = {**update_fixed,
                      "activations (measured per token and layer, x layers)": activation_bytes(
                          act_fits, checkpointing, c["layers"], samples * length),
                      "fused loss peak": fused_loss_bytes(fused, c["hidden"], c["vocab"], samples * min(1024, length // 4), not lora)}
            return sum(always.values()) + max(sum(rollout.values()), sum(update.values())), update

        budgets = []
        for label, length in lengths.items():
            for checkpointing in (False, True):
                total, update = peak(micro, length, checkpointing)
                fitting = [m for m in range(micro, 0, -1) if peak(m, length, checkpointing)[0] < usable]
                # with vLLM rollouts its engine (weights + KV pool) replaces the HF rollout copy and KV cache
                trainer_only = sum(always.values()) - always["rollout copy (bf16)"] + sum(update.values())
                budgets.append({"micro_batch": f"{micro} x {label}", "tokens": micro * length,
                                "gradient_checkpointing": checkpointing,
                                "update_gib": {k: round(v / GIB, 2) for k, v in update.items()},
                                "peak_gib": round(total / GIB, 1), "fits_80gb": total < usable,
                                "largest_micro_batch_that_fits": fitting[0] if fitting else 0,
                                "vllm_gpu_memory_utilization_max": round(max(0.0, (usable - trainer_only) / 80e9), 2)})
        setups.append({"setup": name, "gpus": gpus, "parameters": p, "trainable_parameters": trainable,
                       "always_gib": {k: round(v / GIB, 2) for k, v in always.items()},
                       "always_total_gib": round(sum(always.values()) / GIB, 1),
                       "rollout_gib": {k: round(v / GIB, 2) for k, v in rollout.items()}, "budgets": budgets})
    return {"status": "derived from CPU measurements, not measured on a GPU",
            "assumptions": {"gpu_memory_bytes": 80e9, "usable_fraction": 0.9,
                            "micro_batch_samples": micro, "generate_rows": rows,
                            "rollout_copy_and_kv": "HF backend; with vLLM its engine holds weights and KV cache inside "
                                                   "its gpu_memory_utilization share instead",
                            "not_counted": "CUDA context (~0.5-1 GiB), allocator fragmentation, NCCL buffers: the "
                                           "10 % margin (usable_fraction) is for them"},
            "setups": setups}


# --------------------------------------------------------------------------------------------------


def read_fused_loss() -> dict:
    doc = json.loads((REPO / "benchmarks/results/fused_loss.json").read_text())
    case = next(c for c in doc["cases"] if (c["shape"], c["dtype"], c["tokens"], c["method"], c["status"])
                == ("qwen2.5-1.5b", "bfloat16", 4096, "fused", "ok"))
    return {"source": "benchmarks/results/fused_loss.json", "shape": "qwen2.5-1.5b", "dtype": "bfloat16",
            "tokens": case["tokens"], "hidden": case["hidden"], "vocab": case["vocab"],
            "peak_bytes": case["peak_mb"] * 2**20, "chunk_size": case["chunk_size"],
            "git_sha": doc.get("git_sha")}


def provenance() -> dict:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        sha = None
    import transformers

    return {"command": " ".join([Path(sys.executable).name, *sys.argv]), "git_sha": sha,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__},
            "machine": {"processor": platform.processor() or platform.machine(), "cores": os.cpu_count()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--shapes", nargs="+", default=list(QWEN25), choices=list(QWEN25))
    parser.add_argument("--derive-only", action="store_true", help="recompute `derived` from the measurements in --out")
    args = parser.parse_args(argv)
    if args.derive_only:
        doc = json.loads(args.out.read_text())
        doc["provenance"]["derived_with"] = {k: v for k, v in provenance().items() if k in ("command", "git_sha", "created")}
    else:
        started = time.time()
        doc = {"what": "memory of a training step: measured on the CPU per parameter, per token and per layer",
               "provenance": provenance(),
               "bytes_per_parameter": bytes_per_parameter(),
               "parameter_counts": parameter_counts(),
               "kv_cache": kv_cache_bytes_per_token(args.shapes),
               "fused_loss": read_fused_loss(),
               "activations": activations(args.shapes)}
        doc["provenance"]["seconds"] = round(time.time() - started)
    doc["derived"] = derive(doc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for setup in doc["derived"]["setups"]:
        print(setup["setup"], "held throughout", setup["always_total_gib"], "GiB")
        for b in setup["budgets"]:
            print(f"  {b['micro_batch']}, checkpointing={b['gradient_checkpointing']}: peak {b['peak_gib']} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
