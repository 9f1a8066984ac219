"""Teachers that add one meta-reasoning tag and one sentence to every expert step (paper §3.3;
docs/method.md, 'Cold start').

* `RuleTeacher` — offline and deterministic for a seed. Planning at step 0, explore while searching,
  monitor while executing subgoals, and reflection after a mistake it inserts itself: a realistic wrong
  command replayed in the REAL environment (its reply is the engine's own) followed by the expert's
  command as the recovery; the mistake is kept only if the whole trajectory still wins on replay. The
  mistake step stays in the trajectory (later prompts show it in their history) but is not trained on by
  default, so SFT never teaches the mistake itself. Rules per environment: `alfworld_rules`,
  `scienceworld_rules`.
* `LLMTeacher` — any OpenAI-compatible chat-completions endpoint (OpenAI, a local vLLM server), with the
  official protocol: one call per trajectory at temperature 0, a JSON list of ``{"reason", "action"}`` of
  the same length, up to 5 attempts when the answer does not parse, and rejection (no retry) when the
  list has the wrong length, changes an action, or a reason is not exactly one ``<tag>…</tag>``.
  Plain ``urllib`` through `chat_transport` (no redirects, redacted errors, bounded answers and retries);
  the key is read from an environment variable, never stored.

Both return an annotated `Episode` whose steps carry ``output`` = ``"<tag>sentence</tag>\\n<action>a</action>\\n"``
(the cold-start target shape: paper §3.2; docs/method.md, 'Output format') and ``extra['train']``; both raise
`AnnotationRejected` instead.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, replace
from typing import Any, Protocol, Sequence

from ..envs.base import TaskSpec
from ..envs.lab_world import HOUSES
from ..envs.registry import get_env
from ..rollout.tags import META_TAGS, format_step, parse_output
from ..records import Episode, Step
from .chat_transport import TransientTransportError, post_chat_completion, redact
from .experts import MAX_TRAJECTORY_STEPS, replay


class AnnotationRejected(ValueError):
    """The teacher produced no usable annotation for a trajectory; the dataset builder drops it."""


class Teacher(Protocol):
    """Annotates one expert trajectory (raising `AnnotationRejected` when it cannot)."""

    name: str

    def describe(self) -> dict[str, Any]: ...

    def annotate(self, expert: Episode, env: Any = None) -> Episode: ...


def annotated_copy(
    source: Episode, steps: Sequence[Step], outputs: Sequence[str], trainable: Sequence[bool], info: dict[str, Any]
) -> Episode:
    """A new Episode with each step's teacher output parsed into tag/reasoning/plan (strict rules: docs/method.md,
    'Validity rules').

    Raises `AnnotationRejected` if any output is not strict-valid or its action differs from the step's.
    """
    new_steps = []
    for i, (step, output, train) in enumerate(zip(steps, outputs, trainable, strict=True)):
        parsed = parse_output(output, mode="strict")
        if not parsed.valid:
            raise AnnotationRejected(f"step {i}: output is not strict-valid ({', '.join(parsed.invalid_reasons)}): {output!r}")
        if parsed.action != step.action:
            raise AnnotationRejected(f"step {i}: action changed from {step.action!r} to {parsed.action!r}")
        new_steps.append(replace(
            step, t=i, output=output, tag=parsed.tag, reasoning=parsed.reasoning, plan=parsed.plan, valid=True,
            invalid_reasons=[], extra={**step.extra, "train": bool(train)},
        ))
    return Episode(
        task_id=source.task_id, env=source.env, split=source.split, task_type=source.task_type,
        task_text=source.task_text, group_id=source.group_id, episode_id=source.episode_id, seed=source.seed,
        steps=new_steps, won=bool(new_steps) and new_steps[-1].won, info={**source.info, **info},
    )


def task_of(episode: Episode) -> TaskSpec:
    """The TaskSpec an episode was played on (to replay it)."""
    return TaskSpec(task_id=episode.task_id, env=episode.env, split=episode.split, task_type=episode.task_type)


# ------------------------------------------------------------------------------------------- rule teacher


@dataclass
class RuleTeacher:
    """Offline, deterministic tagging rules (module docstring). `error_rate` is the share of trajectories
    that get an inserted mistake + reflection; `max_replays` bounds the candidate mistakes tried."""

    seed: int = 0
    error_rate: float = 0.8
    second_mistake_min_steps: int = 12
    """Trajectories at least this long may get a second mistake (with probability `error_rate`)."""
    train_on_mistakes: bool = False
    max_replays: int = 6
    name: str = "rule"

    def __post_init__(self) -> None:
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"error_rate must be in [0, 1], got {self.error_rate}")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "error_rate": self.error_rate,
                "second_mistake_min_steps": self.second_mistake_min_steps,
                "train_on_mistakes": self.train_on_mistakes, "max_replays": self.max_replays}

    def annotate(self, expert: Episode, env: Any = None) -> Episode:
        """Tag every step of `expert`; with `env`, maybe insert a replayed mistake and its reflection."""
        if not expert.steps or not expert.won:
            raise AnnotationRejected(f"{expert.task_id}: the rule teacher needs a winning expert trajectory")
        rng = random.Random(f"rule:{self.seed}:{expert.task_id}")
        rules = get_env(expert.env).coldstart().rules
        plan: Any = rules.plan(expert, rng)
        candidates = rules.propose_mistakes(expert, plan, rng)
        took_effect, label = rules.took_effect, rules.label_steps
        actions = [s.action for s in expert.steps]
        wanted = int(rng.random() < self.error_rate)
        if len(actions) >= self.second_mistake_min_steps:
            wanted += int(rng.random() < self.error_rate)
        steps: list[Step] = list(expert.steps)
        origin: list[int | None] = list(range(len(steps)))
        mistakes: dict[int, Any] = {}
        if env is not None and wanted:
            steps, origin, mistakes = self._insert_mistakes(expert, env, candidates, wanted, took_effect)
        labels = label(steps, plan, origin, mistakes, rng)
        outputs = [format_step(tag, sentence, s.action) for (tag, sentence), s in zip(labels, steps, strict=True)]
        trainable = [o is not None or self.train_on_mistakes for o in origin]
        info: dict[str, Any] = {"teacher": self.describe()}
        if mistakes:
            info["inserted_mistakes"] = [{"kind": m.kind, "index": i, "action": m.action, "feedback": steps[i].feedback}
                                         for i, m in sorted(mistakes.items())]
            for i, m in mistakes.items():
                steps[i] = replace(steps[i], extra={**steps[i].extra, "inserted_mistake": m.kind})
        return annotated_copy(expert, steps, outputs, trainable, info)

    def _insert_mistakes(
        self, expert: Episode, env: Any, candidates: Sequence[Any], wanted: int, took_effect: Any
    ) -> tuple[list[Step], list[int | None], dict[int, Any]]:
        """Greedily add candidate mistakes (at least 2 steps apart) that, replayed in the real env with the
        expert's commands around them, are rejected as intended and still end in a win."""
        actions = [s.action for s in expert.steps]
        best: tuple[list[Step], list[int | None], dict[int, Any]] = (list(expert.steps), list(range(len(actions))), {})
        accepted: list[Any] = []
        for candidate in candidates[: self.max_replays]:
            if len(accepted) >= wanted or len(actions) + len(accepted) + 1 > MAX_TRAJECTORY_STEPS:
                break
            if any(abs(candidate.before - m.before) < 2 for m in accepted):
                continue
            chosen = sorted([*accepted, candidate], key=lambda m: m.before)
            sequence, origin, at = list(actions), list(range(len(actions))), {}
            for shift, m in enumerate(chosen):
                position = m.before + shift
                sequence.insert(position, m.action)
                origin.insert(position, None)
                at[position] = m
            trial = replay(env, expert.env, task_of(expert), sequence, expert)
            if trial.won and trial.length == len(sequence) and all(took_effect(m, trial.steps[i]) for i, m in at.items()):
                accepted = chosen
                best = (trial.steps, origin, at)
        return best


