"""One iteration of a training configuration at its real shape, played on a CPU by a scripted stand-in policy.

The trainer's pieces, at the configuration's size: the tasks iteration 0 draws (`trainer.iteration_rng`), the real
worlds through the env registry and its slots (in-process or `env_workers` processes), `rollout.run_rollouts` with
its prompt renderer and token budget, the scoring stage and the step samples (`scoring.score_episodes`,
`update.samples.episodes_to_samples`). Only the policy is replaced: a `ScriptedGenerator` whose `ScriptedPlayer`
writes, for every live episode, a well-formed step (`generation.scripted.write_step`: one reasoning block in the
configuration's prompt style, then ``<action>…</action>``) of a drawn length (`ResponseLengths`), choosing a
uniformly random admissible action that is never a commitment action of the world (`EnvSpec.commitment_actions`:
ScienceWorld's 'focus on', which ends an episode when wrong). Episodes therefore run to the horizon unless a random
walk wins: the longest prompts and the most work a configuration can produce, an upper bound for planning.

Each player decision is drawn from its own stream, seeded by (seed, slot, step), so playing the iteration in waves
of fewer tasks (worlds whose slots are heavy: one ScienceWorld JVM each) yields the same episodes as one wave.
"""

from __future__ import annotations

import os
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..envs.base import Reset, StepResult, TaskSpec
from ..envs.registry import EnvSpec, get_env
from ..envs.slots import env_worker_count, make_env_slots
from ..records import Episode
from ..rollout.generation.base import Prompt, SamplingConfig
from ..rollout.generation.scripted import ResponseLengths, ScriptedGenerator, write_step
from ..rollout.loop import run_rollouts
from ..rollout.prompts import PromptTruncationWarning
from ..scoring.scored import score_episodes
from ..train_config import TrainConfig
from ..trainer import iteration_rng
from ..update.samples import episodes_to_samples

LATER_TAGS = (("monitor", 0.4), ("explore", 0.3), ("reflection", 0.2), ("planning", 0.1))
"""The meta-think player's tag after its first step (which plans): an arbitrary mix of the four (paper §3.2); a
planning block becomes the plan line of every later prompt (docs/method.md, 'Plan memory')."""
EOS_MARGIN = 8
"""A scripted response stays this many tokens under the budget, so it ends with EOS and is never cut."""
MEMORY_SHARE = 0.5
"""Share of the machine's available memory the heavy slots of one wave may take (`wave_size`)."""


class Clock(dict):
    """Seconds per phase, summed over the iteration."""

    def add(self, phase: str, seconds: float) -> None:
        self[phase] = self.get(phase, 0.0) + seconds


class WatchedSlots:
    """The rollout's `EnvSlots`, timed, remembering the live slots' latest results: the rollout prompts exactly
    those, in slot order, at its next generate call (`run_rollouts` drops a slot once it is done, aborted or faulty,
    and steps every other)."""

    def __init__(self, inner: Any, clock: Clock) -> None:
        self.inner, self.clock = inner, clock
        self.live: dict[int, Reset | StepResult] = {}
        self.steps: dict[int, int] = {}

    def reset(self, tasks: Sequence[TaskSpec]) -> list[Any]:
        t0 = time.perf_counter()
        results = self.inner.reset(tasks)
        self.clock.add("env_reset_s", time.perf_counter() - t0)
        self.live = {slot: r for slot, r in enumerate(results) if isinstance(r, Reset)}
        self.steps = {slot: 0 for slot in self.live}
        return results

    def step(self, actions: Mapping[int, str]) -> Mapping[int, Any]:
        t0 = time.perf_counter()
        results = self.inner.step(actions)
        self.clock.add("env_step_s", time.perf_counter() - t0)
        self.live = {slot: r for slot, r in results.items() if isinstance(r, StepResult) and not r.done}
        for slot in actions:
            self.steps[slot] += 1
        return results

    def fork_slots(self, forks: Mapping[int, int]) -> dict[int, Any]:
        """Branching rollouts (`rollout.branching`): each destination slot stands where its source stands, live
        from there with the source's step count. A fork replays its prefix in the engine, so its time is env
        stepping."""
        t0 = time.perf_counter()
        results = self.inner.fork_slots(forks)
        self.clock.add("env_step_s", time.perf_counter() - t0)
        for dst, src in forks.items():
            self.live[dst] = results[dst]
            self.steps[dst] = self.steps.get(src, 0)
        return results


