"""The fairness gate's reference policy: fixed and hash-pinned before any cold start is chosen, played once.

Why a reference. The fairness check's L0 condition compared each RL arm with the run's own cold start, so a weak cold
start made it easy to pass: after GRPO at the classroom budget unseen-L0 success sat near 30 % from every cold start
tried, and the check passed exactly for the cold start that began lowest (docs/lab.md, 'Lever: DAgger'). The gate
(`reference_gate`) therefore asks each arm to be non-inferior to the *better* of its cold start and a
reference policy chosen before any cold-start choice: a weak start no longer lowers the bar.

What pins it. The reference is a saved policy folder named in the configuration (`LabConfig.reference_checkpoint`)
with the SHA-256 of its files stated beside it (`LabConfig.reference_sha256`, `checkpoint_sha256`); a folder whose
files hash otherwise is refused, so the reference cannot be swapped after the fact. It plays every L0 test layout
`LabConfig.reference_plays` times at the evaluation temperature, with sampling seeds that belong to no lab seed
(`REFERENCE_SEED`; `experiment.play_reference`), once per (hash, settings): the result is cached under ``$RLVMR_CACHE/lab-reference`` and
copied into each run folder that uses it (`reference_result`).

Where it travels. A cold start trained on another CPU rounds otherwise, so its files hash otherwise and the pinned
folder cannot be rebuilt elsewhere. What the gate needs from the reference is one number, its L0 success; the record
of its play (`summarise_plays`, with the hash and the play settings) is committed beside the configuration
(`LabConfig.reference_record`) and read wherever the run happens, when its hash and settings match. Only a replay
needs the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..envs.alfworld_data import rlvmr_cache_dir
from ..records import Episode
from . import paired
from .config import LabConfig
from .layout import REFERENCE_LEVEL, REFERENCE_SEED
from .paired import NON_INFERIORITY_MARGIN



def checkpoint_sha256(folder: str | os.PathLike) -> str:
    """SHA-256 over a policy folder: each file's path relative to the folder and its bytes, in sorted path order
    (a renamed or edited file, an added or a removed one, changes it)."""
    root = Path(folder)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    if not files:
        raise FileNotFoundError(f"{root}: no files to hash (a reference policy is a saved model folder)")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def pinned_reference(config: LabConfig) -> Path:
    """The configuration's reference folder after checking its hash against the stated one; raises otherwise."""
    if config.reference_checkpoint is None or config.reference_sha256 is None:
        raise ValueError("no reference policy configured (reference_checkpoint and reference_sha256)")
    folder = Path(config.reference_checkpoint).expanduser()
    found = checkpoint_sha256(folder)
    if found != config.reference_sha256:
        raise ValueError(f"{folder}: its files hash to {found}, not the pinned {config.reference_sha256}: the "
                         f"reference was fixed before the cold start was chosen and may not change")
    return folder


def reference_key(config: LabConfig) -> str:
    """What the reference's play depends on besides its files: plays, level, temperature, horizon, prompt."""
    rollout = config.train.rollout
    settings = {"sha256": config.reference_sha256, "plays": config.reference_plays, "level": REFERENCE_LEVEL,
                "sampling_seed": REFERENCE_SEED, "temperature": config.eval_temperature, "max_steps": rollout.max_steps,
                "max_new_tokens": rollout.max_new_tokens, "prompt_style": rollout.prompt_style}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def summarise_plays(episodes: Sequence[Episode], sha256: str, plays: int, key: str | None = None) -> dict[str, Any]:
    """The reference's record: its hash, the plays, the settings' `reference_key`, the layouts, each episode's
    outcome and the success rate."""
    won = [bool(ep.won) for ep in episodes if not ep.aborted]
    if not won:
        raise ValueError("the reference played no complete episode")
    return {"sha256": sha256, "plays": plays, "key": key, "level": REFERENCE_LEVEL,
            "layouts": len({ep.task_id for ep in episodes}), "episodes": len(won), "won": won,
            "success": sum(won) / len(won)}


