"""`rlvmr-nb train --algo spark` end to end (SPARK, arXiv 2601.20209; docs/method.md, 'Branching rollouts
(SPARK)'): the episodes file holds each task's tree with exactly N leaves, and a run killed mid-way resumes to the
uninterrupted run's trees. The tiny random model never writes <explore>, so the trigger is the ablation's
'random:P' (seeded: the same tree in both runs)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

pytest.importorskip("torch")

from rlvmr_nb.cli import main  # noqa: E402
from rlvmr_nb.records import read_episodes  # noqa: E402
from rlvmr_nb.rollout.branching import tree_edges  # noqa: E402
from rlvmr_nb.runs.logs import read_metrics  # noqa: E402

N, ITERATIONS = 4, 3
ARGS = ["train", "--algo", "spark", "--env", "toy", "--model", "tiny-random:llama", "--tasks", "2", "--group-size",
        str(N), "--branch-roots", "2", "--branch-trigger", "random:0.5", "--max-steps", "3", "--max-new-tokens", "6",
        "--mini-batch-size", "4", "--micro-batch-size", "2", "--save-every", "1", "--stop", "action",
        "--iterations", str(ITERATIONS)]


def _trees(run_dir):
    episodes = read_episodes(run_dir / "episodes.jsonl")
    return episodes, sorted(tree_edges(episodes))


@pytest.mark.slow
def test_spark_trains_trees_of_n_leaves_and_a_killed_run_resumes_to_the_same_trees(tmp_path):
    ref = tmp_path / "ref"
    assert main([*ARGS, "--out", str(ref)]) == 0
    episodes, edges = _trees(ref)
    leaves = Counter(e.group_id for e in episodes)
    assert len(leaves) == 2 * ITERATIONS and set(leaves.values()) == {N}, "exactly N leaves per task"
    assert edges, "the seeded draws branched somewhere"
    by_id = {e.episode_id: e for e in episodes}
    for parent, branch, shared in edges:
        assert by_id[branch].group_id == by_id[parent].group_id
        copied = by_id[branch].steps[:shared]
        assert [s.output for s in copied] == [s.output for s in by_id[parent].steps[:shared]]
        assert all(s.response_token_ids is None and s.extra["prefix_of"] for s in copied), "trained once"
    assert all(e.info["branch"]["kind"] in ("root", "branch", "top_up") for e in episodes)
    rows = read_metrics(ref)
    assert all(0 <= r["branch/shared_steps"] < 1 for r in rows) and any(r["branch/branched"] > 0 for r in rows)

    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "rlvmr_nb.cli", *ARGS, "--out", str(run)])
    deadline = time.time() + 300
    while len(read_metrics(run)) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert main([*ARGS, "--out", str(run)]) == 0  # resume='auto': from the newest checkpoint
    assert [r["iteration"] for r in read_metrics(run)] == list(range(ITERATIONS))
    resumed, resumed_edges = _trees(run)
    assert [e.episode_id for e in resumed] == [e.episode_id for e in episodes], "each iteration logged once"
    assert resumed_edges == edges


@pytest.mark.parametrize("env", ["alfworld", "scienceworld"])
def test_paper_files_hold_sparks_tree_on_rlvmrs_learner(env):
    from pathlib import Path

    from rlvmr_nb.train_config import train_config

    root = Path(__file__).resolve().parents[2] / "configs" / "paper"
    cfg, rlvmr = train_config(root / f"spark_{env}.json"), train_config(root / f"rlvmr_{env}.json")
    rollout = cfg.rollout_for_run
    assert (cfg.method.algo, rollout.group_size, rollout.branch_roots, rollout.branch_factor) == ("spark", 8, 4, 2)
    assert (rollout.branch_trigger, rollout.prompt_style, rollout.env) == ("explore", "meta_think", env)
    # everything but the method and the tree is the RLVMR run's (the file's _about says so)
    same = {k: v for k, v in cfg.flat().items() if k not in ("algo", "branch_roots", "out_dir")}
    assert same == {k: v for k, v in rlvmr.flat().items() if k not in ("algo", "branch_roots", "out_dir")}


def test_branching_is_a_rollout_option_of_any_algorithm():
    from rlvmr_nb.train_config import train_config

    assert train_config(overrides={"algo": "rlvmr"}).rollout_for_run.branch_roots == 0
    assert train_config(overrides={"algo": "rlvmr", "branch_roots": 4}).rollout_for_run.branch_roots == 4
    assert train_config(overrides={"algo": "spark", "branch_roots": 0}).rollout_for_run.branch_roots == 0
    assert train_config(overrides={"algo": "spark_mr"}).method.estimator == "rlvmr"
    with pytest.raises(ValueError, match="branch_roots"):
        train_config(overrides={"algo": "spark", "group_size": 2})  # M = 4 roots cannot fit 2 leaves


def test_validation_and_the_lab_play_each_game_once_without_a_tree(tmp_path):
    """A spark run validates on plain single plays (a tree of 4 roots cannot fit a group of 1)."""
    from rlvmr_nb.envs.toy import toy_tasks
    from rlvmr_nb.lab.config import LabConfig
    from rlvmr_nb.lab.experiment import eval_config
    from rlvmr_nb.train_config import train_config
    from rlvmr_nb.trainer_validation import Validator

    config = train_config(overrides={"algo": "spark", "env": "toy", "validate_every": 1, "out_dir": str(tmp_path)})
    validator = Validator.for_run(config, tmp_path, toy_tasks(4))
    assert validator.eval_config.rollout.branch_roots == 0 and validator.eval_config.rollout.group_size == 1
    lab = LabConfig()
    lab = LabConfig(train=train_config(overrides={**lab.train.to_dict(), "branch_roots": 4}))
    assert eval_config(lab, "L0", 0).rollout.branch_roots == 0