class ScriptedPlayer:
    """Writes the scripted responses of the live slots of the `WatchedSlots` it watches (module docstring)."""

    def __init__(self, tokenizer: Any, style: str, lengths: ResponseLengths, seed: int, avoid: tuple[str, ...],
                 clock: Clock) -> None:
        self.tokenizer, self.style, self.lengths, self.seed, self.avoid = tokenizer, style, lengths, seed, avoid
        self.clock = clock
        self.slots: WatchedSlots | None = None
        self.offset = 0

    def watch(self, slots: WatchedSlots, offset: int) -> None:
        """Play the slots of one wave, whose slot 0 is slot `offset` of the whole iteration."""
        self.slots, self.offset = slots, offset

    def respond(self, prompts: Sequence[Prompt], sampling: SamplingConfig) -> list[str]:
        live = sorted(self.slots.live.items())
        if len(live) != len(prompts):
            raise RuntimeError(f"the scripted player holds {len(live)} live slots for {len(prompts)} prompts")
        texts = []
        for slot, result in live:
            t = self.slots.steps[slot]
            rng = random.Random(f"{self.seed}:{self.offset + slot}:{t}")
            t0 = time.perf_counter()
            actions = list(result.admissible_actions)  # ScienceWorld: the lazy list's one read (the rollout reads it too)
            self.clock.add("admissible_lists_s", time.perf_counter() - t0)
            allowed = [a for a in actions if not a.startswith(self.avoid)] or actions
            action = rng.choice(allowed) if allowed else "look"
            tokens = self.lengths.draw(rng, max(1, sampling.max_new_tokens - EOS_MARGIN))
            tag = "planning" if t == 0 else rng.choices([k for k, _ in LATER_TAGS], [w for _, w in LATER_TAGS])[0]
            texts.append(write_step(self.tokenizer, self.style, action, tokens, tag))
        return texts


def available_memory_mib() -> float | None:
    """MemAvailable of /proc/meminfo (None where there is none)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def wave_size(spec: EnvSpec, tasks: int, group_size: int, available_mib: float | None) -> int:
    """Tasks whose G slots play at once: all of them, unless the world's slots are heavy
    (`EnvSpec.slot_rss_mib`) and together would take more than `MEMORY_SHARE` of the available memory."""
    if spec.slot_rss_mib is None or available_mib is None:
        return tasks
    return max(1, min(tasks, int(MEMORY_SHARE * available_mib / (group_size * spec.slot_rss_mib))))


@dataclass
class Played:
    """What one rehearsed iteration produced."""

    tasks: list[TaskSpec]
    episodes: list[Episode]
    """Task-major, G per task, as `run_rollouts` returns them."""
    samples: list[tuple[int, int]]
    """(prompt tokens, response tokens) of every step sample the update would train on."""
    waves: list[int]
    """Tasks per wave."""
    truncated_prompts: int
    """Prompts whose oldest history the token budget dropped (`prompts.PromptTruncationWarning`)."""
    seconds: dict[str, float] = field(default_factory=dict)


def play_iteration(config: TrainConfig, tokenizer: Any, lengths: ResponseLengths, wave_tasks: int | None = None,
                   progress: bool = False) -> Played:
    """Play iteration 0 of `config` (module docstring); `wave_tasks`: tasks per wave (None: `wave_size`)."""
    rollout, G = config.rollout_for_run, config.rollout.group_size
    spec = get_env(rollout.env)
    pool = spec.tasks("train", rollout.level)
    if not pool:
        raise ValueError(f"empty training task pool for {rollout.env} {rollout.level}")
    batch = iteration_rng(config.seed, 0, "tasks").sample(pool, min(config.run.tasks_per_iteration, len(pool)))
    per_wave = wave_tasks or wave_size(spec, len(batch), G, available_memory_mib())
    clock = Clock()
    started = time.perf_counter()
    # played on this CPU: 'auto' takes its cores, None (a GPU's default) steps in-process here
    inner = make_env_slots(rollout.env, env_worker_count(rollout.env_workers, per_wave * G, on_cuda=False))
    clock.add("env_setup_s", time.perf_counter() - started)
    player = ScriptedPlayer(tokenizer, rollout.prompt_style, lengths, config.seed, spec.commitment_actions, clock)
    generator = ScriptedGenerator(tokenizer, player.respond)
    episodes: list[Episode] = []
    waves = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PromptTruncationWarning)
            for start in range(0, len(batch), per_wave):
                wave = batch[start:start + per_wave]
                watched = WatchedSlots(inner, clock)
                player.watch(watched, start * G)
                t0 = time.perf_counter()
                episodes += run_rollouts(wave, watched, generator, tokenizer, rollout, seed=config.seed, iteration=0,
                                         group_indices=list(range(start, start + len(wave))), progress=progress)
                clock.add("rollout_wall_s", time.perf_counter() - t0)
                waves.append(len(wave))
                print(f"[rehearse] wave {len(waves)}/{-(-len(batch) // per_wave)}: {len(wave)} tasks x {G} rollouts in "
                      f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        if hasattr(inner, "close"):
            inner.close()
    for w in caught:
        if not issubclass(w.category, PromptTruncationWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    t0 = time.perf_counter()
    samples = episodes_to_samples(score_episodes(episodes, config.method))
    clock.add("scoring_and_samples_s", time.perf_counter() - t0)
    clock.add("wall_s", time.perf_counter() - started)
    clock["tokenising_s"] = generator.seconds
    clock["scripting_s"] = generator.respond_seconds - clock.get("admissible_lists_s", 0.0)
    clock["render_and_loop_s"] = clock["rollout_wall_s"] - sum(
        clock.get(k, 0.0) for k in ("env_reset_s", "env_step_s", "admissible_lists_s", "scripting_s", "tokenising_s"))
    return Played(batch, episodes, [(len(s.prompt_ids), len(s.response_ids)) for s in samples], waves,
                  sum(issubclass(w.category, PromptTruncationWarning) for w in caught),
                  {k: round(v, 2) for k, v in clock.items()})


def cpu_count() -> int:
    """Cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
