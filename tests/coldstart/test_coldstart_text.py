"""RuleTeacher wording on ALFWorld (cold start, paper §3.3): instances named as the game names them
('the desk 1'), the lamp step of look-at tasks says what the lamp is for, and sentences are deterministic
for a seed. Built on hand-written trajectories with the engine's own feedback strings, so no game files
are needed."""

from __future__ import annotations

import random
import re

import pytest

from rlvmr_nb.coldstart.alfworld_rules import label_steps, plan_from_actions
from rlvmr_nb.coldstart.mistakes import Mistake
from rlvmr_nb.records import Step

LOOK_AT = (
    "You are in the middle of a room. Looking quickly around you, you see a desk 1, a drawer 1, and a shelf 1.\n\n"
    "Your task is to: examine the cd with the desklamp.",
    [("go to desk 1", "You arrive at desk 1. On the desk 1, you see a cd 2, and a desklamp 1."),
     ("use desklamp 1", "You turn on the desklamp 1."),
     ("take cd 2 from desk 1", "You pick up the cd 2 from the desk 1.")],
)
LOOK_AT_HOLDING = (
    LOOK_AT[0],
    [("go to shelf 1", "You arrive at shelf 1. On the shelf 1, you see a cd 1."),
     ("take cd 1 from shelf 1", "You pick up the cd 1 from the shelf 1."),
     ("go to desk 1", "You arrive at desk 1. On the desk 1, you see a desklamp 1."),
     ("use desklamp 1", "You turn on the desklamp 1.")],
)
NOTHING = "Nothing happens."
PUT_APPLE = (
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
    "a drawer 1, and a fridge 1.\n\nYour task is to: put an apple in cabinet.",
    [("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed."),
     ("open drawer 1", "You open the drawer 1. The drawer 1 is open. In it, you see nothing."),
     ("close drawer 1", "You close the drawer 1."),
     ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1."),
     ("take apple 2 from countertop 1", NOTHING),  # inserted wrong_id mistake
     ("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1."),
     ("move apple 1 to cabinet 1", NOTHING),  # inserted premature mistake
     ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."),
     ("open cabinet 1", "You open the cabinet 1. The cabinet 1 is open. In it, you see nothing."),
     ("move apple 1 to cabinet 1", "You move the apple 1 to the cabinet 1.")],
    {4: Mistake("wrong_id", 4, "take apple 2 from countertop 1", {"wrong": "apple 2", "right": "apple 1"}),
     6: Mistake("premature", 5, "move apple 1 to cabinet 1", {"place": "cabinet 1"})},
)


def _label(trajectory, seed: int) -> tuple[list[str], list[tuple[str, str]]]:
    first, moves, *rest = trajectory
    mistakes = rest[0] if rest else {}
    steps, observation = [], first
    for t, (action, feedback) in enumerate(moves):
        steps.append(Step(t=t, observation=observation, action=action, feedback=feedback))
        observation = feedback
    origin, expert_index = [], 0
    for i in range(len(steps)):
        origin.append(None if i in mistakes else expert_index)
        expert_index += i not in mistakes
    rng = random.Random(seed)
    plan = plan_from_actions([s.action for i, s in enumerate(steps) if i not in mistakes], rng)
    return [g.text for g in plan.subgoals], label_steps(steps, plan, origin, mistakes, rng)


def _without_quotes(sentence: str) -> str:
    return re.sub(r"'[^']*'", "", sentence)  # quoted commands keep the game's command syntax


@pytest.mark.parametrize("trajectory", [LOOK_AT, LOOK_AT_HOLDING, PUT_APPLE], ids=["lamp-first", "lamp-last", "put"])
def test_every_instance_is_named_with_the_article_the_game_uses(trajectory):
    for seed in range(25):  # enough seeds to draw every template of these situations
        _, labels = _label(trajectory, seed)
        for tag, sentence in labels:
            for m in re.finditer(r"\b([a-z]+) \d+\b", _without_quotes(sentence)):
                if m.group(1) == "step":
                    continue
                before = _without_quotes(sentence)[: m.start()].split()
                assert before and before[-1].lower() == "the", (seed, tag, sentence)


@pytest.mark.parametrize("trajectory", [LOOK_AT, LOOK_AT_HOLDING], ids=["lamp-first", "lamp-last"])
def test_the_lamp_step_says_it_lights_the_object_to_examine(trajectory):
    use_step = [a for a, _ in trajectory[1]].index("use desklamp 1")
    for seed in range(25):
        subgoals, labels = _label(trajectory, seed)
        tag, sentence = labels[use_step]
        assert tag == "monitor" and "the desklamp 1" in sentence.lower(), sentence
        assert re.search(r"\b(examine[sd]?|look at)\b", sentence) and "cd" in sentence, sentence
        assert any("desklamp" in g and "cd" in g for g in subgoals), subgoals  # the plan says it too


def test_opening_the_destination_names_the_put_subgoal_and_reflections_name_instances():
    for seed in range(25):
        subgoals, labels = _label(PUT_APPLE, seed)
        assert subgoals[-1] == "put the apple in the cabinet"
        tag, sentence = labels[8]  # open cabinet 1, already standing at it
        assert tag == "monitor" and "put the apple in the cabinet" in sentence and "the cabinet 1" in sentence.lower()
        assert labels[5][0] == labels[7][0] == "reflection"
        assert "the apple 1" in labels[5][1] and "the cabinet 1" in labels[7][1]


def test_sentences_are_deterministic_for_a_seed_and_vary_across_seeds():
    assert _label(PUT_APPLE, 4) == _label(PUT_APPLE, 4)
    assert len({tuple(s for _, s in _label(PUT_APPLE, seed)[1]) for seed in range(6)}) > 1
