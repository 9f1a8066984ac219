"""Trajectory case studies: episodes as readable HTML, and a search for the paper's two patterns.

The paper argues with two transcripts (spec §7.5): a GRPO agent stuck repeating "go to dresser 1"
while the environment answers "Nothing happens." (§2.2), and an RLVMR agent that notices a failed,
hallucinated action and recovers through a ``<reflection>`` step (§4.2). This module

* renders any `Episode` as HTML for a notebook (`episode_html`, `display_episode`): one row per
  step with the tag the model wrote (coloured as in `plots.TAG_COLORS`), its reasoning, the action
  with format-validity and admissibility marks, the environment's answer, new plans, and the
  reward-side numbers r_MR and advantage when `rewards`/`advantages` have filled them;
* finds the two patterns in saved episodes (`find_loops`, `find_reflection_recoveries`,
  `search_runs` over a runs folder);
* ships the paper's two transcripts as episode excerpts (`paper_case_studies`) so the notebook can
  show them next to episodes of the user's own runs.

Rendering uses inline styles only, so the HTML looks the same in JupyterLab, VS Code and a saved
``.html`` file. Tag colours come from `plots.TAG_COLORS`, so tables and figures agree.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from .metrics import NO_EFFECT_FEEDBACK, repetitive_steps
from .plots import DARK_TAGS, TAG_COLORS, tag_color
from .prompts import AgentMemory, PromptConfig
from .trajectory import Episode, Step, iter_episodes

_PAID_TAGS = ("planning", "explore", "reflection")  # tags with a verifiable reward (monitor: off, spec §2.2)
_HIGHLIGHT = "#fff3c4"  # the "ours" yellow of the paper tables
_GOOD, _BAD, _MUTED = "#1a7f37", "#c0392b", "#777777"
_FONT = "font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; font-size: 13px;"
_MONO = "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;"

DEFAULT_EPISODE_GLOB = "**/*episodes.jsonl"
"""Files `search_runs` reads: the trainer's ``episodes.jsonl`` and evaluation's ``*.episodes.jsonl``."""


# --------------------------------------------------------------------------------------------
# Pattern search
# --------------------------------------------------------------------------------------------


def _norm(action: str) -> str:
    return " ".join(action.strip().lower().split())


def is_no_effect(feedback: str) -> bool:
    """Whether the environment's answer says the action changed nothing ("Nothing happens.")."""
    return feedback.strip() in NO_EFFECT_FEEDBACK


def failure_reason(step: Step) -> str | None:
    """Why a step failed, or None: 'malformed output', 'non-admissible action' or 'no effect'.

    The first two are the official reflection-reward notion of a failed step (spec §2.2 step 6:
    malformed or not admissible); 'no effect' adds admissible commands the engine answered with a
    no-op, which a reader of the transcript also sees as a failure.
    """
    if not step.valid:
        return "malformed output"
    if not step.admissible:
        return "non-admissible action"
    if is_no_effect(step.feedback):
        return "no effect"
    return None


@dataclass
class Loop:
    """A run of consecutive steps repeating one action without progress (paper §2.2)."""

    episode: Episode
    action: str
    """The repeated action, as the agent wrote it."""
    steps: tuple[int, ...]
    """`Step.t` of every step of the run."""
    feedback: str
    """The environment's answer to the last repeat."""
    source: str = ""
    """File the episode was read from (set by `search_runs`)."""

    @property
    def repeats(self) -> int:
        return len(self.steps)

    def describe(self) -> str:
        return (f"{self.episode.episode_id or self.episode.task_id}: {self.action!r} {self.repeats}x "
                f"at t={self.steps[0]}..{self.steps[-1]} -> {self.feedback!r}")


@dataclass
class Recovery:
    """A failed step followed by a ``<reflection>`` step that changes to an admissible action (paper §4.2)."""

    episode: Episode
    failed_step: int
    """`Step.t` of the failed step."""
    reflection_step: int
    """`Step.t` of the reflection step right after it."""
    failure: str
    """What went wrong (`failure_reason`)."""
    failed_action: str
    new_action: str
    progress: bool
    """The reflection step's action got a real answer (not a no-op, not empty)."""
    source: str = ""
    """File the episode was read from (set by `search_runs`)."""

    @property
    def won(self) -> bool:
        """The episode was won in the end."""
        return self.episode.won

    @property
    def steps(self) -> tuple[int, int]:
        return (self.failed_step, self.reflection_step)

    def describe(self) -> str:
        outcome = "won" if self.won else ("progress" if self.progress else "no progress")
        return (f"{self.episode.episode_id or self.episode.task_id}: t={self.failed_step} {self.failed_action!r} "
                f"({self.failure}) -> <reflection> {self.new_action!r} [{outcome}]")


