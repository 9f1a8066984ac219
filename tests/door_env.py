"""A one-step text task where exactly one action is right: the learning signal for trainer tests."""

from __future__ import annotations

from rlvmr_nb.envs.base import Reset, StepResult, TaskSpec

ACTIONS = ["open door 1", "open door 2"]
RIGHT = "open door 1"
OBS = ("You are in the middle of a hall. Looking quickly around you, you see a door 1 and a door 2.\n"
       "Your task is to: open the door to the garden.")


class DoorEnv:
    def reset(self, task: TaskSpec) -> Reset:
        return Reset(observation=OBS, admissible_actions=list(ACTIONS), task_text="open the door to the garden.",
                     task_type="door")

    def step(self, action: str) -> StepResult:
        won = action == RIGHT
        return StepResult(observation="You open it. A garden!" if won else "You open it. A wall.", reward=float(won),
                          done=True, won=won, admissible_actions=list(ACTIONS))

    def close(self) -> None:
        pass


def door_tasks(n: int = 4) -> list[TaskSpec]:
    return [TaskSpec(task_id=f"door-{i}", env="door", split="train", task_type="door") for i in range(n)]


def door_level_tasks(role: str, level: str) -> list[TaskSpec]:
    """The registry's task lists for the door task (no levels)."""
    return door_tasks(4)


def register_door_env() -> None:
    """Make 'door' a registered env (prompted like ALFWorld), as any user-added world would be."""
    from rlvmr_nb.envs.registry import EnvSpec, register_env

    register_env(EnvSpec(name="door", env_class=DoorEnv, task_lists=door_level_tasks, prompt_family="alfworld",
                         description="one-step test task: open the right door"), replace=True)


register_door_env()
