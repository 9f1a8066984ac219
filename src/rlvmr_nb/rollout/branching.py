"""Branching rollouts: each task's group grows as a tree of trajectories instead of G independent ones
(SPARK, Wu et al., arXiv 2601.20209, 'Dynamic Branching Exploration'; docs/method.md, 'Branching rollouts (SPARK)').

Why. A group of G independent rollouts spends the same generation on every step, routine or not. SPARK starts
fewer trajectories and splits one where the policy says it is unsure (it writes ``<explore>``): the branches share
the prefix, which is generated once, and the budget goes to the states that decide the task.

The three stages, as this module runs them (`RolloutConfig.branch_roots`, `branch_factor`, `branch_trigger`):

1. Root initialisation: M trajectories per task start from the task's reset (`branch_roots`; SPARK: M = 4).
2. Branching: after a step whose output fires the trigger (by default its tag is ``explore``), an episode that
   goes on is forked into B continuations (`branch_factor`; SPARK: B = 2): itself and B − 1 new ones standing in
   the environment exactly where it stands (`envs.forking`: `fork_slots`). Each continuation samples its own
   next step. The trigger can also be a list of tags, or ``random:P`` (each step fires with probability P, from
   a seeded draw), the ablation that branches at steps the policy did not mark.
3. Budget enforcement: a task never holds more than N leaves (N = `group_size`; SPARK: N = 8). A fork that would
   pass N makes only the continuations the budget has left; once N leaves exist no step branches.

Our reading where the sources we could consult do not say (docs/method.md lists these as ours, not the paper's):

* Where a branch starts: after the triggering step (the branches share it, with its ``<explore>`` reasoning and
  its action) and diverge from the next step on. Forking before it would need a second generate call per step.
* Exactly N leaves: when a task's trajectories all end with budget left (too few triggers), the missing leaves
  are filled by top-up roots, fresh trajectories from the reset sampled in a second, shorter wave (`top_up`), so
  every group the scoring stage normalises over has N members, as a GRPO group of G = N has.
* Shared prefixes are trained once. A branch holds copies of its parent's steps up to the fork (the whole
  trajectory is what its outcome scores), but a copy carries no token ids, so it produces no training sample
  (`update.samples.episodes_to_samples` trains generated tokens only); the step is trained once, in the episode
  that generated it, with the mean advantage of its copies (`scoring.trees`), which is what weighting each of its
  k copies by 1/k gives under a sequence-sum loss. Copies say whose step they are in ``Step.extra["prefix_of"]``.

The tree is kept in the episodes (``Episode.info["branch"]``): ``root`` (the root episode's id), ``parent`` (the
episode forked, None for roots), ``shared_steps`` (steps copied from the parent) and ``kind`` ('root', 'branch' or
'top_up'), so figures and case studies can draw it (`tree_edges`).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from ..envs.base import Reset, TaskSpec
from ..records import Episode, Step, episode_id, group_id, parse_episode_id
from .tags import META_TAGS

RANDOM_TRIGGER = "random:"
"""Prefix of the ablation trigger ``random:P``."""


@dataclass(frozen=True)
class Trigger:
    """When a step branches: its tag is one of `tags`, or (with `probability`) a seeded coin comes up."""

    tags: frozenset[str] = frozenset({"explore"})
    probability: float | None = None

    @classmethod
    def parse(cls, text: str) -> "Trigger":
        """'explore', 'explore,reflection' (tag names, `rollout.tags`) or 'random:P' with 0 < P <= 1."""
        text = text.strip()
        if text.startswith(RANDOM_TRIGGER):
            try:
                p = float(text[len(RANDOM_TRIGGER):])
            except ValueError:
                raise ValueError(f"branch_trigger {text!r}: 'random:P' needs a number P in (0, 1]") from None
            if not 0 < p <= 1:
                raise ValueError(f"branch_trigger {text!r}: P must lie in (0, 1]")
            return cls(frozenset(), p)
        tags = frozenset(t.strip() for t in text.split(",") if t.strip())
        unknown = sorted(tags - set(META_TAGS))
        if not tags or unknown:
            raise ValueError(f"branch_trigger {text!r}: name tags among {list(META_TAGS)} (comma-separated) or "
                             "'random:P'")
        return cls(tags, None)

    def fires(self, step: Step, draw: Callable[[], float]) -> bool:
        if self.probability is not None:
            return draw() < self.probability
        return step.tag in self.tags


def branch_info(kind: str, root: str, parent: str | None = None, shared_steps: int = 0) -> dict[str, Any]:
    """What ``Episode.info["branch"]`` holds (module docstring)."""
    return {"kind": kind, "root": root, "parent": parent, "shared_steps": shared_steps}


def prefix_copy(step: Step, generated_by: str) -> Step:
    """A branch's copy of a parent step: the same record without token ids (the step is trained once, where it was
    generated), marked with the episode that generated it."""
    return replace(step, prompt_token_ids=None, response_token_ids=None, response_logprobs=None,
                   invalid_reasons=list(step.invalid_reasons), admissible_actions=list(step.admissible_actions),
                   extra={**step.extra, "prefix_of": step.extra.get("prefix_of", generated_by)})


class TreeGrower:
    """The branching state of one `run_rollouts` call: which task each slot plays, each task's leaf count, and the
    forks to make after a step. The loop owns the slots; `grow` hands it the new ones."""

    def __init__(self, roots: int, factor: int, leaves: int, trigger: str, *, seed: int, iteration: int,
                 group_indices: Sequence[int]):
        if not 1 <= roots <= leaves:
            raise ValueError(f"branch_roots must lie in 1..group_size ({leaves}), got {roots}")
        if factor < 2:
            raise ValueError(f"branch_factor must be >= 2 (a fork makes at least one new continuation), got {factor}")
        self.roots, self.factor, self.leaves = roots, factor, leaves
        self.trigger = Trigger.parse(trigger)
        self.seed, self.iteration = seed, iteration
        self.groups = list(group_indices)
        self.count = {g: roots for g in self.groups}
        """Leaves (trajectories) each task has so far."""

    def root_info(self, group: int, leaf: int) -> dict[str, Any]:
        return branch_info("root", episode_id(self.iteration, group, leaf))

    def _draw(self, t: int, episode: Episode) -> Callable[[], float]:
        return lambda: random.Random(f"{self.seed}:{self.iteration}:{t}:{episode.episode_id}:branch").random()

    def grow(self, t: int, episodes: Sequence[Episode], memories: Sequence[Any], active: Sequence[int],
             envs: Any) -> list[tuple[Episode, Any, Any]]:
        """After step `t`: the new continuations of every episode in `active` (slots still going) whose step `t`
        fires the trigger, within each task's budget, as (episode, memory, what its env shows) for slots
        ``len(episodes)``, ``len(episodes) + 1``, ... in order. The env's answer is a `Reset`, or an abort record
        when its pool slot failed."""
        forks: dict[int, int] = {}
        made: list[tuple[Episode, Any]] = []
        for slot in active:
            parent = episodes[slot]
            group = _group_of(parent)
            room = self.leaves - self.count[group]
            if room <= 0 or not parent.steps or not self.trigger.fires(parent.steps[-1], self._draw(t, parent)):
                continue
            for _ in range(min(self.factor - 1, room)):
                leaf = self.count[group]
                self.count[group] += 1
                forks[len(episodes) + len(made)] = slot
                made.append((self._branch(parent, group, leaf), copy.deepcopy(memories[slot])))
        if not forks:
            return []
        views = envs.fork_slots(forks)
        return [(ep, memory, views[dst]) for (ep, memory), dst in zip(made, forks)]

    def _branch(self, parent: Episode, group: int, leaf: int) -> Episode:
        steps = [prefix_copy(s, parent.episode_id) for s in parent.steps]
        info = {**parent.info, "branch": branch_info("branch", parent.info["branch"]["root"], parent.episode_id,
                                                    len(steps))}
        return replace(parent, episode_id=episode_id(self.iteration, group, leaf), steps=steps, won=False,
                       aborted=False, info=info)

    def missing(self) -> dict[int, int]:
        """{group index: leaves it still lacks} after the main wave (a task whose episodes ended with budget left)."""
        return {g: self.leaves - n for g, n in self.count.items() if n < self.leaves}


def top_up(tasks: Sequence[TaskSpec], grower: TreeGrower, roll: Callable[..., list[Episode]]) -> list[Episode]:
    """The top-up roots that bring every task to exactly N leaves (module docstring), rolled out by `roll(tasks,
    group_indices, seed)` (the plain loop, one rollout per entry) under a seed of its own, so they are not replays of
    the first wave's roots. Returns them with their leaf ids and tree records."""
    by_group = dict(zip(grower.groups, tasks))
    want = [(g, grower.leaves - n + k) for g, n in grower.missing().items() for k in range(n)]
    if not want:
        return []
    played = roll([by_group[g] for g, _ in want], [g for g, _ in want], grower.seed + 7919 * (grower.iteration + 1))
    out = []
    for ep, (g, leaf) in zip(played, want):
        ep_id = episode_id(grower.iteration, g, leaf)
        out.append(replace(ep, episode_id=ep_id, group_id=group_id(grower.iteration, g),
                           info={**ep.info, "branch": branch_info("top_up", ep_id)}))
        grower.count[g] += 1
    return out