def find_loops(episodes: Iterable[Episode], min_repeats: int = 3) -> list[Loop]:
    """Runs of at least `min_repeats` consecutive steps that repeat one action and change nothing.

    A step *stalls* when its action is non-empty and either the environment answered with a no-op
    ("Nothing happens.") or it repeats the previous step's action and gets the very same answer
    (e.g. a second identical "look"). A loop is a maximal run of stalled steps with one action; the
    step that first did something useful with that action (e.g. the first "go to dresser 1" that
    arrived) is not part of it. This is a stricter, local cousin of `metrics.repetitive_steps`,
    which counts repeats anywhere in the episode.
    """
    if min_repeats < 2:
        raise ValueError(f"min_repeats must be >= 2 (one step is not a loop), got {min_repeats}")
    found: list[Loop] = []
    for ep in episodes:
        run: list[Step] = []
        prev: Step | None = None
        for s in ep.steps:
            action = _norm(s.action)
            repeat_of_prev = prev is not None and action == _norm(prev.action)
            stalled = bool(action) and (
                is_no_effect(s.feedback) or (repeat_of_prev and s.feedback.strip() == prev.feedback.strip())
            )
            if stalled and run and action == _norm(run[-1].action):
                run.append(s)
            else:
                _close_run(ep, run, min_repeats, found)
                run = [s] if stalled else []
            prev = s
        _close_run(ep, run, min_repeats, found)
    return found


def _close_run(ep: Episode, run: list[Step], min_repeats: int, found: list[Loop]) -> None:
    if len(run) >= min_repeats:
        found.append(Loop(ep, run[0].action.strip(), tuple(s.t for s in run), run[-1].feedback.strip()))


def find_reflection_recoveries(episodes: Iterable[Episode], require_progress: bool = False) -> list[Recovery]:
    """Failed steps followed by a well-formed ``<reflection>`` step with a different, admissible action.

    "Failed" is `failure_reason` (malformed, non-admissible, or a no-op answer). The reflection step
    must be format-valid and its action admissible and different from the failed one: a reflection
    that repeats the mistake or hallucinates another command is no recovery. With
    ``require_progress`` the reflection's action must also get a real answer from the environment.
    Results are in episode order; sort by ``(r.won, r.progress)`` to see the best ones first.
    """
    found: list[Recovery] = []
    for ep in episodes:
        for prev, s in zip(ep.steps, ep.steps[1:]):
            failure = failure_reason(prev)
            if failure is None or s.tag != "reflection" or not s.valid or not s.admissible:
                continue
            if not _norm(s.action) or _norm(s.action) == _norm(prev.action):
                continue
            progress = bool(s.feedback.strip()) and not is_no_effect(s.feedback)
            if require_progress and not progress:
                continue
            found.append(Recovery(ep, prev.t, s.t, failure, prev.action.strip(), s.action.strip(), progress))
    return found


@dataclass
class PatternSearch:
    """What `search_runs` found under a folder."""

    files: list[Path]
    episodes: int
    loops: list[Loop]
    recoveries: list[Recovery]

    def summary(self) -> str:
        return (f"{self.episodes} episodes in {len(self.files)} file(s): {len(self.loops)} loop(s), "
                f"{len(self.recoveries)} reflection recovery(ies)")


def episode_files(root: str | os.PathLike, pattern: str = DEFAULT_EPISODE_GLOB) -> list[Path]:
    """Episode JSONL files under `root` (or `root` itself when it is a file), sorted."""
    root = Path(root).expanduser()
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob(pattern) if p.is_file())


