"""ScienceWorld adapter on ``scienceworld==1.2.3`` (the paper's second benchmark, paper §4.1 and App. A.1).

One `ScienceWorldEnv` owns one JVM (py4j). Settings follow the official RLVMR runs: simplification
``"easy"`` and an env step limit of 100. Three engineering choices:

* **JVM heap cap.** ``JAVA_TOOL_OPTIONS="-Xmx384m -XX:+UseSerialGC"`` is put in the environment before
  the first JVM starts unless the user already set it: ~230 MiB RSS per env instead of 0.5-1 GiB, same speed.
* **Fast steps, lazy admissible list.** `step` uses the raw server calls (step, score, completed,
  moves, ~8 ms) instead of ScienceWorld's Python `step`, which always builds the full valid-action list
  (18-94 ms). `StepResult.admissible_actions` is a `LazyActionList` that builds it on first read;
  `admissible_actions()` returns the list of the current state directly (cached per state). Pass
  ``admissible="eager"`` to always compute it, or ``"none"`` to always return ``[]``.
* **Success criterion.** ``success_criterion="completed"`` (default): won iff the task is completed
  (score 100). ``"official"``: the released code's ``won = done and score > 0`` (digitalhuman#34), which
  also counts step-limit terminations with partial score (e.g. after many 10-tick ``wait`` actions).

**Deterministic engine, exact forks.** ``deterministic=True`` (default) starts the JVM with constant identity
hash codes, so what the engine answers no longer depends on what the JVM did before; each env logs the engine
calls of its episode so that `restore` can replay them (`envs.forking`; the reasons are at `restore`).

`available_actions_text()` is the per-step "Valid_actions: [...], OBJ needs to be replaced with one of
the following objects: [...]" string of the official prompt (paper App. C); it is in every `Reset`/`StepResult`
``info['available_actions']`` unless ``include_available_actions=False`` (it costs ~5 ms).

Gold trajectories for the cold start live in `rlvmr_nb.envs.scienceworld_gold`.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from py4j.protocol import Py4JError, Py4JJavaError

from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec
from rlvmr_nb.envs.forking import ForkPoint, check_point, replay, take_point
from rlvmr_nb.envs.lazy import state_bound_actions
from rlvmr_nb.envs.scienceworld_splits import (
    ENV_NAME,
    TASK_NAMES,
    parse_task_id,
    scienceworld_tasks,
)

__all__ = [
    "ScienceWorldEnv",
    "ScienceWorldCrashed",
    "JavaNotFoundError",
    "scienceworld_tasks",
]

SCIENCEWORLD_VERSION = "1.2.3"
DEFAULT_JAVA_TOOL_OPTIONS = "-Xmx384m -XX:+UseSerialGC"
DETERMINISTIC_JVM_OPTIONS = "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2"
"""HotSpot's identity hash code of every object becomes 1 (mode 2). The engine keeps objects in hash sets keyed by
identity hashes, which by default come from a per-thread generator, so a room lists its contents, and a list
read spells referents, in an order that depends on everything the JVM did before. Measured on 6 tasks, 20-step
walks with the same engine calls in two JVMs that had run other episodes before: without the flag all 6
transcripts differed somewhere (observations, info, lists); with it none did, as between two fresh JVMs. Its
cost is within this machine's noise: paired call by call with a default JVM, the median ratio is 1.08 for a
step, 0.99 for a list read and 1.07 for a load (``identity_hash_cost`` in benchmarks/results/env_forking.json;
two earlier runs: 0.94-1.10 for steps and reads, 0.99-1.22 for loads)."""
DEFAULT_SIMPLIFICATION = "easy"
DEFAULT_ENV_STEP_LIMIT = 100
SUCCESS_CRITERIA = ("completed", "official")
ADMISSIBLE_MODES = ("lazy", "eager", "none")
ACTION_EXAMPLE_SUFFIX = "\n example: <action>focus on door</action>"
"""The official prompt appends this literal example to the available-actions string (paper App. C)."""

JAVA_INSTALL_HINT = (
    "ScienceWorld runs its simulator on Java (JRE >= 11; 17 is tested) and needs `java` on PATH, but none was "
    "found. Install it, then retry: Debian/Ubuntu `sudo apt-get install -y openjdk-17-jre-headless`; "
    "macOS `brew install openjdk@17`; conda: add `openjdk=17` to your env.yml dependencies (or "
    "`conda install -c conda-forge openjdk=17`). A JDK elsewhere works if $JAVA_HOME points at it."
)


class JavaNotFoundError(FileNotFoundError):
    """No Java runtime: ScienceWorld cannot start. The message says how to install one."""


class ScienceWorldCrashed(RuntimeError):
    """The env's JVM died or stopped answering; the env is unusable and must be replaced."""


