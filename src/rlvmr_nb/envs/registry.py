"""The one environment registry: name → everything the rest of the package needs to know about an env.

An `EnvSpec` says which `TextEnv` class implements the world, which prompt family renders its prompts
(`prompts.PROMPT_FAMILIES`), where its task lists for each level come from, which constructor arguments
it gets by default (ALFWorld: the memoising accelerator; ScienceWorld: lazy admissible lists), which
task types each level holds out (paper §2.1: L2 holds out task categories) and which cold-start kit
supplies its experts and rule-teacher (`coldstart.kits`). Code elsewhere looks an env up here and calls
its attributes; it never compares env names.

Targets are 'module:attr' strings resolved on first use, so importing the registry imports no
simulator (ALFWorld pulls TextWorld, ScienceWorld a JVM bridge) and no torch: pool workers start fast.

Tests and users add worlds with `register_env(EnvSpec(...))`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .base import TaskSpec, TextEnv

LEVELS: tuple[str, ...] = ("L0", "L1", "L2")
"""Generalisation levels (paper §2.1): L0 seen variants, L1 unseen variants, L2 unseen task categories."""

ROLES: tuple[str, ...] = ("train", "test")
"""Which side of a level's split: the tasks a policy trains on, or the tasks it is evaluated on."""


def resolve_target(target: str | Callable[..., Any]) -> Callable[..., Any]:
    """A callable from a 'package.module:attr' string (or the callable itself)."""
    if callable(target):
        return target
    module_name, sep, attr = str(target).partition(":")
    if not sep:
        raise ValueError(f"target {target!r} must look like 'package.module:attr'")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{module_name} has no {attr!r}") from None


@dataclass(frozen=True)
class EnvSpec:
    """Everything the package knows about one text world."""

    name: str
    """Registry key, also `TaskSpec.env` and `Episode.env` of its tasks."""
    env_class: str | Callable[..., TextEnv]
    """'module:Class' (or a factory) building one `TextEnv`."""
    task_lists: str | Callable[[str, str], list[TaskSpec]]
    """'module:function' with signature ``(role, level) -> list[TaskSpec]``: a level's train or test split,
    in a fixed order."""
    prompt_family: str = "alfworld"
    """Key of `prompts.PROMPT_FAMILIES`: the prompt wording and validity rules of this world (paper App. C)."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Constructor arguments every run uses unless it overrides them."""
    heldout_types: str | Callable[[str], frozenset[str]] | None = None
    """'module:function' ``level -> task types held out of that level's training split`` (None: none)."""
    coldstart_kit: str | None = None
    """'module:attr' of the `coldstart.kits.ColdStartKit` (experts, rule teacher); None: no cold start."""
    data_installer: str | None = None
    """'module:function' ``(source=None, dest=None, force=False) -> Path`` installing the world's game files
    (`rlvmr-nb data <env>`); None: the world needs no data step."""
    data_env_var: str | None = None
    """Environment variable that points the world at its data folder (ALFWorld: ALFWORLD_DATA)."""
    description: str = ""
    commitment_actions: tuple[str, ...] = ()
    """Prefixes of the actions by which an agent commits to an answer and which end the episode when wrong
    (ScienceWorld's 'focus on'). A scripted stand-in player that picks admissible actions at random avoids them, so
    its episodes run to the horizon as a failing policy's do (`rehearsal.play`)."""
    slot_rss_mib: float | None = None
    """Resident memory one env slot holds, where it is large (ScienceWorld: its own JVM, ~360 MiB,
    benchmarks/results/envs_scienceworld.json); a rehearsal plays fewer slots at once where memory is short."""

    def make_env(self, **overrides: Any) -> TextEnv:
        """One environment with the registry defaults, `overrides` on top."""
        return resolve_target(self.env_class)(**{**self.env_kwargs, **overrides})

    def env_factory(self, **overrides: Any) -> Callable[[], TextEnv]:
        """A zero-argument factory (picklable for pool workers when `env_class` is a string)."""
        return _EnvFactory(self.name, dict(overrides))

    def tasks(self, role: str, level: str = "L0") -> list[TaskSpec]:
        """The `role` ('train' or 'test') split of `level`, in its fixed order."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        return list(resolve_target(self.task_lists)(role, check_level(level)))

    def heldout_task_types(self, level: str) -> frozenset[str]:
        """Task types `level`'s policy must never train on (empty for L0/L1)."""
        if self.heldout_types is None:
            return frozenset()
        return frozenset(resolve_target(self.heldout_types)(check_level(level)))

    def install_data(self, source: str | None = None, dest: str | None = None, force: bool = False) -> Any:
        """Install the world's game files (a no-op returning None for worlds that need none)."""
        if self.data_installer is None:
            return None
        return resolve_target(self.data_installer)(source, dest=dest, force=force)

    def coldstart(self) -> Any:
        """This world's cold-start kit, or a clear error when it has none."""
        if self.coldstart_kit is None:
            raise ValueError(f"env {self.name!r} has no cold-start kit (experts and rule teacher); "
                             f"envs with one: {[n for n, s in _REGISTRY.items() if s.coldstart_kit]}")
        return resolve_target(self.coldstart_kit)


