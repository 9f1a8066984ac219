"""The quick-start demo: one real group of tagged ALFWorld rollouts → parse → rewards → advantages → figure.

The shipped group (`data/example_alfworld_group.jsonl`) was recorded on the real ALFWorld engine by
`scripts/make_example_group.py`: the model outputs are scripted (so the demo needs no model), the
observations, admissible lists and feedback are the engine's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .plots import plot_episode_group
from .records import Episode, read_episodes
from .rollout.tags import parse_output
from .scoring.method import MethodConfig
from .scoring.metrics import summarize
from .scoring.scored import score_episodes

EXAMPLE_GROUP = "example_alfworld_group.jsonl"


def example_group_path() -> Path:
    """Path of the shipped example group."""
    return Path(str(resources.files("rlvmr_nb") / "data" / EXAMPLE_GROUP))


def reparse(episodes: list[Episode], mode: str = "strict") -> list[Episode]:
    """Re-derive tag/action/validity of every step from its raw output, so the demo exercises the parser."""
    for ep in episodes:
        for s in ep.steps:
            p = parse_output(s.output, mode=mode)
            s.tag, s.reasoning, s.plan, s.valid = p.tag, p.reasoning, p.plan, p.valid
            s.invalid_reasons = list(p.invalid_reasons)
            s.admissible = p.action in s.admissible_actions
    return episodes


@dataclass
class DemoResult:
    episodes: list[Episode]
    summary: dict
    figure: Path


def step_table(episodes: list[Episode]) -> str:
    """A plain-text table of every step: tag, validity, action, r_MR, outcome score, advantage.

    Steps are numbered from 1 (``step`` = `Step.t` + 1), as in the prompt and the figures."""
    lines = [f"{'rollout':<13}{'step':>4}  {'tag':<11}{'valid':<6}{'r_MR':>6}{'score':>7}{'A':>8}  action"]
    for ep in episodes:
        for s in ep.steps:
            lines.append(
                f"{ep.episode_id:<13}{s.t + 1:>4}  {str(s.tag):<11}{str(s.valid):<6}{s.scores.mr_reward:>6.1f}"
                f"{s.scores.outcome_score:>7.1f}{s.scores.advantage:>8.3f}  {s.action}"
            )
    return "\n".join(lines)


DEMO_OUT = "runs/demo/figures"
"""Where `run_demo` draws by default: run outputs go to runs/; the checked-in ``figures/demo_example_group.png``
changes only when asked (``rlvmr-nb demo --update-figures``)."""


def run_demo(out_dir: str | Path = DEMO_OUT, path: str | Path | None = None, preset: str = "official_code") -> DemoResult:
    """Parse the example group, assign RLVMR rewards and GRPO-MR advantages, draw and save the figure."""
    episodes = reparse(read_episodes(path or example_group_path()))
    scored = score_episodes(episodes, MethodConfig(algo="rlvmr", preset=preset))
    episodes = scored.episodes
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figure = Path(plot_episode_group(episodes, out_path=out / "demo_example_group.png"))
    return DemoResult(episodes=episodes, summary=summarize(episodes, scored.steps), figure=figure)


def format_summary(summary: dict) -> str:
    return json.dumps(summary, indent=2, default=float)
