"""`rlvmr-nb rehearse`: a configuration's iteration played on the CPU through the command line, the memory plan
against numbers computed by hand, a card that cannot hold it, and the time projection's calibration."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from model_fixtures import smollm2_tokenizer  # noqa: E402,F401  (fixture)
from rlvmr_nb.cli import main  # noqa: E402
from rlvmr_nb.rehearsal import MEASURED  # noqa: E402
from rlvmr_nb.rehearsal.hardware import CARDS, MODEL_SHAPES, Card, shape_for_model  # noqa: E402
from rlvmr_nb.rehearsal.memory import GIB, MemoryMeasurements, MicroBatch, Setup, plan_memory  # noqa: E402
from rlvmr_nb.envs.base import Reset  # noqa: E402
from rlvmr_nb.envs.registry import get_env  # noqa: E402
from rlvmr_nb.rehearsal.play import Clock, ScriptedPlayer, WatchedSlots, play_iteration, wave_size  # noqa: E402
from rlvmr_nb.rehearsal.report import markdown_tables  # noqa: E402
from rlvmr_nb.rollout.generation.base import SamplingConfig  # noqa: E402
from rlvmr_nb.rehearsal.timing import PhaseCosts, rollout_call_seconds  # noqa: E402
from rlvmr_nb.rollout.generation.scripted import ResponseLengths  # noqa: E402
from rlvmr_nb.train_config import TrainConfig  # noqa: E402

TINY = ["--env", "toy", "--tasks", "2", "--group-size", "3", "--max-steps", "4", "--max-new-tokens", "96",
        "--shape", "qwen2.5-1.5b", "--no-progress"]
P15 = 1_543_714_304


def test_a_tiny_iteration_is_rehearsed_end_to_end_through_the_cli(tmp_path, capsys):
    out = tmp_path / "rehearsal.json"
    assert main(["rehearse", *TINY, "--cards", "H100 80GB", "A100 40GB", "--gpus", "1", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    played = doc["played"]
    assert played["episodes"]["count"] == 6 and played["episodes"]["aborted"] == 0
    assert played["episodes"]["valid_steps"] == played["episodes"]["steps"] > 0  # scripted steps are well formed
    steps = played["per_step"]
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1)) and steps[0]["rows"] == 6
    # RLVMR's prompt quotes the last outputs: prompts grow step by step as a real run's do
    assert steps[-1]["prompt_tokens"]["p50"] > steps[0]["prompt_tokens"]["p50"] + 100
    assert all(s["response_tokens"]["max"] <= 96 for s in steps)
    assert played["samples"]["count"] == played["episodes"]["steps"]
    assert set(played["cpu_seconds"]) >= {"env_reset_s", "env_step_s", "tokenising_s", "render_and_loop_s", "wall_s"}
    assert "not available offline" in doc["stand_in"]["tokenizer_note"] and "scripted" in doc["stand_in"]["responses"]
    assert [(r["card"], r["gpus"]) for r in doc["plan"]["setups"]] == [
        ("H100 80GB", 1), ("H100 80GB", 2), ("A100 40GB", 1), ("A100 40GB", 2)]
    assert all(r["seconds"]["iteration"] > 0 for r in doc["plan"]["setups"])
    assert "H100 80GB" in printed and "A100 40GB" in printed and f"results: {out}" in printed
    # the provenance every results file carries (`runs.machine.provenance`), with the seed the tasks were drawn from
    assert doc["provenance"]["seed"] == 0 and doc["provenance"]["versions"]["transformers"]
    assert doc["provenance"]["machine_facts"]["cpu"]


def test_playing_in_waves_changes_no_episode(smollm2_tokenizer):
    config = TrainConfig.from_dict({"env": "toy", "tasks_per_iteration": 3, "group_size": 2, "max_steps": 3,
                                    "max_new_tokens": 64, "algo": "grpo"})
    lengths = ResponseLengths("lognormal", 30, 0.5)
    whole = play_iteration(config, smollm2_tokenizer, lengths)
    waves = play_iteration(config, smollm2_tokenizer, lengths, wave_tasks=1)
    assert whole.waves == [3] and waves.waves == [1, 1, 1]

    def seen(played):
        return [[(s.output, s.action, s.prompt_token_ids) for s in e.steps] for e in played.episodes]

    assert seen(whole) == seen(waves) and whole.samples == waves.samples
    assert all("<think>" in s.output for e in whole.episodes for s in e.steps)  # GRPO's prompt style


def test_the_docs_tables_say_what_fits_what_does_not_and_why(tmp_path):
    out = tmp_path / "rehearsal.json"
    # the 7B shape on A100 40GB: its held copies alone (18 bytes per parameter) exceed the card
    assert main(["rehearse", *TINY, "--shape", "qwen2.5-7b", "--cards", "A100 40GB", "H200 141GB", "--gpus", "1", "8",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    doc["config"]["path"] = "configs/paper/tiny.json"
    played, plan = markdown_tables([doc]).split("\n\n")
    assert played.splitlines()[2].startswith(f"| tiny | 2 × 3 × 4 | {doc['played']['episodes']['steps']} (")
    rows = {line.split(" | ")[1]: line for line in plan.splitlines()[2:]}
    assert set(rows) == {"A100 40GB", "H200 141GB"}
    assert "no: rollout" in rows["A100 40GB"] and "update" in rows["A100 40GB"] and "fsdp" in rows["A100 40GB"]
    setups = {(r["card"], r["gpus"]): r for r in doc["plan"]["setups"]}
    eight = setups[("A100 40GB", 8)]
    assert f"**{eight['seconds']['iteration']:.0f}**" in rows["A100 40GB"]
    assert not setups[("A100 40GB", 1)]["memory"]["fits"] and len(plan.splitlines()[0].split(" | ")) == 5


def test_the_scripted_player_never_commits_and_heavy_worlds_play_in_waves(smollm2_tokenizer):
    slots = WatchedSlots(None, Clock())
    slots.live = {0: Reset("obs", ["focus on thermometer", "open door", "focus on water", "look around"], "t", "boil"),
                  1: Reset("obs", ["focus on x"], "t", "boil")}
    slots.steps = {0: 0, 1: 3}
    actions = []
    for seed in range(40):  # each seed its own draw: over 40 the player's whole choice shows
        player = ScriptedPlayer(smollm2_tokenizer, "meta_think", ResponseLengths("fixed", 40, 0.0), seed,
                                ("focus on",), Clock())
        player.watch(slots, 0)
        texts = player.respond(["p0", "p1"], SamplingConfig(max_new_tokens=128))
        actions.append([t.rsplit("<action>", 1)[1] for t in texts])
    assert {a[0] for a in actions} == {"open door</action>", "look around</action>"}  # never a focus while others
    assert {a[1] for a in actions} == {"focus on x</action>"}  # ... unless nothing else is admissible
    sciworld = get_env("scienceworld")
    assert sciworld.commitment_actions == ("focus on",) and get_env("alfworld").commitment_actions == ()
    # 16 tasks x 8 JVMs of 360 MiB with 20 GiB free: half of it holds 3 tasks' slots at once
    assert wave_size(sciworld, 16, 8, 20 * 1024) == 3 and wave_size(sciworld, 16, 8, None) == 16
    assert wave_size(get_env("alfworld"), 16, 8, 1024) == 16 and wave_size(sciworld, 16, 8, 10) == 1


def _measurements(rest: int = 1_000_000) -> MemoryMeasurements:
    """Round made-up measurements, so that the plan can be checked by hand."""
    fits = {"checkpointing/peak_above_weights_and_grads_bytes": {
        "per_layer_bytes": 0, "per_layer_per_token_bytes": 6144, "fixed_bytes": 1000, "fixed_per_token_bytes": 100_000},
        "no_checkpointing/peak_above_weights_and_grads_bytes": {
        "per_layer_bytes": 10, "per_layer_per_token_bytes": 100_000, "fixed_bytes": 0, "fixed_per_token_bytes": 0}}
    fused = {"vocab": 151936, "hidden": 1536, "tokens": 4096,
             "peak_bytes": 4 * 151936 * 1536 + 2 * 4 * 4096 * 1536 + rest}
    return MemoryMeasurements({"weights": 4, "gradients": 4, "adamw_moments": 8, "reference": 4, "rollout_copy": 2},
                              {"qwen2.5-1.5b": fits}, fused, "by hand")


def test_the_published_shapes_give_their_parameters_and_kv_bytes():
    small, large = MODEL_SHAPES["qwen2.5-1.5b"], MODEL_SHAPES["qwen2.5-7b"]
    assert small.parameters == P15 and large.parameters == 7_615_616_512  # memory_model.json counts the same
    assert small.kv_bytes_per_token() == 2 * 28 * 2 * 128 * 2 == 28_672
    assert large.kv_bytes_per_token() == 2 * 28 * 4 * 128 * 2 == 57_344
    assert shape_for_model("Qwen/Qwen2.5-7B-Instruct")[0] is large
    assert shape_for_model("runs/coldstart/alfworld-L0-n200-seed0/sft")[1].startswith("assumed")
    with pytest.raises(ValueError, match="--shape"):
        shape_for_model("embedded:smollm2-135m-instruct")


def test_the_memory_plan_is_the_hand_computed_sum():
    shape, setup = MODEL_SHAPES["qwen2.5-1.5b"], Setup(1, False, "gpu", True)
    micro = MicroBatch(16, 80_000, 4_000)
    plan = plan_memory(shape, CARDS["H100 80GB"], setup, _measurements(), [4000] * 128, 1024, micro)
    held = 4 * P15 + 8 * P15 + 4 * P15 + 2 * P15                                 # 27,786,857,472
    assert plan["held_total_gib"] == round(held / GIB, 2)
    kv = 128 * (4000 + 1024) * 28_672                                           # 18,438,160,384
    rollout = held + kv + 128 * 151936 * 4 * 8 + 2 * GIB
    assert plan["phases"]["rollout"]["parts"] == 1
    assert plan["phases"]["rollout"]["peak_gib"] == round(rollout / GIB, 2) == 45.63
    activations = 28 * 6144 * 80_000 + 1000 + 100_000 * 80_000               # 21,762,561,000
    fused = 4 * 151936 * 1536 + 1_000_000 + 2 * 4 * 4_000 * 1536
    update = held + 4 * P15 + activations + fused
    assert plan["phases"]["update"]["peak_gib"] == round(update / GIB, 2) == 52.81
    logprob = held + (10 + 100_000 * 80_000) + (1_000_000 + 2 * 4 * 4_000 * 1536)  # one layer, no head gradient
    assert plan["phases"]["log-prob passes"]["peak_gib"] == round(logprob / GIB, 2)
    assert plan["fits"] and plan["reason"] == "fits"
    # an A100 40GB holds the same call only in parts: 0.9 x (36e9 - held - 2 GiB - step tensors) / 28,672 B
    # = 170,863 tokens, 34 rows of 5,024 per part
    small = plan_memory(shape, CARDS["A100 40GB"], setup, _measurements(), [4000] * 128, 1024, micro)
    assert small["phases"]["rollout"]["parts"] == 4
    assert small["phases"]["rollout"]["peak_gib"] == round((held + 34 * 5024 * 28_672 + 128 * 151936 * 32 + 2 * GIB) / GIB, 2)


def test_a_card_too_small_does_not_fit_and_says_why():
    shape, setup = MODEL_SHAPES["qwen2.5-1.5b"], Setup(1, False, "gpu", True)
    plan = plan_memory(shape, Card("8GB", 8, 100.0, 1.0), setup, _measurements(), [2000] * 16, 1024,
                       MicroBatch(16, 30_000, 2_000))
    assert not plan["fits"] and not any(p["fits"] for p in plan["phases"].values())
    assert plan["reason"].startswith("does not fit: rollout") and "update" in plan["reason"]
    assert "held 25.9" in plan["reason"] and "AdamW moments" in plan["reason"]
    # the real measurements: the paper's 16-sample micro-batch of 5k-token samples overflows an A100 40GB
    real = MemoryMeasurements.read(MEASURED / "memory_model.json")
    a100 = plan_memory(shape, CARDS["A100 40GB"], setup, real, [4000] * 128, 1024, MicroBatch(16, 80_000, 4_000))
    assert a100["phases"]["rollout"]["fits"] and not a100["phases"]["update"]["fits"] and not a100["fits"]


def test_the_projection_reproduces_the_measured_rollout_call_and_scales_by_the_datasheet():
    costs = PhaseCosts.read(MEASURED)
    rows = costs.rollout_rows
    args = ([costs.rollout_prompt_tokens] * rows, [costs.rollout_new_tokens] * rows, costs.rollout_new_tokens,
            [list(range(rows))], MODEL_SHAPES["qwen2.5-1.5b"])
    prefill, decode = rollout_call_seconds(*args, CARDS["H200 141GB"], costs)
    assert prefill + decode == pytest.approx(costs.rollout_call_s, rel=1e-9) and 0 < prefill < costs.rollout_call_s
    h100 = rollout_call_seconds(*args, CARDS["H100 80GB"], costs)
    assert h100[0] == pytest.approx(prefill) and h100[1] == pytest.approx(decode * 4.8 / 3.35)
    # responses that end early decode fewer rows: half the rows at 1 token, half the KV reads
    shorter = rollout_call_seconds(args[0], [1] * (rows // 2) + [128] * (rows // 2), *args[2:], CARDS["H200 141GB"], costs)
    assert shorter[1] < decode


def test_a_branching_configuration_is_rehearsed_with_its_trees(tmp_path):
    """Guards the rehearsal's env wrapper against branching rollouts: a spark configuration forks slots mid-episode
    (`rollout.branching`), and a wrapper that did not forward `fork_slots` stopped the rehearsal of
    configs/paper/spark_*.json at the first fork."""
    out = tmp_path / "rehearsal.json"
    args = ["rehearse", "--env", "toy", "--tasks", "2", "--group-size", "4", "--max-steps", "4", "--max-new-tokens",
            "96", "--algo", "spark", "--branch-roots", "2", "--branch-trigger", "random:1.0", "--cards", "H100 80GB",
            "--gpus", "1", "--shape", "qwen2.5-1.5b", "--no-progress", "--out", str(out)]
    assert main(args) == 0
    played = json.loads(out.read_text())["played"]
    assert played["episodes"]["count"] == 8 and played["episodes"]["aborted"] == 0  # exactly N leaves per task
