"""One definition of each setting: the rollout engine's and the episodes' fields shared by training and
evaluation, the CLI's flags generated from the config dataclasses (a default is written once, in the
dataclass), and the one rule that ties an advantage preset to its format-penalty channel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import MISSING, fields, replace
from pathlib import Path

import pytest

pytest.importorskip("torch")  # train_config places tensors (`devices`)

from rlvmr_nb.evaluate import EvalConfig  # noqa: E402
from rlvmr_nb.rollout.generation import RolloutEngineConfig  # noqa: E402
from rlvmr_nb.rollout.loop import EpisodeSettings  # noqa: E402
from rlvmr_nb.train_config import TrainConfig, train_config  # noqa: E402

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_training_and_evaluation_share_one_definition_of_the_engine_settings():
    """Each engine field is declared once, on `RolloutEngineConfig`, and each episode field once, on
    `EpisodeSettings`; both configs inherit them (same default, same documentation) and build their engines
    through them: training sleeps at its `vllm_sleep_level`, evaluation never sleeps."""
    shared = {RolloutEngineConfig: {"rollout_backend", "rollout_dtype", "vllm_gpu_memory_utilization",
                                    "generation_batch_size", "rollout_options"},
              EpisodeSettings: {"env", "level", "max_steps", "max_new_tokens", "max_prompt_tokens", "stop",
                                "env_workers"}}
    for base, names in shared.items():
        assert {f.name for f in fields(base)} == names
        for config in (TrainConfig, EvalConfig):
            assert issubclass(config, base)
            assert not names & set(vars(config).get("__annotations__", {}))  # not declared again
            assert {f.name: f.default for f in fields(config) if f.name in names} == \
                {f.name: f.default for f in fields(base)}
    train = TrainConfig(rollout_dtype="float32", vllm_gpu_memory_utilization=0.3, generation_batch_size=4, seed=3)
    evaluation = EvalConfig(rollout_dtype="float32", vllm_gpu_memory_utilization=0.3, generation_batch_size=4, seed=3)
    assert replace(train.engine_settings, sleep_level=0) == evaluation.engine_settings
    assert (train.engine_settings.sleep_level, evaluation.engine_settings.sleep_level) == (2, 0)
    with pytest.raises(ValueError, match="EvalConfig.rollout_dtype"):
        EvalConfig(rollout_dtype="int8")


def _missing_or_changed(saved: dict, loaded: dict, prefix: str = "") -> list[str]:
    """The keys of `saved` (nested ones as ``outer.inner``) whose value `loaded` does not keep."""
    wrong = []
    for key, value in saved.items():
        if isinstance(value, dict) and isinstance(loaded.get(key), dict):
            wrong += _missing_or_changed(value, loaded[key], f"{prefix}{key}.")
        elif key not in loaded or loaded[key] != value:
            wrong.append(f"{prefix}{key}")
    return wrong


def test_a_run_config_written_before_the_engine_record_was_shared_still_loads(tmp_path):
    """A run folder's config.json from before the shared record (the engine keys flat, in their old order)
    loads through both doors, the file reader and `from_dict`, with every value it holds kept (fields added
    since take their defaults)."""
    path = FIXTURES / "run_config_flat_engine_keys.json"
    saved = json.loads(path.read_text())
    for config in (train_config(path), TrainConfig.from_dict(saved)):
        assert _missing_or_changed(saved, json.loads(json.dumps(config.to_dict()))) == []  # later fields: defaults
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

    src = Path(__file__).resolve().parents[2] / "src" / "rlvmr_nb"
    comparisons = [f"{path.relative_to(src)}:{node.lineno}" for path in src.rglob("*.py")
                   for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Compare)
                   and any(isinstance(c, ast.Constant) and c.value == "official_code" for c in [node.left, *node.comparators])]
    assert comparisons == []


# --------------------------------------------------------------------- the CLI generated from the configs

from rlvmr_nb import cli  # noqa: E402
from rlvmr_nb.validation import field_docs, first_sentence, setting_flags  # noqa: E402

NESTED_OR_DICT = {"advantage", "reward", "loss", "rollout_options"}
"""Fields a command line cannot spell; a --config file sets them (loss.kl_coef and advantage.preset excepted)."""

FLAGS_IN_USE = {
    "train": ["--config", "--algo", "--env", "--level", "--model", "--out", "--seed", "--iterations", "--tasks",
              "--group-size", "--max-steps", "--max-new-tokens", "--max-prompt-tokens", "--lr", "--kl-coef",
              "--preset", "--prompt-style", "--stop", "--mini-batch-size", "--micro-batch-size", "--save-every",
              "--resume", "--env-workers", "--lora", "--device", "--reference-device", "--sharding",
              "--gradient-checkpointing", "--validate-every", "--validation-tasks", "--report-to", "--rollout-backend",
              "--rollout-dtype", "--vllm-gpu-memory-utilization", "--vllm-sleep-level", "--tis-cap", "--bf16-autocast",
              "--no-bf16-autocast"],
    "eval": ["--model", "--env", "--level", "--max-tasks", "--seed", "--seeds", "--max-steps", "--max-new-tokens",
             "--prompt-style", "--stop", "--env-workers", "--out", "--device", "--report-to", "--rollout-backend",
             "--rollout-dtype", "--vllm-gpu-memory-utilization"],
}
"""Every train/eval flag the tests, notebooks, docs, Makefile and configs used before the flags were generated."""


def _subparser(command: str):
    parser = cli.build_parser(command)
    return next(a for a in parser._actions if a.dest == "command").choices[command]


def _flag_help(command: str) -> dict[str, str]:
    return {option: action.help for action in _subparser(command)._actions for option in action.option_strings}


@pytest.mark.parametrize("command, config", [("train", TrainConfig), ("eval", EvalConfig)])
def test_every_spellable_field_has_a_flag_with_its_docstring_and_its_default(command, config):
    helps, docs = _flag_help(command), field_docs(config)
    for f in fields(config):
        if f.name in NESTED_OR_DICT:
            continue
        option = "--" + f.name.replace("_", "-")
        assert option in helps, f"{config.__name__}.{f.name} has no flag"
        default = f.default if f.default_factory is MISSING else f.default_factory()
        shown = (" ".join(default) or "none") if isinstance(default, tuple) else str(default)
        assert helps[option] == f"{first_sentence(docs[f.name])} (default: {shown})"
    assert set(FLAGS_IN_USE[command]) <= set(helps)


def test_a_docstring_s_first_sentence_ends_at_a_sentence_s_full_stop():
    assert first_sentence("Weight of the KL term (paper App. A.2: 0.01). 0 disables it.") == \
        "Weight of the KL term (paper App. A.2: 0.01)."
    assert first_sentence("Clip, e.g. 2.0 or §2.1. None: off.") == "Clip, e.g. 2.0 or §2.1."
    assert first_sentence("No full stop") == "No full stop"


def test_no_default_of_a_train_or_eval_flag_is_written_in_the_cli():
    """The defaults live in the dataclasses: the CLI's settings flags default to None (not given), and no value
    that is a default of a train/eval setting (0, 1 and 2 aside: indents, slices) appears as a literal in the
    CLI's train and eval code, nor a "default: <number>" help text anywhere in cli.py."""
    import ast
    import re

    source = Path(cli.__file__).read_text()
    tree = ast.parse(source)
    flags = [*setting_flags(TrainConfig, cli.TRAIN_FLAG_NAMES), *setting_flags(EvalConfig)]
    defaults = {flag.default for flag in flags if not isinstance(flag.default, (bool, tuple, type(None)))} - {0, 1, 2}
    train_and_eval = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in
                      ("_add_train_settings", "_add_eval_settings", "_setting_choices", "_cmd_train", "_cmd_eval")]
    assert len(train_and_eval) == 5
    literals = [(node.lineno, node.value) for part in train_and_eval for node in ast.walk(part)
                if isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value in defaults]
    assert literals == []
    for call in (n for part in train_and_eval for n in ast.walk(part) if isinstance(n, ast.Call)):
        for keyword in call.keywords:
            if keyword.arg == "default":
                assert not isinstance(keyword.value, ast.Constant) or keyword.value.value is None, ast.unparse(call)
    assert not re.search(r"default: [\w.-]*\d", source)  # the old "default: 256" help texts


