"""`benchmarks/lab_gate_seeds.py`: the numbers behind 'a 2-seed classroom cannot be a fair test by the reference
gate' (docs/lab.md, 'What a fair classroom costs'), pinned on hand-made results."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from lab_gate_seeds import differences_from_bar, pooled_noise  # noqa: E402


def _results(tmp_path: Path, reference: float, rows: list[tuple[str, int, float]]) -> dict:
    record = tmp_path / "reference.json"
    record.write_text(json.dumps({"success": reference}))
    return {"config": {"reference_record": str(record)},
            "per_seed": [{"arm": a, "seed": s, "level": "L0", "success": v} for a, s, v in rows]
            + [{"arm": "GRPO", "seed": 1, "level": "L1", "success": 0.9}]}  # another level never counts


def test_the_bar_is_the_better_of_the_reference_and_the_seed_s_cold_start(tmp_path):
    """Seed 1's cold start (0.10) is under the reference (0.12), so the reference is its bar; seed 2's (0.15) is
    over it, so its own cold start is. A weak cold start must not lower the bar (the gate's point)."""
    doc = _results(tmp_path, 0.12, [("cold start", 1, 0.10), ("cold start", 2, 0.15), ("GRPO", 2, 0.18),
                                    ("GRPO", 1, 0.13), ("RLVMR", 1, 0.11), ("RLVMR", 2, 0.15)])
    diffs = differences_from_bar(doc)
    assert diffs["GRPO"] == pytest.approx([0.01, 0.03]) and diffs["RLVMR"] == pytest.approx([-0.01, 0.0])
    with pytest.raises(ValueError, match="no reference record"):
        differences_from_bar({"config": {}, "per_seed": []})


def test_noise_is_pooled_around_each_arm_s_own_mean():
    """An arm's true effect is not noise: two arms shifted by a constant give the same SD as one, and arms that
    move together within a seed correlate at +1, arms that move opposite at -1."""
    same = pooled_noise([{"A": [0.01, 0.03, 0.05], "B": [0.11, 0.13, 0.15]}])
    assert same["sd"] == pytest.approx(0.02) and same["df"] == 4 and same["correlation"] == pytest.approx(1.0)
    opposite = pooled_noise([{"A": [0.01, 0.03, 0.05], "B": [0.05, 0.03, 0.01]}])
    assert opposite["correlation"] == pytest.approx(-1.0)
    two_runs = pooled_noise([{"A": [0.0, 0.02]}, {"A": [0.1, 0.1, 0.1, 0.16]}])  # df 1 + 3
    squares = 2 * 0.01**2 + float(np.sum((np.array([0.1, 0.1, 0.1, 0.16]) - 0.115) ** 2))
    assert two_runs["sd"] == pytest.approx((squares / 4) ** 0.5)
