"""How much of a "seen" (L0) test split the training split already contains (docs/method.md, 'Splits').

Users of the official code found that ALFWorld's L0 test games share task instances with training
(digitalhuman#21: L0 test success above training success), so L0 numbers are easy to reach; this module
measures how large that overlap is. Command: ``rlvmr-nb overlap alfworld`` (and ``scienceworld``).

**ALFWorld.** A game folder ``json_2.1.1/<split>/<task>-<Object>-<MRecep>-<Target>-<scene>/<trial>/`` holds
one ALFRED trial: ``game.tw-pddl`` with the PDDL problem (objects named with their coordinates, initial
state ``:init``, goal ``:goal``), the text grammar (which holds the task sentence) and the expert
walkthrough. The last field of the task folder name is the AI2-THOR floor plan, i.e. the room (scene).
Each test game is compared with every training game under the criteria of `ALFWORLD_CRITERIA`, from
strict to loose; the result counts the test games with at least one training game equal under each.

**ScienceWorld.** A task instance is a (task, variation) pair; L0 test holds the official *dev*
variations, so the identity check is a set intersection of the shipped lists (no Java needed).
Optionally (`descriptions=True`, Java) the task sentences the simulator prints are compared too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..atomic_io import atomic_write_text
from .alfworld import alfworld_tasks
from .alfworld_data import JSON_DIRNAME, resolve_alfworld_data
from .scienceworld import ScienceWorldEnv
from .scienceworld_splits import scienceworld_tasks

_INSTANCE_DECLARATION = re.compile(r"^\s*(\S+_bar_\S+)\s+-\s+object\s*$", re.MULTILINE)
_TASK_SENTENCE = re.compile(r"Your task is to: ([^\"\\]*)")
_PROBLEM_NAME = re.compile(r"\(problem [^)\s]+\)")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _section(problem: str, start: str, end: str | None) -> str:
    i = problem.index(start)
    return problem[i: problem.index(end, i) if end else len(problem)]


def canonical_initial_state(problem: str) -> str:
    """The PDDL ``:init`` and ``:goal`` of a game as the text agent meets them: movable objects named by type
    (their ids carry coordinates: two trials never share them), receptacles by id (fixed in a floor plan),
    facts sorted; the agent's start pose and the objects' own location facts dropped (the text game shows
    neither; objects are found through their receptacles). Lenient on purpose: it can only make more games
    count as the same."""
    instances = set(_INSTANCE_DECLARATION.findall(problem))
    facts = []
    for line in _section(problem, "(:init", "(:goal").splitlines():
        tokens = re.findall(r"[^\s()]+", line)
        if not tokens or tokens[0] == ":init" or tokens[0] == "atLocation":
            continue
        if tokens[0] == "objectAtLocation" and tokens[1] in instances:
            continue
        facts.append(" ".join(t.split("_bar_", 1)[0] if t in instances else t for t in tokens))
    goal = " ".join(_section(problem, "(:goal", None).split())
    return "\n".join(sorted(facts)) + "\n" + goal


def alfworld_game_facts(game_file: str | os.PathLike) -> dict[str, str]:
    """What the criteria compare for one game: digests of its file and state, and its names."""
    path = Path(game_file)
    game = json.loads(path.read_text(encoding="utf-8"))
    problem = game["pddl_problem"]
    folder = path.parent.parent.name
    sentence = _TASK_SENTENCE.search(game.get("grammar", ""))
    trial_free = {**game, "pddl_problem": _PROBLEM_NAME.sub("(problem _)", problem)}
    return {
        "game": _digest(json.dumps(trial_free, sort_keys=True)),
        "state": _digest(canonical_initial_state(problem)),
        "task_scene": folder,
        "walkthrough": json.dumps(game.get("walkthrough")),
        "scene": folder.rsplit("-", 1)[-1],
        "sentence": sentence.group(1).strip() if sentence else "",
    }


ALFWORLD_CRITERIA: dict[str, tuple[str, Callable[[Mapping[str, str]], Any]]] = {
    "identical_game_file": (
        "(a) the game file is identical apart from the PDDL problem's name (the ALFRED trial id)",
        lambda f: f["game"]),
    "same_initial_state_and_goal": (
        "(a) same goal and same initial state: every movable object (by type) in the same receptacle of the same "
        "room (`canonical_initial_state`)",
        lambda f: f["state"]),
    "same_task_scene_and_expert_solution": (
        "same task and room, and the same expert walkthrough: the command list that solves the training game "
        "solves this one verbatim",
        lambda f: (f["task_scene"], f["walkthrough"])),
    "same_task_and_scene": (
        "(b) same task (type, object, receptacle, target) in the same room (floor plan); the other objects are "
        "placed elsewhere",
        lambda f: f["task_scene"]),
    "same_task_sentence": ("the same task sentence ('Your task is to: ...'), in any room", lambda f: f["sentence"]),
    "same_scene": ("the same room (AI2-THOR floor plan), any task", lambda f: f["scene"]),
}
"""Criterion name -> (what it means, the key two games must share). Strict to loose."""


def _game_files(split: str, data_root: Path) -> list[Path]:
    return [data_root / t.task_id for t in alfworld_tasks(split, data_root=data_root)]


def overlap_counts(test: Sequence[Mapping[str, Any]], train: Sequence[Mapping[str, Any]],
                   criteria: Mapping[str, tuple[str, Callable[[Mapping[str, Any]], Any]]],
                   task_type: Callable[[Mapping[str, Any]], str] | None = None) -> dict[str, dict[str, Any]]:
    """For each criterion: how many `test` items share its key with at least one `train` item, their share,
    and (with `task_type`) the counts per task type."""
    out = {}
    for name, (meaning, key) in criteria.items():
        seen = {key(item) for item in train}
        hits = [item for item in test if key(item) in seen]
        row: dict[str, Any] = {"meaning": meaning, "test_items_in_train": len(hits),
                               "share": len(hits) / len(test) if test else float("nan")}
        if task_type is not None:
            totals = Counter(task_type(item) for item in test)
            found = Counter(task_type(item) for item in hits)
            row["by_task_type"] = {t: f"{found.get(t, 0)}/{n}" for t, n in sorted(totals.items())}
        out[name] = row
    return out


def alfworld_overlap(data_root: str | os.PathLike | None = None, test_split: str = "valid_seen",
                     train_split: str = "train", control_split: str | None = "valid_unseen") -> dict[str, Any]:
    """The overlap of ALFWorld's `test_split` (L0 test: valid_seen) with `train_split`, under every criterion
    of `ALFWORLD_CRITERIA`; `control_split` (valid_unseen, L1/L2's test games) is measured the same way as a
    reference that should share no room."""
    root = resolve_alfworld_data(data_root)
    train = [alfworld_game_facts(p) for p in _game_files(train_split, root)]

    def measure(split: str) -> dict[str, Any]:
        games = [alfworld_game_facts(p) for p in _game_files(split, root)]
        return {"split": split, "games": len(games),
                "criteria": overlap_counts(games, train, ALFWORLD_CRITERIA,
                                           task_type=lambda f: f["task_scene"].split("-", 1)[0])}

    doc = {"env": "alfworld", "data": f"{JSON_DIRNAME} (ALFWorld's game filter)", "train_split": train_split,
           "train_games": len(train), "test": measure(test_split)}
    if control_split:
        doc["control"] = measure(control_split)
    return doc


def scienceworld_overlap(level: str = "L0", descriptions: bool = False) -> dict[str, Any]:
    """The overlap of ScienceWorld's `level` test list with its training list: identical (task, variation)
    pairs, and with `descriptions` (starts a JVM; minutes) identical (task, printed task sentence) pairs."""
    train, test = scienceworld_tasks(level, "train"), scienceworld_tasks(level, "test")
    items = {"train": [{"id": t.task_id, "task": t.task_type} for t in train],
             "test": [{"id": t.task_id, "task": t.task_type} for t in test]}
    criteria: dict[str, tuple[str, Callable[[Mapping[str, Any]], Any]]] = {
        "identical_task_variation": ("(a) the same (task, variation) pair: the same generated instance",
                                     lambda item: item["id"])}
    if descriptions:
        with ScienceWorldEnv() as env:
            for group, tasks in (("train", train), ("test", test)):
                for item, task in zip(items[group], tasks):
                    item["sentence"] = env.reset(task).task_text
        criteria["same_task_sentence"] = ("the same task with the same printed task sentence, another variation",
                                          lambda item: (item["task"], item["sentence"]))
    return {"env": "scienceworld", "level": level, "train_items": len(train),
            "test": {"items": len(test), "criteria": overlap_counts(items["test"], items["train"], criteria,
                                                                    task_type=lambda item: item["task"])}}


OVERLAP_MEASURES: dict[str, Callable[..., dict[str, Any]]] = {
    "alfworld": alfworld_overlap,
    "scienceworld": scienceworld_overlap,
}
"""Env name -> the function that measures its L0 overlap (`rlvmr-nb overlap <env>`)."""


def write_overlap(path: str | os.PathLike, doc: Mapping[str, Any], provenance: Mapping[str, Any]) -> Path:
    """Store one env's measurement (with the provenance that made it) under its env name in the JSON file at
    `path`, keeping the other envs' entries: one file for every env's L0 overlap."""
    path = Path(path)
    merged = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    merged[doc["env"]] = {**doc, "provenance": dict(provenance)}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(merged, indent=2, sort_keys=True) + "\n")
    return path
