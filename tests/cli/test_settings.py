"""One definition of each setting: a configuration tree whose branches are what each stage receives, shared by
training, evaluation and the lab; the CLI's flags generated from the tree (a default is written once, in its
dataclass); and the one rule that ties a method's preset to its format-penalty channel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import pytest

pytest.importorskip("torch")  # train_config places tensors (`devices`)

from rlvmr_nb.evaluate import EvalConfig  # noqa: E402
from rlvmr_nb.scoring.metrics import summarize  # noqa: E402
from rlvmr_nb.lab.config import LabConfig  # noqa: E402
from rlvmr_nb.rollout.generation import EngineConfig  # noqa: E402
from rlvmr_nb.rollout.loop import RolloutConfig  # noqa: E402
from rlvmr_nb.settings import branch_type, tree_classes  # noqa: E402
from rlvmr_nb.train_config import TrainConfig, train_config  # noqa: E402

FIXTURES = Path(__file__).parents[1] / "fixtures"
ROOTS = (TrainConfig, EvalConfig, LabConfig)
"""The configurations a user writes: a training run, an evaluation, a lab experiment."""


def _redeclared(roots: tuple[type, ...]) -> list[str]:
    """Fields declared twice: by two branch classes, or by a root and a branch (roots may share their own identity
    fields, such as `seed` and `device`)."""
    owners: dict[str, set[type]] = {}
    root_fields: dict[str, set[type]] = {}
    for root in roots:
        for klass in tree_classes(root):
            hints = typing.get_type_hints(klass)
            for f in fields(klass):
                if branch_type(hints[f.name]) is None:
                    (root_fields if klass in roots else owners).setdefault(f.name, set()).add(klass)
    twice = [f"{name}: {sorted(c.__name__ for c in classes)}" for name, classes in owners.items() if len(classes) > 1]
    shadowed = [f"{name}: {sorted(c.__name__ for c in root_fields[name] | owners[name])}" for name in root_fields
                if name in owners]
    return sorted(twice + shadowed)


def test_every_setting_is_declared_once_in_one_tree():
    """Each setting has one home; training, evaluation and the lab hold the same branch classes."""
    assert _redeclared(ROOTS) == []
    assert len(fields(TrainConfig)) <= 12
    assert typing.get_type_hints(EvalConfig)["rollout"] is typing.get_type_hints(TrainConfig)["rollout"] is RolloutConfig
    assert typing.get_type_hints(EvalConfig)["engine"] is typing.get_type_hints(TrainConfig)["engine"] is EngineConfig
    assert typing.get_type_hints(LabConfig)["train"] is TrainConfig  # the lab is a training configuration plus its own


def test_the_cold_start_is_a_tree_of_its_own_with_one_home_and_one_flag_per_setting():
    """`rlvmr-nb coldstart --config` names settings as `train` does: each field once in its tree, one flag each, the
    help the field's docstring (its SFT `lr` and `seed` are not training's: another tree, another command)."""
    from rlvmr_nb.coldstart.command import build_parser
    from rlvmr_nb.coldstart.config import ColdStartConfig

    assert _redeclared((ColdStartConfig,)) == []
    parser, flags = build_parser()
    helps = {option: action.help for action in parser._actions for option in action.option_strings}
    by_setting = {flag.setting: flag for flag in flags}
    unflagged = set()
    for klass in tree_classes(ColdStartConfig):
        hints, docs = typing.get_type_hints(klass), field_docs(klass)
        for f in fields(klass):
            if branch_type(hints[f.name]) is None and f.name not in by_setting:
                unflagged.add(f.name)
            elif branch_type(hints[f.name]) is None:
                flag = by_setting[f.name]
                shown = helps[flag.options[-1]].replace("%%", "%")  # argparse's escape of a per cent sign
                assert shown.startswith(first_sentence(docs[f.name])), f.name
    assert unflagged == {"betas"}  # AdamW's pair of floats: set in a file (no flag spells a pair)


@dataclass
class _Optimiser:
    lr: float = 1e-6


@dataclass
class _Schedule:
    lr: float = 1e-3  # the same setting declared a second time


@dataclass
class _TwoHomes:
    optimiser: _Optimiser = field(default_factory=_Optimiser)
    schedule: _Schedule = field(default_factory=_Schedule)
    seed: int = 0


@dataclass
class _Shadowing:
    optimiser: _Optimiser = field(default_factory=_Optimiser)
    lr: float = 0.1  # the root repeats a branch's setting


def test_the_redeclaration_check_can_fail():
    assert _redeclared((_TwoHomes,)) == ["lr: ['_Optimiser', '_Schedule']"]
    assert _redeclared((_Shadowing,)) == ["lr: ['_Optimiser', '_Shadowing']"]


def test_training_and_evaluation_build_their_engines_from_one_branch():
    """Training sleeps the engine at its `vllm_sleep_level` between rollouts and syncs weights that find no room in
    /dev/shm through its run folder; evaluation never sleeps nor syncs; otherwise the same `engine` branch gives the
    same settings."""
    engine = dict(rollout_dtype="float32", vllm_gpu_memory_utilization=0.3, generation_batch_size=4, seed=3)
    train, evaluation = TrainConfig.from_dict(engine), EvalConfig.from_dict(engine)
    assert replace(train.engine_settings, sleep_level=0, sync_dir=None) == evaluation.engine_settings
    assert (train.engine_settings.sleep_level, evaluation.engine_settings.sleep_level) == (2, 0)
    assert train.engine_settings.sync_dir == train.run.out_dir
    assert TrainConfig.from_dict(dict(vllm_sync_dir="/scratch/sync")).engine_settings.sync_dir == "/scratch/sync"
    with pytest.raises(ValueError, match="EngineConfig.rollout_dtype"):
        EvalConfig.from_dict(dict(rollout_dtype="int8"))


def test_a_run_config_written_before_the_tree_still_loads(tmp_path):
    """A run folder's config.json from before the tree (every setting at the top, the advantage preset inside
    "advantage", the penalty channel inside "reward") loads through both doors, the file reader and `from_dict`,
    with every value it holds kept: each flat name finds its branch (fields added since take their defaults)."""
    path = FIXTURES / "run_config_flat_engine_keys.json"
    saved = json.loads(path.read_text())
    for config in (train_config(path), TrainConfig.from_dict(saved)):
        now = {**config.flat(), **asdict(config.method.advantage_config), "preset": config.method.preset,
               "format_penalty_channel": config.method.penalty_channel}
        flat_saved = {k: v for section in ("advantage", "reward", "loss") for k, v in saved[section].items()}
        flat_saved.update({k: v for k, v in saved.items() if not isinstance(v, dict) or k == "rollout_options"})
        now = json.loads(json.dumps(now))  # as a file holds it (tuples are lists)
        assert {k: v for k, v in flat_saved.items() if now.get(k, "missing") != v} == {}
        engine = config.engine_settings
        assert (engine.dtype, engine.gpu_memory_utilization, engine.sleep_level, engine.max_batch_size,
                dict(engine.options)) == ("float32", 0.3, 1, 4, {"kv_cache_gb": 1})
        assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config  # and back, as branches


def test_a_name_that_no_longer_exists_is_refused_naming_the_closest():
    with pytest.raises(ValueError, match="unknown TrainConfig setting 'iteratons'; did you mean iterations"):
        train_config(None, {"iteratons": 3})
    with pytest.raises(ValueError, match="settings: rollout.group_size must be an integer, got 2.5"):
        train_config(None, {"group_size": 2.5})


# --------------------------------------------------------------------- the preset → penalty-channel rule


def test_each_preset_puts_the_format_penalty_in_one_channel_everywhere():
    """A method's preset is the rule: the two presets put the penalty in different channels (paper §3.4.1: the step
    reward; the official code: the outcome score), every run of a preset scores with its channel, and there is no
    second setting that could disagree with it."""
    from rlvmr_nb.scoring.method import PRESETS, MethodConfig
    from rlvmr_nb.scoring.rewards import PENALTY_CHANNELS, RewardConfig

    assert {p.penalty_channel for p in PRESETS.values()} == set(PENALTY_CHANNELS)  # the two presets differ
    assert (PRESETS["official_code"].penalty_channel, PRESETS["paper"].penalty_channel) == ("outcome", "step")
    assert "format_penalty_channel" not in {f.name for f in fields(RewardConfig)}
    for name in PRESETS:
        assert train_config(None, {"preset": name}).method.penalty_channel == PRESETS[name].penalty_channel
        assert MethodConfig(preset=name).advantage_config == PRESETS[name].advantage
    with pytest.raises(ValueError, match="MethodConfig.preset must be one of"):
        MethodConfig(preset="papers")


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
from rlvmr_nb.cli import torch_commands  # noqa: E402
from rlvmr_nb.settings import field_docs, first_sentence, setting_flags  # noqa: E402

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
    """Every leaf of the tree a command line can spell has one flat flag (``--lr`` sets ``update.lr``), its help the
    first sentence of the field's docstring and the default the root gives it (evaluation's temperature is 0.4)."""
    from rlvmr_nb.settings import tree_paths

    helps, root, paths = _flag_help(command), config(), tree_paths(config)
    for klass in tree_classes(config):
        hints, docs = typing.get_type_hints(klass), field_docs(klass)
        for f in fields(klass):
            if branch_type(hints[f.name]) is not None or hints[f.name] is dict:  # a --config file sets those
                continue
            option = "--" + f.name.replace("_", "-")
            assert option in helps, f"{klass.__name__}.{f.name} has no flag"
            default = root
            for part in paths[f.name]:
                default = getattr(default, part)
            shown = (" ".join(default) or "none") if isinstance(default, tuple) else str(default)
            assert helps[option] == f"{first_sentence(docs[f.name])} (default: {shown})"
    assert set(FLAGS_IN_USE[command]) <= set(helps)
    assert "(default: 0.4)" in helps["--temperature"] if command == "eval" else "(default: 1.0)" in helps["--temperature"]


def test_a_docstring_s_first_sentence_ends_at_a_sentence_s_full_stop():
    assert first_sentence("Weight of the KL term (paper App. A.2: 0.01). 0 disables it.") == \
        "Weight of the KL term (paper App. A.2: 0.01)."
    assert first_sentence("Clip, e.g. 2.0 or §2.1. None: off.") == "Clip, e.g. 2.0 or §2.1."
    assert first_sentence("No full stop") == "No full stop"


def test_no_default_of_a_train_or_eval_flag_is_written_in_the_cli():
    """The defaults live in the dataclasses: the CLI's settings flags default to None (not given), and no value
    that is a default of a train/eval setting (0, 1 and 2 aside: indents, slices) appears as a literal in the
    CLI's train and eval code (`cli.torch_commands`), nor a "default: <number>" help text anywhere in the CLI."""
    import ast
    import re

    source = Path(torch_commands.__file__).read_text()
    tree = ast.parse(source)
    flags = [*setting_flags(TrainConfig, torch_commands.TRAIN_FLAG_NAMES), *setting_flags(EvalConfig)]
    defaults = {flag.default for flag in flags if not isinstance(flag.default, (bool, tuple, type(None)))} - {0, 1, 2}
    train_and_eval = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in
                      ("add_train_settings", "add_eval_settings", "setting_choices", "cmd_train", "cmd_eval")]
    assert len(train_and_eval) == 5
    literals = [(node.lineno, node.value) for part in train_and_eval for node in ast.walk(part)
                if isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value in defaults]
    assert literals == []
    for call in (n for part in train_and_eval for n in ast.walk(part) if isinstance(n, ast.Call)):
        for keyword in call.keywords:
            if keyword.arg == "default":
                assert not isinstance(keyword.value, ast.Constant) or keyword.value.value is None, ast.unparse(call)
    for text in (source, Path(cli.__file__).read_text()):
        assert not re.search(r"default: [\w.-]*\d", text)  # the old "default: 256" help texts


