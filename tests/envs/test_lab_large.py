"""The lab's larger house (`envs.lab_world`, 'lab_large'): its layouts, homes, horizon, prompt leads, and that adding
it left the small house's layouts and cold-start keys as they were."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from rlvmr_nb.envs import lab_expert
from rlvmr_nb.envs import lab_world as lab
from rlvmr_nb.envs.lab_record import lab_record
from rlvmr_nb.envs.registry import get_env
from rlvmr_nb.rollout.prompts import AgentMemory, PromptConfig

SMALL_HOUSE_LAYOUTS_SHA256 = "4a602f09d0bee4b7c0df6eb6c07c10e2a408e673d0189b42e50fa9e44006f832"
"""`describe_task` of every small-house task (train, L0-L2 test), as built before the larger house existed. Pure
Python with string-seeded `random.Random`: the same on every machine."""


def test_the_small_house_builds_the_layouts_it_built_before_the_larger_house():
    """Guards against the larger house's code changing a random draw of the small one: every recorded lab result
    and cached cold start is of those layouts."""
    ids = [t.task_id for role, level in (("train", "L0"), ("test", "L0"), ("test", "L1"), ("test", "L2"))
           for t in lab.level_tasks(role, level)]
    layouts = json.dumps([lab.describe_task(i) for i in ids], sort_keys=True).encode()
    assert hashlib.sha256(layouts).hexdigest() == SMALL_HOUSE_LAYOUTS_SHA256


def test_larger_house_tasks_are_registered_with_their_own_ids_env_and_splits():
    spec = get_env("lab_large")
    train, l0, l2 = spec.tasks("train", "L0"), spec.tasks("test", "L0"), spec.tasks("test", "L2")
    assert (len(train), len(l0), len(l2)) == (400, 60, 60)
    assert all(t.task_id.endswith(":large") and t.env == "lab_large" for t in [*train, *l0, *l2])
    assert {t.task_type for t in l2} == {"put_two"} and "put_two" not in {t.task_type for t in train}
    assert lab.build_world("put:s:7:large") == lab.build_world("put:s:7:large")
    assert lab.build_world("put:s:7:large") != lab.build_world("put:s:7")
    with pytest.raises(ValueError, match="put:s:3:large"):
        lab.build_world("put:s:7:huge")
    # a world refuses the other house's tasks, so a run cannot mix them
    with pytest.raises(ValueError, match="lab_large"):
        lab.LargeLabEnv().reset(get_env("lab").tasks("test", "L0")[0])
    with pytest.raises(ValueError, match="'lab'"):
        lab.LabEnv().reset(l0[0])


def test_every_larger_house_hides_its_targets_mostly_at_home_and_is_larger():
    tasks = [t for role, level in (("train", "L0"), ("test", "L0"), ("test", "L1"), ("test", "L2"))
             for t in get_env("lab_large").tasks(role, level)]
    at_home = Counter()
    for task in tasks:
        world, state = lab.build_world(task.task_id)
        assert 8 <= len(world.rooms) <= 10 and 5 <= len(world.containers) <= 6
        for target in world.targets:
            home = lab.HOMES[target]
            assert home in world.rooms and world.containers_in(home), (task.task_id, target)
            location = state.location(target)
            at_home[dict(world.containers).get(location) == home] += 1
        # the destination is never a home, so a target at home always has to be carried away
        assert world.destination not in {lab.HOMES[t] for t in world.targets}
        assert dict(world.containers).get(world.destination) not in {lab.HOMES[t] for t in world.targets}
    share = at_home[True] / sum(at_home.values())
    assert abs(share - lab.HOME_SHARE) < 0.05, share  # a home the draw ignored would show here


@pytest.mark.parametrize("level", ["L0", "L1", "L2"])
def test_the_expert_solves_nearly_every_larger_house_within_its_horizon(level):
    rate = lab_expert.expert_solve_rates(lab.LARGE_HORIZON, levels=[level], env_name="lab_large")[level]
    assert rate >= 0.95, (level, rate)
    assert lab_expert.expert_solve_rates(lab.LAB_HORIZON - 6, levels=[level], env_name="lab_large")[level] < 0.95
    assert lab.HORIZONS["lab_large"] == lab.LARGE_HORIZON


def test_leads_list_unsearched_containers_then_unvisited_exits_and_only_the_larger_prompt_shows_them():
    observations = ["You are in the hallway. You see nothing. Exits: garage, study.",
                    "You are in the study. You see a closed box, an open chest. In the chest: nothing. Exits: hallway."]
    record = lab_record(observations, ["go to study"])
    admissible = ["go to hallway", "open box", "close chest", "look"]
    assert record.leads(admissible) == ["open box"]  # the chest was seen open; the hallway was visited
    record = lab_record(observations[:1], [])
    assert record.leads(["go to study", "go to garage", "look"]) == ["go to garage", "go to study"]
    prompts = {}
    for env in ("lab", "lab_large"):
        memory = AgentMemory(task="put the key in the box.", config=PromptConfig(env=env, max_prompt_tokens=None))
        prompts[env] = memory.render(observations[0], ["go to garage", "go to study", "look"])
    assert "Leads: go to garage ; go to study ." in prompts["lab_large"].splitlines()
    assert "Leads" not in prompts["lab"]
    assert prompts["lab_large"].replace("Leads: go to garage ; go to study .\n", "") == prompts["lab"]


def test_the_expert_takes_the_first_lead_while_it_searches():
    """The leads line makes the expert's search choice readable: in every searching step of its winning episodes
    (nothing carried, no target in sight) it sends the line's first command, or walks back when the line is empty."""
    env = lab.LargeLabEnv(max_steps=60)
    checked = 0
    for task in get_env("lab_large").tasks("test", "L0")[:20]:
        reset = env.reset(task)
        observations, actions, admissible = [reset.observation], [], reset.admissible_actions
        for action in lab_expert.lab_expert_actions(task):
            record = lab_record(observations, actions)
            searching = not any(c.startswith(("take ", "drop ")) for c in admissible)
            if searching and record.leads(admissible):
                assert action == record.leads(admissible)[0], (task.task_id, action)
                checked += 1
            result = env.step(action)
            observations.append(result.observation)
            actions.append(action)
            admissible = result.admissible_actions
    assert checked > 100


