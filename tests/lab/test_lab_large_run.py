"""`rlvmr-nb lab` in the larger house (env 'lab_large', and 'lab_large_home' with its homes named): the journey a lab
file naming it takes, end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("world, line", [("lab_large", "\nLeads: "), ("lab_large_home", "\nHome: ")])
def test_rlvmr_nb_lab_runs_in_the_larger_house(tmp_path, monkeypatch, world, line):
    """Guards against a stage that still builds the small house's tasks, vocabulary or prompts when the lab file names
    a larger one: the cold start, training, every level's evaluation and the results must all be of that world, and
    its prompts carry its own line (the leads; the home leads)."""
    from rlvmr_nb.cli import main
    from rlvmr_nb.coldstart.dataset import read_samples
    from rlvmr_nb.lab import load_lab_config
    from rlvmr_nb.lab.experiment import coldstart_key

    monkeypatch.setenv("RLVMR_LAB_COLDSTART_CACHE", "0")
    settings = {**json.loads((ROOT / "configs" / "lab" / "ci.json").read_text()),
                "name": "ci_large", "env": world, "max_steps": 6, "algos": ["grpo"], "seeds": [0],
                "coldstart_dagger_rounds": 1}
    config_file = tmp_path / "ci_large.json"
    config_file.write_text(json.dumps(settings))
    out, results = tmp_path / "lab", tmp_path / "results.json"
    assert main(["lab", "--config", str(config_file), "--out", str(out), "--figures", str(tmp_path / "figures"),
                 "--results", str(results), "--workers", "1"]) == 0
    samples = read_samples(out / "coldstart" / "data")
    assert samples and all(s["task_id"].endswith(":large") for s in samples)
    assert all(line in s["prompt"] for s in samples)
    dagger = read_samples(out / "coldstart" / "dagger-r1")  # the DAgger round replays the larger house's prompt
    assert dagger and all(line in s["prompt"] for s in dagger)
    for level in ("L0", "L1", "L2", "heldin"):
        rows = [json.loads(line) for line in (out / "eval" / "grpo-seed0" / f"{level}.episodes.jsonl").open()]
        assert rows and {r["env"] for r in rows} == {world}, level
    doc = json.loads(results.read_text())
    assert {r["arm"] for r in doc["table"]} == {"cold start", "GRPO"}
    # the same settings in the small house are another cold start (the world is part of the cache key)
    assert coldstart_key(load_lab_config(config_file)) != coldstart_key(load_lab_config(config_file, env="lab"))
