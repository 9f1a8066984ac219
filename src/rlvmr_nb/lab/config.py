"""One lab experiment's settings (`LabConfig`), read from ``configs/lab/*.json``.

The defaults are the "classroom" configuration: it must finish in 20 minutes on a 2-core machine from a fresh clone
with GRPO learning its training layouts (the fairness check's held-in condition), so it trains on 6 layouts met in
every iteration at KL 0.1, from a cold start with two DAgger rounds (chosen on the sweep seeds,
``benchmarks/lab_fairness_sweep.py`` 'c-' variants; docs/lab.md, 'Classroom budget' and 'Lever: DAgger'). From the
demonstrations-only cold start, learning 6 layouts cost unseen L0 (~6-12 pp); from the DAgger one, weaker on unseen
layouts, GRPO raises unseen L0 too, so the check's second condition can pass. The
"recorded" configuration (``configs/lab/recorded.json``) is the learning pilot's (``pilot_learning.json``) with
the seeds that pilot's power calculation asks for; the CI one (``configs/lab/ci.json``) runs end to end in well under a minute.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..envs.lab_world import HOUSES
from ..notebooks import project_root
from ..rollout.loop import RolloutConfig
from ..runs.config import RunConfig
from ..scoring.method import ALGORITHMS, MethodConfig
from ..scoring.rewards import RewardDeviations
from ..settings import build_config, read_settings_file, require_choice, require_positive
from ..train_config import TrainConfig
from ..update.config import UpdateConfig
from ..update.loss_terms import LossConfig

LAB_WORLDS = tuple(HOUSES)
"""The worlds a lab run may play (`LabConfig.train`'s env): the small house, the larger one, the larger one with its
homes named (`envs.lab_world`)."""
PRIMARY_ENDPOINTS = ("repetitive", "avoidable")
"""`LabConfig.primary_endpoint`'s choices."""


@dataclass
class LabConfig:
    """Everything one run of the lab needs (cold start, RL arms, evaluation, statistics)."""

    name: str = "classroom"
    """Label of the configuration in results files and figure titles."""
    # --- cold start (paper §3.3) --------------------------------------------------------------
    coldstart_trajectories: int = 300
    """Tagged expert trajectories of the training split (`RuleTeacher`)."""
    policy_layers: int = 3
    """Decoder layers of the lab transformer (`lab.policy.LabPolicyConfig`)."""
    policy_hidden: int = 128
    """Hidden size of the lab transformer."""
    sft_epochs: int = 14
    """SFT passes' worth of samples over the demonstrations (with DAgger rounds, half on the demonstrations, the rest
    in the rounds). The classroom's 14 keep its run inside 20 minutes with two DAgger rounds; the recorded and pilot
    configurations ran 20 without DAgger."""
    sft_lr: float = 3e-3
    """A freshly initialised policy needs a far larger rate than the paper's 1e-5 fine-tuning of a pretrained one."""
    sft_batch_size: int = 16
    sft_prompt_loss_weight: float = 0.0
    """`SFTConfig.prompt_loss_weight`: the prompt's next-token loss beside the response's in the cold start (0: the
    paper's response-only SFT, every configuration's). At 1 the cold start learnt its layouts' maps and lost unseen L0
    (docs/lab.md, 'Lever: the prompt in the SFT loss')."""
    coldstart_dagger_rounds: int = 2
    """DAgger rounds after the demonstrations (`coldstart.lab_dagger`; 0: the paper's cold start, SFT on demonstrations
    only). With R rounds: half of `sft_epochs` on the demonstrations, then R times: the policy plays every
    demonstrated task once at the training `temperature`, each step it took is labelled with the prompt-only
    expert's tagged choice from the same prompt, and SFT continues over demonstrations + every labelled step so far
    for 1/R of the other half's samples, so the SFT budget is unchanged. With one round the cold start took a target in
    sight on unseen L0 in 81 % of those steps (without: 34 %). The classroom's two rounds were chosen on the sweep seeds
    (`c-pool6-kl0.1-dagger2-e14`): a cold start weak on unseen layouts that GRPO raises there (docs/lab.md, 'Lever:
    DAgger')."""
    format_check_tasks: int = 24
    """Unseen layouts (L0 test tasks) the cold-start model plays to measure its format validity."""
    # --- RL arms (paper §3.4, App. A.2) ---------------------------------------------------------
    algos: tuple[str, ...] = ("grpo", "rlvmr")
    """Trained from the same cold-start checkpoint with the same budget. 'gigpo' (paper Table 1's GiGPO: GRPO plus
    anchor-state step advantages, the same meta-think prompt) may be added as a third arm: it is compared with the
    cold start by the fairness check and reported beside the others, while the pre-registered endpoints stay
    RLVMR − GRPO. The CI configuration runs all three. 'spark' and 'spark_mr' (SPARK's branching rollouts, arXiv
    2601.20209, with SPARK's or RLVMR's advantages; docs/method.md, 'Branching rollouts (SPARK)') are arms of the
    same kind that also differ in their rollouts: each task's `group_size` leaves grow as a tree from 4 roots, so
    their group needs `group_size` >= 4 (refused when the file is loaded); evaluation plays them as it plays every
    arm, one rollout per task."""
    comparison: tuple[str, str] = ("rlvmr", "grpo")
    """The two arms (a, b) every pre-registered endpoint compares, a − b paired over seeds: RLVMR − GRPO, the paper's
    claim, by default. ('spark_mr', 'rlvmr') asks what branching adds to RLVMR (docs/lab.md, 'Branching in the
    lab'). A run that trains only one of them (the demo) computes no endpoint."""
    seeds: tuple[int, ...] = (0, 1)
    train_pool: int = 6
    """Training layouts the RL arms draw their tasks from: the first `train_pool` of the 400-layout training
    pool (`envs.lab_world.level_tasks`). A 0.5 M-parameter policy trained from scratch learns from layouts it
    meets again, not from 400 it meets about once each (README, 'Metacognition lab': the diagnosis). The classroom
    meets its 6 in every iteration, the recorded run its 24 about 11 times each (docs/lab.md, 'Classroom budget')."""
    train: TrainConfig = field(default_factory=lambda: lab_train_defaults())
    """What every RL arm runs (`experiment.train_config` adds the arm's algo, seed, cold start and folder): the
    trainer's own configuration with the lab's values (`lab_train_defaults`, each explained there). A lab file sets its
    fields by name (``"lr": 3e-4``, ``"kl_coef": 0.1``) as a training file does."""
    # --- evaluation (paper §2.1) ------------------------------------------------------------------
    levels: tuple[str, ...] = ("L0", "L1", "L2")
    eval_tasks: int = 20
    """Tasks per level and policy (a seeded subset of the level's 60 test tasks)."""
    eval_episodes: int = 1
    """Sampled episodes per test task and policy: play 0 with the seed's own sampling seed, play k with
    `lab.experiment.play_sampling_seed` (the same for every arm, so arms still pair play by play). With one play the
    fairness check's L0 difference had a per-seed SD of ~8 pp, mostly sampling noise; the confirmation's checkpoints
    replayed with 4 plays gave 1.0 and 2.9 pp (two sets of sampling seeds; docs/lab.md, 'Why GRPO loses')."""
    fairness_l0_margin: float | None = None
    """Form of the fairness check's second condition (`lab.paired.fairness_check`). None: the pre-registered rule, no
    RL arm's unseen-L0 success below the cold start's (point estimate over the seeds >= 0). A number m <= 0:
    non-inferiority at margin m, as verdict (b) is tested: the paired t interval's lower end (over >= 2 seeds)
    must lie above m. The classroom and the first recorded run keep None, as pre-registered; `recorded_ni` states
    −0.05, verdict (b)'s margin, before it runs (docs/lab.md, 'Amendment: the L0 condition as non-inferiority')."""
    power_pilot_sd: float | None = None
    """SD of the primary endpoint's per-seed difference in the pilot that set this configuration's seed count, stated
    before the run. The results record `lab.paired.seeds_for_power` on it at `stats.PRIMARY_EFFECT` beside the seeds
    actually run, so the file carries the power calculation the seed count rests on (docs/lab.md, 'Seeds'). None:
    no pilot stated; the results still give the count this run's own SD would ask for."""
    power_pilot_seeds: int | None = None
    """How many seeds `power_pilot_sd` came from, stated with it. Given, the results add the seed counts from the SD's
    80 % upper confidence bound, and the run is judged on the SD's own count only when the pilot had at least
    `lab.paired.MIN_PILOT_SEEDS` (5) seeds, on the upper bound's otherwise (`lab.paired.planned_seed_count`): an SD
    from 3 seeds may be half the true one. None (the earlier configurations): judged on the SD as stated."""
    power_pilot_l0_sd: float | None = None
    """With `fairness_l0_margin` set: the per-seed SD of an arm's L0 difference from the cold start at this
    configuration's `eval_episodes`, from a pilot, stated before the run. The results record
    `lab.paired.l0_seed_power` on it: the chance that both arms pass the non-inferiority condition when they truly
    equal the cold start, at the seeds run (`benchmarks/lab_play_noise.py` derives the SD for any number of plays)."""
    reference_checkpoint: str | None = None
    """A saved policy folder fixed before any cold-start choice (e.g. a demonstrations-only cold start), the
    fairness gate's reference (`lab.reference`). Set (with `reference_sha256`): the check becomes
    `lab.reference.reference_gate`, each arm non-inferior at `fairness_l0_margin` to the better of the reference and its
    own cold start on all L0 test layouts, and every arm must learn its held-in layouts. None: the check each earlier
    configuration was pre-registered with (`lab.paired.fairness_check`)."""
    reference_sha256: str | None = None
    """SHA-256 of the reference folder's files (`lab.reference.checkpoint_sha256`), stated with the configuration:
    a reference whose files hash otherwise is refused."""
    reference_record: str | None = None
    """A committed copy of the reference's L0 record (`lab.reference.summarise_plays`, e.g.
    ``benchmarks/results/lab_reference_L0.json``), read instead of replaying the folder when its hash and play
    settings are this configuration's. The bar is then one number measured once, on the machine that pinned the
    reference, so a run elsewhere needs neither the folder nor its exact bits: a cold start trained on another CPU
    rounds otherwise and would hash otherwise (docs/verification.md, 'Numbers across machines'). None: play the
    pinned folder (once per hash and settings, cached)."""
    reference_plays: int = 16
    """Plays of every L0 test layout by the reference, once per hash and settings (cached): 60 layouts × 16 plays
    put its success's SE near 1.5 pp, small beside the −5 pp margin."""
    primary_endpoint: str = "repetitive"
    """The primary endpoint's per-episode rate (`lab.paired.seed_endpoint`), RLVMR − GRPO on unseen L0 + L1.
    'repetitive': the paper's repetitive-action rate, the endpoint every earlier configuration pre-registered.
    'avoidable': avoidable repetition (`lab.endpoints`), with wasted steps (repeated, refused or malformed) as a
    co-primary that must fall too, and the L2 repetition secondary on the same measure (docs/lab.md,
    'Pre-registration: avoidable repetition')."""
    heldin_tasks: int = 6
    """Training layouts (the first of `train_pool`) every policy plays at evaluation, with the same sampling seed
    before (cold start) and after training: the paired fairness check (`lab.paired.fairness_check`)."""
    heldin_episodes: int = 12
    """Sampled episodes per held-in layout and policy (one sampling seed, the same before and after training). One
    episode per layout left the check's per-seed estimate an SE of ~10 pp (docs/lab.md, 'Budget')."""
    eval_temperature: float = 0.4
    bootstrap: int = 2000
    """Bootstrap resamples for the confidence intervals (seeds, then episodes within a seed)."""
    workers: int = 2
    """Processes that run the pieces of the seeds side by side after the cold start (per seed: the cold start's
    evaluation and each arm; `lab.experiment.run_seeds`); 1: one after the other, in this process. Each worker
    uses `threads_per_worker` torch threads; on a CPU shared with other jobs this buys throughput."""
    threads_per_worker: int = 1
    """Torch threads of each worker (with `workers` > 1). One suits a machine with no more cores than pieces. On one
    with more, the slowest piece (an arm's training) sets the wall time, so `workers` × `threads_per_worker` up to the
    core count shortens the run: 2 threads ran a recorded-run iteration faster by the factor in
    `benchmarks/results/lab_threads.json` (docs/lab.md, 'What a fair classroom costs')."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes copied into the results file."""

    def __post_init__(self) -> None:
        self.algos, self.seeds, self.levels = tuple(self.algos), tuple(self.seeds), tuple(self.levels)
        self.comparison = tuple(self.comparison)
        if len(self.comparison) != 2 or self.comparison[0] == self.comparison[1]:
            raise ValueError(f"comparison names two different arms (a, b), compared as a - b; got {self.comparison}")
        require_positive(self, ["coldstart_trajectories", "policy_layers", "policy_hidden", "sft_epochs", "sft_lr",
                                "sft_batch_size", "format_check_tasks", "train_pool", "eval_tasks", "heldin_tasks",
                                "heldin_episodes", "bootstrap", "workers", "threads_per_worker"])
        require_positive(self, ["eval_episodes", "reference_plays"])
        require_choice(self, "primary_endpoint", PRIMARY_ENDPOINTS)
        if self.power_pilot_seeds is not None and (self.power_pilot_sd is None or self.power_pilot_seeds < 2):
            raise ValueError(f"power_pilot_seeds states how many seeds (>= 2) power_pilot_sd came from: set both, "
                             f"got {self.power_pilot_seeds} seeds, SD {self.power_pilot_sd}")
        if (self.reference_checkpoint is None) != (self.reference_sha256 is None):
            raise ValueError("reference_checkpoint and reference_sha256 go together: a reference is pinned by its hash")
        if self.reference_record is not None and self.reference_sha256 is None:
            raise ValueError("reference_record is the record of a pinned reference: set reference_checkpoint and "
                             "reference_sha256 too")
        if self.reference_checkpoint is not None and self.fairness_l0_margin is None:
            raise ValueError("the reference gate is a non-inferiority condition: set fairness_l0_margin (e.g. -0.05)")
        if self.power_pilot_l0_sd is not None and not self.power_pilot_l0_sd > 0:
            raise ValueError(f"power_pilot_l0_sd must be a positive SD, got {self.power_pilot_l0_sd}")
        if self.power_pilot_l0_sd is not None and self.fairness_l0_margin is None:
            raise ValueError("power_pilot_l0_sd powers the non-inferiority form of the L0 condition: set "
                             "fairness_l0_margin too (the point-estimate rule has no power to compute)")
        if self.power_pilot_sd is not None and not self.power_pilot_sd > 0:
            raise ValueError(f"power_pilot_sd must be a positive SD (a pilot's per-seed difference), got "
                             f"{self.power_pilot_sd}")
        if self.fairness_l0_margin is not None and self.fairness_l0_margin > 0:
            raise ValueError(f"fairness_l0_margin must be <= 0 (a margin below the cold start) or None, "
                             f"got {self.fairness_l0_margin}")
        if self.sft_prompt_loss_weight < 0:
            raise ValueError(f"sft_prompt_loss_weight must be >= 0, got {self.sft_prompt_loss_weight}")
        if self.coldstart_dagger_rounds < 0:
            raise ValueError(f"coldstart_dagger_rounds must be >= 0, got {self.coldstart_dagger_rounds}")
        if self.coldstart_dagger_rounds and self.sft_epochs < 2:
            raise ValueError(f"a DAgger cold start spends half of sft_epochs on the demonstrations first: it needs "
                             f"sft_epochs >= 2, got {self.sft_epochs}")
        if not self.algos or not self.seeds or not self.levels:
            raise ValueError("a lab run needs at least one algo, one seed and one level")
        if self.train.rollout.env not in LAB_WORLDS:
            raise ValueError(f"env: a lab run plays one of the lab worlds {LAB_WORLDS}, got {self.train.rollout.env!r}")
        for algo in self.algos:
            check_arm(self.train, algo)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "LabConfig") -> "LabConfig":
        """A config from lab settings: the lab's own fields, and the arms' training settings by name (``"lr"``), by
        path (``"train.update.lr"``) or as the ``train`` branch; `MOVED` maps the names of earlier lab files."""
        d = dict(d)
        scope = d.pop("advantage_scope", None)  # earlier files: one scope for both channels
        if scope is not None:
            d.update(outcome_scope=scope, mr_scope=scope)
        return build_config(cls, d, source=source, moved=MOVED)

    def flat(self) -> dict[str, Any]:
        """Every setting by name: the lab's own, then the arms' training settings (`TrainConfig.flat`)."""
        return {**{k: v for k, v in asdict(self).items() if k != "train"}, **self.train.flat()}

    def changed(self, **settings: Any) -> "LabConfig":
        """This configuration with `settings` changed (names as `from_dict` takes them)."""
        return build_config(type(self), settings, source=f"{self.name} changed", base=self, moved=MOVED)


