"""The one record format every stage shares: `Step` and `Episode`, with JSONL I/O.

Rollouts write episodes, rewards and advantages annotate them, metrics and case studies read
them. One JSON object per line, one line per episode, so a run that crashes loses at most the
episode being written (`append_episodes` writes each line unbuffered, and repairs a line torn by an
earlier crash before appending; `write_episodes` replaces a file atomically).

Schema versions: a file carries ``"schema_version"`` on every line; `read_episodes` refuses a
newer major version than it knows instead of silently mis-reading it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

from .atomic_io import atomic_open

SCHEMA_VERSION = "1.3"
"""Major.minor. Minor bumps add optional fields or rename one (its old name still read); major bumps change meaning.
1.1: `Step.score` is `Step.outcome_score`. 1.2: `Step.tag_type` is `Step.tag_class`. 1.3: a step's scoring
fields are one `Step.scores` object (`StepScores`); flat ones of older files are read into it."""

RENAMED_STEP_FIELDS: dict[str, str] = {"score": "outcome_score", "tag_type": "tag_class"}
"""Step keys of files before 1.2 -> the `StepScores` field that holds them now."""


@dataclass(frozen=True)
class StepScores:
    """What the scoring stage says about one step (`scoring.score_episodes`): a step as rolled out has none.

    Kept apart from the rollout's fields so a reader can tell what the environment and the policy did from what
    the method made of it, and so scoring returns new records instead of filling fields of the rollout's."""

    tag_class: str
    """Reward-side tag class: planning/explore/reflection/monitor/none (paper §3.4.1; docs/method.md,
    'Meta-reasoning rewards')."""
    mr_reward: float
    """Meta-reasoning reward r_t^MR (paper §3.4.1; docs/method.md, 'Meta-reasoning rewards'); with the 'step'
    penalty channel, the penalised step reward r_t."""
    outcome_score: float
    """Outcome-channel score of this step sample, R(τ) − λ·invalid under official semantics (docs/method.md,
    'Format penalty')."""
    outcome_reward: float = 0.0
    """r_s as this step earned it: the success reward at the winning step, else 0 (paper §3.4.1; docs/method.md,
    'Outcome reward'); GiGPO's step returns discount it."""
    advantage: float | None = None
    """Final advantage applied to every response token of this step (paper Eq. 4; docs/method.md, 'Combination');
    None between the rewards (`scoring.with_rewards`) and the advantages (`scoring.with_advantages`)."""


_SCORE_FIELDS = ("tag_class", "mr_reward", "outcome_score", "advantage")


@dataclass
class Step:
    """One agent step: what the policy saw, what it wrote, what the environment answered.

    Every field is the rollout's; copies carrying `scores` (`StepScores`) are made later by the scoring stage
    (`scoring.score_episodes`).
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
    """Format validity of `output` under the parser mode used (docs/method.md, 'Validity rules')."""
    invalid_reasons: list[str] = field(default_factory=list)
    """Why `output` was invalid (empty when valid)."""
    admissible: bool = True
    """Whether `action` was in `admissible_actions` (docs/method.md, 'Validity rules': 'action_available')."""
    feedback: str = ""
    """Environment response to `action` (the next observation)."""
    env_reward: float = 0.0
    """The world's own reward where a replay records it (ScienceWorld gold paths; files before 1.3 also held r_s
    here); the rollout loop leaves it 0 — the reward the method pays is `scores.outcome_reward`."""
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
    scores: StepScores | None = None
    """What scoring made of this step (tag class, rewards, advantage); None on a step as rolled out."""
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
    """Success at the last step (paper §2.1; docs/method.md, 'Metrics')."""
    aborted: bool = False
    """The episode was cut by an infrastructure fault (dead worker, timeout): exclude it, never count it as failure."""
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form metadata (model, temperature, iteration, abort reason...; ``"branch"``: the episode's place in its
    task's tree under branching rollouts, `rollout.branching`)."""

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
            s = _step_scores_from(s)
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


def step_score(step: Step, field: str) -> Any:
    """``step.scores.<field>``, or None for a step as rolled out: for readers that show scored and unscored
    episodes alike (figures, case studies)."""
    return getattr(step.scores, field) if step.scores is not None else None


def outcome_of(episode: Episode) -> float:
    """R(τ) of an episode: the r_s its steps earned once scored (`StepScores.outcome_reward`), else the world's
    reward a replay or an earlier file recorded (`Step.env_reward`)."""
    return sum(s.scores.outcome_reward if s.scores is not None else s.env_reward for s in episode.steps)