def test_precedence_defaults_then_the_config_file_then_the_flags_given(monkeypatch, tmp_path):

    seen = {}
    monkeypatch.setattr(torch_commands, "train", lambda config: seen.setdefault("config", config) and [])
    settings = tmp_path / "run.json"
    settings.write_text(json.dumps({"env": "toy", "group_size": 4, "lr": 2e-6, "lora": True,
                                    "advantage": {"preset": "paper", "alpha": 0.25}}))
    assert cli.main(["train", "--config", str(settings), "--lr", "3e-6", "--no-lora", "--tasks", "2",
                     "--kl-coef", "0", "--preset", "official_code", "--report-to", "wandb", "--allow-slow"]) == 0
    config = seen["config"]
    assert (config.rollout.group_size, config.update.lr, config.update.lora, config.run.tasks_per_iteration) == (
        4, 3e-6, False, 2)
    assert config.run.iterations == TrainConfig().run.iterations  # neither in the file nor given
    assert (config.loss.kl_coef, config.loss.clip_eps) == (0.0, TrainConfig().loss.clip_eps)
    assert (config.method.preset, config.method.advantage_config.alpha) == ("official_code", 0.25)  # the file's change kept
    assert config.report_to == ("wandb",)


def test_eval_builds_its_config_from_the_flags_given(monkeypatch, tmp_path):

    seen = {}
    monkeypatch.setattr(torch_commands, "evaluate_seeds", lambda model, tok, config, seeds: seen.update(config=config,
                                                                                                   seeds=seeds) or {})
    monkeypatch.setattr(torch_commands, "write_seed_results",
                        lambda path, *a, **k: (path, {"metrics": summarize([]), "metrics_ci": {}}))
    assert cli.main(["eval", "--env", "toy", "--model", "tiny-random:llama", "--seeds", "3", "4", "--batch-tasks", "2",
                     "--max-prompt-tokens", "none", "--out", str(tmp_path / "eval.json")]) == 0
    config = seen["config"]
    assert (config.seed, seen["seeds"], config.batch_tasks, config.rollout.max_prompt_tokens) == (3, [3, 4], 2, None)
    assert config.rollout.temperature == EvalConfig().rollout.temperature == 0.4


