"""Record the demo's example group on the real ALFWorld engine.

Four rollouts of one valid_seen game. The model outputs are scripted (so the demo needs no model);
observations, admissible lists, feedback and wins are the engine's own. Run:

    .venv/bin/python scripts/make_example_group.py   # writes src/rlvmr_nb/data/example_alfworld_group.jsonl
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvmr_nb.envs.alfworld import ALFWorldEnv, alfworld_tasks
from rlvmr_nb.rollout.tags import parse_output
from rlvmr_nb.records import Episode, Step, write_episodes

GAME = "pick_heat_then_place_in_recep-Apple-None-DiningTable-26"
PLAN = "<planning>step 1: find an apple, step 2: heat it with the microwave, step 3: put it in a diningtable.</planning>"
OUT = Path(__file__).resolve().parents[1] / "src" / "rlvmr_nb" / "data" / "example_alfworld_group.jsonl"


def m(reason: str, action: str) -> str:
    return f"<monitor>{reason}</monitor>\n<action>{action}</action>"


def e(reason: str, action: str) -> str:
    return f"<explore>{reason}</explore>\n<action>{action}</action>"


def r(reason: str, action: str) -> str:
    return f"<reflection>{reason}</reflection>\n<action>{action}</action>"


ROLLOUTS = {
    "direct": [
        PLAN + "\n<action>go to diningtable 2</action>",
        m("The apple is here, so I take it.", "take apple 1 from diningtable 2"),
        m("Next sub-goal: heat it, so I walk to the microwave.", "go to microwave 1"),
        m("I am at the microwave with the apple.", "heat apple 1 with microwave 1"),
        m("The apple is hot; back to the diningtable.", "go to diningtable 2"),
        m("Last sub-goal: put the apple down.", "move apple 1 to diningtable 2"),
    ],
    "recovers": [
        PLAN + "\n<action>go to countertop 1</action>",
        e("Apples are often on tables; diningtable 1, diningtable 2 or the fridge.", "go to diningtable 1"),
        e("Not here; the other diningtable is next.", "go to diningtable 2"),
        m("Found apple 1, taking it.", "take apple 1 from diningtable 2"),
        m("Now heat the apple.", "heat apple 1 with microwave 1"),
        r("Nothing happened because I am not at the microwave; I must walk there first.", "go to microwave 1"),
        m("At the microwave, heating.", "heat apple 1 with microwave 1"),
        m("Back to the diningtable with the hot apple.", "go to diningtable 2"),
        m("Put it down to finish.", "move apple 1 to diningtable 2"),
    ],
    "loops": [
        PLAN + "\n<action>go to fridge 1</action>",
        m("The apple may be inside the fridge.", "open fridge 1"),
        m("Keep at the fridge.", "go to fridge 1"),
        m("Keep at the fridge.", "go to fridge 1"),
        "I should go to the fridge again.\n<action>go to fridge 1</action>",
        m("Keep at the fridge.", "go to fridge 1"),
        m("Keep at the fridge.", "go to fridge 1"),
        m("Keep at the fridge.", "go to fridge 1"),
    ],
    "wanders": [
        PLAN + "\n<action>go to cabinet 1</action>",
        e("The apple could be in any cabinet.", "go to cabinet 2"),
        "<explore>Maybe cabinet 3.</explore><monitor>Search cabinets.</monitor>\n<action>go to cabinet 3</action>",
        r("I saw no apple yet; maybe it is hidden here.", "take apple 1 from cabinet 2"),
        e("Try the next cabinet.", "go to cabinet 4"),
        e("Cabinet 2 again, maybe I missed it.", "go to cabinet 2"),
        "<monitor>Look around.</monitor>\n<action>\nlook\n</action>",
        e("Countertops hold food too.", "go to countertop 1"),
    ],
}


def record() -> list[Episode]:
    task = next(t for t in alfworld_tasks("valid_seen") if GAME in t.task_id)
    env = ALFWorldEnv(accelerate=True)
    episodes = []
    for i, (name, outputs) in enumerate(ROLLOUTS.items()):
        start = env.reset(task)
        ep = Episode(task_id=task.task_id, env="alfworld", split="valid_seen", task_type=start.task_type,
                     task_text=start.task_text, group_id="example", episode_id=f"r{i}-{name}",
                     info={"source": "scripted outputs on the real ALFWorld engine (scripts/make_example_group.py)"})
        obs, admissible = start.observation, start.admissible_actions
        for t, output in enumerate(outputs):
            p = parse_output(output)
            res = env.step(p.action)
            ep.steps.append(Step(t=t, observation=obs, admissible_actions=list(admissible), output=output, tag=p.tag,
                                 reasoning=p.reasoning, action=p.action, plan=p.plan, valid=p.valid,
                                 invalid_reasons=list(p.invalid_reasons), admissible=p.action in admissible,
                                 feedback=res.observation, env_reward=10.0 if res.won else 0.0, done=res.done,
                                 won=res.won))
            obs, admissible = res.observation, res.admissible_actions
            if res.done:
                break
        ep.won = ep.steps[-1].won
        episodes.append(ep)
    env.close()
    return episodes


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0] + f" Writes {OUT.relative_to(OUT.parents[3])}.").parse_args()
    eps = record()
    write_episodes(OUT, eps)
    for ep in eps:
        print(ep.episode_id, "won" if ep.won else "failed", len(ep.steps), "steps")
    print(f"wrote {OUT}")