def test_precedence_defaults_then_the_config_file_then_the_flags_given(monkeypatch, tmp_path):
    from rlvmr_nb import trainer

    seen = {}
    monkeypatch.setattr(trainer, "train", lambda config: seen.setdefault("config", config) and [])
    settings = tmp_path / "run.json"
    settings.write_text(json.dumps({"env": "toy", "group_size": 4, "lr": 2e-6, "lora": True,
                                    "advantage": {"preset": "paper", "alpha": 0.25}}))
    assert cli.main(["train", "--config", str(settings), "--lr", "3e-6", "--no-lora", "--tasks", "2",
                     "--kl-coef", "0", "--preset", "official_code", "--report-to", "wandb"]) == 0
    config = seen["config"]
    assert (config.group_size, config.lr, config.lora, config.tasks_per_iteration) == (4, 3e-6, False, 2)
    assert config.iterations == TrainConfig.iterations  # neither in the file nor given
    assert (config.loss.kl_coef, config.loss.clip_eps) == (0.0, TrainConfig().loss.clip_eps)
    assert (config.advantage.preset, config.advantage.alpha) == ("official_code", 0.25)  # the file's change kept
    assert config.report_to == ("wandb",)


def test_eval_builds_its_config_from_the_flags_given(monkeypatch, tmp_path):
    from rlvmr_nb import evaluate

    seen = {}
    monkeypatch.setattr(evaluate, "evaluate_seeds", lambda model, tok, config, seeds: seen.update(config=config,
                                                                                                   seeds=seeds) or {})
    monkeypatch.setattr(evaluate, "write_seed_results", lambda path, *a, **k: (path, {"metrics": {}, "metrics_ci": {}}))
    assert cli.main(["eval", "--env", "toy", "--model", "tiny-random:llama", "--seeds", "3", "4", "--batch-tasks", "2",
                     "--max-prompt-tokens", "none", "--out", str(tmp_path / "eval.json")]) == 0
    config = seen["config"]
    assert (config.seed, seen["seeds"], config.batch_tasks, config.max_prompt_tokens) == (3, [3, 4], 2, None)
    assert config.temperature == EvalConfig.temperature


