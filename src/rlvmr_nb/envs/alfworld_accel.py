"""Opt-in accelerator for the TextWorld PDDL engine behind ALFWorld (what it memoises and why is measured in benchmarks/envs_alfworld.py).

Stock textworld 1.7.0 spends ~1 s per ``reset()`` re-translating the game's PDDL to SAS, and ~100 ms per
``step()`` re-parsing the same grammar snippets with TatSu and deep-copying derivation contexts. This
module removes that repeated work by patching five module-level functions of the engine. Each patch
returns exactly what the stock code would (argued per patch below, checked by a transcript-identity test
against the stock engine run in a separate process), so game transcripts are byte-identical.

The patches are process-global (they replace functions inside textworld / fast_downward), idempotent,
and reversible with `disable()`. `ALFWorldEnv(accelerate=True)` calls `enable()`.

Why each patch is safe:

1. ``textgen._parse_and_convert`` (grammar snippet -> list of Symbol objects): a pure function of its
   arguments (the TatSu parser has no state that outlives a parse). Callers mutate the returned symbols
   (they attach derivation contexts), so the cache keeps a pristine parse and hands out a deep copy each
   time; a parse result holds only grammar text and empty contexts, so copying it is cheap.
2. ``Rule.parse_conjunctive_query`` (condition text -> Rule): pure; its only callers (grammar conditions
   and ``{expr | query}`` symbols) pass the Rule to ``State.all_assignments``, which reads the rule's
   preconditions/placeholders and never mutates it, so one shared Rule per expression is equivalent.
3. ``fast_downward.pddl2sas`` (PDDL text -> (translated task, SAS text)): deterministic for a given
   (domain, problem, optimize); ``PddlState`` calls it twice per construction (once per reset) and then only
   reads the task (actions, types, objects, init) and passes the SAS string to the C library, which
   copies it. Sharing the result across resets of the same game is therefore equivalent. The stock function
   also overwrites ``sys.argv`` as a hack for the translator's option module; we keep setting it for the
   call (the option module parses it on first import) but restore it afterwards.
4. ``textgen.copy_context``: the stock version deep-copies the context's ``variables`` (name -> EntityInfo)
   and ``mapping`` (Placeholder -> Variable) dicts. Code downstream only *adds* keys to those dicts
   (``query`` updates them) and only reads the values: grammar ``{...}`` expressions are attribute reads
   and string concatenation (``o.name``, ``o.indefinite + ' ' + o.name``), and Placeholder/Variable are
   immutable value objects. A fresh dict per copy (shallow copy) gives the same isolation for the
   mutations that happen, without copying every EntityInfo on every symbol.
5. ``textgen.Symbol.copy(context)``: the stock version deep-copies the whole symbol, *including its current
   context* (which references the game state and fact list), then throws that copied context away and
   installs ``copy_context(context)``. We deep-copy every attribute except ``context`` (sharing one memo
   so aliasing among them is preserved) and install the same new context: the result is identical,
   minus the discarded work.
"""

from __future__ import annotations

import copy
import sys
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Callable, Iterator

_lock = threading.Lock()
_originals: dict[str, Any] = {}
"""Stock callables saved by `enable`, restored by `disable`; non-empty exactly while enabled."""