def _group_of(episode: Episode) -> int:
    return parse_episode_id(episode.episode_id)[1]


def tree_order(episodes: Sequence[Episode]) -> list[Episode]:
    """Episodes task-major, leaves in order (what `run_rollouts` returns)."""
    return sorted(episodes, key=lambda ep: parse_episode_id(ep.episode_id)[1:])


def tree_edges(episodes: Sequence[Episode]) -> list[tuple[str, str, int]]:
    """(parent id, branch id, steps shared) of every branch among `episodes`, for drawing the trees."""
    return [(ep.info["branch"]["parent"], ep.episode_id, ep.info["branch"]["shared_steps"])
            for ep in episodes if ep.info.get("branch", {}).get("parent")]


NO_BRANCHING = "no branching in these episodes (a plain run: every rollout starts from the reset)"
"""`tree_lines`' one line for episodes without trees."""


def tree_lines(episodes: Sequence[Episode]) -> list[str]:
    """The trees among `episodes` as text, one line per leaf (``group: parent -> leaf (kind, k shared steps,
    won)``) and a count; for episodes without trees, the one line `NO_BRANCHING`. Notebooks 02 and 05 print it."""
    branched = [ep for ep in episodes if "branch" in ep.info]
    if not branched:
        return [NO_BRANCHING]
    lines = []
    for ep in branched:
        tree = ep.info["branch"]
        came_from = f"{tree['parent']} -> " if tree["parent"] else ""
        lines.append(f"{ep.group_id}: {came_from}{ep.episode_id} ({tree['kind']}, {tree['shared_steps']} shared steps, "
                     f"won={ep.won})")
    return lines + [f"{len(branched)} leaves in {len({ep.group_id for ep in branched})} trees"]


def tree_stats(episodes: Sequence[Episode]) -> dict[str, float]:
    """An iteration's trees in three shares (empty without branching, so plain runs log what they always did):
    ``branch/branched`` leaves that are branches, ``branch/top_up`` leaves that are top-up roots, and
    ``branch/shared_steps`` leaf steps that are copies of a parent's, i.e. generation the tree saved against as many
    independent rollouts of the same lengths."""
    kinds = [ep.info["branch"]["kind"] for ep in episodes if "branch" in ep.info]
    if not kinds:
        return {}
    steps = [s for ep in episodes for s in ep.steps]
    return {"branch/branched": kinds.count("branch") / len(kinds), "branch/top_up": kinds.count("top_up") / len(kinds),
            "branch/shared_steps": sum("prefix_of" in s.extra for s in steps) / max(len(steps), 1)}


def is_view(result: Any) -> bool:
    """Whether a fork answered with a state to play from (else the pool's abort record)."""
    return isinstance(result, Reset)