@pytest.mark.parametrize("arguments, named", [
    (["train", "--group-size", "0"], "argument --group-size: must be a finite number > 0, got 0"),
    (["train", "--rollout-dtype", "int8"], "argument --rollout-dtype: must be one of ('bfloat16', 'float16', 'float32', 'float64'), got 'int8'"),
    (["train", "--iterations", "two"], "argument --iterations: not an integer: 'two'"),
    (["eval", "--max-steps", "0"], "argument --max-steps: must be a finite number > 0, got 0"),
    (["eval", "--temperature", "-1"], "argument --temperature: must be a finite number >= 0, got -1.0"),
])
def test_a_value_its_field_refuses_alone_is_refused_at_parse_time_naming_the_flag(capsys, arguments, named):
    with pytest.raises(SystemExit) as exc:
        cli.main(arguments)
    assert exc.value.code == 2 and named in capsys.readouterr().err


def test_a_value_refused_with_other_settings_ends_in_the_one_error_line(capsys, tmp_path):
    assert cli.main(["train", "--env", "toy", "--mini-batch-size", "2", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "rlvmr-nb train: error: need micro_batch_size <= mini_batch_size" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_the_parser_of_the_other_commands_does_not_import_torch():
    """The train/eval flags come from configs that import torch; they are built only for those commands, so
    `rlvmr-nb --help`, `demo` or `data` start without it."""
    code = ("import sys; from rlvmr_nb import cli; cli.build_parser(); cli.build_parser('demo'); "
            "assert 'torch' not in sys.modules; cli.build_parser('train'); assert 'torch' in sys.modules")
    src = Path(__file__).resolve().parents[2] / "src"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(src)})
    assert done.returncode == 0, done.stderr[-2000:]
