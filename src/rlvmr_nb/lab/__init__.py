"""The metacognition lab: the paper's central claim (Fig. 1, Table 1) as an experiment that runs in minutes.

Outcome-only GRPO and RLVMR are trained from ONE cold-start checkpoint with equal budgets over several
seeds in a small house world where looping is a real way to fail (`envs.lab_world`), by a ~0.5 M-parameter
transformer with a word-level vocabulary built from the world's text (`policy`), then evaluated on new
layouts (L0), unseen object/destination combinations (L1) and a held-out task kind (L2). The pre-registered
test is paired over seeds (`paired`: fairness check first, then the primary endpoint and the Holm-adjusted
secondaries, their verdicts on the exact sign-flip test over seeds, `signflip`; docs/lab.md); descriptive tables carry two-stage bootstrap intervals (`stats`); figures
(`figures`), case studies (`cases`) and the results file (`report`) follow. Settings: `config.LabConfig`, ``configs/lab/*.json``.
Entry points: `run_lab`, ``rlvmr-nb lab``, notebook ``06_metacognition_lab``.
"""

from .config import LabConfig, load_lab_config
from .experiment import (COLDSTART_ARM, arm_label, run_arm, run_coldstart, run_evaluation, run_lab, run_seed,
                         run_seeds, train_config)
from .policy import LabPolicyConfig, build_lab_policy, build_vocabulary, make_policy, make_tokenizer

__all__ = [
    "COLDSTART_ARM", "LabConfig", "LabPolicyConfig", "arm_label", "build_lab_policy", "build_vocabulary",
    "load_lab_config", "make_policy", "make_tokenizer", "run_arm", "run_coldstart", "run_evaluation", "run_lab",
    "run_seed", "run_seeds", "train_config",
]
