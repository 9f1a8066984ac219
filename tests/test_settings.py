"""One definition of each setting: the rollout engine's fields shared by training and evaluation, the CLI's
flags generated from the config dataclasses (a default is written once, in the dataclass), and the one rule
that ties an advantage preset to its format-penalty channel."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

pytest.importorskip("torch")  # train_config places tensors (`devices`)

from rlvmr_nb.evaluate import EvalConfig  # noqa: E402
from rlvmr_nb.rollout.generation import RolloutEngineConfig  # noqa: E402
from rlvmr_nb.train_config import TrainConfig, train_config  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


def test_training_and_evaluation_share_one_definition_of_the_engine_settings():
    """Each engine field is declared once, on `RolloutEngineConfig`; both configs inherit it (same default,
    same documentation) and build their engines through it: training sleeps at its `vllm_sleep_level`,
    evaluation never sleeps."""
    engine_fields = {f.name for f in fields(RolloutEngineConfig)}
    assert engine_fields == {"rollout_backend", "rollout_dtype", "vllm_gpu_memory_utilization",
                             "generation_batch_size", "rollout_options"}
    for config in (TrainConfig, EvalConfig):
        assert issubclass(config, RolloutEngineConfig)
        assert not engine_fields & set(vars(config).get("__annotations__", {}))  # not declared again
    train = TrainConfig(rollout_dtype="float32", vllm_gpu_memory_utilization=0.3, generation_batch_size=4, seed=3)
    evaluation = EvalConfig(rollout_dtype="float32", vllm_gpu_memory_utilization=0.3, generation_batch_size=4, seed=3)
    assert replace(train.engine_settings, sleep_level=0) == evaluation.engine_settings
    assert (train.engine_settings.sleep_level, evaluation.engine_settings.sleep_level) == (2, 0)
    with pytest.raises(ValueError, match="EvalConfig.rollout_dtype"):
        EvalConfig(rollout_dtype="int8")


def test_a_run_config_written_before_the_engine_record_was_shared_still_loads(tmp_path):
    """A run folder's config.json from before the shared record (the engine keys flat, in their old order)
    loads through both doors, the file reader and `from_dict`, with every engine value kept."""
    path = FIXTURES / "run_config_flat_engine_keys.json"
    saved = json.loads(path.read_text())
    for config in (train_config(path), TrainConfig.from_dict(saved)):
        assert json.loads(json.dumps(config.to_dict())) == saved
        engine = config.engine_settings
        assert (engine.dtype, engine.gpu_memory_utilization, engine.sleep_level, engine.max_batch_size,
                dict(engine.options)) == ("float32", 0.3, 1, 4, {"kv_cache_gb": 1})


# --------------------------------------------------------------------- the preset → penalty-channel rule


def test_each_preset_puts_the_format_penalty_in_one_channel_everywhere():
    """`penalty_channel` is the rule; the reward of a preset, the trainer's default reward, its refusal of the
    other channel and the switch of a file's preset all follow it."""
    from rlvmr_nb.scoring.advantages import PRESETS, AdvantageConfig, penalty_channel, preset
    from rlvmr_nb.scoring.rewards import PENALTY_CHANNELS, RewardConfig
    from rlvmr_nb.train_config import switch_advantage_preset

    assert {penalty_channel(name) for name in PRESETS} == set(PENALTY_CHANNELS)  # the two presets differ
    assert (penalty_channel("official_code"), penalty_channel("paper")) == ("outcome", "step")  # paper §3.4.1
    assert RewardConfig().format_penalty_channel == penalty_channel(AdvantageConfig().preset)
    for name in PRESETS:
        other = next(n for n in PRESETS if n != name)
        assert RewardConfig.for_preset(name).format_penalty_channel == penalty_channel(name)
        assert TrainConfig(advantage=preset(name)).reward.format_penalty_channel == penalty_channel(name)
        with pytest.raises(ValueError, match="format penalty"):
            TrainConfig(advantage=preset(name), reward=RewardConfig.for_preset(other))
        switched = switch_advantage_preset({"reward": {"format_penalty_channel": penalty_channel(other)},
                                            "advantage": {"preset": other}}, name)
        assert switched["reward"]["format_penalty_channel"] == penalty_channel(name)
    with pytest.raises(ValueError, match="unknown advantage preset 'papers'"):
        penalty_channel("papers")


def test_no_other_place_in_the_package_decides_a_channel_from_a_preset_name():
    """The rule is data in one table: no code compares a value with the official preset's name (as the four
    copies of the rule did; 'paper' is also a figure's data source, so only 'official_code' is searched)."""
    import ast

    src = Path(__file__).resolve().parents[1] / "src" / "rlvmr_nb"
    comparisons = [f"{path.relative_to(src)}:{node.lineno}" for path in src.rglob("*.py")
                   for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Compare)
                   and any(isinstance(c, ast.Constant) and c.value == "official_code" for c in [node.left, *node.comparators])]
    assert comparisons == []