# ------------------------------------------------------------------------------------------- LLM teacher

_TAG_GUIDE = {
    "alfworld": (
        "<planning>: break the task into explicitly numbered subgoals (step 1: ..., step 2: ...); use it at the "
        "start of the task or when a big problem forces a new plan.",
        "<explore>: the next action is exploratory (searching for an object or place); list several "
        "candidate places, objects or actions.",
        "<reflection>: the agent made a mistake or stopped making progress; analyse why and how to recover.",
        "<monitor>: recall the current subgoal of the plan and say why the next action serves it.",
    ),
    "scienceworld": (
        "<planning>: break the task into at least 2 explicitly numbered subgoals (step 1: ..., step 2: ...), "
        "leaving out steps the task text already spells out; use it at the start of the task.",
        "<explore>: the next action is exploratory (searching rooms or containers); list several hypotheses "
        "about where things are or what to try.",
        "<reflection>: the agent made a mistake or stopped making progress; analyse why and how to recover.",
        "<monitor>: recall the current subgoal of the plan and say why the next action serves it.",
    ),
}
# The lab world has ALFWorld's rooms-and-containers mechanics (envs/rooms.py) and its own prompt family: the
# same guide fits it; without an entry `--teacher llm` failed on it with KeyError: 'lab'.
_TAG_GUIDE.update({world: _TAG_GUIDE["alfworld"] for world in HOUSES})