@dataclass(frozen=True)
class _EnvFactory:
    """Picklable ``() -> TextEnv`` by registry name: pool workers re-resolve it in their own process."""

    name: str
    overrides: dict[str, Any]

    def __call__(self) -> TextEnv:
        return get_env(self.name).make_env(**self.overrides)


_REGISTRY: dict[str, EnvSpec] = {}


def register_env(spec: EnvSpec, *, replace: bool = False) -> EnvSpec:
    """Add a world to the registry (tests and extensions); `replace=True` overwrites an entry."""
    if spec.name in _REGISTRY and not replace:
        raise ValueError(f"env {spec.name!r} is registered already (pass replace=True to overwrite)")
    _REGISTRY[spec.name] = spec
    return spec


def get_env(name: str) -> EnvSpec:
    """The registered `EnvSpec` of `name`, or a ValueError that lists the known names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown env {name!r}; registered envs: {env_names()}") from None


def env_names() -> list[str]:
    """Registered env names, sorted."""
    return sorted(_REGISTRY)


def check_level(level: str) -> str:
    """'l1' → 'L1'; anything else than L0/L1/L2 is a ValueError."""
    key = str(level).upper()
    if key not in LEVELS:
        raise ValueError(f"unknown level {level!r}; choose one of {LEVELS}")
    return key


# --------------------------------------------------------------------------------------------------
# The worlds this package ships
# --------------------------------------------------------------------------------------------------

register_env(EnvSpec(
    name="alfworld",
    env_class="rlvmr_nb.envs.alfworld:ALFWorldEnv",
    task_lists="rlvmr_nb.envs.alfworld:level_tasks",
    prompt_family="alfworld",
    env_kwargs={"accelerate": True},
    heldout_types="rlvmr_nb.envs.alfworld:heldout_task_types",
    coldstart_kit="rlvmr_nb.coldstart.kits:ALFWORLD",
    data_installer="rlvmr_nb.envs.alfworld_data:install",
    data_env_var="ALFWORLD_DATA",
    description="ALFWorld (TextWorld engine), paper §2.1 / App. A.1",
))
register_env(EnvSpec(
    name="scienceworld",
    env_class="rlvmr_nb.envs.scienceworld:ScienceWorldEnv",
    task_lists="rlvmr_nb.envs.scienceworld_splits:level_tasks",
    prompt_family="scienceworld",
    env_kwargs={"admissible": "lazy"},
    heldout_types="rlvmr_nb.envs.scienceworld_splits:heldout_task_types",
    coldstart_kit="rlvmr_nb.coldstart.kits:SCIENCEWORLD",
    commitment_actions=("focus on",),
    slot_rss_mib=360.0,
    description="ScienceWorld (Java simulator), paper §2.1 / App. A.1",
))
register_env(EnvSpec(
    name="toy",
    env_class="rlvmr_nb.envs.toy:ToyEnv",
    task_lists="rlvmr_nb.envs.toy:level_tasks",
    prompt_family="alfworld",
    description="a pure-Python household game for tests and demos (no levels: every level is the same)",
))
register_env(EnvSpec(
    name="lab",
    env_class="rlvmr_nb.envs.lab_world:LabEnv",
    task_lists="rlvmr_nb.envs.lab_world:level_tasks",
    prompt_family="lab",
    heldout_types="rlvmr_nb.envs.lab_world:heldout_task_types",
    coldstart_kit="rlvmr_nb.coldstart.kits:LAB",
    description="the metacognition lab: a small house with closed containers and dead ends, L0/L1/L2 splits "
                "(new layouts / unseen object-destination pairs / a held-out task kind)",
))
register_env(EnvSpec(
    name="lab_large",
    env_class="rlvmr_nb.envs.lab_world:LargeLabEnv",
    task_lists="rlvmr_nb.envs.lab_world:large_level_tasks",
    prompt_family="lab_large",
    heldout_types="rlvmr_nb.envs.lab_world:heldout_task_types",
    coldstart_kit="rlvmr_nb.coldstart.kits:LAB_LARGE",
    description="the lab's larger house: 8-10 rooms, objects hidden in their home rooms, the room's leads in the "
                "prompt; the lab's splits (docs/lab.md, 'The larger house')",
))
register_env(EnvSpec(
    name="lab_large_home",
    env_class="rlvmr_nb.envs.lab_world:LargeLabHomeEnv",
    task_lists="rlvmr_nb.envs.lab_world:large_home_level_tasks",
    prompt_family="lab_large_home",
    heldout_types="rlvmr_nb.envs.lab_world:heldout_task_types",
    coldstart_kit="rlvmr_nb.coldstart.kits:LAB_LARGE_HOME",
    description="the lab's larger house with the homes named: its layouts, and a prompt line with the room's leads "
                "towards a target's home (docs/lab.md, 'The homes named')",
))
