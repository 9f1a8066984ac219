"""Episodes, groups and found patterns as HTML for a notebook or a saved page.

One row per step with the tag the model wrote (coloured as in `plots.TAG_COLORS`, so tables and
figures agree), its reasoning, the action with format-validity and admissibility marks, the
environment's answer, new plans, and the reward-side numbers r_MR and advantage when
`rewards`/`advantages` have filled them. Inline styles only, so the HTML looks the same in JupyterLab,
VS Code and a saved ``.html`` file: every cell states its alignment (text left, numbers right) and
every table its width rule and left margin, since JupyterLab's own table style right-aligns cells,
fixes column widths and centres tables.

Steps are numbered from 1, as the prompt ("This is step N") and the paper's transcripts number
them: the "step" column shows `Step.t` + 1.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..scoring.metrics import repetitive_steps
from ..plots import DARK_TAGS, TAG_COLORS, tag_color
from ..records import Episode, Step, outcome_of, step_score
from .patterns import Loop, Recovery

_PAID_TAGS = ("planning", "explore", "reflection")  # tags with a verifiable reward (monitor has none, paper §3.4.1)
_HIGHLIGHT = "#fff3c4"  # the "ours" yellow of the paper tables
_GOOD, _BAD, _MUTED = "#1a7f37", "#c0392b", "#777777"
_FONT = "font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; font-size: 13px;"
_MONO = "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;"
# JupyterLab styles output tables with `table-layout: fixed; margin: auto` and right-aligned cells;
# inline styles win over its stylesheet, so each table and cell says what it needs.
_TABLE = "border-collapse:collapse; table-layout:auto; margin:4px 0 0 0; width:auto;"
_LEFT, _RIGHT = "text-align:left;", "text-align:right;"


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
    earned = step_score(s, "outcome_reward") or s.env_reward
    if earned:
        out.append(f'<span style="color:{_GOOD}">env reward {earned:+g}</span>')
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
        outcome = outcome_of(ep)
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
    adv = [abs(a) for a in (step_score(s, "advantage") for s in episode.steps) if a is not None]
    scale = max(adv) if adv else None
    cell = "padding:4px 6px; border-top:1px solid #e5e5e5; vertical-align:top;"
    columns = (("step", _RIGHT), ("tag", _LEFT), ("reasoning", _LEFT), ("action", _LEFT), ("environment", _LEFT),
               ("r<sub>MR</sub>", _RIGHT), ("A", _RIGHT))
    head = "".join(f'<th style="{cell} {align} color:#444;">{h}</th>' for h, align in columns)
    rows = []
    for s, rep in zip(episode.steps, repeats):
        bg = f" background:{_HIGHLIGHT};" if s.t in marked else ""
        reward_class = ""
        reward_tag = step_score(s, "tag_class")
        if s.tag in _PAID_TAGS and reward_tag is not None and reward_tag != s.tag:
            # e.g. a tagged but malformed step: the reward side files it under 'none'
            reward_class = f'<div style="color:{_MUTED}; font-size:11px;">reward class: {_e(reward_tag)}</div>'
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
            f'<td style="{cell} {_RIGHT} {_MONO}" title="t = {s.t}">{s.t + 1}</td>'
            f"<td style=\"{cell} {_LEFT}\">{tag_chip(s.tag)}{reward_class}</td>"
            f'<td style="{cell} {_LEFT} max-width:320px;">{reasoning}{"".join(extras)}</td>'
            f'<td style="{cell} {_LEFT}"><span style="{_MONO}">{action}</span>'
            f'<div style="font-size:11px;">{_marks(s, rep)}</div></td>'
            f'<td style="{cell} {_LEFT} max-width:300px;">{feedback}</td>'
            f'<td style="{cell} {_RIGHT} white-space:nowrap;">{_number(step_score(s, "mr_reward"))}</td>'
            f'<td style="{cell} {_RIGHT} white-space:nowrap;">{_number(step_score(s, "advantage"), scale)}</td>'
            "</tr>"
        )
    first = episode.steps[0].observation.strip() if episode.steps else ""
    observation = ""
    if show_observation and first:
        observation = (f'<details style="margin:4px 0;"><summary style="color:{_MUTED}">first observation</summary>'
                       f'<div style="white-space:pre-wrap;">{_e(first)}</div></details>')
    top = f'<div style="font-weight:600; margin-bottom:2px;">{_e(title)}</div>' if title else ""
    return (f'<div style="{_FONT} margin:8px 0 14px 0;">{top}<div>{_header(episode)}</div>{observation}'
            f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead>'
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
        steps = f"{m.steps[0] + 1}–{m.steps[-1] + 1}"  # 1-based, as the episode tables show them
        rows.append(f'<tr><td style="{cell}">{_e(m.episode.episode_id or m.episode.task_id)}</td>'
                    f'<td style="{cell} {_MONO}">{steps}</td><td style="{cell}">{what}</td>'
                    f'<td style="{cell} color:{_MUTED}">{_e(m.source)}</td></tr>')
    more = "" if limit is None or len(matches) <= limit else f"<div>… and {len(matches) - limit} more</div>"
    head = "".join(f'<th style="{cell}">{h}</th>' for h in ("episode", "steps", "pattern", "file"))
    return (f'<div style="{_FONT}"><table style="{_TABLE}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>{more}</div>')


def _display(markup: str) -> Any:
    try:
        # IPython, present only in a notebook is loaded here only: importing casestudy.html needs none of it
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
