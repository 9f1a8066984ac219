import json

import pytest

pytest.importorskip("torch")

from rlvmr_nb.evaluate import EvalConfig, eval_tasks, evaluate_policy, write_results  # noqa: E402
from rlvmr_nb.rollout import LocalEnvs  # noqa: E402

from door_env import DoorEnv, door_tasks  # noqa: E402


def test_toy_eval_tasks_are_fixed_and_nested():
    full = eval_tasks(EvalConfig.from_dict(dict(env="toy")))
    assert full == eval_tasks(EvalConfig.from_dict(dict(env="toy")))
    small, smaller = eval_tasks(EvalConfig.from_dict(dict(env="toy", max_tasks=6))), eval_tasks(EvalConfig.from_dict(dict(env="toy", max_tasks=4)))
    assert set(t.task_id for t in smaller) <= set(t.task_id for t in small) and len(small) == 6
    with pytest.raises(ValueError, match="unknown env"):
        eval_tasks(EvalConfig.from_dict(dict(env="atari")))


def test_evaluate_writes_traceable_results(tmp_path):
    from rlvmr_nb.models import load_model

    model, tok = load_model("tiny-random:llama", seed=0)
    cfg = EvalConfig.from_dict(dict(env="door", max_steps=1, max_new_tokens=8, max_prompt_tokens=None, batch_tasks=3))
    episodes, summary = evaluate_policy(model, tok, cfg, tasks=door_tasks(4), make_env_slots=lambda: LocalEnvs(DoorEnv),
                                        progress=False)
    assert len(episodes) == 4 and len({e.group_id for e in episodes}) == 4
    # random weights cannot produce the format: every step malformed, nothing won
    assert summary["success"] == 0.0 and summary["invalid_malformed"] == 1.0
    path = write_results(tmp_path / "eval.json", summary, cfg, episodes)
    doc = json.loads(path.read_text())
    assert doc["config"]["rollout"]["temperature"] == 0.4 and doc["provenance"]["versions"]["torch"]
    assert doc["metrics"]["episodes"] == 4 and (tmp_path / "eval.episodes.jsonl").exists()
    ci = doc["metrics_ci"]
    assert ci["method"]["success"] == "wilson" and ci["intervals"]["success"][0] == 0.0
    assert 0.0 < ci["intervals"]["success"][1] < 1.0  # 0 of 4 won: Wilson's upper bound, not [0, 0]


def _played(task_ids, wins, seed):
    from rlvmr_nb.records import Episode

    return [Episode(task_id=t, env="door", task_type="door", won=w, seed=seed) for t, w in zip(task_ids, wins)]


def test_seeds_aggregate_over_all_episodes_with_task_clustered_intervals():
    from rlvmr_nb.evaluate import aggregate_seeds
    from rlvmr_nb.scoring.metrics import summarize

    tasks = ["a", "b", "c", "d"]
    runs = {s: (eps, summarize(eps)) for s, eps in
            ((0, _played(tasks, [1, 0, 0, 0], 0)), (1, _played(tasks, [1, 1, 0, 0], 1)), (2, _played(tasks, [1, 1, 1, 0], 2)))}
    agg = aggregate_seeds(runs)
    assert agg["metrics"]["episodes"] == 12 and agg["metrics"]["success"] == pytest.approx(6 / 12)
    assert agg["by_seed"]["1"]["success"] == 0.5 and agg["seeds"] == [0, 1, 2]
    assert agg["seed_spread"]["success"]["mean"] == pytest.approx(0.5) and agg["seed_spread"]["success"]["std"] == pytest.approx(0.25)
    assert agg["metrics_ci"]["clusters"] == 4 and agg["metrics_ci"]["method"]["success"] == "bootstrap"
    lo, hi = agg["metrics_ci"]["intervals"]["success"]
    assert lo <= 0.5 <= hi and lo < 0.5 < hi


