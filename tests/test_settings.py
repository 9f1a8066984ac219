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
