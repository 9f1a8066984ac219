"""The env registry: one place that knows each world; nothing else compares env names."""

import re
from pathlib import Path

import pytest

from rlvmr_nb.envs.registry import EnvSpec, check_level, env_names, get_env, register_env
from rlvmr_nb.envs.slots import make_env_slots

SRC = Path(__file__).resolve().parents[2] / "src" / "rlvmr_nb"


def test_shipped_worlds_and_their_defaults():
    assert {"alfworld", "scienceworld", "toy"} <= set(env_names())
    assert get_env("alfworld").env_kwargs == {"accelerate": True}
    assert get_env("scienceworld").env_kwargs == {"admissible": "lazy"}
    assert get_env("scienceworld").prompt_family == "scienceworld" and get_env("toy").prompt_family == "alfworld"
    with pytest.raises(ValueError, match="registered envs: .*alfworld"):
        get_env("atari")
    with pytest.raises(ValueError, match="level"):
        check_level("L3")


def test_task_lists_and_heldout_types_per_level():
    toy = get_env("toy")
    assert len(toy.tasks("train", "L0")) == 8 and len(toy.tasks("test", "L2")) == 16
    assert toy.heldout_task_types("L2") == frozenset()
    with pytest.raises(ValueError, match="role"):
        toy.tasks("valid", "L0")
    sw = get_env("scienceworld")
    assert len(sw.heldout_task_types("L2")) == 10 and sw.heldout_task_types("L1") == frozenset()
    assert {t.task_type for t in sw.tasks("train", "L2")}.isdisjoint(sw.heldout_task_types("L2"))
    assert get_env("alfworld").heldout_task_types("L2") == {"pick_cool_then_place_in_recep", "pick_two_obj_and_place"}


def test_registered_world_is_reachable_everywhere():
    register_env(EnvSpec(name="toy-copy", env_class="rlvmr_nb.envs.toy:ToyEnv", task_lists="rlvmr_nb.envs.toy:level_tasks"),
                 replace=True)
    with pytest.raises(ValueError, match="registered already"):
        register_env(EnvSpec(name="toy-copy", env_class="x:y", task_lists="x:z"))
    slots = make_env_slots("toy-copy")
    (reset,) = slots.reset(get_env("toy-copy").tasks("train", "L0")[:1])
    assert "Your task is to" in reset.observation
    with pytest.raises(ValueError, match="no cold-start kit"):
        get_env("toy-copy").coldstart()


def test_no_env_name_comparisons_outside_the_registry():
    """Guards the regrouping: env-specific behaviour lives in `envs.registry` (and the per-world modules it
    points at), never in `if env == "alfworld"` branches scattered through the package."""
    pattern = re.compile(r"""(==|!=)\s*["'](alfworld|scienceworld|toy)["']|["'](alfworld|scienceworld|toy)["']\s*(==|!=)""")
    offenders = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py") if p.name != "registry.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == [], f"env-name comparisons outside envs/registry.py: {offenders}"
