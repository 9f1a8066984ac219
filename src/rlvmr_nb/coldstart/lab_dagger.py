"""DAgger for the lab's cold start (Ross, Gordon & Bagnell, 2011): the expert labels the states the POLICY reaches.

Why. The rule-tagged demonstrations (paper §3.3) show the expert's decisions in the expert's own states only. In
the lab, "take the cup" then always follows the same route through the same rooms, so the route predicts the
decision as well as the cup in sight does, and a policy trained from scratch learns the route: on unseen layouts it
took a target in sight in about a third of those steps (docs/lab.md, 'Which decisions the policies get right'). The
lab's expert decides from the prompt alone (`envs.lab_expert.expert_choice`), so every state a policy reaches has an
expert choice; labelled there, the cup is in sight after many routes and only the observation predicts the decision.

What it adds to the paper's cold start: after SFT on the demonstrations, the policy plays their tasks; each step it
took becomes a sample whose prompt is the one it saw (its own earlier outputs in the history) and whose response is
the expert's command from the same prompt, tagged by the cold start's rules; SFT continues over demonstrations +
these samples (`lab.experiment`, `LabConfig.coldstart_dagger_rounds`). The tags and sentences are the rule
teacher's (`lab_world_rules.policy_state_label`); no new wording.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from ..envs.lab_record import lab_record
from ..envs.lab_world import build_world, transition
from ..rollout.prompts import PromptConfig
from ..records import Episode, Step
from .dataset import step_samples
from .lab_world_rules import policy_state_label


def dagger_samples(episodes: Sequence[Episode], prompt_config: PromptConfig | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """One cold-start sample (`coldstart.dataset` record format) per step a policy took in the lab `episodes`: its
    prompt rendered as the rollout rendered it (`dataset.step_samples`, with the policy's own earlier outputs in the
    history), and the expert's tagged choice there as the response (`lab_world_rules.policy_state_label`). Returns the
    samples and counts. Each episode is replayed in the world beside its steps; a replay that disagrees with the
    rollout raises."""
    rows: list[dict[str, Any]] = []
    no_choice = 0
    for ep in episodes:
        # the episode's own world's prompt (the larger house's shows the room's leads)
        rendered = step_samples(ep, prompt_config or PromptConfig(env=ep.env, show_admissible=True, max_prompt_tokens=None))
        if len(rendered) != len(ep.steps):
            raise ValueError(f"{ep.episode_id}: every step of a policy's episode is labelled; some are marked untrained")
        world, state = build_world(ep.task_id)
        observations: list[str] = []
        actions: list[str] = []
        previous: Step | None = None
        for step, sample in zip(ep.steps, rendered):
            observations.append(step.observation)
            rng = random.Random(f"dagger:{ep.task_id}:{ep.episode_id}:{step.t}")
            label = policy_state_label(world, state, lab_record(observations, actions), ep.task_text,
                                       step.admissible_actions, step.t, previous, rng)
            if label is None:
                no_choice += 1
            else:
                rows.append({**sample, "response": label[1], "tag": label[0], "episode_id": f"dagger:{ep.episode_id}"})
            state, answer = transition(world, state, step.action or "")
            if answer != step.feedback:
                raise RuntimeError(f"replaying {ep.task_id} step {step.t} in the lab world gave {answer!r}; the rollout "
                                   f"saw {step.feedback!r}")
            actions.append(step.action or "")
            previous = step
    return rows, {"samples": len(rows), "no_expert_choice": no_choice, "episodes": len(episodes),
                  "won": sum(bool(ep.won) for ep in episodes)}


def draw_samples(pool: Sequence[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    """`n` samples from `pool` for one round of SFT: whole copies of the pool while they fit, then a seeded subset
    without repeats, so a round costs exactly `n` samples whatever the pool's size (the cold start's SFT budget
    stays that of `LabConfig.sft_epochs` passes over the demonstrations)."""
    if n < 1 or not pool:
        raise ValueError(f"need a non-empty pool and n >= 1, got {len(pool)} samples and n={n}")
    copies, rest = divmod(n, len(pool))
    return [*pool] * copies + random.Random(seed).sample(list(pool), rest)