def check_arm(train: TrainConfig, algo: str) -> None:
    """Refuse, when a lab file is loaded, an arm that could not run: an unknown algo, or a branching arm (SPARK's
    `spark`/`spark_mr`) whose roots do not fit the group every arm shares, which the trainer would otherwise refuse
    only when that arm starts, after the cold start and the arms before it."""
    if algo not in ALGORITHMS:
        raise ValueError(f"algos: unknown arm {algo!r}; the arms are {', '.join(ALGORITHMS)}")
    group = train.rollout.group_size
    roots = ALGORITHMS[algo].branch_roots if train.rollout.branch_roots is None else train.rollout.branch_roots
    if roots > group:
        raise ValueError(f"algos: the {algo!r} arm grows each task's group_size leaves from {roots} roots, and "
                         f"group_size {group} cannot hold them: set group_size >= {roots} (the group of every arm)")


MOVED: dict[str, str | None] = {"advantage_preset": "train.method.preset"}
"""Lab settings of earlier files whose name changed (the arms' advantage preset is their method's)."""


def lab_train_defaults() -> TrainConfig:
    """The training settings of the lab's RL arms, before each arm's algo, seed, cold start and run folder.

    * The lab world (`envs.lab_world`) at level L0, 8 rollouts per task, 24 steps (`envs.lab_world.LAB_HORIZON`,
      within which the prompt-only expert wins every test task of every level: it needs at most 19), 64 response
      tokens, the whole prompt (the lab's prompts are short), the meta-think prompt and parser for every arm, so
      GRPO is the outcome-only ablation from the same cold start (paper Table 3, 'w/o A^MC') and the arms differ in
      their advantage estimator only; sampling at the official code's 1.0.
    * 14 iterations of 6 tasks (the classroom: the 6 layouts of its training pool met in every iteration;
      docs/lab.md, 'Classroom budget').
    * AdamW at 3e-4 (a freshly initialised 0.5 M-parameter policy, not the paper's pretrained 1.5B at 1e-6), without
      bf16 autocast (the lab's CPU runs are fp32), mini-batches of 32 step samples: an iteration gives ~600 step samples,
      so one pass takes ~20 AdamW steps (one step per iteration gave each arm 20-30 steps in all: too few to learn);
      micro-batches of 32; one PPO pass (a second pass over the same rollouts costs ~12 s here, fresh rollouts ~5 s).
    * Old log-probs from the sampler (`UpdateConfig.old_logprobs` 'sampler'): with one PPO pass they differ from the
      recomputed ones only by the generation's numerics (mean |difference| ~0.002 per token in the lab), and skipping
      the recompute saves one forward pass over every step sample: 27.0 → 24.5 s per iteration of 8 tasks here, 9 %
      (`benchmarks/lab_old_logprobs.py`, side by side).
    * KL 0.1 to the cold start (paper Eq. 5 with 10x the paper's 0.01): on few layouts a looser one let GRPO learn them
      by heart and lose unseen L0 (−25 against −10 pp on 4 layouts). Clip 0.2 (paper); with ~20 updates per batch
      the later mini-batches are off-policy and the clip binds (`clip_frac` ~1-3 %).
    * The official code's preset ('official_code': per-task groups over step samples); 'paper' is not group-relative
      for GRPO and lowered GRPO's held-in success in the budget sweep (docs/lab.md, 'Advantage preset', 'Budget').
    * Two declared reward deviations (docs/lab.md, 'Deviations from the paper'): <explore>/<reflection> pay only for
      accepted commands, and a first-step reflection does not pay; no penalty for a refused command (at 0.1 it was
      the only difference left in all-failed groups and pushed their loops up: GRPO's held-in success fell 8.3 pp
      under either preset; docs/lab.md, 'Budget').
    """
    return TrainConfig(
        rollout=RolloutConfig(env="lab", level="L0", group_size=8, max_steps=24, max_new_tokens=64,
                              max_prompt_tokens=None, prompt_style="meta_think", temperature=1.0),
        method=MethodConfig(preset="official_code",
                            deviations=RewardDeviations(meta_rewards_admissible_only=True, reflection_at_start=False)),
        loss=LossConfig(kl_coef=0.1, clip_eps=0.2),
        update=UpdateConfig(lr=3e-4, mini_batch_size=32, micro_batch_size=32, ppo_epochs=1, old_logprobs="sampler",
                            bf16_autocast=False),
        run=RunConfig(iterations=14, tasks_per_iteration=6, keep_checkpoints=1, progress=False),
    )


def load_lab_config(path: str | os.PathLike, **overrides: Any) -> LabConfig:
    """A `LabConfig` from a JSON file, with `overrides` on top. A relative path that does not exist here is
    looked up in the repository (``configs/lab/...`` from a notebook run in another folder)."""
    path = Path(path)
    if not path.is_file() and not path.is_absolute():
        path = project_root() / path
    data = read_settings_file(path, "LabConfig")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a LabConfig file holds one JSON object {{setting: value}}")
    return LabConfig.from_dict({**data, **overrides}, source=str(path))
