"""The one record format every stage shares: `Step` and `Episode`, with JSONL I/O.

Rollouts write episodes, rewards and advantages annotate them, metrics and case studies read
them. One JSON object per line, one line per episode, so a run that crashes loses at most the
episode being written (`append_episodes` flushes after every line).

Schema versions: a file carries ``"schema_version"`` on every line; `read_episodes` refuses a
newer major version than it knows instead of silently mis-reading it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

SCHEMA_VERSION = "1.0"
"""Major.minor. Minor bumps add optional fields; major bumps change meaning."""


@dataclass
class Step:
    """One agent step: what the policy saw, what it wrote, what the environment answered.

    Fields filled by the rollout are the observation/output/feedback ones; `tag_type`,
    `mr_reward`, `score` and `advantage` are filled later by `rewards` and `advantages`.
    """

    t: int
    """0-based step index within the episode."""
    observation: str
    """Observation the policy acted on (before this step's action)."""
    admissible_actions: list[str] = field(default_factory=list)
    """Admissible commands at this state (empty when the env does not list them)."""
    output: str = ""
    """Raw model output (or teacher response) for this step."""
    tag: str | None = None
    """Meta-reasoning tag parsed from `output` (planning/explore/reflection/monitor) or None."""
    reasoning: str = ""
    """Text inside the meta-reasoning tag."""
    action: str = ""
    """The action string sent to the environment (may be '' for malformed outputs)."""
    plan: str | None = None
    """New plan written at this step by a non-empty <planning> block, else None."""
    valid: bool = True
    """Format validity of `output` under the parser mode used (spec §1.2)."""
    invalid_reasons: list[str] = field(default_factory=list)
    """Why `output` was invalid (empty when valid)."""
    admissible: bool = True
    """Whether `action` was in `admissible_actions` (spec §1.2 rule 4, 'action_available')."""
    feedback: str = ""
    """Environment response to `action` (the next observation)."""
    env_reward: float = 0.0
    """Reward the rollout assigned from the environment (10·won at the winning step, spec §2.1)."""
    done: bool = False
    """Whether the episode ended after this step."""
    won: bool = False
    """Whether the task was completed after this step."""
    prompt_token_ids: list[int] | None = None
    """Token ids of the rendered prompt (rollouts only)."""
    response_token_ids: list[int] | None = None
    """Token ids of the generated response (rollouts only)."""
    response_logprobs: list[float] | None = None
    """Sampler log-probabilities of `response_token_ids` (rollouts only)."""
    tag_type: str | None = None
    """Reward-side tag class (spec §2.2 step 3): planning/explore/reflection/monitor/none."""
    mr_reward: float | None = None
    """Meta-reasoning reward r_t^MR (spec §2.2)."""
    score: float | None = None
    """Outcome-channel score of this step sample, R(τ) − λ·invalid under official semantics (§2.3)."""
    advantage: float | None = None
    """Final advantage applied to every response token of this step (§3.4)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form per-step extras (timings, env info)."""


@dataclass
class Episode:
    """One trajectory of one task instance; `group_id` ties the G rollouts of the same task."""

    task_id: str
    """Stable id of the task instance (ALFWorld game path relative to the data root, or 'task:variation')."""
    env: str
    """'alfworld' or 'scienceworld' (or a test env name)."""
    split: str = ""
    """Split the task came from, e.g. 'train', 'valid_seen', 'L2/test'."""
    task_type: str = ""
    """Task family (ALFWorld type such as 'pick_and_place_simple', ScienceWorld task name)."""
    task_text: str = ""
    """The natural-language goal shown to the agent."""
    group_id: str = ""
    """Rollouts of the same task in one iteration share this id (the GRPO group, 'uid' in the code)."""
    episode_id: str = ""
    """Unique id of this trajectory."""
    seed: int | None = None
    """Sampling seed used for the rollout, if any."""
    steps: list[Step] = field(default_factory=list)
    """The steps, in order."""
    won: bool = False
    """Success at the last step (spec §6.4)."""
    aborted: bool = False
    """The episode was cut by an infrastructure fault (dead worker, timeout): exclude it, never count it as failure."""
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form metadata (model, temperature, iteration, abort reason...)."""

    @property
    def length(self) -> int:
        """Number of steps taken."""
        return len(self.steps)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, tagged with the schema version."""
        d = dataclasses.asdict(self)
        d["schema_version"] = SCHEMA_VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Episode":
        """Inverse of `to_dict`; unknown keys are kept in `info`/`extra` rather than dropped."""
        d = dict(d)
        version = str(d.pop("schema_version", SCHEMA_VERSION))
        if int(version.split(".")[0]) > int(SCHEMA_VERSION.split(".")[0]):
            raise ValueError(
                f"episode schema {version} is newer than this rlvmr_nb understands ({SCHEMA_VERSION}); upgrade rlvmr_nb"
            )
        step_fields = {f.name for f in dataclasses.fields(Step)}
        steps = []
        for s in d.pop("steps", []):
            known = {k: v for k, v in s.items() if k in step_fields}
            unknown = {k: v for k, v in s.items() if k not in step_fields}
            if unknown:
                known.setdefault("extra", {}).update(unknown)
            steps.append(Step(**known))
        ep_fields = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in d.items() if k in ep_fields}
        unknown = {k: v for k, v in d.items() if k not in ep_fields}
        if unknown:
            known.setdefault("info", {}).update(unknown)
        return cls(steps=steps, **known)


