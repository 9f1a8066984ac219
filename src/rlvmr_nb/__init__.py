"""rlvmr_nb: a tested, notebook-first reimplementation of RLVMR (arXiv 2507.22844).

The sub-packages are the method's stages, in the order data flows: `envs` → `rollout` → `scoring` → `update` →
`runs`, then `trainer` / `evaluate`, the `cli` and the notebooks (README, 'Where the code is').

Modules that moved into the stage folders can still be imported by their old names (`rlvmr_nb.advantages` is
`rlvmr_nb.scoring.advantages`), with a `DeprecationWarning` naming the new place; a name that was renamed fails
with an error naming its new one. `MOVED` and `RENAMED` are the whole list."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

__version__ = "0.1.0"

MOVED: dict[str, tuple[str, ...]] = {
    "rlvmr_nb.trajectory": ("rlvmr_nb.rollout.trajectory",),
    "rlvmr_nb.tags": ("rlvmr_nb.rollout.tags",),
    "rlvmr_nb.generation": ("rlvmr_nb.rollout.generation",),
    "rlvmr_nb.prompts": ("rlvmr_nb.rollout.prompts",),
    "rlvmr_nb.rewards": ("rlvmr_nb.scoring.rewards",),
    "rlvmr_nb.advantages": ("rlvmr_nb.scoring.advantages",),
    "rlvmr_nb.metrics": ("rlvmr_nb.scoring.metrics",),
    "rlvmr_nb.stats": ("rlvmr_nb.scoring.stats",),
    "rlvmr_nb.loss_terms": ("rlvmr_nb.update.loss_terms",),
    "rlvmr_nb.loss": ("rlvmr_nb.update.reference_loss", "rlvmr_nb.update.loss_terms"),
    "rlvmr_nb.step_samples": ("rlvmr_nb.update.samples", "rlvmr_nb.update.logprobs", "rlvmr_nb.update.ppo"),
    "rlvmr_nb.sampler_correction": ("rlvmr_nb.update.sampler_correction",),
    "rlvmr_nb.reference_policy": ("rlvmr_nb.update.reference_policy",),
    "rlvmr_nb.distributed": ("rlvmr_nb.update.distributed",),
    "rlvmr_nb.sharding": ("rlvmr_nb.update.sharding",),
    "rlvmr_nb.kernels": ("rlvmr_nb.update.kernels",),
    "rlvmr_nb.sft": ("rlvmr_nb.coldstart.sft",),
    "rlvmr_nb.sft_config": ("rlvmr_nb.coldstart.sft_config",),
    "rlvmr_nb.sft_unsloth": ("rlvmr_nb.coldstart.sft_unsloth",),
    "rlvmr_nb.config_files": ("rlvmr_nb.train_config",),
    "rlvmr_nb.envs.lab": ("rlvmr_nb.envs.lab_world",),
    "rlvmr_nb.coldstart.lab_rules": ("rlvmr_nb.coldstart.lab_world_rules",),
    "rlvmr_nb.prompts.lab": ("rlvmr_nb.rollout.prompts.families",),
}
"""Old module name -> the module(s) its names now live in (the old packages' sub-modules moved with them)."""

RENAMED: dict[str, str] = {
    "rlvmr_nb.step_samples.ResponseScorer": "rlvmr_nb.update.logprobs.ResponseLogprobModel",
    "rlvmr_nb.step_samples.ScoringOptions": "rlvmr_nb.update.logprobs.LogprobOptions",
    "rlvmr_nb.step_samples.score_micro_batch": "rlvmr_nb.update.logprobs.micro_batch_hidden_states",
    "rlvmr_nb.step_samples.episodes_to_samples": "rlvmr_nb.update.samples.episodes_to_samples (takes ScoredEpisodes)",
    "rlvmr_nb.rewards.assign_rewards": "rlvmr_nb.scoring.rewards.with_rewards (copies; the input is left as it is)",
    "rlvmr_nb.metrics.mean_mr_reward_by_tag": "rlvmr_nb.scoring.metrics.mean_mr_reward_by_tag (of ScoredStep records)",
}
"""Old name -> new name, for names that changed as well as moved: importing the old one says where to look."""


def _new_home(old: str) -> tuple[str, ...] | None:
    if old in MOVED:
        return MOVED[old]
    for prefix, homes in MOVED.items():
        if old.startswith(prefix + ".") and len(homes) == 1:  # a sub-module of a moved package
            return (homes[0] + old[len(prefix):],)
    return None


def renamed_error(module: str, name: str) -> ImportError | None:
    """The error for `module.name` when that name was renamed (None otherwise). An ImportError, because
    ``from module import name`` would turn an AttributeError into a message that does not say where to look."""
    new = RENAMED.get(f"{module}.{name}")
    return ImportError(f"{module}.{name} is now {new}", name=name) if new else None


class _MovedModule(types.ModuleType):
    """Stands for an old module: each attribute is looked up in the module(s) that now hold it."""

    def __getattr__(self, name: str):
        error = renamed_error(self.__name__, name)
        if error:
            raise error
        for home in self.__dict__["_homes"]:
            module = importlib.import_module(home)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} (moved to {', '.join(self.__dict__['_homes'])}) has no "
                             f"attribute {name!r}")


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as its new home (`MOVED`)."""

    def find_spec(self, fullname, path=None, target=None):
        if _new_home(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        homes = _new_home(spec.name)
        warnings.warn(f"{spec.name} moved to {' and '.join(homes)}", DeprecationWarning, stacklevel=3)
        if len(homes) == 1 and not any(k.startswith(spec.name + ".") for k in RENAMED):
            return importlib.import_module(homes[0])  # the same module object: patches and isinstance agree
        module = _MovedModule(spec.name)
        module._homes = homes
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_MovedFinder())