def find_java() -> str:
    """Path of the `java` executable py4j will launch; falls back to $JAVA_HOME/bin (added to PATH)."""
    java = shutil.which("java")
    if java:
        return java
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate is not None and os.access(candidate, os.X_OK):
        # py4j always launches plain `java`, so the JDK has to be on PATH, not only in JAVA_HOME.
        os.environ["PATH"] = f"{candidate.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return str(candidate)
    raise JavaNotFoundError(JAVA_INSTALL_HINT)


@contextmanager
def _java_launcher_options(extra: str) -> Iterator[None]:
    """Add `extra` to JDK_JAVA_OPTIONS, which the `java` launcher (JDK 9+) reads besides JAVA_TOOL_OPTIONS, while
    py4j starts a JVM; then put the variable back. A user's own JAVA_TOOL_OPTIONS thus still applies unchanged."""
    saved = os.environ.get("JDK_JAVA_OPTIONS")
    if extra:
        os.environ["JDK_JAVA_OPTIONS"] = f"{saved} {extra}" if saved else extra
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("JDK_JAVA_OPTIONS", None)
        else:
            os.environ["JDK_JAVA_OPTIONS"] = saved


_LOGGED_READS = ("admissible_actions", "available_actions_text", "goal_progress")
"""The env's methods, besides `step`, whose engine calls it logs for a fork to replay (see `restore`)."""


def _import_scienceworld() -> Any:
    try:
        # ScienceWorld (the 'envs' extra) is loaded here only: importing envs.scienceworld needs none of it
        import scienceworld
    except ImportError as e:
        raise ImportError(
            f"the ScienceWorld env needs the `scienceworld` package: pip install scienceworld=={SCIENCEWORLD_VERSION} "
            "(or install this project with the envs extra: pip install -e '.[envs]')"
        ) from e
    return scienceworld


def _quiet_py4j() -> None:
    # A dead JVM makes py4j log full tracebacks at ERROR for every retry; our own exception already
    # says what happened. Only quieten it when the user has not configured the logger.
    log = logging.getLogger("py4j")
    if log.level == logging.NOTSET:
        log.setLevel(logging.CRITICAL)