def _step_scores_from(raw: dict[str, Any]) -> dict[str, Any]:
    """A step's dict with its scores as a `StepScores`: a 1.3 ``scores`` object, or the flat fields (under their
    old names too) of an earlier file; a step scored only in part keeps those values in `Step.extra`."""
    raw = {(RENAMED_STEP_FIELDS[k] if k in RENAMED_STEP_FIELDS and not isinstance(v, dict) else k): v
           for k, v in raw.items()}
    flat = {k: raw.pop(k) for k in _SCORE_FIELDS if k in raw}
    nested = raw.pop("scores", None)
    if nested is not None:
        raw["scores"] = StepScores(**nested)
    elif all(flat.get(k) is not None for k in _SCORE_FIELDS[:3]):
        # before 1.3 scoring wrote r_s into the step's env_reward
        raw["scores"] = StepScores(**flat, outcome_reward=float(raw.get("env_reward") or 0.0))
    elif any(v is not None for v in flat.values()):
        raw.setdefault("extra", {}).update({k: v for k, v in flat.items() if v is not None})
    return raw


def _episode_line(episode: Episode) -> bytes:
    return (json.dumps(episode.to_dict(), ensure_ascii=False) + "\n").encode("utf-8")


def write_episodes(path: str | os.PathLike, episodes: Iterable[Episode]) -> int:
    """Write episodes to a JSONL file, replacing it atomically (`atomic_io.atomic_open`: a unique temporary
    file, so concurrent writers of one path never share one). Returns the number written."""
    n = 0
    with atomic_open(path, "wb") as f:
        for ep in episodes:
            f.write(_episode_line(ep))
            n += 1
    return n


_TAIL_CHUNK = 1 << 16


def repair_torn_tail(path: str | os.PathLike) -> int:
    """Make a JSONL file end with a complete line before anything is appended to it.

    A run that crashed mid-append leaves an incomplete last line; appending after it would glue the next
    record onto it and make the file unreadable from that line on. A last line without its newline that
    holds a complete JSON value only gets the newline; anything else after the last newline is truncated
    with a warning. Returns the number of bytes dropped (0 when the file was intact or absent).
    """
    try:
        with open(path, "r+b") as f:
            dropped = _drop_incomplete_last_line(f)
    except FileNotFoundError:
        return 0
    if dropped:
        warnings.warn(f"{path}: dropped an incomplete last line ({dropped} bytes, from an interrupted write) "
                      "before appending", stacklevel=3)
    return dropped


def _drop_incomplete_last_line(f: BinaryIO) -> int:
    size = f.seek(0, os.SEEK_END)
    if size == 0:
        return 0
    f.seek(size - 1)
    if f.read(1) == b"\n":
        return 0
    line_start = _start_of_last_line(f, size)
    f.seek(line_start)
    if _is_json(f.read()):
        f.seek(size)
        f.write(b"\n")
        return 0
    f.truncate(line_start)
    return size - line_start


def _start_of_last_line(f: BinaryIO, size: int) -> int:
    """Offset just after the last newline of a file (0 if it has none), reading backwards in chunks."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        f.seek(start)
        at = f.read(end - start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return True


def append_episodes(path: str | os.PathLike, episodes: Iterable[Episode]) -> int:
    """Append episodes to a JSONL file, one unbuffered write per line so a crash loses nothing already returned.

    Holds an exclusive ``flock`` on the file while it works, so that `repair_torn_tail` (run first) never
    mistakes another appender's line in progress for the debris of a crash.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "ab", buffering=0) as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            repair_torn_tail(path)
            for ep in episodes:
                line = memoryview(_episode_line(ep))
                while line:  # a raw write may be partial
                    line = line[f.write(line):]
                n += 1
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return n


def iter_episodes(path: str | os.PathLike) -> Iterator[Episode]:
    """Stream episodes from a JSONL file, one line in memory at a time.

    A last line without its newline that does not parse is the torn end of an interrupted write (or of a
    line still being appended) and is skipped. Any other bad line raises ValueError naming the file and
    the line number.
    """
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            complete = raw.endswith(b"\n")
            if not raw.strip():
                continue
            try:
                d = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                if not complete:
                    return  # torn final write: only the last line can lack its newline
                raise ValueError(f"{path}: line {number} is not valid JSON ({type(e).__name__})") from None
            try:
                episode = Episode.from_dict(d)
            except (TypeError, ValueError, AttributeError) as e:
                raise ValueError(f"{path}: line {number} is not an episode record: {e}") from e
            yield episode


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
