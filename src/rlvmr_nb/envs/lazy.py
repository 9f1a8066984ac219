"""`LazyActionList`: an admissible-action list that is computed only when someone reads it.

Why: ScienceWorld's valid-action list makes a step 4.6x slower (60 ms instead of 13 ms,
`benchmarks/results/envs_scienceworld.json`), and many of its users never need it: gold-path replay
and cold-start building, steps whose output holds no action, states an episode ends in, prompts that
show the action templates instead. An env therefore returns this object in `Reset.admissible_actions`
/ `StepResult.admissible_actions`; the first read (len, iteration, `in`, indexing, ==, pickling,
`dataclasses.asdict`) runs the loader once and caches the result. The `EnvPool` returns the same type,
with a loader that fetches every outstanding list from the workers at once, in parallel. The rollout
reads each state's list before it steps the env, only to check the step's action
(`rollout.read_admissibility`).

It is a read-only `Sequence[str]`, not a `list` subclass: a lazy list subclass would be read as empty
by C code that bypasses Python methods (the json encoder, `list.__add__`), silently dropping actions.
Call `list(x)` where a real list is required.

A list belongs to one environment state. Reading it after the env has moved on raises
`StaleActionsError` instead of returning the actions of a different state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, Iterator, overload


class StaleActionsError(RuntimeError):
    """The admissible list was first read after its environment had already taken another step."""


class LazyActionList(Sequence[str]):
    """A `Sequence[str]` whose contents come from `loader()` on first access (then cached)."""

    __slots__ = ("_loader", "_items")

    def __init__(self, loader: Callable[[], Sequence[str]]) -> None:
        self._loader: Callable[[], Sequence[str]] | None = loader
        self._items: list[str] | None = None

    @classmethod
    def of(cls, items: Sequence[str]) -> "LazyActionList":
        """An already-computed list (no loader call ever happens)."""
        lazy = cls(lambda: items)
        lazy._resolve()
        return lazy

    @property
    def loaded(self) -> bool:
        """Whether the list has been computed (reading this does not compute it)."""
        return self._items is not None

    def _resolve(self) -> list[str]:
        if self._items is None:
            assert self._loader is not None
            self._items = [str(a) for a in self._loader()]
            self._loader = None  # drop the env reference: a resolved list must not pin a dead env
        return self._items

    def to_list(self) -> list[str]:
        """The actions as a plain list (a copy)."""
        return list(self._resolve())

    def __len__(self) -> int:
        return len(self._resolve())

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        return self._resolve()[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolve())

    def __contains__(self, action: object) -> bool:
        return action in self._resolve()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyActionList):
            return self._resolve() == other._resolve()
        if isinstance(other, (list, tuple)):
            return self._resolve() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-by-loading, like list

    def __repr__(self) -> str:
        # Never compute in repr: printing a StepResult in a notebook must not cost a JVM call.
        if self._items is None:
            return "LazyActionList(<not computed>)"
        return f"LazyActionList({self._items!r})"

    def __reduce__(self) -> tuple[type[list], tuple[list[str]]]:
        # Pickling / deepcopy / dataclasses.asdict turn it into a plain list of the real actions.
        return (list, (self._resolve(),))


def state_bound_actions(compute: Callable[[], Sequence[str]], version: Callable[[], int], env_name: str) -> LazyActionList:
    """A lazy list of `compute()` valid only while `version()` keeps its current value.

    Envs bump a counter on every reset/step; reading the list after that raises `StaleActionsError`.
    """
    born = version()

    def load() -> Sequence[str]:
        if version() != born:
            raise StaleActionsError(
                f"{env_name}: this admissible-action list belongs to an earlier state; read it before the next "
                "step()/reset() (or construct the env with admissible='eager')"
            )
        return compute()

    return LazyActionList(load)
