"""What two backward-pass fixes save in a lab iteration on the CPU, side by side with the code they replaced.

A CPU profile of the lab's update (8-task iteration, 32-sample packed micro-batches) showed a third of its time in
`aten::fill_`/`aten::add_` from `SliceBackward0` and `ExpandBackward0`, not in the matmuls:
  * the packed attention's per-sequence loop sliced q, k and v (``query[:, :, s:e]``); each slice's backward
    zero-fills a gradient the size of the whole packed row, so S sequences cost S row-sized fills and adds. Now
    ``torch.split``, whose backward is one concatenation;
  * `ResponseLogprobModel` expanded the packed row to [B, N, H] to `gather` each sample's response positions; the
    backward zero-fills and sums a B-times-larger gradient. Now the row is indexed directly.
This script runs both ('before': the replaced code patched back in; 'after': the package as it is) on the same
GRPO training (classroom cold start, sweep seed 100, 8 tasks x 8 rollouts, 3 iterations, the first a warm-up), in
alternating blocks, and reports the trainer's own phase times.

    PYTHONPATH=src python benchmarks/lab_update_cpu.py --out benchmarks/results/lab_update_cpu.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Iterator  # noqa: E402

PHASES = ("rollout_s", "logprobs_s", "update_s")


def _sliced_per_sequence(query: Any, key: Any, value: Any, ends: list[int], scaling: float | None) -> Any:
    """The replaced loop: one SDPA call per sequence on slices of the row."""
    import torch
    import torch.nn.functional as F

    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads != heads:
        key = key.repeat_interleave(heads // kv_heads, dim=1)
        value = value.repeat_interleave(heads // kv_heads, dim=1)
    parts = [F.scaled_dot_product_attention(query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], is_causal=True,
                                            scale=scaling) for s, e in zip(ends[:-1], ends[1:])]
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous()


def _expand_gather_forward(self: Any, ids: Any, attn: Any, index: Any, positions: Any = None,
                           bounds: Any = None) -> Any:
    """The replaced forward: the packed row expanded to one copy per sample, then gathered."""
    from rlvmr_nb.devices import autocast_context
    from rlvmr_nb.update.logprobs import _prepared_mask

    decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
    with autocast_context(ids.device, self.autocast):
        if bounds is None:
            hidden = decoder(input_ids=ids, attention_mask=attn).last_hidden_state
        else:
            hidden = decoder(input_ids=ids, position_ids=positions, attention_mask=_prepared_mask(ids.device),
                             cu_seq_lens_q=bounds).last_hidden_state
            hidden = hidden.expand(index.shape[0], -1, -1)
    h = hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])).float()
    return h, self.model.get_output_embeddings().weight


@contextlib.contextmanager
def replaced_code() -> Iterator[None]:
    from rlvmr_nb.update.kernels import packed_attention
    from rlvmr_nb.update.logprobs import ResponseLogprobModel

    saved = packed_attention._per_sequence, ResponseLogprobModel.forward
    packed_attention._per_sequence, ResponseLogprobModel.forward = _sliced_per_sequence, _expand_gather_forward
    try:
        yield
    finally:
        packed_attention._per_sequence, ResponseLogprobModel.forward = saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="configs/lab/classroom.json")
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--work", default="/tmp/lab-update-cpu")
    p.add_argument("--out", default="benchmarks/results/lab_update_cpu.json")
    args = p.parse_args(argv)

    import torch

    from rlvmr_nb.runs.machine import provenance
    from rlvmr_nb.lab.config import load_lab_config
    from rlvmr_nb.lab.experiment import run_arm, run_coldstart

    config = load_lab_config(args.base, tasks_per_iteration=8, iterations=3, lr=1e-4, kl_coef=0.1,
                             old_logprobs="sampler")
    rows: dict[str, list[dict[str, float]]] = {}
    for block in range(args.blocks):
        for code in ("before", "after"):
            out = Path(args.work) / f"{code}-{block}"
            shutil.rmtree(out, ignore_errors=True)
            run_coldstart(config, out)
            with replaced_code() if code == "before" else contextlib.nullcontext():
                run_dir = run_arm(config, out, "grpo", 100)
            metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()][1:]  # iteration 0: warm-up
            rows.setdefault(code, []).extend({k: m[k] for k in (*PHASES, "samples", "loss")} for m in metrics)
    means = {code: {k: sum(r[k] for r in rs) / len(rs) for k in PHASES} for code, rs in rows.items()}
    for m in means.values():
        m["iteration_s"] = sum(m[k] for k in PHASES)
    saving = {k: 1 - means["after"][k] / means["before"][k] for k in (*PHASES, "iteration_s")}
    doc = {"what": "GRPO lab iteration phases, replaced code ('before') vs the package ('after'), same seed",
           "iterations_per_code": {k: len(v) for k, v in rows.items()}, "rows": rows, "means": means,
           "saving": saving, "torch_threads": torch.get_num_threads(), "provenance": provenance()}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    for code, m in means.items():
        print(f"{code:7s} " + "  ".join(f"{k} {v:.2f}" for k, v in m.items()))
    print("saving " + "  ".join(f"{k} {100 * v:.1f} %" for k, v in saving.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