@pytest.mark.slow
def test_cli_eval_with_several_seeds_writes_each_seed_and_the_aggregate(tmp_path, capsys):
    from rlvmr_nb import cli
    from rlvmr_nb.records import read_episodes

    out = tmp_path / "toy.json"
    assert cli.main(["eval", "--model", "tiny-random:llama", "--env", "toy", "--max-tasks", "3", "--max-steps", "2",
                     "--max-new-tokens", "6", "--seeds", "0", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["seeds"] == [0, 1] and doc["metrics"]["episodes"] == 6 and doc["metrics_ci"]["clusters"] == 3
    assert set(doc["by_seed"]) == {"0", "1"} and set(doc["seed_spread"]) >= {"success", "invalid"}
    per_seed = [read_episodes(tmp_path / f"toy.seed{s}.episodes.jsonl") for s in (0, 1)]
    assert [e.task_id for e in per_seed[0]] == [e.task_id for e in per_seed[1]], "seeds must play one task list"
    outputs = [[s.output for e in eps for s in e.steps] for eps in per_seed]
    assert outputs[0] != outputs[1], "two sampling seeds drew the same outputs"
    assert json.loads((tmp_path / "toy.seed1.json").read_text())["config"]["seed"] == 1


def _checkpoint_folder(folder, settings):
    """A checkpoint as `runs.policy.training_run_settings` finds one: ``model.pt`` beside the run's ``config.json``."""
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"")
    (folder / "config.json").write_text(json.dumps(settings))
    return folder


def test_a_run_s_prompt_and_budgets_come_with_it_and_a_differing_one_is_refused(tmp_path):
    from rlvmr_nb.evaluate import eval_config_for

    # a config.json written before the tree (flat): a GiGPO run, prompt style left to its algorithm
    ckpt = _checkpoint_folder(tmp_path / "run" / "ckpt-00004", {
        "model": "tiny-random:llama", "algo": "gigpo", "prompt_style": None, "stop": "action", "max_new_tokens": 48,
        "max_prompt_tokens": 2048, "env": "toy", "level": "L1", "max_steps": 5, "temperature": 1.0})
    config, record = eval_config_for(ckpt, {})
    rollout = config.rollout
    assert (rollout.prompt_style, rollout.stop, rollout.max_new_tokens, rollout.max_prompt_tokens) == (
        "think", "action", 48, 2048)
    assert (rollout.env, rollout.level, rollout.max_steps, rollout.temperature) == ("toy", "L1", 5, 0.4)
    assert record["from"] == str(ckpt / "config.json") and record["taken"]["prompt_style"] == "think"

    # world, level and T are questions a user may ask of any policy: a given one wins, unrecorded as taken
    config, record = eval_config_for(ckpt, {"level": "L2", "max_steps": 3, "max_new_tokens": 48},
                                     fallback={"max_new_tokens": 64, "stop": "none"})
    assert (config.rollout.level, config.rollout.max_steps, config.rollout.stop) == ("L2", 3, "action")
    assert not {"level", "max_steps", "max_new_tokens"} & set(record["taken"]) and record["overridden"] == {}

    with pytest.raises(ValueError, match="max_new_tokens 64 given, the run trained with 48"):
        eval_config_for(ckpt, {"max_new_tokens": 64})
    warned = []
    config, record = eval_config_for(ckpt, {"max_new_tokens": 64, "prompt_style": "think"}, override_run=True,
                                     warn=warned.append)
    assert config.rollout.max_new_tokens == 64 and len(warned) == 1 and "max_new_tokens" in warned[0]
    assert record["overridden"] == {"max_new_tokens": {"run": 48, "given": 64}}

    # a policy no run made: the caller's fallback, then evaluation's defaults
    config, record = eval_config_for("tiny-random:llama", {}, fallback={"max_new_tokens": 64})
    assert (config.rollout.max_new_tokens, config.rollout.prompt_style, record["from"]) == (64, "meta_think", None)
    # a saved model folder's config.json is the model's, not a run's
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "config.json").write_text(json.dumps({"model_type": "llama", "max_new_tokens": 7, "algo": "grpo"}))
    assert eval_config_for(sft, {})[1] == {"from": None, "taken": {}, "overridden": {}}


def test_the_summary_table_is_a_header_and_a_line_per_evaluation():
    from rlvmr_nb.evaluate import summary_table, table_row
    from rlvmr_nb.rollout.loop import RolloutConfig

    episodes = _played(["a", "b", "a", "b"], [1, 0, 0, 0], 0)
    metrics = {"episodes": 4, "success": 0.25, "invalid_malformed": 0.125, "invalid": 0.5, "episode_length": 7.25}
    intervals = {"intervals": {"success": [0.05, 0.7]}}
    rows = [table_row(RolloutConfig(env="door", level="L1"), episodes, metrics, intervals),
            table_row(RolloutConfig(env="door", level="L2"), episodes[:1], {**metrics, "episodes": 1})]
    lines = summary_table(rows).splitlines()
    assert len(lines) == 3 and lines[0].split()[:4] == ["env", "level", "tasks", "episodes"]
    assert lines[1].split() == ["door", "L1", "2", "4", "25.0%", "[5.0%,", "70.0%]", "87.5%", "50.0%", "7.2"]
    assert lines[2].split()[:5] == ["door", "L2", "1", "1", "25.0%"]
    column = lines[0].index("format-valid")  # aligned under its header, however wide the success cell
    assert lines[1][column:].startswith("87.5%") and lines[2][column:].startswith("87.5%")
