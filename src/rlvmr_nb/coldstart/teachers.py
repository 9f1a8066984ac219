"""Teachers that add one meta-reasoning tag and one sentence to every expert step (spec §4.1.3-4, issue 5).

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
  Plain ``urllib``; the key is read from an environment variable, never stored.

Both return an annotated `Episode` whose steps carry ``output`` = ``"<tag>sentence</tag>\\n<action>a</action>\\n"``
(spec §1.1 cold-start target shape) and ``extra['train']``; both raise `AnnotationRejected` instead.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Any, Protocol, Sequence

from ..envs.base import TaskSpec
from ..envs.registry import get_env
from ..tags import META_TAGS, format_step, parse_output
from ..trajectory import Episode, Step
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
    """A new Episode with each step's teacher output parsed (strict rules, spec §1.2) into tag/reasoning/plan.

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
_JSON_LIST = re.compile(r"\[.*\]", re.DOTALL)


def annotation_prompt(expert: Episode) -> str:
    """The tagging request for one successful trajectory (our wording of spec §4.1.3)."""
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
    m = _JSON_LIST.search(text or "")
    if not m:
        raise ValueError("no JSON list in the answer")
    data = json.loads(m.group(0))
    if not isinstance(data, list) or not all(
        isinstance(d, dict) and isinstance(d.get("reason"), str) and isinstance(d.get("action"), str) for d in data
    ):
        raise ValueError('the answer is not a list of {"reason": str, "action": str} objects')
    return data


def check_annotation(expert: Episode, items: Sequence[dict[str, str]]) -> list[str]:
    """Validate a parsed annotation (spec §4.1.4) and return the step outputs; raises `AnnotationRejected`."""
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


@dataclass
class LLMTeacher:
    """Tagging by a chat model behind an OpenAI-compatible ``/chat/completions`` endpoint (module docstring).

    `base_url` defaults to ``$OPENAI_BASE_URL`` or ``https://api.openai.com/v1``; the key is read from the
    environment variable named by `api_key_env` (may be unset for local servers). `max_attempts` calls
    per trajectory when the answer does not parse (official: 5); HTTP 429/5xx and connection errors also
    use up an attempt, other HTTP errors raise at once. `max_tokens` 1024 and temperature 0 are the
    official settings; raise `max_tokens` for trajectories near 30 steps.
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 1024
    max_attempts: int = 5
    timeout_s: float = 120.0
    retry_backoff_s: float = 1.0
    name: str = "llm"

    def __post_init__(self) -> None:
        if self.base_url is None:
            self.base_url = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        self.base_url = self.base_url.rstrip("/")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "base_url": self.base_url, "temperature": self.temperature,
                "max_tokens": self.max_tokens, "max_attempts": self.max_attempts}

    def annotate(self, expert: Episode, env: Any = None) -> Episode:
        """One chat call per attempt; parse, validate, and return the annotated trajectory."""
        messages = [{"role": "user", "content": annotation_prompt(expert)}]
        errors: list[str] = []
        for attempt in range(1, self.max_attempts + 1):
            try:
                answer = self.complete(messages)
                items = parse_annotation(answer)
            except (ValueError, _Retryable) as e:  # json.JSONDecodeError is a ValueError
                errors.append(f"attempt {attempt}: {e}")
                if attempt < self.max_attempts and isinstance(e, _Retryable):
                    time.sleep(self.retry_backoff_s * attempt)
                continue
            outputs = check_annotation(expert, items)
            info = {"teacher": self.describe(), "llm_attempts": attempt}
            return annotated_copy(expert, expert.steps, outputs, [True] * len(outputs), info)
        raise AnnotationRejected(
            f"{expert.task_id}: no parseable annotation in {self.max_attempts} attempts ({'; '.join(errors)})")

    def complete(self, messages: list[dict[str, str]]) -> str:
        """POST one chat-completions request and return the first choice's message text."""
        body = json.dumps({"model": self.model, "messages": messages, "temperature": self.temperature,
                           "max_tokens": self.max_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(f"{self.base_url}/chat/completions", data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            if e.code == 429 or e.code >= 500:
                raise _Retryable(f"HTTP {e.code} from {self.base_url}") from e
            raise RuntimeError(
                f"{self.base_url}/chat/completions answered HTTP {e.code}: {e.read()[:300]!r}. Check the model name, "
                f"base_url and the key in ${self.api_key_env}."
            ) from e
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise _Retryable(f"cannot reach {self.base_url}: {e}") from e
        try:
            return payload["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError(f"not a chat-completions response: {str(payload)[:200]}") from e


class _Retryable(Exception):
    """A transient transport failure: worth another attempt."""


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