@pytest.mark.parametrize("arguments, named", [
    (["train", "--group-size", "0"], "argument --group-size: must be a finite number > 0, got 0"),
    (["train", "--rollout-dtype", "int8"],
     "argument --rollout-dtype: must be one of ('bfloat16', 'float16', 'float32', 'float64'), got 'int8'"),
    (["train", "--iterations", "two"], "argument --iterations: not an integer: 'two'"),
    (["eval", "--max-steps", "0"], "argument --max-steps: must be a finite number > 0, got 0"),
    (["eval", "--temperature", "-1"], "argument --temperature: must be a finite number >= 0, got -1.0"),
    (["train", "--env-workers", "lots"], "argument --env-workers: must be a count >= 0 or 'auto', got 'lots'"),
    (["eval", "--env-workers", "-1"], "argument --env-workers: must be a count >= 0 or 'auto', got -1"),
    (["train", "--tis-cap", "on"], "argument --tis-cap: must be a number > 0, 'auto' or None, got 'on'"),
])
def test_a_value_its_field_refuses_alone_is_refused_at_parse_time_naming_the_flag(capsys, arguments, named):
    with pytest.raises(SystemExit) as exc:
        cli.main(arguments)
    assert exc.value.code == 2 and named in capsys.readouterr().err


def test_count_or_word_flags(monkeypatch, tmp_path):
    """A field that is a number or a word (``int | str``: a count or 'auto') is spelled either way; `none` sets an
    optional one to None. A dict (the vLLM engine's options) comes from a --config file."""

    seen = []
    monkeypatch.setattr(torch_commands, "train", lambda config: seen.append(config) or [])
    run = ["train", "--env", "toy", "--out", str(tmp_path / "run"), "--allow-slow"]  # default size: slow on a CPU
    settings = tmp_path / "engine.json"
    settings.write_text(json.dumps({"vllm_engine_options": {"max_num_seqs": 64, "enforce_eager": True}}))
    assert cli.main([*run, "--env-workers", "auto", "--tis-cap", "auto", "--config", str(settings)]) == 0
    assert cli.main([*run, "--env-workers", "3", "--tis-cap", "2.5"]) == 0
    assert cli.main([*run, "--env-workers", "none", "--tis-cap", "none"]) == 0
    assert [(c.rollout.env_workers, c.update.tis_cap) for c in seen] == [("auto", "auto"), (3, 2.5), (None, None)]
    assert seen[0].engine.vllm_engine_options == {"max_num_seqs": 64, "enforce_eager": True}
    assert "--env-workers INT|WORD" in _subparser("train").format_help()


def test_a_value_refused_with_other_settings_ends_in_the_one_error_line(capsys, tmp_path):
    assert cli.main(["train", "--env", "toy", "--mini-batch-size", "2", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "rlvmr-nb train: error: settings: need micro_batch_size <= mini_batch_size" in err and "Traceback" not in err
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