def committed_record(config: LabConfig) -> dict[str, Any] | None:
    """The configuration's committed reference record (`LabConfig.reference_record`) when it is the record of this
    reference at these settings; None when none is named; an error when the named one belongs to another
    reference or other play settings (the bar must be the pinned policy's, played as configured)."""
    if config.reference_record is None:
        return None
    record = json.loads(Path(config.reference_record).read_text())
    expected = {"sha256": config.reference_sha256, "key": reference_key(config)}
    found = {k: record.get(k) for k in expected}
    if found != expected:
        raise ValueError(f"{config.reference_record}: the record of reference {found['sha256']} at settings "
                         f"{found['key']}, not of the pinned {expected['sha256']} at {expected['key']}: replay the "
                         f"reference (drop reference_record) or name its own record")
    return record


def reference_result(config: LabConfig, out: str | os.PathLike,
                     player: Callable[[LabConfig, Path], list[Episode]]) -> dict[str, Any]:
    """The pinned reference's L0 record for a run folder (``out/reference_L0.json``): the committed record when the
    configuration names one (`committed_record`), else read from the cache when this hash and these settings were
    played before, else played once by `player` (config, folder) -> episodes (`experiment.play_reference`) and
    cached."""
    target = Path(out) / "reference_L0.json"
    if target.is_file():
        return json.loads(target.read_text())
    root = rlvmr_cache_dir()
    cached = root / "lab-reference" / f"{reference_key(config)}.json"
    record = committed_record(config)
    if record is None and cached.is_file():
        record = json.loads(cached.read_text())
    elif record is None:
        record = summarise_plays(player(config, pinned_reference(config)), config.reference_sha256,
                                 config.reference_plays, reference_key(config))
        cached.parent.mkdir(parents=True, exist_ok=True)
        staging = cached.with_suffix(f".tmp{os.getpid()}")
        staging.write_text(json.dumps(record) + "\n")
        staging.replace(cached)  # atomic: a concurrent run reads a whole record or none
    Path(out).mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record) + "\n")
    return record


def reference_gate(heldin: Mapping[str, Mapping[str, Any]], l0_arms: Mapping[str, Sequence[float]],
                   l0_coldstart: Sequence[float], reference: float, layouts: int, required_layouts: int,
                   margin: float = NON_INFERIORITY_MARGIN, bootstrap: int = 2000) -> dict[str, Any]:
    """The fairness gate with a pinned reference policy (docs/lab.md, 'Pre-registration: avoidable
    repetition'). A run is a fair test when

    1. every RL arm learns its held-in training layouts (`heldin`: each arm's `paired.heldin_rise`, which must pass), and
    2. every RL arm is non-inferior at `margin` to the better of the reference and its own cold start on unseen L0:
       per seed the bar is max(`reference`, the cold start's success), and the paired t interval of arm − bar over
       the seeds must lie above `margin` (`paired.l0_condition`); a cold start weaker than the reference leaves the
       reference as the bar, so a weak start cannot lower it;
    3. the arms played every L0 test layout (`layouts` >= `required_layouts`): a subset of 20 let one play per layout
       decide the condition (docs/lab.md, 'The third classroom').

    `l0_arms`: per-seed unseen-L0 success of each arm; `l0_coldstart`: the cold start's, the same seeds;
    `reference`: the reference's success over all layouts and its plays (one number: the reference is one policy,
    played once for every run)."""
    bars = [max(reference, c) for c in l0_coldstart]
    l0 = {arm: {**paired.l0_condition(values, bars, margin, bootstrap), "bar": bars}
          for arm, values in l0_arms.items()}
    learnt = {arm: bool(rise["passes"]) for arm, rise in heldin.items()}
    complete = layouts >= required_layouts
    fair = bool(l0 and learnt and all(learnt.values()) and all(v["passes"] for v in l0.values()) and complete)
    reasons = [f"{arm} did not learn its held-in layouts" for arm, ok in learnt.items() if not ok]
    reasons += [f"{arm} is not non-inferior at {margin:+.3f} to max(reference, cold start) on unseen L0"
                for arm, v in l0.items() if not v["passes"]]
    if not complete:
        reasons.append(f"the arms played {layouts} of the {required_layouts} L0 test layouts")
    return {"rule": "reference gate", "reference_success": reference, "margin": margin, "heldin": dict(heldin),
            "l0_vs_bar": l0, "layouts": layouts, "required_layouts": required_layouts, "fair_test": fair,
            "reasons": reasons,
            "verdict": "fair test" if fair else paired.NOT_FAIR}
