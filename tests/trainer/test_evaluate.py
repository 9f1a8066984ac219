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
