"""The L0 overlap measurement on a small synthetic ALFWorld folder whose overlaps are known by construction,
and on the shipped ScienceWorld lists."""

import json

import pytest

from rlvmr_nb.envs.split_overlap import alfworld_overlap, canonical_initial_state, scienceworld_overlap, write_overlap

ROOM = "301"


def _problem(trial, placements, agent="loc_bar_1", goal="(holds agent1 MugType)", room=ROOM):
    """A PDDL problem in ALFWorld's layout: object ids carry coordinates, receptacle ids are fixed per room."""
    suffix = "" if room == ROOM else f"_{room}"  # another room: other receptacle ids
    placements = [(o, f"{r}{suffix}") for o, r in placements]
    objects = sorted({o for o, _ in placements})
    declared = "\n".join(f"        {o} - object" for o in objects)
    facts = "\n".join(f"        (inReceptacle {o} {r})\n        (objectAtLocation {o} loc_bar_{i})"
                      for i, (o, r) in enumerate(placements))
    return (f"\n(define (problem plan_{trial})\n(:domain alfred)\n(:objects\nagent1 - agent\nMug - object\n{declared}\n"
            f"        Desk_bar_05{suffix} - receptacle\n        Shelf_bar_07{suffix} - receptacle\n        )\n(:init\n"
            f"        (atLocation agent1 {agent})\n{facts}\n        )\n\n(:goal\n (and {goal})\n)\n)\n")


def _game(root, split, folder, trial, problem, walkthrough, sentence="put a mug in shelf."):
    path = root / "json_2.1.1" / split / folder / trial / "game.tw-pddl"
    path.parent.mkdir(parents=True)
    grammar = '{"task": [{"rhs": "Your task is to: ' + sentence + '"}]}'
    path.write_text(json.dumps({"pddl_domain": "(define (domain alfred))", "grammar": grammar, "pddl_problem": problem,
                                "solvable": True, "walkthrough": walkthrough}))


@pytest.fixture
def synthetic(tmp_path):
    task = f"pick_and_place_simple-Mug-None-Shelf-{ROOM}"
    base = [("Mug_bar_01", "Desk_bar_05"), ("Pen_bar_02", "Shelf_bar_07")]
    solution = ["go to desk 1", "take mug 1 from desk 1", "go to shelf 1", "move mug 1 to shelf 1"]
    _game(tmp_path, "train", task, "trial_T1", _problem("trial_T1", base), solution)
    _game(tmp_path, "train", f"look_at_obj_in_light-Book-None-DeskLamp-{ROOM}", "trial_T2",
          _problem("trial_T2", base, goal="(isToggled DeskLampType)"), ["use desklamp 1"], "look at book under the desklamp.")
    # valid_seen, strict to loose:
    _game(tmp_path, "valid_seen", task, "trial_V1", _problem("trial_V1", base), solution)  # the same game, renamed
    moved = [("Mug_bar_09", "Desk_bar_05"), ("Pen_bar_08", "Shelf_bar_07")]  # same places, new coordinates + start
    _game(tmp_path, "valid_seen", task, "trial_V2", _problem("trial_V2", moved, agent="loc_bar_4"), solution)
    shuffled = [("Mug_bar_11", "Desk_bar_05"), ("Pen_bar_12", "Desk_bar_05")]  # the pen moved: same solution
    _game(tmp_path, "valid_seen", task, "trial_V3", _problem("trial_V3", shuffled), solution)
    elsewhere = [("Mug_bar_13", "Shelf_bar_07"), ("Pen_bar_14", "Desk_bar_05")]  # the mug moved: another solution
    _game(tmp_path, "valid_seen", task, "trial_V4", _problem("trial_V4", elsewhere), ["go to shelf 1", "take mug 1"])
    _game(tmp_path, "valid_seen", f"pick_and_place_simple-Pen-None-Desk-{ROOM}", "trial_V5",
          _problem("trial_V5", base, goal="(holds agent1 PenType)"), ["go to shelf 1"], "put a pen in desk.")
    _game(tmp_path, "valid_unseen", "pick_and_place_simple-Mug-None-Shelf-10", "trial_U1",
          _problem("trial_U1", base, room="10"), solution)  # another room, the same sentence
    return tmp_path


def test_alfworld_overlap_counts_each_level_of_sameness(synthetic):
    doc = alfworld_overlap(synthetic)
    assert doc["train_games"] == 2 and doc["test"]["games"] == 5 and doc["control"]["games"] == 1
    found = {name: row["test_items_in_train"] for name, row in doc["test"]["criteria"].items()}
    assert found == {"identical_game_file": 1, "same_initial_state_and_goal": 2,
                     "same_task_scene_and_expert_solution": 3, "same_task_and_scene": 4,
                     "same_task_sentence": 4, "same_scene": 5}
    assert doc["test"]["criteria"]["same_task_and_scene"]["share"] == pytest.approx(0.8)
    assert doc["test"]["criteria"]["same_scene"]["by_task_type"] == {"pick_and_place_simple": "5/5"}
    control = {name: row["test_items_in_train"] for name, row in doc["control"]["criteria"].items()}
    assert control["same_scene"] == 0 and control["same_task_sentence"] == 1 and control["identical_game_file"] == 0


def test_canonical_state_ignores_coordinates_and_start_but_not_placement():
    a = _problem("x", [("Mug_bar_01", "Desk_bar_05")])
    assert canonical_initial_state(a) == canonical_initial_state(_problem("y", [("Mug_bar_99", "Desk_bar_05")], agent="z"))
    assert canonical_initial_state(a) != canonical_initial_state(_problem("x", [("Mug_bar_01", "Shelf_bar_07")]))
    assert canonical_initial_state(a) != canonical_initial_state(_problem("x", [("Mug_bar_01", "Desk_bar_05")],
                                                                          goal="(holds agent1 PenType)"))


def test_scienceworld_l0_test_variations_are_not_training_variations(tmp_path):
    doc = scienceworld_overlap("L0")
    row = doc["test"]["criteria"]["identical_task_variation"]
    assert (doc["train_items"], doc["test"]["items"], row["test_items_in_train"]) == (3322, 1661, 0)
    path = write_overlap(tmp_path / "overlap.json", doc, {"git_sha": "x"})
    write_overlap(path, {"env": "alfworld", "test": {}}, {"git_sha": "y"})
    stored = json.loads(path.read_text())
    assert set(stored) == {"alfworld", "scienceworld"} and stored["scienceworld"]["provenance"] == {"git_sha": "x"}
