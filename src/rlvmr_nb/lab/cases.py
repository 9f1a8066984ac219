"""Case studies of the lab's evaluation episodes, found by the package's own search (`casestudy`).

The paper argues with two transcripts (paper §2.2, §4.2): a GRPO agent looping on one command while the
world answers "Nothing happens.", and an RLVMR agent that recovers from a failed step through a
``<reflection>``. Here `casestudy.search_runs` looks for the same two patterns in each arm's evaluation
episodes and counts them per arm; the page shows the longest loop of the run's comparison arm b next to the
best recovery (won first, then progress) of its arm a (`LabConfig.comparison`, a − b: by default the paper's pair,
GRPO's loop beside RLVMR's recovery; ('spark_mr', 'rlvmr') shows RLVMR's loop beside SPARK-MR's recovery).
Nothing is hand-picked: if a pattern does not occur, the page says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from ..casestudy import episode_html, legend_html, search_runs
from .config import LabConfig
from .layout import arm_label


def find_cases(out: str | os.PathLike, arms: Sequence[str], min_repeats: int = 3) -> dict[str, Any]:
    """Per arm: the `casestudy.PatternSearch` over its evaluation episodes (all seeds and levels)."""
    return {arm: search_runs(sorted((Path(out) / "eval").glob(f"{arm.replace(' ', '_')}-seed*")),
                             min_repeats=min_repeats) for arm in arms}


def pattern_counts(found: dict[str, Any]) -> list[dict[str, Any]]:
    """Loops and reflection recoveries per arm, per 100 evaluation episodes."""
    return [{"arm": arm_label(arm), "episodes": s.episodes, "loops": len(s.loops), "recoveries": len(s.recoveries),
             "loops_per_100": 100 * len(s.loops) / max(1, s.episodes),
             "recoveries_per_100": 100 * len(s.recoveries) / max(1, s.episodes)} for arm, s in found.items()]


def case_study_html(found: dict[str, Any], comparison: Sequence[str] = LabConfig.comparison) -> str:
    """The page: pattern counts, then the longest loop of the `comparison`'s arm b beside the best recovery of its
    arm a (`LabConfig.comparison`, a − b: the arm the claim expects to loop beside the one expected to recover)."""
    recovery_arm, loop_arm = comparison
    counts = pattern_counts(found)
    table = "".join(f"<tr><td>{c['arm']}</td><td>{c['episodes']}</td><td>{c['loops']}</td><td>{c['recoveries']}</td></tr>"
                    for c in counts)
    parts = ["<h3>Loops and reflection recoveries in the evaluation episodes</h3>",
             "<table><tr><th>arm</th><th>episodes</th><th>loops (≥3 stalled repeats)</th>"
             f"<th>reflection recoveries</th></tr>{table}</table>", legend_html()]
    loops = sorted(found[loop_arm].loops, key=lambda m: -m.repeats) if loop_arm in found else []
    recoveries = sorted(found[recovery_arm].recoveries, key=lambda m: (not m.won, not m.progress)) \
        if recovery_arm in found else []
    cells = []
    if loops:
        m = loops[0]
        cells.append(episode_html(m.episode, highlight=m.steps, title=f"{arm_label(loop_arm)} loop: {m.describe()}"))
    else:
        cells.append(f"<p>No {arm_label(loop_arm)} loop of 3 or more stalled repeats was found.</p>")
    if recoveries:
        m = recoveries[0]
        cells.append(episode_html(m.episode, highlight=m.steps,
                                  title=f"{arm_label(recovery_arm)} recovery: {m.describe()}"))
    else:
        cells.append(f"<p>No {arm_label(recovery_arm)} recovery through &lt;reflection&gt; was found.</p>")
    parts.append('<div style="display:flex; gap:16px; align-items:flex-start;">'
                 + "".join(f'<div style="flex:1; min-width:0;">{c}</div>' for c in cells) + "</div>")
    return "\n".join(parts)
