"""What a training run will cost on a CPU, said before it starts.

The run's shape gives its response budget, iterations × B tasks × G rollouts × T steps × max_new_tokens (the
official scripts': 100 × 16 × 8 × 30 × 1024). One measured rate turns it into time: an RLVMR iteration of the CPU demo's shape
(configs/demo/02_rl_training.json: 1 task × 4 rollouts × 3 steps × 96 tokens, a budget of 1,152 tokens;
SmolLM2-135M-Instruct, hf backend, 2 cores) took 105.28 s on average, sampling, log-probs and update together
(benchmarks/results/rollout_backends.json, ``summary.mean.hf.iteration_s``): 0.091 s per token of budget.

The estimate is an upper bound for a model of that size (episodes that end early and responses that stop before the
budget cost less; the demo's used 95 % of theirs) and a lower bound for a larger one (a 1.5B model computes about
eleven times more per token). Validation games and model loading are left out. A CPU run whose estimate exceeds
`SLOW_RUN_HOURS` does not start unless asked to (``rlvmr-nb train --allow-slow``): a bare ``rlvmr-nb train`` is the
paper's shape, which a CPU would take over a year to run.
"""

from __future__ import annotations

from typing import Any

from .progress import duration

MEASURED_ITERATION_S = 105.28
"""Mean seconds of one iteration at the demo's shape, hf backend (benchmarks/results/rollout_backends.json)."""
MEASURED_BUDGET_TOKENS = 1 * 4 * 3 * 96
"""That shape's response budget: B 1 × G 4 × T 3 × 96 tokens."""
CPU_SECONDS_PER_TOKEN = MEASURED_ITERATION_S / MEASURED_BUDGET_TOKENS
"""Seconds of one whole iteration per token of response budget, on this project's 2 CPU cores."""

SLOW_RUN_HOURS = 8.0
"""Above this estimate a CPU run asks for --allow-slow: longer than a working day or a night."""


class SlowRunRefused(ValueError):
    """A CPU run whose estimate exceeds `SLOW_RUN_HOURS`, started without --allow-slow (the message says the
    estimate and the ways on)."""


def budget_tokens(rollout: Any, run: Any) -> int:
    """The most response tokens the run can sample: iterations × B × G × T × max_new_tokens."""
    return (run.iterations * run.tasks_per_iteration * rollout.group_size * rollout.max_steps
            * rollout.max_new_tokens)


def cpu_estimate(rollout: Any, run: Any) -> tuple[float, str]:
    """(seconds, one line saying them and how they were reckoned) for the run on a CPU like the measured one."""
    seconds = budget_tokens(rollout, run) * CPU_SECONDS_PER_TOKEN
    shape = (f"{run.iterations} iterations × {run.tasks_per_iteration} tasks × {rollout.group_size} rollouts × "
             f"{rollout.max_steps} steps × {rollout.max_new_tokens} tokens")
    return seconds, (f"up to {duration(seconds)} on a CPU ({shape}, at {CPU_SECONDS_PER_TOKEN:.3f} s per token "
                     "measured with SmolLM2-135M on 2 cores; a larger model takes longer)")


def check_cpu_cost(rollout: Any, run: Any, allow_slow: bool = False) -> str:
    """The estimate line of a run about to start on a CPU; raises `SlowRunRefused` when it exceeds
    `SLOW_RUN_HOURS` and `allow_slow` is not given."""
    seconds, line = cpu_estimate(rollout, run)
    if seconds > SLOW_RUN_HOURS * 3600 and not allow_slow:
        raise SlowRunRefused(f"this run would take {line}; on a GPU see docs/gpu.md, on a CPU shrink it (--iterations,"
                             " --tasks, --group-size, --max-steps, --max-new-tokens) or pass --allow-slow to start it")
    return line
