"""`benchmarks/lab_sweep_rule.py`: the larger-house sweeps' adoption rule recomputed from stored per-seed arrays,
pinned on hand-made results and on the committed replication (docs/lab.md, 'Replicating the DAgger arm')."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from lab_sweep_rule import sweep_rule  # noqa: E402


def _results(cold: dict[int, float], grpo: dict[int, float], rise: float = 0.3, lo: float = 0.1) -> dict:
    rows = [{"arm": "cold start", "seed": s, "level": "L0", "success": v, "episodes": 240} for s, v in cold.items()]
    rows += [{"arm": "GRPO", "seed": s, "level": "L0", "success": v, "episodes": 240} for s, v in grpo.items()]
    rows += [{"arm": "GRPO", "seed": s, "level": "L1", "success": 0.9, "episodes": 240} for s in grpo]  # not L0
    return {"per_seed": rows, "preregistered": {"fairness": {"grpo_heldin": {"rise": rise, "lo": lo, "hi": 0.5}}}}


def test_a_weak_cold_start_does_not_lower_a_fixed_bar():
    """Cold starts at 8 % under a fixed 12 % bar: GRPO at 14 / 16 % clears the bar by 2 / 4 pp (mean 3: passes),
    not the cold start by 6 / 8; and the room condition reads the bar, not the weak start."""
    rule = sweep_rule(_results({1: 0.08, 2: 0.08}, {1: 0.14, 2: 0.16}), bar=0.12)
    assert rule["clears"]["GRPO"]["per_seed"] == pytest.approx([0.02, 0.04]) and rule["passes"]
    assert rule["room"]["bar"] == pytest.approx(0.12)
    alone = sweep_rule(_results({1: 0.08, 2: 0.08}, {1: 0.14, 2: 0.16}))  # no fixed bar: the start is the bar
    assert not alone["conditions"]["room both ways"]  # 8 % is under the 10 % floor


def test_every_seed_must_clear_and_the_mean_must_reach_the_threshold():
    assert not sweep_rule(_results({1: 0.12, 2: 0.12}, {1: 0.20, 2: 0.11}))["conditions"]["RL clears the bar"]
    assert not sweep_rule(_results({1: 0.12, 2: 0.12}, {1: 0.13, 2: 0.14}))["conditions"]["RL clears the bar"]
    assert not sweep_rule(_results({1: 0.12, 2: 0.12}, {1: 0.2, 2: 0.2}, rise=0.14))["conditions"]["the arms learn"]
    assert not sweep_rule(_results({1: 0.12, 2: 0.12}, {1: 0.2, 2: 0.2}, lo=-0.01))["conditions"]["the arms learn"]


def test_the_committed_replication_passes_as_reported():
    """docs/lab.md reports bar 12.1 %, held-in +47.4 pp [+34.9, +58.3], GRPO - bar +1.7 / +5.8 pp, +3.75 averaged."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "lab_large_sweep_dagger_replicate.json").read_text())
    rule = sweep_rule(doc, bar=0.119)
    assert rule["passes"] and round(100 * rule["room"]["bar"], 1) == 12.1
    assert [round(100 * d, 1) for d in rule["clears"]["GRPO"]["per_seed"]] == [1.7, 5.8]
    assert round(100 * rule["clears"]["GRPO"]["mean"], 2) == 3.75
    assert round(100 * rule["heldin"]["GRPO"]["rise"], 1) == 47.4
