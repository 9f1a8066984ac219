"""The fairness gate with a pinned reference policy (lab/paired.py `reference_gate`, lab/reference.py): a weak cold
start cannot lower the bar, the reference cannot change after it was pinned, and it is played once per hash."""

from __future__ import annotations

import json

import pytest

from rlvmr_nb.lab import paired, reference
from rlvmr_nb.lab.config import LabConfig, load_lab_config
from rlvmr_nb.lab.report import reference_gate_lines

from episode_builders import episode, step

LEARNT = {"passes": True, "tasks": 24, "before": 0.4, "after": 0.6, "rise": 0.2, "lo": 0.1, "hi": 0.3}


def test_the_gate_refuses_a_cold_start_weaker_than_the_reference():
    """The arms gain 10 pp on a cold start that sits 20 pp under the reference: the former rule (non-inferior to the
    cold start) passes them; the gate holds them to the reference, 10 pp above them, and refuses."""
    weak_start = [0.20, 0.22, 0.18, 0.21, 0.19]
    arms = {"GRPO": [0.30, 0.31, 0.29, 0.30, 0.32], "RLVMR": [0.31, 0.30, 0.30, 0.29, 0.31]}
    heldin = {"GRPO": LEARNT, "RLVMR": LEARNT}
    former = {arm: paired.l0_condition(v, weak_start, -0.05, bootstrap=200)["passes"] for arm, v in arms.items()}
    assert former == {"GRPO": True, "RLVMR": True}
    gate = reference.reference_gate(heldin, arms, weak_start, 0.40, layouts=60, required_layouts=60, bootstrap=200)
    assert not gate["fair_test"] and gate["l0_vs_bar"]["GRPO"]["bar"] == [0.40] * 5
    assert gate["l0_vs_bar"]["GRPO"]["difference"] == pytest.approx(-0.096)
    assert len(gate["reasons"]) == 2


def test_the_gate_accepts_a_fair_start_and_checks_every_condition():
    start = [0.40, 0.42, 0.38, 0.41, 0.39]  # above the reference in some seeds, below it in others
    arms = {"GRPO": [0.41, 0.42, 0.40, 0.40, 0.41], "RLVMR": [0.40, 0.43, 0.39, 0.42, 0.40]}
    heldin = {"GRPO": LEARNT, "RLVMR": LEARNT}
    gate = reference.reference_gate(heldin, arms, start, 0.395, layouts=60, required_layouts=60, bootstrap=200)
    assert gate["fair_test"] and gate["reasons"] == []
    assert gate["l0_vs_bar"]["RLVMR"]["bar"] == [0.40, 0.42, 0.395, 0.41, 0.395]  # per seed the better of the two
    # an arm that did not learn its held-in layouts, or a run that played a subset of the layouts, is not fair
    unlearnt = reference.reference_gate({**heldin, "RLVMR": {**LEARNT, "passes": False}}, arms, start, 0.395, 60, 60,
                                     bootstrap=200)
    assert not unlearnt["fair_test"] and unlearnt["reasons"] == ["RLVMR did not learn its held-in layouts"]
    subset = reference.reference_gate(heldin, arms, start, 0.395, layouts=20, required_layouts=60, bootstrap=200)
    assert not subset["fair_test"] and "20 of the 60" in subset["reasons"][0]
    lines = reference_gate_lines({**gate, "reference": {"sha256": "ab" * 32, "success": 0.395, "layouts": 60,
                                                        "plays": 16, "episodes": 960}})
    assert lines[0] == "**Fairness check (reference gate): fair test.**" and "39.5 % on 60 L0 layouts × 16" in lines[1]


def _policy_folder(root):
    root.mkdir()
    (root / "model.safetensors").write_bytes(b"\x00weights")
    (root / "config.json").write_text("{}")
    return root


def test_a_reference_is_pinned_by_the_hash_of_its_files(tmp_path):
    folder = _policy_folder(tmp_path / "ref")
    pinned = reference.checkpoint_sha256(folder)
    config = LabConfig(reference_checkpoint=str(folder), reference_sha256=pinned, fairness_l0_margin=-0.05)
    assert reference.pinned_reference(config) == folder
    (folder / "model.safetensors").write_bytes(b"\x00weightz")  # retrained or swapped after it was pinned
    assert reference.checkpoint_sha256(folder) != pinned
    with pytest.raises(ValueError, match="may not change"):
        reference.pinned_reference(config)
    (folder / "model.safetensors").write_bytes(b"\x00weights")
    (folder / "extra.bin").write_bytes(b"")  # an added file changes it too
    assert reference.checkpoint_sha256(folder) != pinned
    with pytest.raises(ValueError, match="go together"):
        LabConfig(reference_checkpoint=str(folder), fairness_l0_margin=-0.05)
    with pytest.raises(ValueError, match="non-inferiority"):
        LabConfig(reference_checkpoint=str(folder), reference_sha256=pinned)


