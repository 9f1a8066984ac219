"""`rlvmr-nb verify`: the verdicts, the tolerance bands, the machine facts, and the quick reproductions end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvmr_nb.paper import verify
from rlvmr_nb.runs.machine import IDENTITY_KEYS, describe_machine, machine_facts, same_machine
from rlvmr_nb.paper.verify import Check, Tolerance, format_checks, prediction_band

ROOT = Path(__file__).resolve().parents[2]


def test_verdicts():
    band = Tolerance("band", low=0.1, high=0.3)
    assert Check("r", "x", 0.2, 0.2, band).verdict == "exact"
    assert Check("r", "x", 0.2, 0.29, band).verdict == "within tolerance"
    assert Check("r", "x", 0.2, 0.31, band).verdict == "outside"
    assert Check("r", "x", 0.5, 0.5 + 1e-10, Tolerance("absolute", width=1e-9)).verdict == "within tolerance"
    assert Check("r", "x", 0.5, 0.5 + 1e-8, Tolerance("absolute", width=1e-9)).verdict == "outside"
    assert Check("r", "t", "a table", "a table", verify.EXACT).verdict == "exact"
    assert Check("r", "t", "a table", "another", verify.EXACT).verdict == "outside"
    assert Check("r", "x", 0.5, None, band).verdict == "outside"  # a number the rerun no longer gives


def test_prediction_band_by_hand():
    # mean 1, sd 1, n 3: 1 ± t(0.975, 2) · √(4/3), t = 4.302653
    low, high = prediction_band([0.0, 1.0, 2.0], low=-10, high=10)
    assert (low, high) == pytest.approx((1 - 4.302653 * math.sqrt(4 / 3), 1 + 4.302653 * math.sqrt(4 / 3)), abs=1e-5)
    assert prediction_band([0.0, 1.0, 2.0]) == (-1.0, 1.0)  # clipped to the rate difference's range
    with pytest.raises(ValueError, match=">= 3"):
        prediction_band([0.1, 0.2])


def test_the_lab_demo_bands_come_from_the_measured_runs_and_say_something(monkeypatch):
    monkeypatch.chdir(ROOT)
    spread = json.loads(verify.LAB_DEMO_SPREAD.read_text())
    distinct = {json.dumps(r["numbers"], sort_keys=True): r["numbers"] for r in spread["runs"]}
    assert len(distinct) >= 3
    assert len(distinct) < len(spread["runs"]), "the file's repeated path (one thread = the default here) counts once"
    for name in ("training/rise", "heldin/rise"):
        band = verify.lab_demo_tolerance(name)
        low, high = prediction_band([numbers[name] for numbers in distinct.values()])
        assert band.high == high and band.low == max(low, math.nextafter(0.0, 1.0))
        assert band.high - band.low < 1.0, f"{name}: a band as wide as {band.describe()} would pass any learning"
        assert not band.admits(0.3, 0.0), "a rerun that does not learn must be outside"


def test_machine_facts_name_what_decides_rounding():
    facts = machine_facts()
    assert set(IDENTITY_KEYS) <= set(facts) and facts["torch"] and facts["cpu"]
    assert same_machine(facts, dict(facts))
    assert not same_machine(facts, {**facts, "torch_cpu_capability": "DEFAULT"})
    assert not same_machine(facts, None) and not same_machine({}, {})
    assert facts["cpu"] in describe_machine(facts) and "does not name" in describe_machine(None)


def test_the_quick_reproductions_are_exact_here_and_a_changed_number_is_outside(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    checks = verify.verify(["paper-tables", "example-group"], root=tmp_path, say=lambda _: None)
    assert len(checks) > 20 and {c.verdict for c in checks} == {"exact"}
    committed = json.loads(verify.DEMO_RESULTS.read_text())
    key = next(k for k in committed["example_group"]["numbers"] if k.endswith("advantage"))
    committed["example_group"]["numbers"][key] += 1e-6
    changed = tmp_path / "demo.json"
    changed.write_text(json.dumps(committed))
    monkeypatch.setattr(verify, "DEMO_RESULTS", changed)
    checks = verify.verify(["example-group"], root=tmp_path, say=lambda _: None)
    assert [c.name for c in checks if c.verdict == "outside"] == [key]
    assert "1 outside" in format_checks(checks)


def test_the_command_names_the_machine_and_fails_on_an_unknown_reproduction():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run([sys.executable, "-m", "rlvmr_nb.cli", "verify", "paper-tables"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("this machine: ") and "5 exact, 0 within tolerance, 0 outside" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "rlvmr_nb.cli", "verify", "demo"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "no reproduction demo" in bad.stderr