def test_the_small_house_cold_start_key_does_not_name_the_world():
    """Guards against the larger house renaming every cached small-house cold start: the key hashes the world's name
    only when it is not the small house."""
    import hashlib as h

    from rlvmr_nb.lab import experiment
    from rlvmr_nb.lab.config import LabConfig

    config = LabConfig()
    values = {f: getattr(config, f) for f in experiment.COLDSTART_FIELDS}
    values.update({f: getattr(config.train.rollout, f) for f in experiment.DAGGER_FIELDS})  # the classroom's DAgger
    digest = h.sha256(json.dumps(values, sort_keys=True).encode())
    package = Path(experiment.__file__).resolve().parents[1]
    for name in experiment.COLDSTART_SOURCES:
        digest.update(name.encode() + (package / name).read_bytes())
    assert experiment.coldstart_key(config) == digest.hexdigest()[:16]


# ----- the larger house with its homes named (docs/lab.md, 'The homes named') -----------------------------------


def test_home_leads_name_the_way_to_a_target_not_yet_taken_and_nothing_else():
    """Hand-made episode: the key's home is the garage. Guards against a home line that names a visited home, a home
    of an object already taken, a distractor's home, or a container outside the home room."""
    goal = "put the key in the box."
    hallway = "You are in the hallway. You see nothing. Exits: attic, garage, library."
    offered = ["go to attic", "go to garage", "go to library", "look"]
    assert lab_expert.home_leads(goal, lab_record([hallway], []), offered) == ["go to garage"]  # not the library (the book's)
    garage = "You are in the garage. You see a closed drawer. Exits: hallway."
    in_garage = lab_record([hallway, garage], ["go to garage"])
    assert lab_expert.home_leads(goal, in_garage, ["go to hallway", "look", "open drawer"]) == ["open drawer"]
    opened = "You open the drawer. In the drawer: a key. You are in the garage."
    searched = lab_record([hallway, garage, opened], ["go to garage", "open drawer"])
    assert lab_expert.home_leads(goal, searched, ["close drawer", "go to hallway", "look", "take key"]) == []
    back = lab_record([hallway, garage, hallway], ["go to garage", "go to hallway"])
    assert lab_expert.home_leads(goal, back, offered) == []  # the garage is visited
    attic = "You are in the attic. You see a closed chest. Exits: hallway."
    assert lab_expert.home_leads(goal, lab_record([hallway, attic], ["go to attic"]), ["go to hallway", "open chest"]) == []
    taken = "You take the key. You are in the hallway."
    assert lab_expert.home_leads(goal, lab_record([hallway, taken], ["take key"]), offered) == []