class _LRU:
    """A small bounded mapping: engine processes may run through thousands of games."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.data: OrderedDict = OrderedDict()

    def get(self, key: Any, compute: Callable[[], Any]) -> Any:
        if key in self.data:
            self.data.move_to_end(key)
            return self.data[key]
        value = compute()
        self.data[key] = value
        if len(self.data) > self.maxsize:
            self.data.popitem(last=False)
        return value


def is_enabled() -> bool:
    """Whether the accelerator patches are active in this process."""
    return bool(_originals)


def _engine_modules() -> tuple[Any, Any, Any]:
    """The three engine modules the patches replace functions of: fast-downward's, TextWorld's text generator and
    its logic `Rule`."""
    # fast-downward (built with ALFWorld) and TextWorld (the 'envs' extra) are loaded here only: importing
    # envs.alfworld_accel needs none of them
    import fast_downward
    import textworld.envs.pddl.textgen as textgen
    from textworld.logic import Rule

    return fast_downward, textgen, Rule


def enable(sas_cache_games: int = 8, parse_cache_size: int = 8192) -> None:
    """Install the patches (no-op if already installed).

    ``sas_cache_games``: how many games' PDDL->SAS translations to keep (each game needs two entries; a few MB
    each). Resetting the same game again, the common case in GRPO groups, hits the cache.
    ``parse_cache_size``: grammar snippets and queries kept; a game adds only a handful of new ones.
    """
    with _lock:
        if _originals:
            return
        fast_downward, textgen, Rule = _engine_modules()

        stock_parse = textgen._parse_and_convert
        stock_query = Rule.__dict__["parse_conjunctive_query"]  # the classmethod object itself
        stock_query_func = stock_query.__func__
        stock_pddl2sas = fast_downward.pddl2sas
        stock_copy_context = textgen.copy_context
        stock_symbol_copy = textgen.Symbol.copy

        grammar_cache = _LRU(parse_cache_size)
        query_cache = _LRU(parse_cache_size)
        sas_cache = _LRU(2 * sas_cache_games)

        def parse_and_convert(text: str, **kwargs: Any) -> Any:
            key = (text, tuple(sorted(kwargs.items())))
            pristine = grammar_cache.get(key, lambda: stock_parse(text, **kwargs))
            return copy.deepcopy(pristine)

        def parse_conjunctive_query(cls: type, expr: str) -> Any:
            return query_cache.get((cls, expr), lambda: stock_query_func(cls, expr))

        def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
            if verbose:  # debugging output was asked for: let the translator print it
                return stock_pddl2sas(domain, problem, verbose=verbose, optimize=optimize)

            def translate() -> Any:
                saved_argv = sys.argv
                try:
                    return stock_pddl2sas(domain, problem, verbose=False, optimize=optimize)
                finally:
                    sys.argv = saved_argv

            return sas_cache.get((domain, problem, bool(optimize)), translate)

        def copy_context(context: dict) -> dict:
            return {
                "state": context["state"],
                "facts": context["facts"],
                "variables": dict(context["variables"]),
                "mapping": dict(context["mapping"]),
                "entity_infos": context["entity_infos"],
            }

        def symbol_copy(self: Any, context: dict) -> Any:
            clone = object.__new__(type(self))
            memo: dict = {id(self): clone}
            for name, value in vars(self).items():
                if name != "context":
                    setattr(clone, name, copy.deepcopy(value, memo))
            clone.context = copy_context(context)
            return clone

        _originals.update(
            parse=stock_parse,
            query=stock_query,
            pddl2sas=stock_pddl2sas,
            copy_context=stock_copy_context,
            symbol_copy=stock_symbol_copy,
        )
        textgen._parse_and_convert = parse_and_convert
        Rule.parse_conjunctive_query = classmethod(parse_conjunctive_query)
        fast_downward.pddl2sas = pddl2sas
        textgen.copy_context = copy_context
        textgen.Symbol.copy = symbol_copy


def disable() -> None:
    """Restore the stock engine functions (no-op if not enabled); caches are dropped."""
    with _lock:
        if not _originals:
            return
        fast_downward, textgen, Rule = _engine_modules()

        textgen._parse_and_convert = _originals["parse"]
        Rule.parse_conjunctive_query = _originals["query"]
        fast_downward.pddl2sas = _originals["pddl2sas"]
        textgen.copy_context = _originals["copy_context"]
        textgen.Symbol.copy = _originals["symbol_copy"]
        _originals.clear()


@contextmanager
def accelerated(**kwargs: Any) -> Iterator[None]:
    """Enable the accelerator inside a ``with`` block, restoring the previous state after it."""
    was_enabled = is_enabled()
    enable(**kwargs)
    try:
        yield
    finally:
        if not was_enabled:
            disable()