def search_runs(
    roots: str | os.PathLike | Sequence[str | os.PathLike],
    pattern: str = DEFAULT_EPISODE_GLOB,
    min_repeats: int = 3,
    require_progress: bool = False,
) -> PatternSearch:
    """Search every episode file under `roots` for loops and reflection recoveries.

    Files are streamed one at a time; only matched episodes stay in memory. Missing folders yield
    an empty result rather than an error, so a notebook can point at ``runs/`` before any run exists.
    """
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    files = [f for r in roots for f in episode_files(r, pattern)]
    loops: list[Loop] = []
    recoveries: list[Recovery] = []
    n = 0
    for f in files:
        eps = list(iter_episodes(f))
        n += len(eps)
        loops += [replace(m, source=str(f)) for m in find_loops(eps, min_repeats)]
        recoveries += [replace(m, source=str(f)) for m in find_reflection_recoveries(eps, require_progress)]
    return PatternSearch(files, n, loops, recoveries)


# --------------------------------------------------------------------------------------------
# The paper's two transcripts
# --------------------------------------------------------------------------------------------


def _excerpt_step(t: int, action: str, *, tag: str | None = None, feedback: str = "", admissible: bool = True) -> Step:
    return Step(t=t, observation="", output="", tag=tag, action=action, valid=True, admissible=admissible,
                feedback=feedback)


def paper_case_studies() -> dict[str, Episode]:
    """The paper's two case-study transcripts (spec §7.5) as episode excerpts.

    Only what the paper prints is filled in: the steps' numbers (``t`` = paper step − 1), tags,
    actions and the "Nothing happens." answers. The agents' sentences, the other observations and
    the episodes' outcomes are not printed, so reasoning and those feedbacks are empty and
    ``info["excerpt"]`` is True (renderers then show no outcome).

    * ``"grpo_loop"`` — §2.2, a GRPO agent on the L2 task "put two keychains in safe": after taking
      keychain 1 at dresser 1 it sends "go to dresser 1" at steps 8-10, each answered "Nothing
      happens.", then the inadmissible "move keychain 1 to safe 1".
    * ``"rlvmr_reflection"`` — §4.2, an RLVMR agent on "find two soapbars and put them in cabinet",
      steps 13-18: a hallucinated "examine soapbar 2" fails, a ``<reflection>`` step checks the
      inventory, and the agent goes back to monitoring and exploring.
    """
    nothing = "Nothing happens."
    loop_steps = [_excerpt_step(t, "go to dresser 1", feedback=nothing) for t in (7, 8, 9)]
    loop_steps.append(_excerpt_step(10, "move keychain 1 to safe 1", feedback=nothing, admissible=False))
    grpo = Episode(
        task_id="paper §2.2", env="alfworld", split="L2", task_type="pick_two_obj_and_place",
        task_text="put two keychains in safe.", episode_id="paper-grpo-loop", steps=loop_steps,
        info={"excerpt": True, "method": "GRPO",
              "source": "RLVMR paper §2.2 case study; steps 8-11 as printed (after taking keychain 1 at dresser 1)"},
    )
    rlvmr_steps = [
        _excerpt_step(12, "go to toilet 1", tag="explore"),
        _excerpt_step(13, "examine soapbar 2", tag="monitor", feedback=nothing, admissible=False),
        _excerpt_step(14, "inventory", tag="reflection"),
        _excerpt_step(15, "go to countertop 1", tag="monitor"),
        _excerpt_step(16, "go to toiletpaperhanger 1", tag="explore"),
        _excerpt_step(17, "go to handtowelholder 1", tag="explore"),
    ]
    rlvmr = Episode(
        task_id="paper §4.2", env="alfworld", task_type="pick_two_obj_and_place",
        task_text="find two soapbars and put them in cabinet.", episode_id="paper-rlvmr-reflection",
        steps=rlvmr_steps,
        info={"excerpt": True, "method": "RLVMR",
              "source": "RLVMR paper §4.2 case study; steps 13-18 as printed (examine soapbar 2 is hallucinated)"},
    )
    return {"grpo_loop": grpo, "rlvmr_reflection": rlvmr}


