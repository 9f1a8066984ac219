"""Two seeded 2-iteration runs whose metrics are pinned: a regrouping of the package (modules moved, scoring
returned by value, the configuration restructured) must leave every number as it was, and a change to the
advantage or the loss must not pass unnoticed.

Why float64. In float32 a run's numbers are one machine's: another CPU's BLAS and vector kernels round the last
bits differently, a sampled token flips where two candidates nearly tie, and RL turns that into other
trajectories (an AMD EPYC machine gave success 0.5625 against 0.4375 pinned on the Intel one that wrote it, and a
KL 2 % apart). In float64 the policy, the sampler's softmax, the log-probs, the loss and AdamW round ~1e-16 apart
on any CPU: a flip would need two tokens tied to ~1e-15, so the sampled trajectories are the same everywhere.
What is left of the rounding, measured between this CPU's kernel paths (`make test-pinned`: MKL's compatible
path, ATen's non-vectorised kernels, one thread; docs/verification.md, 'Numbers across machines'), is at most
5e-12 relative and 1.4e-16 absolute. `RELATIVE_TOLERANCE` (1e-9) and `ABSOLUTE_FLOOR` (1e-12) sit far above that and
far below what a deliberate error changes: weighting the meta-reasoning advantage 0.9, the entropy bonus 1.1x or
the KL 1.1x moved some metric by 4-10 % (`test_a_changed_advantage_or_loss_breaks_the_pin`).

Two things keep the runs from forking: the door policy is taught by a convex fit (`pinned_door_policy`: the SFT
that teaches the trainer tests' policy is chaotic, and a start 1e-8 apart is another run), and the sampler computes
its softmax in the model's precision (`rlvmr_nb.devices.accumulation_dtype`), not in float32.

The fixture is written by this file's `_record`; timing columns (`*_s`, `*_per_s`) are wall-clock and left out.
Rerun `python tests/trainer/test_golden_run.py` only for a change that is meant to alter the numbers, and say
why in its commit."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

if __name__ == "__main__":  # `python tests/trainer/test_golden_run.py` rewrites the fixture; the helpers live in tests/
    sys.path.insert(0, str(Path(__file__).parents[1]))

torch = pytest.importorskip("torch")

from rlvmr_nb.models import load_model  # noqa: E402
from rlvmr_nb.update.loss_terms import LossConfig  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402
from rlvmr_nb.trainer import train  # noqa: E402

from door_env import door_tasks  # noqa: E402
from trainer_helpers import door_slots, pinned_door_policy, small_config  # noqa: E402

RELATIVE_TOLERANCE = 1e-9
"""How far a pinned metric may move, relative to its size (the module docstring says how it was chosen)."""
ABSOLUTE_FLOOR = 1e-12
"""How far a metric near 0 may move (e.g. the sampler/trainer log-prob gap, ~1e-8, which transformers' float32 cast
of the logits makes a rounding measurement)."""
ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "golden_run_metrics.json"


def _is_timing(column: str) -> bool:
    return column.endswith("_s") or column.endswith("_per_s")


def _metrics_csv(out_dir: Path) -> list[dict[str, str]]:
    with open(out_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if not _is_timing(k)} for row in csv.DictReader(f)]


FLOAT64 = dict(rollout_dtype="float64", bf16_autocast=False)
"""The pinned runs sample, score and update in float64 (the module docstring says why)."""


def _toy_config(out_dir: Path) -> TrainConfig:
    return TrainConfig.from_dict(dict(env="toy", model="tiny-random:llama", out_dir=str(out_dir), iterations=2, tasks_per_iteration=3,
                       group_size=3, max_steps=2, max_new_tokens=6, max_prompt_tokens=2048, mini_batch_size=8,
                       micro_batch_size=2, save_every=1, lr=1e-4, tis_cap=2.0, progress=False, **FLOAT64))


def _toy_run(out_dir: Path, config: TrainConfig | None = None) -> list[dict[str, str]]:
    """The random tiny model on the toy env (every output malformed), sampler correction on."""
    policy, tokenizer = load_model("tiny-random:llama", dtype=torch.float64)
    train(config or _toy_config(out_dir), policy=policy, tokenizer=tokenizer)
    return _metrics_csv(out_dir)


def _door_config(out_dir: Path) -> TrainConfig:
    return small_config(out_dir, iterations=2, tis_cap=2.0, prompt_style="meta_think",
                        loss=LossConfig(kl_coef=0.01, entropy_coef=0.001), **FLOAT64)


def _door_run(out_dir: Path, config: TrainConfig | None = None) -> list[dict[str, str]]:
    """A policy taught the format on the door env (`pinned_door_policy`): valid <planning> steps paid by the outcome
    and either door, so rewards, tag groups and both advantage channels are not all zero, with the KL term and the
    sampler correction on."""
    model, tok = pinned_door_policy()
    train(config or _door_config(out_dir), tasks=door_tasks(), make_env_slots=door_slots, policy=model, tokenizer=tok)
    return _metrics_csv(out_dir)


def _differences(expected: list[dict[str, str]], got: list[dict[str, str]]) -> list[tuple[int, str, str, str]]:
    """(iteration, column, pinned, got) of every metric outside the tolerance; a missing row or column counts."""
    if len(got) != len(expected):
        return [(-1, "rows", str(len(expected)), str(len(got)))]
    out = []
    for i, (want, have) in enumerate(zip(expected, got)):
        if sorted(have) != sorted(want):
            out.append((i, "columns", str(sorted(want)), str(sorted(have))))
            continue
        for column, a in want.items():
            b = have[column]
            try:
                x, y = float(a), float(b)
            except ValueError:
                if a != b:
                    out.append((i, column, a, b))
                continue
            if not ((math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=RELATIVE_TOLERANCE, abs=ABSOLUTE_FLOOR)):
                out.append((i, column, a, b))
    return out


@pytest.mark.pinned
def test_toy_run_metrics_are_pinned(tmp_path):
    assert _differences(json.loads(GOLDEN.read_text())["toy"], _toy_run(tmp_path)) == []


@pytest.mark.pinned
@pytest.mark.slow
def test_door_run_metrics_are_pinned(tmp_path):
    assert _differences(json.loads(GOLDEN.read_text())["door"], _door_run(tmp_path)) == []


@pytest.mark.slow
@pytest.mark.parametrize("change", ["mr_weight", "entropy_coef", "kl_coef"])
def test_a_changed_advantage_or_loss_breaks_the_pin(tmp_path, change):
    """The tolerance is not so loose that it hides a real change: the door run with the meta-reasoning advantage
    weighted 0.9 instead of 1, the entropy bonus 0.0011 instead of 0.001, or the KL coefficient 0.011 instead of
    0.01 leaves the pin."""
    config = _door_config(tmp_path)
    if change == "mr_weight":
        config = replace(config, method=replace(config.method, advantage=replace(config.method.advantage, mr_weight=0.9)))
    elif change == "entropy_coef":
        config = replace(config, loss=replace(config.loss, entropy_coef=0.0011))
    else:
        config = replace(config, loss=replace(config.loss, kl_coef=0.011))
    assert _differences(json.loads(GOLDEN.read_text())["door"], _door_run(tmp_path, config)) != []


FLOAT32_STEP = """
import hashlib, torch
from rlvmr_nb.models import load_model
model, tok = load_model("tiny-random:llama", seed=0)
ids = torch.arange(100, 164).reshape(2, 32)
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
torch.optim.AdamW(model.parameters(), lr=1e-3).step()
print(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest())
"""


def _other_numerics() -> dict[str, str]:
    """The environment `make test-pinned` reruns the pinned tests in (the Makefile's ``OTHER_NUMERICS``)."""
    line = next(x for x in (ROOT / "Makefile").read_text().splitlines() if x.startswith("OTHER_NUMERICS :="))
    return dict(item.split("=", 1) for item in line.split(":=", 1)[1].split())


def test_the_rerun_under_other_numerics_changes_float32_rounding():
    """`make test-pinned` checks something only if its numerics round differently: one float32 forward, backward and
    AdamW step of the tiny model must give other bits there than here (the float32 pins it was written to catch
    failed there, docs/verification.md, 'Numbers across machines')."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    plain, other = (subprocess.run([sys.executable, "-c", FLOAT32_STEP], env=e, capture_output=True, text=True,
                                   check=True, timeout=300).stdout for e in ({**env, "OMP_NUM_THREADS": "1"},
                                                                              {**env, **_other_numerics()}))
    assert plain != other


def _record() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        runs = {"toy": _toy_run(Path(tmp) / "toy"), "door": _door_run(Path(tmp) / "door")}
    GOLDEN.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    _record()
