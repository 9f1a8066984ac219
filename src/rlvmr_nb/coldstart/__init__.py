"""Cold start without an API key (paper §3.3; docs/method.md, 'Cold start').

expert trajectories (`experts`) -> one tag + one sentence per step (`teachers`: `RuleTeacher` offline,
`LLMTeacher` for any OpenAI-compatible endpoint) -> step-level SFT pairs with the rollout prompt code
(`dataset`) -> SFT and the before/after measurement (`experiment`).

Settings of a whole cold start: `config.ColdStartConfig` (``configs/paper/coldstart_<env>.json``); its folder
and the command that builds a missing one: `layout`. Command line: ``rlvmr-nb coldstart ...`` = `command.main`.
"""

from .dataset import (
    TagShareError,
    build_coldstart_dataset,
    check_tag_shares,
    load_coldstart_samples,
    read_manifest,
    read_samples,
    read_trajectories,
)
from .command import main
from .experts import LeakageError, assert_no_heldout, heldout_task_types, training_tasks
from .chat_transport import EndpointError
from .teachers import AnnotationRejected, LLMTeacher, RuleTeacher, TeacherUnavailable, make_teacher

__all__ = [
    "AnnotationRejected",
    "EndpointError",
    "LLMTeacher",
    "LeakageError",
    "RuleTeacher",
    "TagShareError",
    "TeacherUnavailable",
    "assert_no_heldout",
    "build_coldstart_dataset",
    "check_tag_shares",
    "heldout_task_types",
    "load_coldstart_samples",
    "main",
    "make_teacher",
    "read_manifest",
    "read_samples",
    "read_trajectories",
    "training_tasks",
]