def prompt_at(episode: Episode, t: int, style: str = "meta_think", max_prompt_tokens: int | None = None) -> str:
    """The user message the agent saw before step `t`, rebuilt from the episode with `prompts` (spec §1.4).

    Replays the earlier steps' outputs through `AgentMemory` (plan memory included), so it equals the
    rollout's prompt when the same `PromptConfig` is used and no truncation happened.
    """
    index = {s.t: i for i, s in enumerate(episode.steps)}
    if t not in index:
        raise ValueError(f"episode {episode.episode_id or episode.task_id} has no step t={t}; steps: {sorted(index)}")
    env = "scienceworld" if episode.env == "scienceworld" else "alfworld"
    memory = AgentMemory(config=PromptConfig(env=env, style=style, max_prompt_tokens=max_prompt_tokens))
    for s in episode.steps[: index[t]]:
        memory.record(s.observation, s.output, s.action)
    step = episode.steps[index[t]]
    return memory.render(step.observation, step.admissible_actions)


# --------------------------------------------------------------------------------------------
# Tidy per-step rows (for DataFrames)
# --------------------------------------------------------------------------------------------


def step_records(episodes: Iterable[Episode]) -> list[dict[str, Any]]:
    """One flat dict per step: ids, tag, validity, action, feedback, rewards, advantage, repeat flag.

    ``pandas.DataFrame(step_records(eps))`` gives the table the notebooks show.
    """
    rows = []
    for ep in episodes:
        repeats = repetitive_steps(ep)
        for s, rep in zip(ep.steps, repeats):
            rows.append({
                "episode": ep.episode_id or ep.task_id, "t": s.t, "tag": s.tag or "none",
                "reward_class": s.tag_type, "valid": s.valid, "admissible": s.admissible, "action": s.action,
                "feedback": s.feedback, "repetitive": rep, "r_MR": s.mr_reward, "score": s.score,
                "advantage": s.advantage, "won": ep.won,
            })
    return rows


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _clip(text: str, limit: int | None) -> str:
    text = text.strip()
    return text if limit is None or len(text) <= limit else text[: limit - 1].rstrip() + "…"


def tag_chip(tag: str | None) -> str:
    """A coloured label for a meta-reasoning tag (``none`` for a missing tag)."""
    name = tag or "none"
    fg = "white" if name in DARK_TAGS else "#222222"
    return (f'<span style="background:{tag_color(tag)}; color:{fg}; border-radius:3px; padding:1px 6px; '
            f'font-size:11px; white-space:nowrap;">{_e(name)}</span>')


def _number(value: float | None, scale: float | None = None) -> str:
    """A signed number, green/red, with a small bar scaled to `scale` (the largest |value| shown)."""
    if value is None:
        return f'<span style="color:{_MUTED}">—</span>'
    color = _GOOD if value > 0 else _BAD if value < 0 else _MUTED
    bar = ""
    if scale:
        width = max(1, round(36 * min(1.0, abs(value) / scale)))
        bar = (f'<span style="display:inline-block; width:{width}px; height:6px; background:{color}; '
               f'opacity:0.55; margin-left:4px; vertical-align:middle;"></span>')
    return f'<span style="color:{color}; {_MONO}">{value:+.2f}</span>{bar}'


def _marks(s: Step, repeated: bool) -> str:
    out = []
    if not s.valid:
        reasons = ", ".join(s.invalid_reasons) or "invalid"
        out.append(f'<span title="malformed output" style="color:{_BAD}">✗ format ({_e(reasons)})</span>')
    elif s.output:  # excerpts without the raw output cannot vouch for its format
        out.append(f'<span title="format-valid output" style="color:{_GOOD}">✓ format</span>')
    if not s.admissible:
        out.append(f'<span style="color:{_BAD}">✗ not admissible</span>')
    if repeated:
        out.append(f'<span title="metrics.repetitive_steps" style="color:{_BAD}">↻ repeat</span>')
    if s.env_reward:
        out.append(f'<span style="color:{_GOOD}">env reward {s.env_reward:+g}</span>')
    return " · ".join(out)