def write_episodes(path: str | os.PathLike, episodes: Iterable[Episode]) -> int:
    """Write episodes to a JSONL file (overwrites atomically). Returns the number written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for ep in episodes:
            f.write(json.dumps(ep.to_dict(), ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def append_episodes(path: str | os.PathLike, episodes: Iterable[Episode]) -> int:
    """Append episodes to a JSONL file, flushing after each so a crash loses nothing already returned."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "a", encoding="utf-8") as f:
        for ep in episodes:
            f.write(json.dumps(ep.to_dict(), ensure_ascii=False) + "\n")
            f.flush()
            n += 1
    return n


def iter_episodes(path: str | os.PathLike) -> Iterator[Episode]:
    """Stream episodes from a JSONL file. A truncated last line (crash mid-write) is skipped."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break  # torn final write from an interrupted run
            raise ValueError(f"{path}: line {i + 1} is not valid JSON") from None
        yield Episode.from_dict(d)


def read_episodes(path: str | os.PathLike) -> list[Episode]:
    """Read all episodes of a JSONL file."""
    return list(iter_episodes(path))


# ----- rollout ids: the one place that builds and parses them ----------------------------------------------


def group_id(iteration: int, group: int) -> str:
    """Id shared by the G rollouts of one task in one iteration (the GRPO group): ``'it3-g5'``."""
    return f"it{iteration}-g{group}"


def episode_id(iteration: int, group: int, rollout: int) -> str:
    """Id of rollout `rollout` of group `group` in iteration `iteration`: ``'it3-g5-r7'``."""
    return f"{group_id(iteration, group)}-r{rollout}"


def parse_episode_id(text: str) -> tuple[int, int, int]:
    """``'it3-g5-r7'`` → ``(3, 5, 7)``; a ValueError for anything else (e.g. an expert's ``'expert:…'``)."""
    parts = text.split("-")
    if len(parts) != 3 or not (parts[0][:2] == "it" and parts[1][:1] == "g" and parts[2][:1] == "r"):
        raise ValueError(f"not a rollout episode id (itN-gK-rJ): {text!r}")
    try:
        return int(parts[0][2:]), int(parts[1][1:]), int(parts[2][1:])
    except ValueError:
        raise ValueError(f"not a rollout episode id (itN-gK-rJ): {text!r}") from None