def process_rss_bytes(pid: int) -> int | None:
    """Resident set size of a process from /proc (Linux), or None when unavailable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def is_success(*, score: int, completed: bool, done: bool, criterion: str = "completed") -> bool:
    """Whether a ScienceWorld state counts as won (paper §3.4.1: the outcome reward).

    'completed': the task was completed (score 100). 'official': the released RLVMR code's
    ``done and score > 0`` (digitalhuman#34), true also when the move limit ends an episode with partial score.
    """
    if criterion == "completed":
        return completed and score >= 100
    if criterion == "official":
        return done and score > 0
    raise ValueError(f"success criterion must be one of {SUCCESS_CRITERIA}, got {criterion!r}")


class ScienceWorldEnv:
    """`TextEnv` over one ScienceWorld simulator (one JVM). See the module docstring for the choices.

    Not thread-safe; one env per worker process in `EnvPool`.
    """

    name = ENV_NAME

    def __init__(
        self,
        *,
        simplification: str = DEFAULT_SIMPLIFICATION,
        env_step_limit: int = DEFAULT_ENV_STEP_LIMIT,
        success_criterion: str = "completed",
        admissible: str = "lazy",
        include_available_actions: bool = True,
        deterministic: bool = True,
    ) -> None:
        if success_criterion not in SUCCESS_CRITERIA:
            raise ValueError(f"success_criterion must be one of {SUCCESS_CRITERIA}, got {success_criterion!r}")
        if admissible not in ADMISSIBLE_MODES:
            raise ValueError(f"admissible must be one of {ADMISSIBLE_MODES}, got {admissible!r}")
        if env_step_limit < 1:
            raise ValueError(f"env_step_limit must be >= 1, got {env_step_limit}")
        self.simplification = simplification
        self.env_step_limit = int(env_step_limit)
        self.success_criterion = success_criterion
        self.admissible_mode = admissible
        self.include_available_actions = include_available_actions
        self.deterministic = deterministic

        find_java()
        os.environ.setdefault("JAVA_TOOL_OPTIONS", DEFAULT_JAVA_TOOL_OPTIONS)
        _quiet_py4j()
        sw = _import_scienceworld()
        with _java_launcher_options(DETERMINISTIC_JVM_OPTIONS if deterministic else ""):
            self._sw = sw.ScienceWorldEnv("", envStepLimit=self.env_step_limit)
        self._server = self._sw.server
        self._closed = False
        self._loaded: tuple[str, int] | None = None
        self._task: TaskSpec | None = None
        self._state = 0  # bumped on every reset/step; lazy admissible lists are bound to one value
        self._admissible_cache: tuple[int, list[str]] | None = None
        self._last_score = 0
        self._max_variations: dict[str, int] = {}
        self._calls: list[tuple[str, ...]] = []  # engine calls since the last reset, in order: what a fork replays
        self._observation = ""
        self._done = False

    # ----- TextEnv -------------------------------------------------------------------------------
    def reset(self, task: TaskSpec) -> Reset:
        """Load `task` ('task-name:variation'), return the "look around" observation and the goal."""
        if task.env not in (ENV_NAME, ""):
            raise ValueError(f"task {task.task_id!r} is for env {task.env!r}, not {ENV_NAME!r}")
        name, variation = parse_task_id(task.task_id)
        limit = self.max_variations(name)
        if variation >= limit:
            raise ValueError(f"{name} has variations 0..{limit - 1}; task id {task.task_id!r} is out of range")
        with self._guard("reset"):
            if self._loaded == (name, variation):
                self._server.reset()  # same world again: cheaper than load (0.15 s vs 0.15-0.7 s)
            else:
                self._sw.load(name, variation, self.simplification, generateGoldPath=False)
                self._loaded = (name, variation)
            observation = str(self._server.step("look around"))  # what ScienceWorld's reset shows; no move used
            task_text = str(self._server.getTaskDescription())
        self._task, self._observation, self._done, self._calls = task, observation, False, []
        self._last_score = 0
        self._state += 1
        info: dict[str, Any] = {"task_name": name, "variation": variation, "score": 0, "moves": 0}
        if self.include_available_actions:
            info["available_actions"] = self._available_actions_text()
        return Reset(
            observation=observation,
            admissible_actions=self._admissible_for_state(),  # type: ignore[arg-type]  # Sequence when lazy
            task_text=task_text,
            task_type=name,
            info=info,
        )

    def step(self, action: str) -> StepResult:
        """Take one action with the raw server calls (no valid-list computation unless asked)."""
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        if self._task is None:
            raise RuntimeError("call reset(task) before step(); the env has no loaded task")
        with self._guard("step"):
            observation = str(self._server.step(action))
            score = int(round(100 * self._server.getScore()))
            completed = bool(self._server.getCompleted())
            moves = int(self._server.getNumMoves())
        self._calls.append(("step", action))
        reward = score - self._last_score
        self._last_score = score
        # Same termination rule as ScienceWorld's Python step(): completion, failure (score < 0), move limit.
        done = completed or score < 0 or moves > self.env_step_limit
        self._observation, self._done = observation, done
        won = is_success(score=score, completed=completed, done=done, criterion=self.success_criterion)
        self._state += 1
        name, variation = self._loaded or ("", -1)
        info: dict[str, Any] = {
            "task_name": name,
            "variation": variation,
            "score": score,
            "moves": moves,
            "completed": completed,
        }
        if self.include_available_actions:
            info["available_actions"] = self._available_actions_text()
        return StepResult(
            observation=observation,
            reward=float(reward),
            done=done,
            won=won,
            admissible_actions=self._admissible_for_state(),  # type: ignore[arg-type]
            info=info,
        )

    def close(self) -> None:
        """Stop the JVM (politely, then by force after 5 s). Safe to call twice."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        gateway = self._sw._gateway
        proc: subprocess.Popen = gateway.java_process
        try:
            if proc.poll() is None:
                self._sw.close()  # py4j shutdown + newline on stdin: the JVM exits on its own
            else:
                # shutting down a gateway whose JVM is gone loops through connection retries
                gateway.shutdown_callback_server()
                gateway.close()
        except Exception:  # noqa: BLE001 - best effort; the kill below is what guarantees no orphan
            pass
        finally:
            self._sw.close = lambda: None  # its __del__ would try again against a dead gateway
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def __enter__(self) -> "ScienceWorldEnv":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ----- actions -------------------------------------------------------------------------------
    def admissible_actions(self) -> list[str]:
        """All valid action strings in the current state (18-94 ms; cached until the next step)."""
        if self._admissible_cache is None or self._admissible_cache[0] != self._state:
            with self._guard("admissible_actions"):
                actions = [str(a) for a in self._server.getValidActionObjectCombinations()]
            self._calls.append(("admissible_actions",))  # the read draws from the world's random generator
            self._admissible_cache = (self._state, actions)
        return list(self._admissible_cache[1])

    def available_actions_text(self, with_example: bool = False) -> str:
        """The prompt's 'Valid_actions: [...], OBJ needs to be replaced with ... objects: [...]' (paper App. C).

        Lists are rendered as Python list literals, as in the official prompt; `with_example` appends
        the official "example: <action>focus on door</action>" line.
        """
        text = self._available_actions_text(with_example)
        self._calls.append(("available_actions_text",))  # reads the objects' names: may draw, as a list read does
        return text

    def _available_actions_text(self, with_example: bool = False) -> str:
        """`available_actions_text` as `reset` and `step` call it: part of those calls, so not logged apart."""
        with self._guard("available_actions_text"):
            templates = [str(a) for a in self._server.getPossibleActions()]
            objects = [str(o) for o in self._server.getPossibleObjects()]
        text = f"Valid_actions: {templates}, OBJ needs to be replaced with one of the following objects: {objects}"
        return text + ACTION_EXAMPLE_SUFFIX if with_example else text

    def _admissible_for_state(self) -> Sequence[str]:
        if self.admissible_mode == "none":
            return []
        if self.admissible_mode == "eager":
            return self.admissible_actions()
        return state_bound_actions(self.admissible_actions, lambda: self._state, "ScienceWorldEnv")

    # ----- simulator queries ---------------------------------------------------------------------
    def task_names(self) -> list[str]:
        """Task names as the simulator lists them."""
        with self._guard("task_names"):
            return [str(t) for t in self._server.getTaskNames()]

    def max_variations(self, name: str) -> int:
        """Number of variations of a task (cached)."""
        if name not in self._max_variations:
            if name not in TASK_NAMES:
                raise ValueError(f"unknown ScienceWorld task {name!r}; known tasks: {', '.join(TASK_NAMES)}")
            with self._guard("max_variations"):
                self._max_variations[name] = int(self._server.getTaskMaxVariations(name))
        return self._max_variations[name]

    def official_variations(self, name: str) -> dict[str, list[int]]:
        """The simulator's own train/dev/test variation lists of a task (loads the task; reset afterwards)."""
        if name not in TASK_NAMES:
            raise ValueError(f"unknown ScienceWorld task {name!r}; known tasks: {', '.join(TASK_NAMES)}")
        with self._guard("official_variations"):
            self._sw.load(name, 0, self.simplification, generateGoldPath=False)
            out = {
                "train": [int(v) for v in self._server.getVariationsTrain()],
                "dev": [int(v) for v in self._server.getVariationsDev()],
                "test": [int(v) for v in self._server.getVariationsTest()],
            }
        self._loaded, self._task = (name, 0), None
        return out

    def gold_actions(self, task: TaskSpec) -> list[str]:
        """Generate the simulator's gold action sequence for `task` (0.2 s to ~80 s for genetics tasks).

        The env must be `reset(task)` before replaying it: generation leaves the world solved.
        """
        name, variation = parse_task_id(task.task_id)
        if variation >= self.max_variations(name):
            raise ValueError(f"{name} has variations 0..{self.max_variations(name) - 1}; got {task.task_id!r}")
        with self._guard("gold_actions"):
            self._sw.load(name, variation, self.simplification, generateGoldPath=True)
            actions = [str(a) for a in self._server.getGoldActionSequence()]
        # Generation leaves the world solved, and the engine's own reset would reload it with generation on again
        # (seconds, and random draws of its own), so the next reset(task) loads the task afresh, as a fork does.
        self._loaded, self._task = None, None
        return actions

    def goal_progress(self) -> str:
        """The simulator's subgoal scorecard (debugging aid)."""
        with self._guard("goal_progress"):
            progress = str(self._server.getGoalProgressStr())
        self._calls.append(("goal_progress",))
        return progress

    # ----- forking (envs.forking) ----------------------------------------------------------------
    def fork_settings(self) -> tuple[tuple[str, Any], ...]:
        return (("simplification", self.simplification), ("env_step_limit", self.env_step_limit),
                ("success_criterion", self.success_criterion), ("admissible", self.admissible_mode),
                ("include_available_actions", self.include_available_actions), ("deterministic", self.deterministic))

    def fork_point(self) -> ForkPoint:
        """Where this env stands: its task and the engine calls since the reset (steps, list reads, read-outs)."""
        if not self.deterministic:
            raise ValueError("a ScienceWorldEnv(deterministic=False) cannot be forked exactly: its JVM answers "
                             "depend on the JVM's history (see DETERMINISTIC_JVM_OPTIONS)")
        steps = sum(call[0] == "step" for call in self._calls)
        return take_point(self, self._task, steps, self._done, self._observation, tuple(self._calls))

    def restore(self, point: ForkPoint) -> Reset:
        """Stand where `point` stands: load its task in this env's JVM and make the same engine calls again (a load,
        ~0.2 s, then ~20 ms a step and ~37 ms a list read; the JVM is reused, so forking into a warm env costs no
        JVM start). The view's admissible list is this env's own, lazy as ever; if the parent had read it, it was
        read again here and is cached, so reading it costs nothing and draws nothing.

        Why the calls and not only the actions. The engine holds one random generator per JVM (scala.util.Random),
        seeded with the variation at every load; it moves animals and bees, breeds plants, and also picks which of
        an object's names ("paint in cup", "paint on cup") a valid-action list shows. Reading the admissible list
        therefore changes the world's future, and the parent's future depends on which of its states had their
        list read (the rollout reads none for an empty action). Replaying every call that may draw from the
        generator (steps, list reads, the available-actions text, the goal scorecard), in order, reproduces it.
        With the identity hashes made constant (``deterministic=True``, `DETERMINISTIC_JVM_OPTIONS`) the engine is
        then a function of the task, the settings and the calls: the fork shows the parent's observation, info
        and admissible list to the letter, whatever either JVM did before. What could break it: engine calls
        made past this class (``env._sw``, ``env._server``) are not logged; another scienceworld version or jar.
        """
        check_point(self, point)

        def run(call: tuple[str, ...]) -> StepResult | None:
            name, *args = call
            if name == "step":
                return self.step(*args)
            if name not in _LOGGED_READS:
                raise ValueError(f"not a ScienceWorldEnv engine call: {call!r}")
            getattr(self, name)()
            return None

        return replay(self, point, run)

    @property
    def jvm_pid(self) -> int:
        """Process id of this env's JVM."""
        return int(self._sw._gateway.java_process.pid)

    def jvm_rss_bytes(self) -> int | None:
        """Resident memory of this env's JVM (Linux), None if unknown."""
        return process_rss_bytes(self.jvm_pid)

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Turn py4j connection errors into `ScienceWorldCrashed` naming the JVM and the failed call."""
        if self._closed:
            raise RuntimeError(f"ScienceWorldEnv.{what}() called after close()")

        try:
            yield
        except Py4JError as e:
            code = self._sw._gateway.java_process.poll()
            if isinstance(e, Py4JJavaError) and code is None:
                raise  # an exception thrown inside a live JVM: a real error, not a crash
            raise ScienceWorldCrashed(
                f"ScienceWorld JVM (pid {self.jvm_pid}, exit code {code}) failed during {what}(): {e}. "
                "This env is unusable; close it and create a new one (EnvPool does this and marks the episode aborted)."
            ) from e


# The gold-path replay moved to `scienceworld_gold`; `cli` and `coldstart/experts.py` still import it
# from here. Resolved on first use: an import at the top would be circular (it needs ScienceWorldEnv).
