"""Cold-start dataset: tagged expert trajectories -> step-level (prompt, response) pairs (paper §3.3; docs/method.md, 'Cold start').

Prompts are rendered by the SAME code as rollouts (`prompts.AgentMemory`: history, last 3 outputs, plan
memory), so what SFT teaches is exactly what RL will show. Two deliberate choices:

* Plan memory includes the first step's plan (the official builder only updates it from step 1 on, so
  its SFT prompts keep "No plan." after a step-0 plan while its RL prompts do not; we do not reproduce
  that mismatch).
* ``show_admissible`` (default True): the official cold-start prompts drop the ALFWorld admissible list
  and the ScienceWorld "available actions" section, while its RL and evaluation prompts show them. We
  default to the RL prompt so SFT and RL see one prompt format — a model fine-tuned on list-free prompts
  meets an unfamiliar (and longer) prompt at its first RL step. ``show_admissible=False`` reproduces the
  official cold-start variant (``PromptConfig(show_admissible=False)``).

Files in the output folder: ``samples.jsonl`` (one trained step per line: user-message ``prompt``,
``response``, task/step metadata; apply the model's chat template at training time with
`load_coldstart_samples`), ``trajectories.jsonl`` (the tagged Episodes, mistakes included) and
``manifest.json`` (source, teacher, seed, level, counts per task type, tag distribution, git SHA). A
dataset without a manifest is incomplete: the manifest is written last.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

from tqdm.auto import tqdm

from ..atomic_io import atomic_open
from ..envs.base import TaskSpec
from ..envs.registry import get_env
from ..records import Episode, read_episodes, write_episodes
from ..rollout.prompts import AgentMemory, PromptConfig, to_chat
from ..rollout.tags import META_TAGS
from ..runs.lock import RunFolderLock
from .experts import (
    MAX_TRAJECTORY_STEPS,
    TrajectoryTooLong,
    assert_no_heldout,
    candidate_order,
    expert_episode,
    heldout_task_types,
    make_expert_env,
    training_tasks,
)
from .teachers import AnnotationRejected, Teacher, TeacherGaveUp, UnparseableAnswers, make_teacher

FORMAT = "rlvmr-nb-coldstart/1"
SAMPLES_FILE, TRAJECTORIES_FILE, MANIFEST_FILE = "samples.jsonl", "trajectories.jsonl", "manifest.json"
MIN_TAG_SHARE = 0.05
"""Every tag must be at least this share of the trained steps (so that the cold start teaches every tag, not mostly <monitor>)."""
MAX_TYPE_FAILURES = 6
"""A task type whose candidates fail this many times in a row is given up (e.g. ScienceWorld tasks whose
gold paths are always >= 30 steps)."""


class TooFewTrajectories(RuntimeError):
    """Fewer trajectories than asked for survived the experts and the teacher (the message counts why)."""


class TagShareError(ValueError):
    """A meta-reasoning tag is missing or below the minimum share of steps."""


def check_tag_shares(counts: dict[str, int], min_share: float = MIN_TAG_SHARE) -> dict[str, float]:
    """Shares of the four tags; raises `TagShareError` when one is absent or under `min_share`."""
    total = sum(counts.get(t, 0) for t in META_TAGS)
    if total == 0:
        raise TagShareError("the dataset has no tagged steps")
    shares = {t: counts.get(t, 0) / total for t in META_TAGS}
    low = {t: s for t, s in shares.items() if s < min_share}
    if low:
        detail = ", ".join(f"{t} {s:.1%}" for t, s in low.items())
        raise TagShareError(
            f"tag share below {min_share:.0%} of steps: {detail} (all: "
            + ", ".join(f"{t} {s:.1%}" for t, s in shares.items())
            + "). With the rule teacher raise error_rate (reflection) or use expert='mixed' (explore); with an "
            "LLM teacher annotate more trajectories; or pass min_tag_share=0 to accept the imbalance."
        )
    return shares


def step_samples(episode: Episode, prompt_config: PromptConfig) -> list[dict[str, Any]]:
    """One record per trained step of a tagged episode, its prompt rendered exactly as a rollout would."""
    memory = AgentMemory(task=episode.task_text, config=prompt_config)
    records = []
    for step in episode.steps:
        prompt = memory.render(step.observation, step.admissible_actions,
                               available_actions=step.extra.get("available_actions"))
        if step.extra.get("train", True):
            records.append({
                "prompt": prompt, "response": step.output, "env": episode.env, "task_id": episode.task_id,
                "task_type": episode.task_type, "episode_id": episode.episode_id, "t": step.t, "tag": step.tag,
            })
        memory.record(step.observation, step.output, step.action)
    return records


def default_out_dir(env: str, level: str, teacher_name: str, n: int, seed: int) -> Path:
    """runs/coldstart/<env>-<level>-<teacher>-n<N>-seed<S> (runs/ is git-ignored)."""
    return Path("runs") / "coldstart" / f"{env}-{level}-{teacher_name}-n{n}-seed{seed}"


def build_coldstart_dataset(
    env: str = "alfworld",
    level: str = "L0",
    n_trajectories: int | None = None,
    seed: int = 0,
    teacher: str | Teacher = "rule",
    out_dir: str | os.PathLike | None = None,
    *,
    expert: str | None = None,
    handcoded_share: float = 0.5,
    show_admissible: bool = True,
    min_tag_share: float = MIN_TAG_SHARE,
    tasks: Sequence[TaskSpec] | None = None,
    env_instance: Any = None,
    progress: bool = True,
) -> Path:
    """Build a tagged cold-start set from the level's training split and return its folder.

    Args:
        env: 'alfworld' or 'scienceworld'.
        level: 'L0' / 'L1' / 'L2'; candidates come from its training split only (L2: held-out types
            never appear, asserted before and after annotation, digitalhuman#15).
        n_trajectories: trajectories to keep (default 200 ALFWorld, 60 ScienceWorld).
        seed: candidate order, expert coin and teacher sentences; same seed, same files.
        teacher: 'rule' (offline `RuleTeacher(seed)`), or a Teacher object (e.g. `LLMTeacher`).
        out_dir: output folder (default `default_out_dir`).
        expert: ALFWorld 'walkthrough' | 'handcoded' | 'mixed' (hand-coded with probability
            `handcoded_share`); ScienceWorld always uses gold paths.
        show_admissible: render prompts with the admissible list (RL format, default) or without it
            (official cold-start format); see the module docstring.
        min_tag_share: every tag must reach this share of trained steps, else `TagShareError` (0 disables).
        tasks: candidate tasks instead of the full training split (still leakage-checked).
        env_instance: an environment to reuse (tests); it is not closed.
    """
    kit = get_env(env).coldstart()  # a clear error for worlds without experts
    expert = expert or kit.experts[0]
    kit.check_expert(expert)
    n = kit.default_trajectories if n_trajectories is None else int(n_trajectories)
    if n < 1:
        raise ValueError(f"n_trajectories must be >= 1, got {n}")
    teacher_obj = make_teacher(teacher, seed=seed)
    candidates = list(tasks) if tasks is not None else training_tasks(env, level)
    assert_no_heldout(candidates, env, level)
    out = Path(out_dir) if out_dir is not None else default_out_dir(env, level, teacher_obj.name, n, seed)

    with RunFolderLock(out, "coldstart"):  # one build per folder: two would interleave their files
        episodes, rejected, experts_used = _collect(
            env, level, candidates, n, seed, teacher_obj, expert, handcoded_share, env_instance, progress
        )
        if len(episodes) < n:
            raise TooFewTrajectories(
                f"only {len(episodes)} of {n} trajectories could be built from {len(candidates)} candidates "
                f"(rejections: {dict(rejected)}); lower n_trajectories or widen the candidate tasks"
            )
        assert_no_heldout(episodes, env, level)
        prompt_config = PromptConfig(env=env, show_admissible=show_admissible, max_prompt_tokens=None)
        samples = [r for ep in episodes for r in step_samples(ep, prompt_config)]
        tag_counts = Counter(r["tag"] for r in samples)
        shares = check_tag_shares(tag_counts, min_tag_share) if min_tag_share > 0 else {
            t: tag_counts.get(t, 0) / max(1, len(samples)) for t in META_TAGS}

        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST_FILE).unlink(missing_ok=True)  # an interrupted rebuild must not look complete
        _write_jsonl(out / SAMPLES_FILE, samples)
        write_episodes(out / TRAJECTORIES_FILE, episodes)
        manifest = _manifest(env, level, n, seed, teacher_obj, expert, handcoded_share, prompt_config, episodes,
                             samples, tag_counts, shares, min_tag_share, rejected, experts_used, out)
        (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        return out


MAX_UNREADABLE_IN_A_ROW = 3
"""Trajectories in a row on which the LLM teacher gave nothing readable before the build stops
(`TeacherGaveUp`): each costs `LLMTeacher.max_attempts` requests, and a model that does not follow the
answer format will not start to later."""


def _collect(
    env: str, level: str, candidates: Sequence[TaskSpec], n: int, seed: int, teacher: Teacher, expert: str,
    handcoded_share: float, env_instance: Any, progress: bool,
) -> tuple[list[Episode], Counter, Counter]:
    engine = env_instance if env_instance is not None else make_expert_env(env, expert)
    episodes: list[Episode] = []
    rejected: Counter = Counter()
    experts_used: Counter = Counter()
    failures_in_a_row: Counter = Counter()
    unreadable: list[str] = []  # reasons of the teacher's unreadable answers since its last readable one
    bar = tqdm(total=n, desc=f"cold start {env} {level}", disable=None if progress else True)
    try:
        for task in candidate_order(candidates, seed):
            if len(episodes) >= n:
                break
            if failures_in_a_row[task.task_type] >= MAX_TYPE_FAILURES:
                continue
            try:
                source = expert_episode(env, task, engine, expert, seed=seed, handcoded_share=handcoded_share)
            except Exception as e:  # noqa: BLE001 - an expert that cannot solve a game is skipped, not fatal
                if _is_crash(e):
                    raise
                reason = "expert: 30 steps or more" if isinstance(e, TrajectoryTooLong) else f"expert: {type(e).__name__}: {e}"
                rejected[reason[:100]] += 1
                failures_in_a_row[task.task_type] += 1
                continue
            try:  # only rejections are skipped: transport or auth errors of an LLM teacher stop the build
                tagged = teacher.annotate(source, env=engine)
            except AnnotationRejected as e:
                unreadable = unreadable + [str(e)] if isinstance(e, UnparseableAnswers) else []
                if len(unreadable) >= MAX_UNREADABLE_IN_A_ROW:
                    raise TeacherGaveUp(
                        f"the LLM teacher gave no readable answer for {len(unreadable)} trajectories in a row; "
                        f"stopping (check --llm-model and the endpoint). First: {unreadable[0]}") from None
                rejected[f"teacher: {e}"[:100]] += 1
                failures_in_a_row[task.task_type] += 1
                continue
            unreadable = []
            if tagged.length > MAX_TRAJECTORY_STEPS:
                rejected["teacher: 30 steps or more"] += 1
                failures_in_a_row[task.task_type] += 1
                continue
            failures_in_a_row[task.task_type] = 0
            used = source.info.get("expert", env)
            experts_used[f"{used} (fallback from handcoded)" if source.info.get("fallback") else used] += 1
            episodes.append(tagged)
            bar.update(1)
    finally:
        bar.close()
        if env_instance is None:
            engine.close()
    return episodes, rejected, experts_used


def _is_crash(error: Exception) -> bool:
    return type(error).__name__ in ("ScienceWorldCrashed", "JavaNotFoundError")


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    with atomic_open(path) as f:  # unique temp name: two builds into one folder never share a temp file
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(
    env: str, level: str, n: int, seed: int, teacher: Teacher, expert: str, handcoded_share: float,
    prompt_config: PromptConfig, episodes: Sequence[Episode], samples: Sequence[dict], tag_counts: Counter,
    shares: dict[str, float], min_tag_share: float, rejected: Counter, experts_used: Counter, out: Path,
) -> dict[str, Any]:
    # torch (the 'train' extra) is loaded here only: importing coldstart.dataset needs none of it
    from ..evaluate import provenance

    per_type: dict[str, dict[str, int]] = {}
    for ep in episodes:
        row = per_type.setdefault(ep.task_type, {"trajectories": 0, "samples": 0})
        row["trajectories"] += 1
    for r in samples:
        per_type[r["task_type"]]["samples"] += 1
    lengths = [ep.length for ep in episodes]
    mistakes = Counter(m["kind"] for ep in episodes for m in ep.info.get("inserted_mistakes", []))
    return {
        "format": FORMAT,
        "env": env,
        "level": level,
        "seed": seed,
        "source": {
            "split": f"{level}/train",
            **get_env(env).coldstart().describe_expert(expert, handcoded_share),
            "experts_used": dict(sorted(experts_used.items())),
            "heldout_task_types_excluded": sorted(heldout_task_types(env, level)),
            "max_trajectory_steps": MAX_TRAJECTORY_STEPS,
        },
        "teacher": teacher.describe(),
        "prompt": {"style": prompt_config.style, "show_admissible": prompt_config.show_admissible,
                   "recent_outputs": prompt_config.recent_outputs, "plan_memory": "every non-empty <planning>, step 0 included"},
        "counts": {
            "trajectories": len(episodes),
            "samples": len(samples),
            "steps": sum(lengths),
            "history_only_steps": sum(lengths) - len(samples),
            "per_task_type": dict(sorted(per_type.items())),
            "inserted_mistakes": dict(sorted(mistakes.items())),
            "rejected_candidates": dict(sorted(rejected.items())),
            "mean_steps": round(sum(lengths) / len(lengths), 3),
            "max_steps": max(lengths),
        },
        "tags": {"counts": {t: tag_counts.get(t, 0) for t in META_TAGS},
                 "shares": {t: round(s, 4) for t, s in shares.items()}, "min_share_required": min_tag_share},
        "files": {SAMPLES_FILE: _sha256(out / SAMPLES_FILE), TRAJECTORIES_FILE: _sha256(out / TRAJECTORIES_FILE)},
        "git_sha": provenance()["git_sha"],
    }


# ------------------------------------------------------------------------------------------- loading


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a built dataset folder (raises if the build did not finish)."""
    file = Path(path) / MANIFEST_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file} missing: {path} is not a finished cold-start dataset; rebuild it with "
                                "`rlvmr-nb coldstart` / build_coldstart_dataset()")
    return json.loads(file.read_text())


def read_samples(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The raw sample records of a dataset folder."""
    read_manifest(path)
    with open(Path(path) / SAMPLES_FILE, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_trajectories(path: str | os.PathLike) -> list[Episode]:
    """The tagged trajectories of a dataset folder."""
    read_manifest(path)
    return read_episodes(Path(path) / TRAJECTORIES_FILE)


def load_coldstart_samples(path: str | os.PathLike, tokenizer: Any) -> list:
    """`sft.SFTSample`s of a dataset folder, prompts wrapped in the tokenizer's chat template (paper App. C; docs/method.md, 'Prompts').

    CPU-sized subsets are chosen afterwards by `experiment.select_samples` (token cap, tag-stratified).
    """
    # torch (the 'train' extra) is loaded here only: importing coldstart.dataset needs none of it
    from .sft import SFTSample

    return [SFTSample(prompt=to_chat(tokenizer, r["prompt"]), response=r["response"],
                      meta={k: v for k, v in r.items() if k not in ("prompt", "response")})
            for r in read_samples(path)]