def annotation_prompt(expert: Episode) -> str:
    """The tagging request for one successful trajectory (our wording; docs/method.md, 'Cold start')."""
    guide = _TAG_GUIDE[get_env(expert.env).prompt_family]
    lines = [
        "I will show you a successful trajectory of an agent solving a task in a text environment. Supplement "
        "its reasoning: for every step, write the thought that led to the action, as ONE concise sentence "
        "wrapped in exactly one of these tags:",
        *guide,
        f"Task: {expert.task_text}",
        "Trajectory:",
    ]
    for i, step in enumerate(expert.steps, 1):
        lines.append(f"Step {i}. Observation: {step.observation}\nAction: {step.action}")
    lines.append(
        f"Answer with a JSON list of exactly {len(expert.steps)} objects, one per step and in order, each "
        '{"reason": "<tag>sentence</tag>", "action": "<the step\'s action copied exactly>"}. '
        "Output only the JSON list."
    )
    return "\n".join(lines)


def parse_annotation(text: str) -> list[dict[str, str]]:
    """The JSON list inside a model answer (code fences and chatter around it are tolerated).

    Raises ValueError when no list of ``{"reason": str, "action": str}`` objects can be read.
    """
    text = text or ""
    # The span from the first '[' to the last ']' (what a greedy r"\[.*\]" finds), located without a regex:
    # that regex backtracks quadratically on an answer full of '[' with no ']'.
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        raise ValueError("no JSON list in the answer")
    try:
        data = json.loads(text[start : end + 1])
    except RecursionError:  # nesting deeper than the parser's stack: a bad answer like any other
        raise ValueError("the JSON list in the answer is nested too deeply") from None
    if not isinstance(data, list) or not all(
        isinstance(d, dict) and isinstance(d.get("reason"), str) and isinstance(d.get("action"), str) for d in data
    ):
        raise ValueError('the answer is not a list of {"reason": str, "action": str} objects')
    return data


def check_annotation(expert: Episode, items: Sequence[dict[str, str]]) -> list[str]:
    """Validate a parsed annotation (docs/method.md, 'Cold start') and return the step outputs; raises
    `AnnotationRejected`."""
    if len(items) != len(expert.steps):
        raise AnnotationRejected(f"annotation has {len(items)} entries for {len(expert.steps)} steps")
    outputs = []
    for i, (item, step) in enumerate(zip(items, expert.steps, strict=True)):
        reason, action = item["reason"].strip(), item["action"].strip()
        if action != step.action:
            raise AnnotationRejected(f"step {i}: action changed from {step.action!r} to {action!r}")
        if not reason.startswith("<"):
            raise AnnotationRejected(f"step {i}: reason does not start with a tag: {reason[:60]!r}")
        output = f"{reason}\n<action>{action}</action>\n"
        parsed = parse_output(output, mode="strict")
        if not parsed.valid or parsed.tag not in META_TAGS:
            raise AnnotationRejected(
                f"step {i}: reason is not exactly one meta-reasoning tag ({', '.join(parsed.invalid_reasons)})")
        outputs.append(output)
    return outputs


class TeacherUnavailable(RuntimeError):
    """The LLM teacher's endpoint stayed unreachable for the whole retry budget: the build should stop, since
    every later trajectory would wait the same way."""


class UnparseableAnswers(AnnotationRejected):
    """Every attempt of the LLM teacher on one trajectory gave an answer without a readable JSON list."""


class TeacherGaveUp(TeacherUnavailable):
    """The LLM teacher answered nothing readable for several trajectories in a row: the endpoint or model does
    not follow the protocol, and every further trajectory would cost its full attempts the same way."""


