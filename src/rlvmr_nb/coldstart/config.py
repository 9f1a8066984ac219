"""`ColdStartConfig`: every setting of a cold start (paper §3.3, App. A.2), and the run that builds one:
the tagged dataset, the SFT and the measurement before and after (docs/method.md, 'Cold start').

    ColdStartConfig
    ├── model, out_dir                       the model fine-tuned, the folder written (`layout.coldstart_folder`)
    ├── data      ColdStartData              world, level, trajectories, teacher, prompt format, samples trained on
    ├── sft       sft_config.SFTConfig       epochs, lr, batch, micro-batch, max length, backend, device, seed
    └── measure   ColdStartMeasure           held-out games played before and after the SFT

As `train_config.TrainConfig` for RL, every field name is unique in the tree, so files and flags name a setting by
its field alone (``"lr"``, ``--micro-batch-size``), by its dotted path (``"sft.lr"``) or inside its branch
(``{"sft": {"lr": 1e-5}}``); keys starting with ``_`` are comments. The cold start's one seed is ``sft.seed``: it
also draws the trajectories, the sample subset and the held-out games. Precedence: the defaults, the file, the
options given (``rlvmr-nb coldstart --config FILE --epochs 1``).

The shipped files ``configs/paper/coldstart_<env>.json`` hold the paper's settings; their folder
(``runs/coldstart/<env>-L0-n200-seed0``) is where ``configs/paper/rlvmr_<env>.json`` takes its model from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..envs.registry import LEVELS, get_env
from ..rollout.generation.base import STOP_POLICIES
from ..settings import build_config, read_settings_file, require_non_negative, require_positive
from .dataset import MIN_TAG_SHARE, build_coldstart_dataset, read_manifest
from .layout import DATA_FOLDER, MODEL_FOLDER, RESULTS_FILE, coldstart_folder
from .sft_config import SFTConfig
from .teachers import make_teacher

TEACHERS: tuple[str, ...] = ("rule", "llm")
"""Who writes the tag and sentence of each step (`teachers.make_teacher`)."""


@dataclass
class ColdStartData:
    """Which expert trajectories are tagged, how, and which of their steps are trained on (`dataset`)."""

    env: str = "alfworld"
    """The world whose experts are tagged (`experts.coldstart_envs`: alfworld, scienceworld, lab)."""
    level: str = "L0"
    """Whose training split the experts come from (L2: the held-out task types never appear)."""
    n_trajectories: int | None = None
    """Tagged expert trajectories (paper §3.3: 200); None: the world's default (200 ALFWorld, 60 ScienceWorld)."""
    teacher: str = "rule"
    """'rule' (`RuleTeacher`: offline, deterministic for a seed) or 'llm' (an OpenAI-compatible endpoint, named
    with --llm-model and --llm-base-url; the paper's teacher was GPT-4o)."""
    expert: str | None = None
    """ALFWorld: mixed (default) | walkthrough | handcoded; ScienceWorld: gold (the only one)."""
    error_rate: float = 0.8
    """Rule teacher: the share of trajectories given a replayed mistake and the reflection that recovers it."""
    admissible: bool = True
    """Show the admissible commands in the SFT prompts, as the RL prompts do; False: the official cold-start
    prompt, which omits them (docs/method.md, 'Cold start')."""
    min_tag_share: float = MIN_TAG_SHARE
    """Every tag must make up at least this share of the trained steps (0: no check)."""
    max_samples: int | None = None
    """Train on a seeded subset of this many step samples (None: all; the paper trains on every step)."""
    max_sample_tokens: int | None = None
    """Drop samples longer than this many tokens, prompt and response (None: keep all; a sample longer than
    `max_length` raises, as the official SFT's truncation='error')."""
    stratify_tags: bool = True
    """Keep the dataset's tag shares in the `max_samples` subset (`experiment.select_samples`)."""

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"ColdStartData.level must be one of {LEVELS}, got {self.level!r}")
        if self.teacher not in TEACHERS:
            raise ValueError(f"ColdStartData.teacher must be one of {TEACHERS}, got {self.teacher!r}")
        for name in ("n_trajectories", "max_samples", "max_sample_tokens"):
            if getattr(self, name) is not None:
                require_positive(self, [name])
        require_non_negative(self, ["error_rate", "min_tag_share"])
        if self.error_rate > 1 or self.min_tag_share >= 1:
            raise ValueError("ColdStartData.error_rate is a share in [0, 1] and min_tag_share one in [0, 1)")