def _header(ep: Episode) -> str:
    parts = [f"<b>{_e(ep.episode_id or ep.task_id)}</b>"]
    if ep.info.get("method"):
        parts.append(_e(ep.info["method"]))
    parts += [_e(x) for x in (ep.env, ep.split, ep.task_type) if x]
    if ep.info.get("excerpt"):
        parts.append(f"excerpt of {len(ep.steps)} steps")
    else:
        verdict = f'<b style="color:{_GOOD}">won</b>' if ep.won else f'<b style="color:{_BAD}">failed</b>'
        if ep.aborted:
            verdict = f'<b style="color:{_MUTED}">aborted</b>'
        outcome = sum(s.env_reward for s in ep.steps)
        parts += [verdict, f"{len(ep.steps)} steps"]
        if outcome or not ep.won:  # expert replays record no env reward; a win with R = 0 would mislead
            parts.append(f"R(τ) = {outcome:g}")
    lines = [" · ".join(parts)]
    if ep.task_text:
        lines.append(f"task: <i>{_e(ep.task_text)}</i>")
    if ep.info.get("source"):
        lines.append(f'<span style="color:{_MUTED}">{_e(ep.info["source"])}</span>')
    return "<br>".join(lines)


def episode_html(
    episode: Episode,
    *,
    highlight: Iterable[int] = (),
    show_observation: bool = True,
    show_admissible: bool = False,
    show_output: bool = False,
    feedback_chars: int | None = 240,
    title: str | None = None,
) -> str:
    """One episode as an HTML table, one row per step.

    Args:
        highlight: `Step.t` values to shade (e.g. a `Loop.steps` or `Recovery.steps`).
        show_observation: put the first observation (task description) in a collapsible block.
        show_admissible: add each step's admissible commands in a collapsible block.
        show_output: add each step's raw model output in a collapsible block.
        feedback_chars: clip long environment answers to this many characters (None: never).
        title: a line above the episode header.
    """
    marked = set(highlight)
    repeats = repetitive_steps(episode)
    adv = [abs(s.advantage) for s in episode.steps if s.advantage is not None]
    scale = max(adv) if adv else None
    cell = "padding:4px 6px; border-top:1px solid #e5e5e5; vertical-align:top;"
    head = ("".join(f'<th style="{cell} text-align:left; color:#444;">{h}</th>'
                    for h in ("t", "tag", "reasoning", "action", "environment", "r<sub>MR</sub>", "A")))
    rows = []
    for s, rep in zip(episode.steps, repeats):
        bg = f" background:{_HIGHLIGHT};" if s.t in marked else ""
        reward_class = ""
        if s.tag in _PAID_TAGS and s.tag_type is not None and s.tag_type != s.tag:
            # e.g. a tagged but malformed step: the reward side files it under 'none'
            reward_class = f'<div style="color:{_MUTED}; font-size:11px;">reward class: {_e(s.tag_type)}</div>'
        reasoning = f"<i>{_e(s.reasoning)}</i>" if s.reasoning else f'<span style="color:{_MUTED}">—</span>'
        extras = []
        if s.plan and s.plan == s.reasoning:
            extras.append(f'<div style="color:{TAG_COLORS["planning"]}; font-size:11px;">→ becomes the plan</div>')
        elif s.plan:
            extras.append(f'<div style="margin-top:3px; padding-left:6px; border-left:3px solid {TAG_COLORS["planning"]};">'
                          f"new plan: {_e(s.plan)}</div>")
        if show_output and s.output:
            extras.append(f'<details><summary style="color:{_MUTED}">raw output</summary>'
                          f'<pre style="white-space:pre-wrap; margin:2px 0;">{_e(s.output)}</pre></details>')
        if show_admissible and s.admissible_actions:
            extras.append(f'<details><summary style="color:{_MUTED}">{len(s.admissible_actions)} admissible</summary>'
                          f'<div style="{_MONO} font-size:11px;">{_e(", ".join(s.admissible_actions))}</div></details>')
        action = _e(s.action) if s.action else f'<span style="color:{_MUTED}">(empty)</span>'
        feedback = _e(_clip(s.feedback, feedback_chars)) if s.feedback.strip() else f'<span style="color:{_MUTED}">—</span>'
        rows.append(
            f'<tr style="{bg}">'
            f'<td style="{cell} {_MONO}">{s.t}</td>'
            f"<td style=\"{cell}\">{tag_chip(s.tag)}{reward_class}</td>"
            f'<td style="{cell} max-width:320px;">{reasoning}{"".join(extras)}</td>'
            f'<td style="{cell}"><span style="{_MONO}">{action}</span>'
            f'<div style="font-size:11px;">{_marks(s, rep)}</div></td>'
            f'<td style="{cell} max-width:300px;">{feedback}</td>'
            f'<td style="{cell} white-space:nowrap;">{_number(s.mr_reward)}</td>'
            f'<td style="{cell} white-space:nowrap;">{_number(s.advantage, scale)}</td>'
            "</tr>"
        )
    first = episode.steps[0].observation.strip() if episode.steps else ""
    observation = ""
    if show_observation and first:
        observation = (f'<details style="margin:4px 0;"><summary style="color:{_MUTED}">first observation</summary>'
                       f'<div style="white-space:pre-wrap;">{_e(first)}</div></details>')
    top = f'<div style="font-weight:600; margin-bottom:2px;">{_e(title)}</div>' if title else ""
    return (f'<div style="{_FONT} margin:8px 0 14px 0;">{top}<div>{_header(episode)}</div>{observation}'
            f'<table style="border-collapse:collapse; margin-top:4px;"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def legend_html() -> str:
    """The tag colours and marks used by `episode_html`, as one line."""
    chips = " ".join(tag_chip(t) for t in TAG_COLORS)
    return (f'<div style="{_FONT} color:#444;">{chips} · <span style="color:{_GOOD}">✓ format</span> valid output · '
            f'<span style="color:{_BAD}">✗</span> malformed / not admissible · <span style="color:{_BAD}">↻</span> '
            f"meaningless repeat · r<sub>MR</sub> meta-reasoning reward · A advantage · "
            f'<span style="background:{_HIGHLIGHT}">&nbsp;shaded&nbsp;</span> steps of a found pattern</div>')


def group_html(episodes: Sequence[Episode], **kwargs: Any) -> str:
    """A legend and every episode of a group (keyword arguments go to `episode_html`)."""
    return legend_html() + "".join(episode_html(ep, **kwargs) for ep in episodes)


def matches_html(matches: Sequence[Loop | Recovery], limit: int | None = 20) -> str:
    """A table of found loops or recoveries (episode, steps, what happened, source file)."""
    if not matches:
        return f'<div style="{_FONT} color:{_MUTED}">no matches</div>'
    cell = "padding:3px 8px; border-top:1px solid #e5e5e5; text-align:left; vertical-align:top;"
    rows = []
    for m in list(matches)[:limit]:
        what = (f"{_e(m.action)} × {m.repeats} → {_e(m.feedback)}" if isinstance(m, Loop)
                else f"{_e(m.failed_action)} ({_e(m.failure)}) → {tag_chip('reflection')} {_e(m.new_action)}"
                f" · {'won' if m.won else 'progress' if m.progress else 'no progress'}")
        steps = f"{m.steps[0]}–{m.steps[-1]}"
        rows.append(f'<tr><td style="{cell}">{_e(m.episode.episode_id or m.episode.task_id)}</td>'
                    f'<td style="{cell} {_MONO}">{steps}</td><td style="{cell}">{what}</td>'
                    f'<td style="{cell} color:{_MUTED}">{_e(m.source)}</td></tr>')
    more = "" if limit is None or len(matches) <= limit else f"<div>… and {len(matches) - limit} more</div>"
    head = "".join(f'<th style="{cell}">{h}</th>' for h in ("episode", "t", "pattern", "file"))
    return f'<div style="{_FONT}"><table style="border-collapse:collapse;">{head}{"".join(rows)}</table>{more}</div>'


def _display(markup: str) -> Any:
    try:
        from IPython.display import HTML
    except ImportError:  # plain Python: the caller gets the markup itself
        return markup
    return HTML(markup)


def display_episode(episode: Episode, **kwargs: Any) -> Any:
    """`episode_html` wrapped in an IPython ``HTML`` object (the markup string without IPython).

    Make it the last expression of a cell, or pass it to ``IPython.display.display``.
    """
    return _display(legend_html() + episode_html(episode, **kwargs))


def display_group(episodes: Sequence[Episode], **kwargs: Any) -> Any:
    """`group_html` wrapped like `display_episode`."""
    return _display(group_html(episodes, **kwargs))


def save_html(path: str | os.PathLike, body: str, title: str = "RLVMR case studies") -> Path:
    """Write HTML fragments as one standalone page (UTF-8) and return its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'<!doctype html><html><head><meta charset="utf-8"><title>{_e(title)}</title></head>'
                    f"<body>{body}</body></html>\n", encoding="utf-8")
    return path