def test_the_homes_named_world_plays_the_larger_house_and_only_its_prompt_adds_the_home_line():
    spec = get_env("lab_large_home")
    l0 = spec.tasks("test", "L0")
    assert [t.task_id for t in l0] == [t.task_id for t in get_env("lab_large").tasks("test", "L0")]
    assert all(t.env == "lab_large_home" for t in l0)
    reset = spec.make_env(max_steps=26).reset(l0[0])
    assert reset.observation == lab.LargeLabEnv(max_steps=26).reset(get_env("lab_large").tasks("test", "L0")[0]).observation
    with pytest.raises(ValueError, match="lab_large_home"):
        spec.make_env().reset(get_env("lab").tasks("test", "L0")[0])
    hallway = "You are in the hallway. You see nothing. Exits: garage, study."
    prompts = {}
    for env in ("lab_large", "lab_large_home"):
        memory = AgentMemory(task="put the key in the box.", config=PromptConfig(env=env, max_prompt_tokens=None))
        prompts[env] = memory.render(hallway, ["go to garage", "go to study", "look"])
    assert prompts["lab_large_home"].replace("Home: go to garage .\n", "") == prompts["lab_large"]


def test_searching_the_named_home_first_saves_the_expert_steps_on_unseen_layouts():
    """What the home line is worth, measured on the L0 test layouts (docs/lab.md, 'The homes named'): the homes-first
    expert (`use_homes`) needs 14.2 steps on average where the searching expert needs 16.2, and wins as often within
    the horizon. Pure Python: the same on every machine."""
    tasks = get_env("lab_large_home").tasks("test", "L0")
    plain = [len(lab_expert.lab_expert_actions(t, max_steps=200)) for t in tasks]
    homes_first = [len(lab_expert.lab_expert_actions(t, max_steps=200, use_homes=True)) for t in tasks]
    assert round(sum(plain) / 60, 1) == 16.2 and round(sum(homes_first) / 60, 1) == 14.2
    assert sum(n <= lab.LARGE_HORIZON for n in homes_first) >= sum(n <= lab.LARGE_HORIZON for n in plain) == 60


@pytest.mark.parametrize("world", sorted(lab.HOUSES))
def test_every_lab_world_plays_its_house_tasks_and_layouts(world):
    """`HOUSES` is the one place a world is tied to a house: a world whose task lists built the other house's ids,
    or whose env refused its own tasks, would pass each world's own tests and fail here."""
    from rlvmr_nb.envs.registry import get_env

    house = lab.HOUSES[world]
    spec = get_env(world)
    env = spec.make_env()
    for level in ("L0", "L2"):
        tasks = spec.tasks("test", level)
        assert {lab.env_of(t.task_id) for t in tasks} == {house} and {t.env for t in tasks} == {world}
        env.reset(tasks[0])  # its own tasks are its to play
    # the same task ids as its house: the homes-named world changes the prompt, not the layouts
    assert [t.task_id for t in spec.tasks("train")] == [t.task_id for t in get_env(house).tasks("train")]
