"""Parse one model output into (tag, reasoning, action, new plan, validity) — paper §3.2;
docs/method.md, 'Output format', 'Validity rules' and 'Plan memory'.

Two validity modes:

* ``"strict"`` — the official ALFWorld rules (docs/method.md, 'Validity rules'): no CJK character; exactly one
  ``<action>…</action>`` block; exactly one meta-reasoning block in total, non-empty after removing
  inner XML tags, and placed before the first ``<action>``.
* ``"lenient"`` — paper App. A.2 and the official ScienceWorld rules: at least one meta-reasoning
  tag pair and one action, no CJK. The action is the text between the first ``<action>`` and the
  first ``</action>``.
* ``"think"`` — the outcome-only baselines (GRPO/GiGPO, ReAct; docs/method.md, 'Baselines'): exactly one
  non-empty ``<think>…</think>`` before exactly one ``<action>…</action>``, no CJK. No meta tag.

`parse_output` never raises: any string (or even a non-string) yields a `ParsedOutput`.

The official reward code extracts actions with a non-DOTALL regex, so a multi-line
``<action>\\n…\\n</action>`` matches nothing (digitalhuman#14). We extract with DOTALL and strip;
the buggy extraction is available only through ``official_regex_bug=True`` for ablations.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

META_TAGS: tuple[str, ...] = ("planning", "explore", "reflection", "monitor")
"""The four meta-reasoning tags of RLVMR (paper §3.2)."""

MODES: tuple[str, ...] = ("strict", "lenient", "think")

_CJK = re.compile("[\u4e00-\u9fff]")
_ACTION_BLOCK = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)
_ACTION_BLOCK_NO_DOTALL = re.compile(r"<action>(.*?)</action>")  # the official reward-side regex
_ACTION_OPEN = re.compile(r"<action>", re.IGNORECASE)
_META_BLOCK = re.compile(r"<(planning|explore|reflection|monitor)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)
_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.IGNORECASE | re.DOTALL)
_TAG_BLOCKS = {t: re.compile(rf"<{t}>(.*?)</{t}>", re.IGNORECASE | re.DOTALL) for t in META_TAGS}
"""One pattern per tag: the official ALFWorld check counts each tag on its own, so a tag nested inside
another counts too (``<planning><explore>x</explore></planning>`` holds two tags)."""
_INNER_XML = re.compile(r"<[^<>]*>")
_ACTION_NAMES, _META_NAMES, _THINK_NAMES = ("action",), META_TAGS, ("think",)
_LENIENT_FALLBACK_CHARS = 20  # official ScienceWorld: with no action tags, the last 20 chars are sent


@dataclass(frozen=True)
class ParsedOutput:
    """Everything the rollout, rewards and metrics need from one model output."""

    tag: str | None
    """The meta-reasoning tag ('planning', 'explore', 'reflection', 'monitor'), or None if none found.
    With several tags (lenient mode) the first one in the text."""
    reasoning: str
    """Stripped text inside that tag (inner XML removed)."""
    action: str
    """The action string to send to the environment (sent even when invalid: docs/method.md, 'Validity rules')."""
    plan: str | None
    """New plan from a ``<planning>`` block, or None to keep the current plan (docs/method.md, 'Plan memory')."""
    valid: bool
    """Format validity under the chosen mode."""
    invalid_reasons: tuple[str, ...] = field(default_factory=tuple)
    """Machine-readable reasons (e.g. 'no_action', 'multiple_tags', 'cjk')."""
    actions: tuple[str, ...] = field(default_factory=tuple)
    """All action blocks, as compared by the explore and reflection rules (docs/method.md, 'Meta-reasoning rewards')."""
    mode: str = "strict"


def has_cjk(text: str) -> bool:
    """True if `text` has a CJK unified ideograph (U+4E00–U+9FFF), which invalidates an output (docs/method.md,
    'Validity rules')."""
    return bool(_CJK.search(text))


def extract_action_list(text: str, official_regex_bug: bool = False) -> tuple[str, ...]:
    """Action blocks as the MR rewards compare them (paper §3.4.1; docs/method.md, 'Meta-reasoning rewards').

    Default: case-insensitive, multi-line, whitespace-stripped. With ``official_regex_bug=True``:
    the official extraction — case-sensitive, no DOTALL, unstripped — under which every multi-line
    action yields an empty list, so all such steps compare equal (digitalhuman#14).
    """
    if not isinstance(text, str):
        return ()
    if official_regex_bug:
        return tuple(m.group(1) for m in find_blocks(_ACTION_BLOCK_NO_DOTALL, _ACTION_NAMES, text))
    return tuple(m.group(1).strip() for m in find_blocks(_ACTION_BLOCK, _ACTION_NAMES, text))


def find_blocks(block: re.Pattern, names: tuple[str, ...], text: str) -> list[re.Match]:
    """``list(block.finditer(text))`` for a ``<name>(.*?)</name>`` pattern, in time linear in ``len(text)``.

    `block` opens with ``<(name1|name2|...)>`` (the alternatives are `names`; one name needs no group) and
    closes with the same name, literally or as ``</\\1>``. The regex engine alone retries the lazy ``(.*?)``
    from every opening tag to the end of the text, so a degenerate output full of unclosed tags costs
    quadratic time (62 KiB took 4 s). Here an opening tag is tried only while a closing tag of its name
    still follows it: a name with no closing tag left is dropped from the search, and a failed try rules
    out every later opening tag that needs the same closing text (without DOTALL: every later one before
    the line of the next closing tag). The matches themselves come from `block`, so spans, groups and
    case rules are exactly the regex's.
    """
    flags = block.flags & re.IGNORECASE
    dotall = bool(block.flags & re.DOTALL)
    live = list(names)
    next_close: dict[str, int] = {}
    dead: dict[str, str] = {}  # lower-cased tag name -> a spelling whose try failed; its case variants fail too
    matches: list[re.Match] = []
    pos = 0
    while live:
        opening = _opening_tags(tuple(live), tuple(sorted(dead.values())), flags).search(text, pos)
        if opening is None:
            break
        name = live[opening.lastindex - 1]
        if next_close.get(name, -1) < opening.end():
            close = re.compile(f"</{name}>", flags).search(text, opening.end())
            if close is None:
                live.remove(name)  # no later opening tag of this name can close either
                pos = opening.end()
                continue
            next_close[name] = close.start()
        spelling = opening.group(opening.lastindex)
        match = None if spelling.lower() in dead else block.match(text, opening.start())
        if match is not None:
            matches.append(match)
            pos = match.end()
        elif dotall:  # only closing tags of another case class lie ahead ('</plannıng>' for '<planning>')
            dead.setdefault(spelling.lower(), spelling)
            pos = opening.end()
        else:  # the block must close on its own line: skip to the line holding the next closing tag
            pos = max(opening.end(), text.rfind("\n", 0, next_close[name]) + 1)
    return matches


@functools.lru_cache(maxsize=256)
def _opening_tags(names: tuple[str, ...], dead: tuple[str, ...], flags: int) -> re.Pattern:
    """``<name>`` for any of `names` (group i+1 for names[i]), except the case variants of the `dead` tags.

    A dead tag's variants are spelt with ASCII case pairs and its other characters exact: those are the
    spellings with the same ``str.lower()``, which ``</\\1>`` treats alike (``İ`` and ``ı`` stay apart).
    """
    variants = ["".join(f"[{c.lower()}{c.upper()}]" if c.isascii() and c.isalpha() else re.escape(c) for c in tag)
                for tag in dead]
    exclude = f"(?!(?-i:{'|'.join(variants)})>)" if variants else ""
    return re.compile("<" + exclude + "(?:" + "|".join(f"({n})" for n in names) + ")>", flags)


def _clean_inner(text: str) -> str:
    return _INNER_XML.sub("", text).strip()


def _one_block_then_action(
    text: str, block: re.Pattern, names: tuple[str, ...], kind: str
) -> tuple[list[re.Match], str, str, list[str]]:
    """The rule strict and think modes share: exactly one non-empty `block` before exactly one action,
    no CJK. Returns the block matches, the first block's cleaned text, the action and the reasons
    (named after `kind`: no_tag / multiple_tags / empty_tag / tag_after_action, or ..._think...)."""
    reasons: list[str] = []
    if has_cjk(text):
        reasons.append("cjk")
    actions = [m.group(1) for m in find_blocks(_ACTION_BLOCK, _ACTION_NAMES, text)]
    action = actions[0].strip() if len(actions) == 1 else ""  # ALFWorld answers "Nothing happens." to ""
    if len(actions) != 1:
        reasons.append("no_action" if not actions else "multiple_actions")
    blocks = find_blocks(block, names, text)
    reasoning = _clean_inner(blocks[0].group(blocks[0].lastindex)) if blocks else ""
    if not blocks:
        reasons.append(f"no_{kind}")
    elif len(blocks) > 1:
        reasons.append(f"multiple_{kind}s")
    else:
        if not reasoning:
            reasons.append(f"empty_{kind}")
        first_action = _ACTION_OPEN.search(text)
        if first_action is not None and blocks[0].start() > first_action.start():
            reasons.append(f"{kind}_after_action")
    return blocks, reasoning, action, reasons


def _parse_strict(text: str) -> tuple[str | None, str, str, str | None, list[str]]:
    metas, reasoning, action, reasons = _one_block_then_action(text, _META_BLOCK, _META_NAMES, "tag")
    tag = metas[0].group(1).lower() if metas else None
    # Nested tags: the official check counts each tag on its own, so a block of another tag that opens inside
    # the one outer block found counts too. Blocks cannot open earlier (the scan would have found them first),
    # so only the text from the outer block on is searched.
    tail = text[metas[0].start():] if len(metas) == 1 else ""
    inner = {t: find_blocks(_TAG_BLOCKS[t], (t,), tail) for t in META_TAGS if t != tag} if tail else {}
    if any(inner.values()):
        reasons.append("multiple_tags")
    plan = None
    planning = [m.group(2) for m in metas if m.group(1).lower() == "planning"] + [
        m.group(1) for m in inner.get("planning", [])]
    for content in planning:  # the plan side-output ignores validity (docs/method.md, 'Validity rules')
        if _clean_inner(content):
            plan = _clean_inner(content)
            break
    return tag, reasoning, action, plan, reasons


def _parse_think(text: str) -> tuple[str | None, str, str, str | None, list[str]]:
    _, reasoning, action, reasons = _one_block_then_action(text, _THINK_BLOCK, _THINK_NAMES, "think")
    return None, reasoning, action, None, reasons


def _parse_lenient(text: str) -> tuple[str | None, str, str, str | None, list[str]]:
    reasons: list[str] = []
    start, end = text.find("<action>"), text.find("</action>")
    if start == -1 or end == -1 or end < start + len("<action>"):
        reasons.append("no_action")
        action = text[-_LENIENT_FALLBACK_CHARS:].strip()
    else:
        action = text[start + len("<action>") : end].strip()
    present = [(text.find(f"<{t}>"), t) for t in META_TAGS if f"<{t}>" in text and f"</{t}>" in text]
    tag, reasoning = None, ""
    if not present:
        reasons.append("no_tag")
    else:
        _, tag = min(present)
        a, b = text.find(f"<{tag}>") + len(tag) + 2, text.find(f"</{tag}>")
        reasoning = _clean_inner(text[a:b]) if b >= a else ""
    if has_cjk(text):
        reasons.append("cjk")
    plan = None
    a, b = text.find("<planning>"), text.find("</planning>")
    if a != -1 and b != -1 and b >= a + len("<planning>"):
        # Unlike strict mode, an empty block sets the plan to '' (official ScienceWorld manager; docs/method.md,
        # 'Plan memory').
        plan = text[a + len("<planning>") : b].strip()
    return tag, reasoning, action, plan, reasons


def parse_output(text: object, mode: str = "strict", official_regex_bug: bool = False) -> ParsedOutput:
    """Parse one model output (docs/method.md, 'Validity rules'). Total: never raises, whatever `text` is.

    Args:
        text: the raw model output.
        mode: ``"strict"`` (official ALFWorld, the default), ``"lenient"`` (paper App. A.2 / ScienceWorld)
            or ``"think"`` (``<think>`` + ``<action>``, the GRPO/GiGPO/ReAct baselines).
        official_regex_bug: reproduce the official non-DOTALL reward-side action extraction in
            `ParsedOutput.actions` (ablations only; digitalhuman#14).
    """
    if mode not in MODES:
        raise ValueError(f"unknown parser mode {mode!r}; choose one of {MODES}")
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if mode == "strict":
        tag, reasoning, action, plan, reasons = _parse_strict(text)
    elif mode == "think":
        tag, reasoning, action, plan, reasons = _parse_think(text)
    else:
        tag, reasoning, action, plan, reasons = _parse_lenient(text)
    return ParsedOutput(
        tag=tag,
        reasoning=reasoning,
        action=action,
        plan=plan,
        valid=not reasons,
        invalid_reasons=tuple(reasons),
        actions=extract_action_list(text, official_regex_bug),
        mode=mode,
    )


def tag_class(text: str) -> str:
    """The tag class of an output, the one name the package gives it (the rewards pay by it and the meta-reasoning
    advantage groups by it; paper §3.4.1, docs/method.md, 'Meta-reasoning rewards'): substring precedence planning >
    explore > reflection > monitor, and 'none' for an output with no opening tag.

    This mirrors the official code, which checks for the opening tag as a substring; for
    strict-valid outputs (exactly one tag) it agrees with `ParsedOutput.tag`.
    """
    if not isinstance(text, str):
        return "none"
    for t in ("planning", "explore", "reflection", "monitor"):
        if f"<{t}>" in text:
            return t
    return "none"


def format_step(tag: str, reasoning: str, action: str) -> str:
    """Render a well-formed step output, the cold-start target shape (paper §3.2; docs/method.md, 'Output format'):
    ``<tag>reasoning</tag>\\n<action>action</action>\\n``."""
    if tag not in META_TAGS:
        raise ValueError(f"unknown meta-reasoning tag {tag!r}; choose one of {META_TAGS}")
    return f"<{tag}>{reasoning}</{tag}>\n<action>{action}</action>\n"