def test_the_reference_is_played_once_per_hash_and_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVMR_CACHE", str(tmp_path / "cache"))
    folder = _policy_folder(tmp_path / "ref")
    config = LabConfig(reference_checkpoint=str(folder), reference_sha256=reference.checkpoint_sha256(folder),
                       fairness_l0_margin=-0.05, reference_plays=2)
    calls = []

    def player(cfg, where):
        calls.append(where)
        return [episode([step(0, "explore", "look")], won=i % 4 == 0) for i in range(8)]

    first = reference.reference_result(config, tmp_path / "run1", player)
    assert first["success"] == 0.25 and first["episodes"] == 8 and first["plays"] == 2 and calls == [folder]
    second = reference.reference_result(config, tmp_path / "run2", player)
    assert second == first and len(calls) == 1  # the second run reads the cache
    assert json.loads((tmp_path / "run2" / "reference_L0.json").read_text()) == first
    reference.reference_result(config.changed(reference_plays=3), tmp_path / "run3", player)
    assert len(calls) == 2  # other settings, another play


def test_a_committed_record_stands_in_for_the_folder_on_another_machine(tmp_path, monkeypatch):
    """Elsewhere the reference folder does not exist (a cold start trained on another CPU would hash otherwise): the
    committed record of the pinned hash at these settings is the bar, without a replay; a record of another
    reference or of other play settings is refused, not used."""
    monkeypatch.setenv("RLVMR_CACHE", str(tmp_path / "cache"))
    folder = _policy_folder(tmp_path / "ref")
    config = LabConfig(reference_checkpoint=str(folder), reference_sha256=reference.checkpoint_sha256(folder),
                       fairness_l0_margin=-0.05, reference_plays=2)
    played = reference.summarise_plays([episode([step(0, "explore", "look")], won=i < 3) for i in range(8)],
                                       config.reference_sha256, 2, reference.reference_key(config))
    committed = tmp_path / "lab_reference_L0.json"
    committed.write_text(json.dumps(played))
    (folder / "model.safetensors").unlink()  # this machine has no copy of the pinned folder
    (folder / "config.json").unlink()
    folder.rmdir()

    def player(cfg, where):
        raise AssertionError("the committed record should have been read, not a replay started")

    elsewhere = config.changed(reference_record=str(committed))
    assert reference.reference_result(elsewhere, tmp_path / "run", player)["success"] == 3 / 8
    with pytest.raises(ValueError, match="not of the pinned"):  # the record was played 2 times, this asks 3
        reference.reference_result(elsewhere.changed(reference_plays=3), tmp_path / "run3", player)
    with pytest.raises(ValueError, match="set reference_checkpoint"):
        LabConfig(reference_record=str(committed))


def test_the_lab_settings_name_the_reference_by_field():
    config = load_lab_config("configs/lab/ci.json", reference_checkpoint="/x", reference_sha256="0" * 64,
                             fairness_l0_margin=-0.05)
    assert (config.reference_checkpoint, config.reference_plays) == ("/x", 16)


def test_the_committed_reference_record_is_the_pilots_reference(monkeypatch):
    """The record the avoidable-repetition pilot names is the play of its pinned hash at its own settings, all 60 L0
    layouts x 16 plays: a run on any machine reads this bar (docs/lab.md, 'The reference and the pilot')."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    config = load_lab_config(root / "configs" / "lab" / "avoidable_pilot.json")
    record = reference.committed_record(config)
    assert (record["layouts"], record["plays"], record["episodes"]) == (60, 16, 960)
    assert record["success"] == sum(record["won"]) / 960


def test_the_endpoint_validity_script_plays_the_pinned_reference_only_when_its_hash_holds(tmp_path):
    """`benchmarks/lab_endpoint_validity.py --coldstart reference` stands the pinned reference in for the cold start of
    its recipe: a folder whose files changed after pinning must be refused, not played as if it were the reference."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "lab_endpoint_validity.py"
    spec = importlib.util.spec_from_file_location("lab_endpoint_validity", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder = _policy_folder(tmp_path / "ref")
    config = LabConfig(reference_checkpoint=str(folder), reference_sha256=reference.checkpoint_sha256(folder),
                       fairness_l0_margin=-0.05)
    found, note = module.coldstart_folder(config, "reference", tmp_path / "build")
    assert found == folder and config.reference_sha256 in note
    (folder / "config.json").write_text('{"edited": true}')
    with pytest.raises(ValueError, match="may not change"):
        module.coldstart_folder(config, "reference", tmp_path / "build")


def test_two_builds_with_the_same_weights_pin_the_same_folder_whatever_their_sft_logs_timed(tmp_path):
    """A rebuild on the same machine gives bit-identical weights but another SFT log (its throughput column is a
    timing), and the whole-folder hash used to differ, so a pinned reference could never be rebuilt and matched.
    `benchmarks/lab_reference.py` pins the folder without its training logs; other weights still pin otherwise."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "lab_reference.py"
    spec = importlib.util.spec_from_file_location("lab_reference_script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    builds = []
    for i, speed in enumerate((1102.5, 1389.2)):
        sft = _policy_folder(tmp_path / f"build{i}")
        (sft / "sft_log.jsonl").write_text(json.dumps({"step": 0, "loss": 0.24, "tokens_per_s": speed}) + "\n")
        builds.append(module.pin_reference(sft, tmp_path / "pinned"))
    (first, sha), (second, again) = builds
    assert first == second and sha == again and not (first / "sft_log.jsonl").exists()
    assert sorted(p.name for p in (tmp_path / "pinned").iterdir()) == [first.name]  # no staging folder left behind
    other = _policy_folder(tmp_path / "other")
    (other / "model.safetensors").write_bytes(b"\x00weightz")
    assert module.pin_reference(other, tmp_path / "pinned")[1] != sha