@dataclass
class LLMTeacher:
    """Tagging by a chat model behind an OpenAI-compatible ``/chat/completions`` endpoint (module docstring).

    `base_url` defaults to ``$OPENAI_BASE_URL`` or ``https://api.openai.com/v1``; the key is read from the
    environment variable named by `api_key_env` (may be unset for local servers). `max_attempts` calls
    per trajectory when the answer does not parse (official: 5); `max_tokens` 1024 and temperature 0 are
    the official settings; raise `max_tokens` for trajectories near 30 steps.

    Transport (`chat_transport`): redirects are refused so the key never reaches another address; server
    text in errors is redacted and truncated; answers over `max_response_bytes` or not parseable (any JSON
    nesting depth included) use up an attempt. Unreachable endpoints, timeouts, HTTP 429 and 5xx are
    retried with growing pauses for at most `retry_budget_s` seconds after the first such failure (each
    retry's timeout is cut to the time left), then `TeacherUnavailable` is raised with the last cause: the
    worst case for one trajectory is about `timeout_s` + `retry_budget_s`. Other HTTP errors raise
    `chat_transport.EndpointError` at once.
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 1024
    max_attempts: int = 5
    timeout_s: float = 120.0
    retry_backoff_s: float = 1.0
    retry_budget_s: float = 60.0
    max_response_bytes: int = 4 * 1024 * 1024
    name: str = "llm"

    def __post_init__(self) -> None:
        if self.base_url is None:
            self.base_url = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        self.base_url = self.base_url.rstrip("/")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.timeout_s <= 0 or self.retry_budget_s < 0 or self.max_response_bytes < 1:
            raise ValueError("timeout_s and max_response_bytes must be positive and retry_budget_s non-negative")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "base_url": redact(self.base_url or ""),
                "temperature": self.temperature, "max_tokens": self.max_tokens, "max_attempts": self.max_attempts}

    def annotate(self, expert: Episode, env: Any = None) -> Episode:
        """One chat call per attempt; parse, validate, and return the annotated trajectory."""
        messages = [{"role": "user", "content": annotation_prompt(expert)}]
        errors: list[str] = []
        first_transport_failure: float | None = None
        timeout = self.timeout_s
        for attempt in range(1, self.max_attempts + 1):
            try:
                items = parse_annotation(self.complete(messages, timeout_s=timeout))
            except TransientTransportError as e:
                errors.append(f"attempt {attempt}: {e}")
                if first_transport_failure is None:
                    first_transport_failure = time.monotonic()
                pause = self.retry_backoff_s * attempt
                left = self.retry_budget_s - (time.monotonic() - first_transport_failure) - pause
                if attempt == self.max_attempts or left < _MIN_RETRY_TIMEOUT_S:
                    raise TeacherUnavailable(
                        f"LLM teacher endpoint {redact(self.base_url or '')} failed: {e} ({attempt} attempt(s), "
                        f"{time.monotonic() - first_transport_failure:.1f} s of retries, retry_budget_s="
                        f"{self.retry_budget_s}; all errors: {'; '.join(errors)})"
                    ) from None
                time.sleep(pause)
                timeout = min(self.timeout_s, left)
                continue
            except ValueError as e:  # MalformedResponse or an answer without a usable JSON list
                errors.append(f"attempt {attempt}: {e}")
                timeout = self.timeout_s  # the endpoint answered: a full timeout for the next attempt again
                continue
            outputs = check_annotation(expert, items)
            info = {"teacher": self.describe(), "llm_attempts": attempt}
            return annotated_copy(expert, expert.steps, outputs, [True] * len(outputs), info)
        raise UnparseableAnswers(
            f"{expert.task_id}: no parseable annotation in {self.max_attempts} attempts ({'; '.join(errors)})")

    def complete(self, messages: list[dict[str, str]], timeout_s: float | None = None) -> str:
        """POST one chat-completions request and return the first choice's message text (`chat_transport`)."""
        body = {"model": self.model, "messages": messages, "temperature": self.temperature,
                "max_tokens": self.max_tokens}
        return post_chat_completion(f"{self.base_url}/chat/completions", body, os.environ.get(self.api_key_env),
                                    timeout_s or self.timeout_s, self.max_response_bytes)


_MIN_RETRY_TIMEOUT_S = 0.5
"""A retry with less time than this left in the budget could not get an answer: give up instead."""


def make_teacher(spec: str | Teacher, seed: int = 0, **kwargs: Any) -> Teacher:
    """'rule' -> `RuleTeacher(seed)`; 'llm' -> `LLMTeacher(**kwargs)` (needs model=...); objects pass through."""
    if not isinstance(spec, str):
        return spec
    if spec == "rule":
        return RuleTeacher(seed=seed, **kwargs)
    if spec == "llm":
        if "model" not in kwargs:
            raise ValueError("teacher='llm' needs model=... (the endpoint's model name)")
        return LLMTeacher(**kwargs)
    raise ValueError(f"unknown teacher {spec!r}; use 'rule', 'llm' or a Teacher object")