@dataclass
class ColdStartMeasure:
    """The held-out games the model plays before and after the SFT: format validity, admissible actions, success
    (`experiment.coldstart_sft_experiment`; not part of the paper's recipe)."""

    eval_games: int = 16
    """Games of the level's test split (a seeded subset), the same before and after; 0: no measurement."""
    eval_max_steps: int = 8
    """Steps per game (paper: 30)."""
    eval_max_new_tokens: int = 128
    """Response tokens per step (paper: 1024)."""
    eval_temperature: float = 0.4
    """Sampling temperature (official validation: 0.4)."""
    eval_stop: str = "action"
    """'action': stop after </action> (a CPU token budget) | 'none': EOS or the budget (official)."""
    eval_batch_tasks: int = 8
    """Games stepped together."""

    def __post_init__(self) -> None:
        require_non_negative(self, ["eval_games", "eval_temperature"])
        require_positive(self, ["eval_max_steps", "eval_max_new_tokens", "eval_batch_tasks"])
        if self.eval_stop not in STOP_POLICIES:
            raise ValueError(f"ColdStartMeasure.eval_stop must be one of {tuple(STOP_POLICIES)}, got {self.eval_stop!r}")


@dataclass
class ColdStartConfig:
    """Every setting of a cold start (the module docstring draws the tree)."""

    model: str = "embedded:smollm2-135m-instruct"
    """The model fine-tuned: a `models.load_model` spec (paper: Qwen2.5-1.5B/7B-Instruct)."""
    out_dir: str | None = None
    """The cold start's folder: data/, sft/ (the model RL starts from) and results.json (None:
    runs/coldstart/<env>-<level>-n<N>-seed<S>). A dataset-only build (`rlvmr-nb coldstart` without --config)
    writes its dataset here itself."""
    data: ColdStartData = field(default_factory=ColdStartData)
    """The tagged dataset (`dataset.build_coldstart_dataset`)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """The fine-tuning (`sft.train_sft`); its seed is the cold start's one seed, its device where it all runs."""
    measure: ColdStartMeasure = field(default_factory=ColdStartMeasure)
    """The measurement before and after."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def coldstart_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> ColdStartConfig:
    """A `ColdStartConfig` from the JSON file at `path` (None: the defaults) with `overrides` on top; names as the
    module docstring says. Unknown names and values of the wrong type are refused naming the file and setting."""
    base = None
    if path is not None:
        settings = read_settings_file(path, "ColdStartConfig")
        if not isinstance(settings, dict):
            raise ValueError(f"{path}: a ColdStartConfig file holds one JSON object {{setting: value}}")
        base = build_config(ColdStartConfig, {k: v for k, v in settings.items() if not k.startswith("_")},
                            source=str(path))
    given = {k: v for k, v in (overrides or {}).items() if not k.startswith("_")}
    return build_config(ColdStartConfig, given, source="settings" if path is None else f"{path} (+ options)",
                        base=base)


def trajectories(config: ColdStartConfig) -> int:
    """The number of trajectories asked for (the world's default when the config leaves it open)."""
    data = config.data
    return data.n_trajectories if data.n_trajectories is not None else get_env(data.env).coldstart().default_trajectories


def folder(config: ColdStartConfig) -> Path:
    """The cold start's folder: `ColdStartConfig.out_dir`, else `layout.coldstart_folder`."""
    if config.out_dir is not None:
        return Path(config.out_dir)
    return coldstart_folder(config.data.env, config.data.level, trajectories(config), config.sft.seed,
                            config.data.teacher)


def make_config_teacher(config: ColdStartConfig) -> Any:
    """The rule teacher of `config` (its seed and error rate). The LLM teacher needs its endpoint, which is no
    setting: build it with `teachers.make_teacher('llm', model=...)` and pass it."""
    if config.data.teacher != "rule":
        raise ValueError(f"teacher {config.data.teacher!r} needs its endpoint: pass a Teacher object "
                         "(rlvmr-nb coldstart: --llm-model and --llm-base-url)")
    return make_teacher("rule", seed=config.sft.seed, error_rate=config.data.error_rate)


def _recipe(env: str, level: str, seed: int, teacher: dict, expert: str, trajectories: int, admissible: bool,
            min_tag_share: float) -> dict[str, Any]:
    """What decides a dataset's contents (it is deterministic for these), as its manifest records them."""
    return {"env": env, "level": level, "seed": seed, "teacher": teacher, "expert": expert,
            "trajectories": trajectories, "admissible": admissible, "min_tag_share": min_tag_share}


def coldstart_dataset(config: ColdStartConfig, teacher: Any = None, out: str | Path | None = None,
                      reuse: bool = True, progress: bool = True) -> Path:
    """The tagged dataset of `config` in `out` (default ``<folder>/data``). With `reuse`, a finished dataset there
    is kept when its manifest says it was built with these settings, and refused when it says otherwise; without,
    it is built again. `teacher`: a Teacher object (default: `make_config_teacher`)."""
    data, seed = config.data, config.sft.seed
    teacher = teacher if teacher is not None else make_config_teacher(config)
    kit = get_env(data.env).coldstart()
    expert = data.expert or kit.experts[0]
    out = Path(out) if out is not None else folder(config) / DATA_FOLDER
    if reuse and (out / "manifest.json").is_file():
        m = read_manifest(out)
        built = _recipe(m.get("env"), m.get("level"), m.get("seed"), m.get("teacher"),
                        m.get("source", {}).get("expert"), m.get("counts", {}).get("trajectories"),
                        m.get("prompt", {}).get("show_admissible"), m.get("tags", {}).get("min_share_required"))
        asked = _recipe(data.env, data.level, seed, teacher.describe(), kit.describe_expert(expert, 0.5)["expert"],
                        trajectories(config), data.admissible, data.min_tag_share)
        differ = sorted(k for k in asked if asked[k] != built[k])
        if differ:
            raise ValueError(f"{out} holds a dataset built with other {', '.join(differ)} "
                             f"({', '.join(f'{k}={built[k]!r}' for k in differ)}): delete it, or give this cold start "
                             "another --out")
        return out
    return build_coldstart_dataset(data.env, data.level, trajectories(config), seed, teacher, out, expert=expert,
                                   show_admissible=data.admissible, min_tag_share=data.min_tag_share,
                                   progress=progress)


def experiment_config(config: ColdStartConfig, dataset: str | Path) -> Any:
    """The `experiment.ColdStartExperimentConfig` that fine-tunes ``config.model`` on `dataset` and measures it,
    writing ``<folder>/sft`` and ``<folder>/results.json``."""
    # torch (the 'train' extra) is loaded here only: importing coldstart.config needs none of it
    from .experiment import ColdStartExperimentConfig

    data, measure, out = config.data, config.measure, folder(config)
    return ColdStartExperimentConfig(
        model=config.model, dataset=str(dataset), env=data.env, level=data.level, n_trajectories=trajectories(config),
        seed=config.sft.seed, max_samples=data.max_samples, max_sample_tokens=data.max_sample_tokens,
        stratify_tags=data.stratify_tags, sft=config.sft, eval_games=measure.eval_games,
        eval_max_steps=measure.eval_max_steps, eval_max_new_tokens=measure.eval_max_new_tokens,
        eval_temperature=measure.eval_temperature, eval_stop=measure.eval_stop,
        eval_batch_tasks=measure.eval_batch_tasks, run_eval=measure.eval_games > 0,
        results_path=str(out / RESULTS_FILE), model_out_dir=str(out / MODEL_FOLDER))


def run_coldstart(config: ColdStartConfig, teacher: Any = None, progress: bool = True) -> dict[str, Any]:
    """The whole cold start: the dataset (`coldstart_dataset`), then SFT and the measurement before and after
    (`experiment.coldstart_sft_experiment`). Returns the results document (also in ``<folder>/results.json``, with
    the settings in ``<folder>/coldstart_config.json``); the model is in ``<folder>/sft``."""
    # torch (the 'train' extra) is loaded here only: importing coldstart.config needs none of it
    from .experiment import coldstart_sft_experiment

    dataset = coldstart_dataset(config, teacher, progress=progress)
    out = folder(config)
    (out / "coldstart_config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
    return coldstart_sft_experiment(experiment_config(config, dataset), progress=progress)
