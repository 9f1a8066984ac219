"""The lab policy (word-level tokenizer + small Llama), the lab statistics, and the lab end to end:
`rlvmr-nb lab` with configs/lab/ci.json and notebook 06 under papermill with configs/ci."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from rlvmr_nb.envs.lab_world import level_tasks  # noqa: E402
from rlvmr_nb.lab import stats  # noqa: E402
from rlvmr_nb.lab.report import preregistered_markdown  # noqa: E402
from rlvmr_nb.lab.policy import build_vocabulary, make_policy, make_tokenizer, world_corpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab_tokenizer(tmp_path_factory):
    """The vocabulary as `build_lab_policy` makes it: the world's text plus a tagged cold-start set."""
    from rlvmr_nb.coldstart import build_coldstart_dataset, read_samples

    data = build_coldstart_dataset("lab", "L0", 20, seed=0, out_dir=tmp_path_factory.mktemp("cs"), progress=False)
    texts = [s[k] for s in read_samples(data) for k in ("prompt", "response")]
    return make_tokenizer(build_vocabulary([*world_corpus(), *texts]))


def test_word_tokenizer_round_trips_what_the_parser_reads(lab_tokenizer):
    from rlvmr_nb.rollout.prompts import AgentMemory, PromptConfig, to_chat
    from rlvmr_nb.rollout.tags import parse_output

    tok = lab_tokenizer
    output = "<explore>The key may be in the Box, so i open it.</explore>\n<action>open box</action>\n"
    ids = tok(output, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids
    decoded = tok.decode(ids, skip_special_tokens=True)
    a, b = parse_output(output, mode="strict"), parse_output(decoded, mode="strict")
    assert b.valid and (b.tag, b.action) == (a.tag, a.action) == ("explore", "open box")
    assert tok(decoded, add_special_tokens=False)["input_ids"] == ids  # decoding is a fixed point
    memory = AgentMemory(task="put the key and the apple in the crate.", config=PromptConfig(env="lab"))
    chat = to_chat(tok, memory.render("You are in the hallway. Exits: cellar.", ["go to cellar", "look"]))
    chat_ids = tok(chat, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in chat_ids and chat.endswith("<|assistant|>\n")
    assert tok.convert_ids_to_tokens(chat_ids[:3]) == ["<|user|>", "task", ":"]
    assert len(chat_ids) < 120


def test_the_vocabulary_is_built_from_training_text_only(monkeypatch):
    """Building the corpus never builds a test layout (it would fail here), yet covers the test levels' words."""
    from rlvmr_nb.envs import lab_expert
    from rlvmr_nb.envs import lab_world as lab
    from rlvmr_nb.envs.base import TaskSpec
    from rlvmr_nb.lab.policy import words_of

    test_ids = {t.task_id for level in ("L0", "L1", "L2") for t in level_tasks("test", level)}
    real_build = lab.build_world

    def training_only(tid):
        if tid in test_ids:
            raise AssertionError(f"world_corpus built the test layout {tid}")
        return real_build(tid)

    for module in (lab, lab_expert):  # the world's, and the expert's own reference to it
        monkeypatch.setattr(module, "build_world", training_only)
    vocabulary = set(build_vocabulary(world_corpus()))
    for module in (lab, lab_expert):
        monkeypatch.setattr(module, "build_world", real_build)
    env = lab.LabEnv(max_steps=60)
    unseen = set()
    for tid in sorted(test_ids):
        reset = env.reset(TaskSpec(task_id=tid, env="lab"))
        texts = [reset.task_text, reset.observation, *reset.admissible_actions]
        for action in lab_expert.lab_expert_actions(tid):
            result = env.step(action)
            texts += [result.observation, *result.admissible_actions]
        unseen |= {w for text in texts for w in words_of(text)} - vocabulary
    assert not unseen


def test_policy_saves_as_a_model_folder_the_library_loads_and_samples(lab_tokenizer, tmp_path):
    from rlvmr_nb.rollout.generation.base import SamplingConfig
    from rlvmr_nb.rollout.generation.hf import HFGenerator
    from rlvmr_nb.lab.policy import LabPolicyConfig
    from rlvmr_nb.models import load_model

    model = make_policy(lab_tokenizer, LabPolicyConfig(hidden_size=32, layers=1))
    model.save_pretrained(tmp_path)
    lab_tokenizer.save_pretrained(tmp_path)
    loaded, tok = load_model(str(tmp_path))
    assert sum(p.numel() for p in loaded.parameters()) == sum(p.numel() for p in model.parameters())
    prompt = tok.apply_chat_template([{"role": "user", "content": "Task: look"}], tokenize=False, add_generation_prompt=True)
    gens = HFGenerator(loaded, tok, max_batch_size=4).generate([prompt] * 4, SamplingConfig(max_new_tokens=8, seed=0))
    assert all(len(g.token_ids) == len(g.logprobs) > 0 for g in gens)


def test_pooled_metrics_match_metrics_summarize():
    from rlvmr_nb.scoring.metrics import summarize
    from rlvmr_nb.records import Episode, Step

    eps = [Episode(task_id=f"t{i}", env="lab", won=i % 2 == 0, steps=[
        Step(t=t, observation="o", action=a, feedback=f, valid=t != 1, admissible=f != "Nothing happens.")
        for t, (a, f) in enumerate([("go to a", "A"), ("go to a", "Nothing happens."), ("look", "A")][: 1 + i % 3])])
        for i in range(6)]
    ours, ref = stats.pooled(stats.episode_rows(eps)), summarize(eps)
    for metric in ("success", "repetitive", "invalid", "episode_length"):
        assert ours[metric] == pytest.approx(ref[metric])
    assert ours["format_valid"] == pytest.approx(1 - ref["invalid_malformed"])


def test_two_stage_bootstrap_intervals():
    rng = np.random.default_rng(0)

    def arm(p, seeds=3, n=40):  # won, steps, repetitive, invalid, malformed
        return [np.column_stack([rng.random(n) < p, np.full(n, 10), rng.binomial(10, p, n), np.zeros(n), np.zeros(n)])
                .astype(float) for _ in range(seeds)]

    a, b = arm(0.8), arm(0.2)
    ci = stats.bootstrap(a, 300)
    assert ci["success"]["lo"] <= ci["success"]["mean"] <= ci["success"]["hi"]
    assert 0.6 < ci["success"]["mean"] < 0.95 and ci["format_valid"]["mean"] == 1.0
    diff = stats.bootstrap(a, 300, other=b)
    assert diff["success"]["lo"] > 0.3 and diff["repetitive"]["lo"] > 0.3  # a clear difference is seen
    same = stats.bootstrap(a, 300, other=a)
    assert same["success"]["mean"] == 0 and same["success"]["lo"] < 0 < same["success"]["hi"]
    with pytest.raises(ValueError, match="same seeds"):
        stats.bootstrap(a, 10, other=b[:2])
    lo, hi = stats.wilson(8, 10)
    assert (round(lo, 3), round(hi, 3)) == (0.490, 0.943)


def test_training_rise_is_the_fairness_check():
    """Guards the lab's fairness check: the rise is last-minus-first on the training curve, pooled over seeds."""
    rising = [[0.2, 0.2, 0.5, 0.6, 0.6], [0.1, 0.3, 0.4, 0.6, 0.7]]
    r = stats.training_rise(rising, head=2, tail=2, n=500)
    assert r["rise"] == pytest.approx(np.mean([0.6 - 0.2, 0.65 - 0.2]))
    assert (r["head"], r["tail"]) == (2, 2) and 0 < r["lo"] <= r["rise"] <= r["hi"]
    flat = stats.training_rise([[0.3, 0.1, 0.3, 0.1, 0.3], [0.1, 0.3, 0.1, 0.3, 0.1]], head=2, tail=3, n=500)
    assert flat["lo"] < 0 < flat["hi"]
    assert stats.training_rise(rising, head=2, tail=10)["tail"] == 3  # a short run: the tail shrinks to fit
    with pytest.raises(ValueError, match="longer than head"):
        stats.training_rise([[0.1, 0.2]], head=2, tail=1)


def test_the_printed_verdicts_are_the_exact_tests_not_the_descriptive_bootstrap():
    """Guards the classroom's printed verdicts: `rlvmr-nb lab` printed verdicts read off the two-stage bootstrap of
    pooled rates, which over 2 seeds is far too narrow. On the committed classroom it put RLVMR − GRPO's repetitive
    rate on L1 wholly above −5 pp, printed as 'refuted', where the exact sign-flip test over the 4 sign patterns can
    reach no verdict (and on an AMD EPYC, 'refuted' on all three levels). The printed verdicts are the
    pre-registered exact tests' and nothing else."""
    from rlvmr_nb.cli.torch_commands import lab_verdicts

    classroom = json.loads((ROOT / "benchmarks" / "results" / "lab_classroom.json").read_text())
    pre = classroom["preregistered"]
    l1 = next(d for d in classroom["differences"] if (d["level"], d["metric"]) == ("L1", "repetitive"))
    assert l1["lo"] > -stats.PRIMARY_EFFECT  # what the bootstrap's reading called 'refuted'
    verdicts = lab_verdicts(classroom)
    assert verdicts == {"primary": pre["primary"]["verdict"],
                        "secondaries": {name: test["verdict"] for name, test in pre["secondaries"].items()},
                        "fairness": pre["fairness"]["verdict"]}
    assert verdicts["primary"] == "inconclusive" and "refuted" not in json.dumps(verdicts)


def test_both_arms_get_the_same_budget_and_the_configured_advantage_preset(tmp_path):
    """A lab configuration is the trainer's configuration (`LabConfig.train`) plus the lab's own settings: a lab file
    names training settings as a training file does, and both arms get the same one but for the estimator."""
    from rlvmr_nb.lab import LabConfig, load_lab_config, train_config

    config = LabConfig.from_dict(dict(preset="paper", temperature=0.8, lr=1e-3, iterations=3))
    grpo, rlvmr = (train_config(config, tmp_path, algo, 7) for algo in ("grpo", "rlvmr"))
    shape = grpo.method.advantage_config
    assert (shape.outcome_unit, shape.outcome_scope) == ("trajectory", "batch")
    assert grpo.method.penalty_channel == "step"  # the penalty channel follows the preset
    differing = {k for k, v in grpo.flat().items() if v != rlvmr.flat()[k]}
    assert differing == {"algo", "out_dir"}  # equal budget: only the estimator (and the folder) differ
    f = rlvmr.flat()
    assert (f["temperature"], f["lr"], f["iterations"], rlvmr.seed) == (0.8, 1e-3, 3, 7)
    default = {algo: train_config(LabConfig(), tmp_path, algo, 0) for algo in ("grpo", "rlvmr")}
    # the official code's preset: per-task groups over step samples (docs/lab.md, 'Budget')
    assert (default["grpo"].method.advantage_config.outcome_unit,
            default["grpo"].method.advantage_config.outcome_scope) == ("step", "group")
    for cfg in default.values():  # the lab's reward deviations and PPO shape reach both arms alike (docs/lab.md)
        rules = cfg.method.deviations
        assert (rules.refused_penalty, rules.meta_rewards_admissible_only, rules.reflection_at_start) == (0.0, True, False)
    grouped = train_config(LabConfig.from_dict(dict(advantage_preset="paper", advantage_scope="group")), tmp_path,
                           "rlvmr", 0).method.advantage_config  # an earlier lab file's names still load
    assert (grouped.outcome_unit, grouped.outcome_scope, grouped.mr_scope, grouped.combine) == (
        "trajectory", "group", "group", "convex")  # the scope is set on top of the preset, nothing else changes
    with pytest.raises(ValueError, match="outcome_scope"):
        LabConfig.from_dict(dict(advantage_scope="task"))
    for cfg in default.values():
        f = cfg.flat()
        assert (f["ppo_epochs"], f["mini_batch_size"], f["clip_eps"], f["max_steps"]) == (1, 32, 0.2, 24)
        assert f["old_logprobs"] == "sampler"  # the classroom's (one forward pass fewer)
    recompute = train_config(LabConfig.from_dict(dict(old_logprobs="recompute")), tmp_path, "grpo", 0)
    assert recompute.update.old_logprobs == "recompute"  # the lab option reaches the trainer
    with pytest.raises(ValueError, match="old_logprobs"):
        LabConfig.from_dict(dict(old_logprobs="rollout"))
    with pytest.raises(ValueError, match="preset"):
        LabConfig.from_dict(dict(preset="papr"))
    from rlvmr_nb.lab.experiment import training_pool

    assert [t.task_id for t in training_pool(LabConfig.from_dict(dict(train_pool=2)))] == ["put:s:0", "bring:s:1"]
    with pytest.raises(ValueError, match="train_pool 401 exceeds"):
        training_pool(LabConfig.from_dict(dict(train_pool=401)))
    classroom = load_lab_config(ROOT / "configs" / "lab" / "classroom.json")
    assert classroom == LabConfig()  # the defaults are the classroom configuration (lab/config.py says so)
    for name in ("classroom", "recorded", "pilot"):  # the shipped configurations train both arms alike
        shipped = load_lab_config(ROOT / "configs" / "lab" / f"{name}.json")
        assert set(shipped.algos) == {"grpo", "rlvmr"}
    assert load_lab_config(ROOT / "configs" / "lab" / "ci.json").algos == ("grpo", "rlvmr", "gigpo")
    gigpo = train_config(config, tmp_path, "gigpo", 7)  # the third arm: the same budget, its own estimator
    assert {k for k, v in gigpo.flat().items() if v != grpo.flat()[k]} == {"algo", "out_dir"}
    pilot, recorded = (load_lab_config(ROOT / "configs" / "lab" / f"{n}.json") for n in ("pilot", "recorded"))
    assert not set(pilot.seeds) & (set(recorded.seeds) | set(classroom.seeds))  # the power pilot uses its own seeds
    # the power pilot's file still runs what its results record (it ran the classroom's settings of its day)
    ran = json.loads((ROOT / "benchmarks" / "results" / "lab_pilot.json").read_text())["config"]  # flat, as then
    ran = {("preset" if k == "advantage_preset" else k): v for k, v in ran.items() if k != "workers"}
    now = {**{k: v for k, v in pilot.to_dict().items() if k != "train"}, **pilot.train.flat(),
           "preset": pilot.train.method.preset}
    assert {k: now[k] for k in ran if k in now} == {k: (tuple(v) if isinstance(v, list) else v) for k, v in ran.items()
                                                      if k in now}


@pytest.mark.slow
def test_rlvmr_nb_lab_end_to_end_with_the_ci_config(tmp_path, capsys):
    """`rlvmr-nb lab`: one cold start, GRPO, RLVMR and GiGPO over two seeds, three levels, figures, results; then the
    reference gate on the same finished run, with a pinned reference played on every L0 layout."""
    from rlvmr_nb.cli import main
    from rlvmr_nb.lab import load_lab_config

    out, results = tmp_path / "lab", tmp_path / "results.json"
    # the cold start built before class (docs/lab.md, 'What a fair classroom costs'), and nothing else
    assert main(["lab", "--config", str(ROOT / "configs" / "lab" / "ci.json"), "--out", str(out), "--coldstart-only"]) == 0
    assert (out / "coldstart" / "sft" / "sft_log.jsonl").is_file()
    assert sorted(p.name for p in out.iterdir()) == ["coldstart"] and "cold start: " in capsys.readouterr().out
    assert main(["lab", "--config", str(ROOT / "configs" / "lab" / "ci.json"), "--out", str(out),
                 "--figures", str(tmp_path / "figures"), "--results", str(results), "--workers", "3"]) == 0
    doc = json.loads(results.read_text())
    # with 3 workers the pieces of the seeds ran side by side; each piece's stages reach the timing table
    assert {f"{stage} seed{seed}" for stage in ("eval cold start", "train grpo", "eval grpo", "train rlvmr",
                                                "eval rlvmr", "train gigpo", "eval gigpo")
            for seed in (0, 1)} <= set(doc["timing"])
    printed = capsys.readouterr().out
    assert '"training_rise"' in printed  # the CLI prints the training curves' rise beside the verdicts
    assert {(r["arm"], r["level"]) for r in doc["table"]} == {
        (a, lvl) for a in ("cold start", "GRPO", "RLVMR", "GiGPO") for lvl in ("L0", "L1", "L2")}
    assert {r["seed"] for r in doc["per_seed"]} == {0, 1}
    assert "hypothesis" not in doc  # no verdict from the descriptive bootstrap (the exact tests' are in preregistered)
    assert set(doc["training_rise"]) == {"GRPO", "RLVMR", "GiGPO"}  # the training curves' rise travels with them
    pre = doc["preregistered"]  # the paired fairness check, the primary endpoint and the secondaries
    assert pre["fairness"]["grpo_heldin"]["tasks"] == 3
    assert set(pre["fairness"]["l0_vs_coldstart"]) == {"GRPO", "RLVMR", "GiGPO"}
    assert pre["primary"]["metric"] == "repetitive" and pre["primary"]["levels"] == ["L0", "L1"]
    assert len(pre["primary"]["differences"]) == 2 and pre["primary"]["power"]["target"] == 0.8
    # ci.json states a pilot SD of 3.44 pp: 6 seeds for 80 % power, and the file says its 2 seeds fall short
    assert pre["seed_count"]["seeds"] == 6 and pre["seed_count"]["seeds_run"] == 2 and not pre["seed_count"]["meets"]
    assert "needs 6 seeds" in printed and "this run has 2 (TOO FEW)" in printed
    assert set(pre["secondaries"]) == {"repetitive L2", "invalid L0+L1", "success L0", "success L1 (b)",
                                       "success L2 (b)"}
    assert "Fairness check" in printed and "must not fall below the cold start: point estimate >= 0" in printed
    assert all(r["lo"] <= r["rise"] <= r["hi"] for r in doc["training_rise"].values())
    assert {(d["level"], d["metric"]) for d in doc["differences"]} >= {("L1", "success"), ("L0", "repetitive")}
    assert len([r for r in doc["training_curves"] if r["arm"] == "RLVMR"]) == 4  # 2 iterations x 2 seeds
    assert doc["provenance"]["git_sha"] and doc["timing"]["coldstart"]["cpu_s"] >= 0  # 0: copied from the cache
    assert len(doc["sessions"]) == 1 and doc["sessions"][0]["git_sha"] == doc["provenance"]["git_sha"]
    assert doc["sessions_one_machine"]  # one start, so one machine (`experiment.record_session`)
    assert {p.name for p in (tmp_path / "figures").iterdir()} == {
        "lab_ci_metrics.png", "lab_ci_training.png", "lab_ci_hypothesis.png", "lab_ci_case_studies.html"}
    # the amended rule on the same finished run (recorded_ni's two settings): the check reads the margin and the
    # results carry the L0 power calculation; the point-estimate run above carries none

    amended = stats.preregistered(replace(load_lab_config(ROOT / "configs" / "lab" / "ci.json"),
                                          fairness_l0_margin=-0.05, power_pilot_l0_sd=0.0231), out)
    assert {r["rule"] for r in amended["fairness"]["l0_vs_coldstart"].values()} == {"non-inferior at -0.050"}
    assert amended["l0_seed_count"]["seeds_run"] == 2 and not amended["l0_seed_count"]["meets"]
    assert "l0_seed_count" not in pre
    # the reference gate on the same run: a reference pinned by its hash (here a copy of this run's cold start),
    # played once on all 60 L0 layouts; the CI arms played 2 of them, so the gate cannot call the run fair
    from rlvmr_nb.lab.experiment import play_reference
    from rlvmr_nb.lab.reference import checkpoint_sha256, reference_result

    shutil.copytree(out / "coldstart" / "sft", tmp_path / "reference")
    gated = replace(load_lab_config(ROOT / "configs" / "lab" / "ci.json"), fairness_l0_margin=-0.05,
                    reference_checkpoint=str(tmp_path / "reference"),
                    reference_sha256=checkpoint_sha256(tmp_path / "reference"), reference_plays=2)
    record = reference_result(gated, out, play_reference)
    assert (record["layouts"], record["episodes"], record["plays"]) == (60, 120, 2)
    gate = stats.preregistered(gated, out)["fairness"]
    assert gate["rule"] == "reference gate" and set(gate["heldin"]) == set(gate["l0_vs_bar"]) == {
        "GRPO", "RLVMR", "GiGPO"}
    assert not gate["fair_test"] and "2 of the 60" in gate["reasons"][-1]
    cold = [r["success"] for r in sorted(doc["per_seed"], key=lambda r: r["seed"])
            if r["arm"] == "cold start" and r["level"] == "L0"]
    assert gate["l0_vs_bar"]["GiGPO"]["bar"] == pytest.approx([max(record["success"], c) for c in cold])
    assert "Fairness check (reference gate)" in preregistered_markdown({"preregistered": {"fairness": gate}})
    # the avoidable-repetition pre-registration on the same run: its primary, wasted steps as co-primary, claim (a)
    looping = stats.preregistered(replace(load_lab_config(ROOT / "configs" / "lab" / "ci.json"),
                                          primary_endpoint="avoidable"), out)
    assert looping["primary"]["metric"] == "avoidable" and looping["co_primary"]["metric"] == "wasted"
    assert "avoidable L2" in looping["secondaries"] and "repetitive L2" not in looping["secondaries"]
    assert looping["claim_a"] in ("supported", "refuted") or looping["claim_a"].startswith(("inconclusive", "uninf"))
    assert "**Co-primary** (wasted steps" in preregistered_markdown({"preregistered": looping})
    # beside it, exploratory: every arm's primary per seed, and RLVMR against the arm outside the comparison (GiGPO)
    assert set(looping["by_arm"]) == {"cold start", "GRPO", "RLVMR", "GiGPO"}
    assert looping["by_arm"]["RLVMR"]["avoidable"] == looping["primary"]["a"]
    assert looping["by_arm"]["GRPO"]["wasted"] == looping["co_primary"]["b"]
    versus = looping["exploratory"]["RLVMR - GiGPO"]
    assert versus["a"] == looping["primary"]["a"] and versus["b"] == looping["by_arm"]["GiGPO"]["avoidable"]
    assert versus["kind"] == "lower" and "p_holm" not in versus
    assert "exploratory, outside the pre-registration" in preregistered_markdown({"preregistered": looping})
    pool = {t.task_id for t in level_tasks("train", "L0")[:3]}  # ci.json: train_pool 3
    played = {}
    for arm in ("grpo", "rlvmr"):  # both arms started from the one cold-start checkpoint, on the same layouts
        config = json.loads((out / "runs" / f"{arm}-seed0" / "config.json").read_text())
        assert config["model"] == str(out / "coldstart" / "sft") and config["rollout"]["prompt_style"] == "meta_think"
        episodes = [json.loads(line) for line in (out / "runs" / f"{arm}-seed0" / "episodes.jsonl").open()]
        played[arm] = sorted(ep["task_id"] for ep in episodes)
        assert set(played[arm]) <= pool
    assert played["grpo"] == played["rlvmr"]
    from rlvmr_nb.records import read_episodes

    heldin = {arm: read_episodes(out / "eval" / f"{arm}-seed1" / "heldin.episodes.jsonl")
              for arm in ("cold_start", "grpo", "rlvmr")}  # the fairness check's pairs: same tasks, same seed
    repeats = load_lab_config(ROOT / "configs" / "lab" / "ci.json").heldin_episodes  # each layout played this often
    assert repeats > 1 and pre["fairness"]["grpo_heldin"]["pairs"] == 2 * 3 * repeats  # 2 seeds x 3 layouts
    assert [e.task_id for e in heldin["cold_start"]] == [e.task_id for e in heldin["grpo"]] == sorted(pool, key=[
        t.task_id for t in level_tasks("train", "L0")].index) * repeats
    # `replay` (the benchmarks' re-measurement of a finished run) plays with the evaluation's own settings: given
    # the held-in plays it reproduces the written held-in episodes of both the cold start and GRPO, action by action
    from rlvmr_nb.lab.experiment import COLDSTART_ARM, eval_config, heldin_tasks, replay

    ci = load_lab_config(ROOT / "configs" / "lab" / "ci.json")
    replayed = replay(ci, out, 1, heldin_tasks(ci) * ci.heldin_episodes)
    for arm, folder in ((COLDSTART_ARM, "cold_start"), ("grpo", "grpo")):
        assert [[s.action for s in e.steps] for e in replayed[arm]] == [[s.action for s in e.steps] for e in heldin[folder]]
    # naming the evaluation's own sampling seed changes nothing; another seed keeps both arms on the same tasks
    same = replay(ci, out, 1, heldin_tasks(ci), sampling_seed=eval_config(ci, "L0", 1).seed)
    assert [[s.action for s in e.steps] for e in same["grpo"]] == [
        [s.action for s in e.steps] for e in replay(ci, out, 1, heldin_tasks(ci))["grpo"]]
    other = replay(ci, out, 1, heldin_tasks(ci), temperature=1.0, sampling_seed=1234)
    assert [e.task_id for e in other[COLDSTART_ARM]] == [e.task_id for e in other["grpo"]] == [
        t.task_id for t in heldin_tasks(ci)]
    # eval_episodes 2 (ci.json): each L0 test task is played twice, play 0 with the seed's own sampling seed (what
    # one play gave), play 1 with play_sampling_seed(seed, 1); the arms play the same tasks in the same order
    from rlvmr_nb.evaluate import eval_tasks
    from rlvmr_nb.lab.experiment import play_sampling_seed

    l0 = {arm: read_episodes(out / "eval" / f"{arm}-seed1" / "L0.episodes.jsonl") for arm in ("cold_start", "grpo")}
    subset = [t.task_id for t in eval_tasks(eval_config(ci, "L0", 1))]
    assert ci.eval_episodes == 2
    assert [e.task_id for e in l0["cold_start"]] == [e.task_id for e in l0["grpo"]] == subset * 2
    for play in (0, 1):
        again = replay(ci, out, 1, eval_tasks(eval_config(ci, "L0", 1)), sampling_seed=play_sampling_seed(1, play))
        assert [[s.action for s in e.steps] for e in again["grpo"]] == [
            [s.action for s in e.steps] for e in l0["grpo"][play * len(subset):(play + 1) * len(subset)]]
    assert play_sampling_seed(1, 0) == 1 and len({play_sampling_seed(s, k) for s in range(50) for k in range(8)}) == 400
    # a rerun resumes: nothing is retrained, the same numbers come out
    before = (out / "runs" / "grpo-seed0" / "metrics.jsonl").read_text()
    assert main(["lab", "--config", str(ROOT / "configs" / "lab" / "ci.json"), "--out", str(out),
                 "--figures", str(tmp_path / "figures"), "--results", str(results), "--workers", "1"]) == 0
    assert (out / "runs" / "grpo-seed0" / "metrics.jsonl").read_text() == before
    assert json.loads(results.read_text())["table"] == doc["table"]


@pytest.mark.slow
def test_metacognition_lab_notebook_runs_with_the_ci_parameters(tmp_path):
    pytest.importorskip("papermill")
    pytest.importorskip("seaborn")
    from rlvmr_nb import notebooks as nbs

    # the demo with a lesson exercise's one change (docs/teaching.md): the notebook must hand it to the demo
    executed = nbs.run_notebook("06_metacognition_lab", nbs.config_path("06_metacognition_lab", ci=True),
                                tmp_path / "executed", parameters={"demo_overrides": {"algos": ["grpo"]}}, cwd=tmp_path)
    cells = json.loads(executed.read_text())["cells"]
    assert not [o for c in cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    doc = json.loads((tmp_path / "runs" / "metalab" / "ci" / "lab_results.json").read_text())
    assert {r["level"] for r in doc["table"]} == {"L0", "L2"}
    assert (tmp_path / "runs" / "metalab" / "ci" / "figures" / "lab_ci_metrics.png").is_file()
    assert (tmp_path / "runs" / "metalab" / "ci-demo" / "figures" / "lab_ci_learning.png").is_file()  # the demo
    demo = json.loads((tmp_path / "runs" / "metalab" / "ci-demo" / "learning_demo.json").read_text())
    assert demo["algo"] == "grpo" and (tmp_path / "runs" / "metalab" / "ci-demo" / "runs" / "grpo-seed0").is_dir()
    shown = "".join(str(o.get("data", {}).get("text/plain", "")) for c in cells for o in c.get("outputs", []))
    assert "repetitive" in shown and "entropy" in shown  # the failure-signals table, one row per iteration


def test_a_cold_start_is_cached_per_configuration(tmp_path, monkeypatch):
    """A rerun, the notebook and the suite copy a cold start built before for the same settings and code."""
    from rlvmr_nb.lab import LabConfig
    from rlvmr_nb.lab import experiment

    monkeypatch.setenv("RLVMR_CACHE", str(tmp_path / "cache"))
    built = []

    def fake_build(config, root, progress):
        built.append(config.sft_epochs)
        (root / "sft").mkdir(parents=True)
        (root / "data").mkdir(parents=True)
        (root / "sft" / "sft_log.jsonl").write_text(f'{{"epochs": {config.sft_epochs}}}\n')
        (root / "data" / "manifest.json").write_text("{}")

    monkeypatch.setattr(experiment, "_build_coldstart", fake_build)
    experiment.run_coldstart(LabConfig(), tmp_path / "a")
    experiment.run_coldstart(LabConfig.from_dict(dict(seeds=(5, 6), iterations=3)), tmp_path / "b")  # RL settings: same key
    default = LabConfig().sft_epochs
    assert built == [default] and (tmp_path / "b" / "coldstart" / "sft" / "sft_log.jsonl").read_text() == (
        f'{{"epochs": {default}}}\n')
    experiment.run_coldstart(LabConfig.from_dict(dict(sft_epochs=3)), tmp_path / "c")  # a cold-start setting: a new key
    assert built == [default, 3]
    assert experiment.coldstart_key(LabConfig()) != experiment.coldstart_key(LabConfig.from_dict(dict(sft_epochs=3)))
    # what a DAgger round's play reads is part of a DAgger cold start's key, and only of its
    assert experiment.coldstart_key(LabConfig()) != experiment.coldstart_key(LabConfig.from_dict(dict(max_steps=16)))
    plain = LabConfig.from_dict(dict(coldstart_dagger_rounds=0))
    assert experiment.coldstart_key(plain) == experiment.coldstart_key(LabConfig.from_dict(dict(coldstart_dagger_rounds=0, max_steps=16)))
    monkeypatch.setenv("RLVMR_LAB_COLDSTART_CACHE", "0")
    experiment.run_coldstart(LabConfig(), tmp_path / "d")
    assert built == [default, 3, default]


def test_stage_timer_adds_a_resumed_stage_instead_of_replacing_it(tmp_path):
    """Guards a resumed lab run overwriting the measured time of a finished stage by the time to skip it."""
    import time

    from rlvmr_nb.lab.experiment import StageTimer

    with StageTimer(tmp_path / "timing.json").stage("seeds"):
        time.sleep(0.05)
    with StageTimer(tmp_path / "timing.json").stage("seeds"):  # a new process: the file is read back
        pass
    assert json.loads((tmp_path / "timing.json").read_text())["seeds"]["wall_s"] >= 0.05


@pytest.mark.slow
def test_rlvmr_nb_lab_demo_end_to_end_with_the_ci_config(tmp_path, capsys):
    """`rlvmr-nb lab-demo` (the end of `make demo`): RLVMR trained on the pool, the pool played before and after
    with the same sampling seeds, the figure and the results file; a rerun resumes without retraining."""
    from rlvmr_nb.cli import main

    out = tmp_path / "demo"
    args = ["lab-demo", "--config", str(ROOT / "configs" / "lab" / "ci.json"), "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "training success, first 1 -> last 1 iterations" in printed and "paired plays" in printed
    doc = json.loads((out / "learning_demo.json").read_text())
    assert doc["algo"] == "rlvmr" and [row["iteration"] for row in doc["curve"]] == [0, 1]  # ci.json: 2 iterations
    assert all(0 <= r["lo"] <= r["success"] <= r["hi"] <= 1 and r["episodes"] == 4 for r in doc["curve"])
    pool = [t.task_id for t in level_tasks("train", "L0")[:3]]  # ci.json: train_pool 3, each played heldin_episodes
    repeats = doc["config"]["heldin_episodes"]
    assert doc["heldin"]["tasks"] == 3 and doc["heldin"]["pairs"] == 3 * repeats
    from rlvmr_nb.records import read_episodes

    played = {arm: [e.task_id for e in read_episodes(out / "eval" / f"{arm}-seed0" / "heldin.episodes.jsonl")]
              for arm in ("cold_start", "rlvmr")}
    assert played["cold_start"] == played["rlvmr"] == pool * repeats
    assert not (out / "eval" / "rlvmr-seed0" / "L0.json").exists()  # the demo plays its pool, no test level
    assert (out / "figures" / "lab_ci_learning.png").is_file()
    trained = (out / "runs" / "rlvmr-seed0" / "metrics.jsonl").read_text()
    assert main(args) == 0 and (out / "runs" / "rlvmr-seed0" / "metrics.jsonl").read_text() == trained


def test_the_lab_demo_trains_the_one_algo_its_configuration_names():
    """A lesson exercise swaps the demo's method by its configuration alone (`{"algos": ["grpo"]}`); the lab's
    configurations name several arms, and their demo stays RLVMR's."""
    from rlvmr_nb.lab import load_lab_config
    from rlvmr_nb.lab.learning_demo import demo_algo

    demo = ROOT / "configs" / "lab" / "demo.json"
    assert demo_algo(load_lab_config(demo)) == "rlvmr"
    assert demo_algo(load_lab_config(demo, algos=["grpo"])) == "grpo"
    assert demo_algo(load_lab_config(ROOT / "configs" / "lab" / "ci.json")) == "rlvmr"  # grpo, rlvmr, gigpo


def test_every_lesson_exercise_changes_one_setting_of_the_demo():
    """docs/teaching.md's exercises (configs/lesson, the run copies of `make lab` and benchmarks/lesson_exercises.py)
    each change exactly one setting of the lab demo, and that setting takes effect."""
    from rlvmr_nb.lab import load_lab_config

    demo = load_lab_config(ROOT / "configs" / "lab" / "demo.json")
    lesson = (ROOT / "configs" / "lesson").glob("*.json")
    exercises = {p.stem: json.loads(p.read_text())["demo_overrides"] for p in lesson}
    assert exercises.pop("0_demo") == {} and exercises
    for name, change in exercises.items():
        varied = load_lab_config(ROOT / "configs" / "lab" / "demo.json", **change)
        moved = {k for k, v in varied.flat().items() if demo.flat()[k] != v}
        assert moved == set(change), name


def test_failure_signals_read_the_trainer_s_rows(tmp_path):
    from rlvmr_nb.lab.learning_demo import failure_signals

    rows = [{"iteration": 0, "success": 0.25, "repetitive": 0.4, "entropy": 0.17, "kl": 0.01, "lr": 3e-4},
            {"iteration": 1, "success": 0.5, "repetitive": 0.3, "entropy": 0.15, "kl": 0.03, "lr": 3e-4}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert failure_signals(tmp_path) == [{k: v for k, v in r.items() if k != "lr"} for r in rows]


def test_the_lab_demo_shares_the_classroom_cold_start():
    """`make demo` ends with the lab demo: it must reuse the classroom's cached cold start, not build its own."""
    from rlvmr_nb.lab import load_lab_config
    from rlvmr_nb.lab.experiment import coldstart_key

    demo, classroom = (load_lab_config(ROOT / "configs" / "lab" / f"{n}.json") for n in ("demo", "classroom"))
    assert coldstart_key(demo) == coldstart_key(classroom)
    assert demo.algos == ("rlvmr",) and demo.train_pool <= 8


@pytest.mark.slow
def test_make_demo_ends_with_the_lab_learning_demo(tmp_path, monkeypatch, capsys):
    """`make demo` runs `rlvmr-nb demo --train`: after the notebook chain (stubbed here: it needs ALFWorld and
    SmolLM2, and has its own tests) the lab demo must run and draw its figure beside the demo's figures."""
    from rlvmr_nb import cli

    monkeypatch.chdir(tmp_path)
    # patched where the CLI looks them up (it imports them at its top): patching their home modules let the real
    # notebook chain run, minutes of SmolLM2 on ALFWorld, which failed on a stale runs/demo/ checkpoint
    monkeypatch.setattr(cli, "default_source", lambda: None)
    monkeypatch.setattr(cli, "install_alfworld_data", lambda source: tmp_path)
    monkeypatch.setattr(cli, "run_demo_chain", lambda **kwargs: {})
    monkeypatch.setattr(cli, "LAB_DEMO_CONFIG", str(ROOT / "configs" / "lab" / "ci.json"))
    # the demo points $ALFWORLD_DATA at the installed games; monkeypatch puts the variable back at teardown, so the
    # stub's folder does not leak into later tests (an ALFWorld cold-start test then failed on the missing folder)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    assert cli.main(["demo", "--train"]) == 0
    assert "paired plays" in capsys.readouterr().out
    assert (tmp_path / "runs" / "figures" / "demo" / "lab_ci_learning.png").is_file()
    assert (tmp_path / "runs" / "metalab" / "demo" / "learning_demo.json").is_file()


def test_every_lab_configuration_loads_and_keeps_its_seeds_apart():
    """Every file in configs/lab loads (a setting misspelt in a rarely run configuration, e.g. the pilots, would
    otherwise surface only when someone runs it), and no two of the seeded experiments share a seed with each other
    or with the budget sweep (a budget chosen on a seed that a reported run also uses is the winner's curse)."""
    import sys

    from rlvmr_nb.lab import load_lab_config

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lab_fairness_sweep import SWEEP_SEEDS

    configs = {path.stem: load_lab_config(path) for path in sorted((ROOT / "configs" / "lab").glob("*.json"))}
    assert {"classroom", "recorded", "pilot", "pilot_learning", "ci", "demo"} <= set(configs)
    reported = {name: set(configs[name].seeds) for name in ("recorded", "pilot", "pilot_learning")}
    assert not reported["pilot"] & reported["recorded"] and not reported["pilot_learning"] & reported["recorded"]
    # the recorded seed count rests on the learning pilot's SD, so the recorded run keeps the pilot's settings
    # and states that SD; its seed count meets the power calculation
    recorded, learning = configs["recorded"].to_dict(), configs["pilot_learning"].to_dict()
    assert {k: v for k, v in recorded.items() if k not in ("name", "seeds", "power_pilot_sd")} == {
        k: v for k, v in learning.items() if k not in ("name", "seeds", "power_pilot_sd")}
    from rlvmr_nb.lab import paired
    from rlvmr_nb.lab.stats import PRIMARY_EFFECT

    pilot_sd = json.loads((ROOT / "benchmarks" / "results" / "lab_pilot_learning.json").read_text())[
        "preregistered"]["primary"]["t"]["sd"]
    assert configs["recorded"].power_pilot_sd == round(pilot_sd, 4)  # the stated SD is the pilot's measured one
    needed = paired.seeds_for_power(PRIMARY_EFFECT, configs["recorded"].power_pilot_sd)["seeds"]
    assert len(configs["recorded"].seeds) >= needed
    assert not reported["pilot"] & reported["pilot_learning"]
    assert not set(SWEEP_SEEDS) & set().union(*reported.values(), configs["classroom"].seeds)
    # the avoidable-repetition pilot draws seeds no other configuration or sweep uses, and plays the pinned reference
    for pilot in ("avoidable_pilot", "branching_pilot"):
        others = set().union(*(set(c.seeds) for name, c in configs.items() if name not in (pilot, "ci", "demo")))
        assert not set(configs[pilot].seeds) & (others | set(SWEEP_SEEDS))
        assert configs[pilot].reference_record and configs[pilot].primary_endpoint == "avoidable"
    # the classroom runs the sweep variant it was chosen as, on its own seeds (docs/lab.md, 'Classroom budget'), and
    # every variant still builds on the budget it ran on, whatever the classroom file says now. The variant measured
    # unseen L0 on all 60 layouts x 4 plays; the classroom keeps its pre-registered 20 layouts x 1 play.
    from lab_fairness_sweep import FIRST_CLASSROOM, VARIANTS

    first = load_lab_config(ROOT / "configs" / "lab" / "classroom.json", **VARIANTS["base"])
    chosen = load_lab_config(ROOT / "configs" / "lab" / "classroom.json", **{
        **VARIANTS["c-pool6-kl0.1-dagger2-e14"], "eval_tasks": 20, "eval_episodes": 1})
    assert chosen == configs["classroom"] and first != configs["classroom"]
    assert all(set(FIRST_CLASSROOM) <= set(overrides) for overrides in VARIANTS.values())
    assert configs["pilot_learning"].eval_episodes == 2 and configs["pilot_learning"].fairness_l0_margin is None


def test_the_amended_recorded_run_states_its_rule_plays_and_seeds_from_the_play_noise_split():
    """`recorded_ni` changes only what the amendment names (docs/lab.md, 'Amendment'): the L0 condition as
    non-inferiority at verdict (b)'s margin, 8 plays per test task, fresh seeds, and the two SDs its seed count
    rests on, which must be the ones `benchmarks/lab_play_noise.py` derived for 8 plays. Guards against a run whose
    stated power calculation is not the committed one, or whose seeds were already looked at."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lab_fairness_sweep import SWEEP_SEEDS

    from rlvmr_nb.lab import LabConfig, load_lab_config, paired
    from rlvmr_nb.lab.stats import PRIMARY_EFFECT

    configs = {path.stem: load_lab_config(path) for path in sorted((ROOT / "configs" / "lab").glob("*.json"))}
    amended, recorded = configs["recorded_ni"], configs["recorded"]
    changed = {"name", "seeds", "eval_episodes", "fairness_l0_margin", "power_pilot_sd", "power_pilot_l0_sd"}
    assert {k: v for k, v in amended.to_dict().items() if k not in changed} == {
        k: v for k, v in recorded.to_dict().items() if k not in changed}
    assert amended.fairness_l0_margin == paired.NON_INFERIORITY_MARGIN == -0.05
    used = set(SWEEP_SEEDS).union(*(set(c.seeds) for name, c in configs.items() if name != "recorded_ni"))
    assert not set(amended.seeds) & used
    noise = json.loads((ROOT / "benchmarks" / "results" / "lab_play_noise.json").read_text())
    design = next(d for d in noise["designs"] if d["plays"] == amended.eval_episodes)
    assert amended.power_pilot_sd == round(design["sd_primary"], 4)
    assert amended.power_pilot_l0_sd == round(design["sd_l0"], 4)
    assert len(amended.seeds) >= paired.seeds_for_power(PRIMARY_EFFECT, amended.power_pilot_sd)["seeds"]
    assert paired.l0_seed_power(amended.power_pilot_l0_sd, len(amended.seeds), amended.fairness_l0_margin)["meets"]
    with pytest.raises(ValueError, match="fairness_l0_margin too"):
        LabConfig.from_dict(dict(power_pilot_l0_sd=0.02))
    from rlvmr_nb.lab.report import preregistered_markdown

    record = paired.l0_seed_power(amended.power_pilot_l0_sd, len(amended.seeds), amended.fairness_l0_margin)
    text = preregistered_markdown({"preregistered": {"l0_seed_count": record}})
    assert f"probability {record['power']:.2f} at {len(amended.seeds)} seeds" in text and "TOO FEW" not in text


def test_the_homes_named_recorded_run_is_its_pilot_on_fresh_seeds_counted_by_the_pilots_power():
    """`recorded_home` is what docs/lab.md stated before the homes-named pilot's results were read ('The recorded run
    that follows the pilot'): `large_pilot_home` unchanged but for its name and seeds (780 onwards, none used
    elsewhere), as many as the exact sign-flip count on the pilot's primary SD, 6 to 10, with that SD stated. Guards
    against a recorded run whose settings drifted from the pilot that made it fair, or whose seed count is not the
    committed pilot's."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lab_fairness_sweep import SWEEP_SEEDS

    from rlvmr_nb.lab import load_lab_config, paired
    from rlvmr_nb.lab.stats import PRIMARY_EFFECT

    configs = {path.stem: load_lab_config(path) for path in sorted((ROOT / "configs" / "lab").glob("*.json"))}
    recorded, pilot = configs["recorded_home"], configs["large_pilot_home"]
    stated = {"name", "seeds", "power_pilot_sd", "power_pilot_seeds"}
    assert {k: v for k, v in recorded.to_dict().items() if k not in stated} == {
        k: v for k, v in pilot.to_dict().items() if k not in stated}
    results = json.loads((ROOT / "benchmarks" / "results" / "lab_large_pilot_home.json").read_text())["preregistered"]
    assert results["fairness"]["fair_test"]  # the condition the recorded run was stated under
    assert recorded.power_pilot_sd == round(results["primary"]["t"]["sd"], 4)
    assert recorded.power_pilot_seeds == len(pilot.seeds) == 5
    needed = paired.seeds_for_power(PRIMARY_EFFECT, recorded.power_pilot_sd, pilot_seeds=recorded.power_pilot_seeds)
    assert len(recorded.seeds) == min(10, max(6, needed["seeds_sign_flip"]))
    assert recorded.seeds == tuple(range(780, 780 + len(recorded.seeds)))
    used = set(SWEEP_SEEDS).union(*(set(c.seeds) for name, c in configs.items() if name != "recorded_home"))
    assert not set(recorded.seeds) & used


def test_the_sweeps_prompt_patches_still_apply_and_mark_the_prompt(tmp_path):
    """A sweep variant that ran on a patched lab prompt is reproduced by applying its patch (docs/lab.md, 'Lever (2)
    tested'). Guards the two ways that breaks silently: the prompt's source drifts so the patch no longer applies,
    or the patched prompt loses the text the sweep script checks before it runs such a variant."""
    import shutil
    import subprocess
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lab_fairness_sweep import PATCH_MARK, PATCHED, VARIANTS

    if shutil.which("git") is None:
        pytest.skip("needs git")
    assert set(PATCHED) <= set(VARIANTS)
    target = "src/rlvmr_nb/rollout/prompts/families.py"
    copy = tmp_path / target
    copy.parent.mkdir(parents=True)
    shutil.copy(ROOT / target, copy)
    for patch in set(PATCHED.values()):
        assert PATCH_MARK not in copy.read_text()
        subprocess.run(["git", "apply", str(ROOT / patch)], cwd=tmp_path, check=True)
        assert PATCH_MARK in copy.read_text()
        subprocess.run(["git", "apply", "-R", str(ROOT / patch)], cwd=tmp_path, check=True)


def test_the_expert_agrees_with_itself_in_every_decision_kind(tmp_path):
    """`benchmarks/lab_expert_agreement.py` re-derives the expert's choice from each step's prompt inputs and sorts it
    by kind. On the expert's own episodes every step must agree, and the kinds must all occur: a wrong record
    (observations and actions out of step) or a kind that never fires would show here, not as a low rate in
    docs/lab.md's table."""
    import sys

    from rlvmr_nb.envs.lab_expert import lab_expert_actions
    from rlvmr_nb.envs.lab_world import LabEnv

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lab_expert_agreement import KINDS, agreement

    env, lines = LabEnv(max_steps=60), []
    for task in level_tasks("test", "L0")[:20]:
        reset = env.reset(task)
        observation, admissible, steps = reset.observation, reset.admissible_actions, []
        for action in lab_expert_actions(task):
            steps.append({"observation": observation, "admissible_actions": admissible, "action": action})
            result = env.step(action)
            observation, admissible = result.observation, result.admissible_actions
        lines.append(json.dumps({"task_text": reset.task_text, "steps": steps}))
    path = tmp_path / "expert.episodes.jsonl"
    path.write_text("\n".join(lines) + "\n")
    counts = agreement(path)
    assert set(counts) == set(KINDS)
    assert all(agree == steps > 0 for agree, steps in counts.values())


def test_renamed_demonstrations_stay_training_tasks():
    """The renamed cold start (`benchmarks/lab_coldstart_epochs.py --renamed-copies`) must not train on an L1
    combination (that would leak the unseen split), must keep the hallway every episode starts in, and must rename
    a word everywhere it occurs, articles included."""
    import random
    import sys

    from rlvmr_nb.envs.lab_world import HUB, combination_is_heldout, parse_goal

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lab_coldstart_epochs import renamer

    for i in range(50):
        goal = "put the apple in the box." if i % 2 else "bring the apple to the kitchen."
        rename = renamer(random.Random(i), goal)
        _, (target,), destination = parse_goal(rename(goal))
        assert not combination_is_heldout(target, destination)
        text = rename(f"You are in the {HUB}. You see an apple. Exits: kitchen.")
        assert text == f"You are in the {HUB}. You see {'an' if target[0] in 'aeiou' else 'a'} {target}. Exits: " \
                      f"{rename('kitchen')}."


def test_a_spark_arm_is_refused_when_its_tree_cannot_fit_the_group():
    from rlvmr_nb.lab import load_lab_config

    with pytest.raises(ValueError, match=r"'spark_mr' arm grows .* from 4 roots, and group_size 2 cannot hold them"):
        load_lab_config(ROOT / "configs" / "lab" / "ci.json", algos=["grpo", "spark_mr"])  # ci.json: group_size 2
    with pytest.raises(ValueError, match="unknown arm 'sprak'"):
        load_lab_config(ROOT / "configs" / "lab" / "ci.json", algos=["grpo", "sprak"])
    fits = load_lab_config(ROOT / "configs" / "lab" / "ci.json", algos=["grpo", "spark", "spark_mr"], group_size=4)
    assert fits.algos == ("grpo", "spark", "spark_mr")


@pytest.mark.slow
def test_rlvmr_nb_lab_trains_and_reports_a_spark_arm_beside_the_others(tmp_path, capsys):
    """`rlvmr-nb lab` with ci.json's settings and a SPARK-MR arm (RLVMR's advantages on SPARK's trees): the arm
    trains from the same cold start on trees of 8 leaves from 4 roots, is evaluated on every level with one
    rollout per task, and stands in the results beside GRPO and RLVMR. The seeded `random:0.5` trigger makes forks
    happen within ci.json's 4 steps (with the default `explore` trigger this cold start forked none in seed 0: 16 roots
    and 16 top-ups); it only matters to arms that branch."""
    from rlvmr_nb.cli import main
    from rlvmr_nb.records import read_episodes
    from rlvmr_nb.rollout.branching import tree_edges
    from rlvmr_nb.runs.logs import read_metrics

    config = {**json.loads((ROOT / "configs" / "lab" / "ci.json").read_text()), "name": "ci-spark",
              "algos": ["grpo", "rlvmr", "spark_mr"], "group_size": 8, "branch_trigger": "random:0.5"}
    (tmp_path / "ci_spark.json").write_text(json.dumps(config))
    out, results = tmp_path / "lab", tmp_path / "results.json"
    assert main(["lab", "--config", str(tmp_path / "ci_spark.json"), "--out", str(out),
                 "--figures", str(tmp_path / "figures"), "--results", str(results), "--workers", "2"]) == 0
    doc = json.loads(results.read_text())
    assert {(r["arm"], r["level"]) for r in doc["table"]} == {
        (a, lvl) for a in ("cold start", "GRPO", "RLVMR", "SPARK-MR") for lvl in ("L0", "L1", "L2")}
    assert {"train spark_mr seed0", "eval spark_mr seed1"} <= set(doc["timing"])
    assert set(doc["training_rise"]) == {"GRPO", "RLVMR", "SPARK-MR"}
    assert set(doc["preregistered"]["fairness"]["l0_vs_coldstart"]) == {"GRPO", "RLVMR", "SPARK-MR"}
    trained = read_episodes(out / "runs" / "spark_mr-seed0" / "episodes.jsonl")
    groups = {ep.group_id for ep in trained}
    assert len(trained) == 8 * len(groups) == 8 * 2 * 2  # 8 leaves x 2 tasks x 2 iterations
    kinds = [ep.info["branch"]["kind"] for ep in trained]
    assert kinds.count("root") == 4 * len(groups) and kinds.count("branch") > 0
    assert set(kinds) <= {"root", "branch", "top_up"}
    for parent, child, shared in tree_edges(trained):  # every branch forked from a leaf of its own task's tree
        assert parent.rsplit("-", 1)[0] == child.rsplit("-", 1)[0] and shared >= 1
    assert any(k.startswith("branch/") for row in read_metrics(out / "runs" / "spark_mr-seed0") for k in row)
    assert not any("branch" in ep.info for ep in read_episodes(out / "runs" / "grpo-seed0" / "episodes.jsonl"))
    evaluated = read_episodes(out / "eval" / "spark_mr-seed0" / "L0.episodes.jsonl")
    assert evaluated and not any("branch" in ep.info for ep in evaluated)  # evaluation plays plain rollouts
    print("spark_mr kinds:", {k: kinds.count(k) for k in set(kinds)}, "tags:",
          sorted({str(s.tag) for ep in trained for s in ep.steps}), file=__import__("sys").stderr)



def test_the_lab_summary_gives_a_one_arm_sweep_its_fairness_check_alone():
    """`rlvmr-nb lab`'s printed verdicts (`lab_verdicts`) on the results of real runs with the avoidable primary.
    Guards the crash the larger house's budget sweep (GRPO only) met after writing its results: the summary read the
    primary's verdict, which a run with one arm has no comparison for (KeyError 'primary')."""
    from rlvmr_nb.cli.torch_commands import lab_verdicts

    results = ROOT / "benchmarks" / "results"
    one_arm = json.loads((results / "lab_large_sweep_budget.json").read_text())
    assert "primary" not in one_arm["preregistered"]
    assert lab_verdicts(one_arm) == {"fairness": one_arm["preregistered"]["fairness"]["verdict"]}
    two_arms = json.loads((results / "lab_large_sweep_pool.json").read_text())
    pre = two_arms["preregistered"]
    assert lab_verdicts(two_arms) == {
        "primary": pre["primary"]["verdict"], "co_primary": pre["co_primary"]["verdict"], "claim_a": pre["claim_a"],
        "secondaries": {name: test["verdict"] for name, test in pre["secondaries"].items()},
        "fairness": pre["fairness"]["verdict"]}


def test_an_arm_stopped_before_its_last_checkpoint_resumes_to_the_uninterrupted_weights(lab_tokenizer, tmp_path,
                                                                                          monkeypatch):
    """Guards two bugs of a lab arm that checkpoints along the way. (1) A lab run stopped between an arm's last
    logged iteration and its last checkpoint counted the arm finished by its metrics rows, and its evaluation then
    played the newest intact checkpoint: an older policy, reported as the trained one. (2) A stopped lab run
    restarted each unfinished arm from iteration 0 (one checkpoint at the end). Here the stop is simulated by
    deleting the last checkpoint of a finished arm: the arm must retrain from the checkpoint before it and end on
    the uninterrupted run's weights, bit for bit."""
    import torch

    from rlvmr_nb.lab import LabConfig, experiment
    from rlvmr_nb.lab.policy import LabPolicyConfig
    from rlvmr_nb.runs.logs import read_metrics

    monkeypatch.setattr(experiment, "ARM_CHECKPOINT_EVERY", 2)
    lab_train_config = experiment.train_config  # the lab keeps one checkpoint; two leave the stop's state behind
    monkeypatch.setattr(experiment, "train_config", lambda *args: (lambda c: replace(
        c, run=replace(c.run, keep_checkpoints=2)))(lab_train_config(*args)))
    config = LabConfig.from_dict({**json.loads((ROOT / "configs" / "lab" / "ci.json").read_text()), "iterations": 4})
    assert experiment.train_config(config, tmp_path, "grpo", 0).run.save_every == 2  # along the way, not at the end
    runs = {}
    for name in ("whole", "stopped"):
        out = tmp_path / name
        policy = make_policy(lab_tokenizer, LabPolicyConfig(hidden_size=32, layers=1))
        torch.manual_seed(0)
        for p in policy.parameters():  # the same cold start in both folders
            torch.nn.init.normal_(p, std=0.02)
        policy.save_pretrained(experiment.coldstart_dir(out))
        lab_tokenizer.save_pretrained(experiment.coldstart_dir(out))
        runs[name] = experiment.run_arm(config, out, "grpo", 3)
    final = experiment.final_checkpoint(config, tmp_path / "stopped", "grpo", 3)
    assert final.name == "ckpt-00003" and (runs["stopped"] / "ckpt-00001").is_dir()
    shutil.rmtree(final)  # stopped after iteration 3 was logged, before its checkpoint
    assert len(read_metrics(runs["stopped"])) == 4  # the old "finished" test would have passed here
    experiment.run_arm(config, tmp_path / "stopped", "grpo", 3)
    assert [r["iteration"] for r in read_metrics(runs["stopped"])] == [0, 1, 2, 3]  # every iteration once
    whole, resumed = (torch.load(r / "ckpt-00003" / "model.pt", weights_only=True) for r in runs.values())
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_each_start_of_a_lab_run_is_logged_with_its_commit_machine_and_what_was_already_finished(tmp_path):
    """`experiment.record_session`: a lab run spread over sessions must say which commit and machine each piece ran
    on. Guards the gap the homes-named pilot showed: its results named only the commit of the session that wrote
    them, though its arms ran at three commits, and a resume on another machine would have gone unnoticed. The log
    appends (an earlier start is never overwritten) and records what the folder held before each start."""
    from rlvmr_nb.lab import load_lab_config
    from rlvmr_nb.lab.experiment import HELDIN, eval_path, record_session
    from rlvmr_nb.runs.machine import machine_facts, same_machine

    config = load_lab_config(ROOT / "configs" / "lab" / "ci.json")
    first = record_session(config, tmp_path)
    assert len(first) == 1 and first[0]["finished_before"] == {"arms": [], "evaluations": []}
    assert first[0]["git_sha"] and same_machine(first[0]["machine_facts"], machine_facts())
    for level in (*config.levels, HELDIN):  # the cold start of seed 1 evaluated everywhere; seed 0 on one level
        eval_path(tmp_path, "cold start", 1, level).parent.mkdir(parents=True, exist_ok=True)
        eval_path(tmp_path, "cold start", 1, level).write_text("{}")
    eval_path(tmp_path, "cold start", 0, "L0").parent.mkdir(parents=True, exist_ok=True)
    eval_path(tmp_path, "cold start", 0, "L0").write_text("{}")
    second = record_session(config, tmp_path)
    assert len(second) == 2 and second[0] == first[0]
    assert second[1]["finished_before"] == {"arms": [], "evaluations": ["cold_start-seed1"]}


def test_the_committed_recorded_run_is_its_configuration_and_its_verdicts_recompute_from_its_seeds():
    """`benchmarks/results/lab_recorded_home.json`, which the README and docs/lab.md quote ('The recorded run:
    result'), ran `configs/lab/recorded_home.json` as committed, on one machine, and its fairness verdict, primary,
    co-primary and claim (a) follow from the per-seed values it stores. Guards a quoted verdict that the stored
    numbers do not give (a hand edit, or a result written by other code than the tests' `lab.paired`)."""
    from rlvmr_nb.lab import load_lab_config, paired
    from rlvmr_nb.lab.stats import PRIMARY_EFFECT, co_primary_verdict

    config = load_lab_config(ROOT / "configs" / "lab" / "recorded_home.json")
    results = json.loads((ROOT / "benchmarks" / "results" / "lab_recorded_home.json").read_text())
    now = json.loads(json.dumps(config.to_dict()))
    # only a machine setting added after the run (the threads of a worker: the same run at 1 and 2, lab_threads.json)
    assert set(now) - set(results["config"]) <= {"threads_per_worker"}
    assert {k: v for k, v in results["config"].items() if k in now} == {
        k: v for k, v in now.items() if k in results["config"]}
    assert results["sessions_one_machine"]
    pre = results["preregistered"]
    assert pre["seeds"] == list(config.seeds) and list(pre["by_arm"]) == ["cold start", "GRPO", "RLVMR", "GiGPO"]
    gate = pre["fairness"]
    assert gate["fair_test"] == (all(arm["passes"] for arm in gate["heldin"].values())
                                 and all(arm["passes"] for arm in gate["l0_vs_bar"].values())
                                 and gate["layouts"] >= gate["required_layouts"])
    verdicts = {}
    for name, effect in (("primary", PRIMARY_EFFECT), ("co_primary", 0.0)):
        stored = pre[name]
        again = paired.paired_comparison(stored["a"], stored["b"], stored["kind"], effect=effect)
        assert again["differences"] == pytest.approx(stored["differences"])
        assert (again["sign_flip"]["lo"], again["sign_flip"]["hi"]) == pytest.approx(
            (stored["sign_flip"]["lo"], stored["sign_flip"]["hi"]))
        verdicts[name] = again["verdict"]
        assert verdicts[name] == stored["verdict"]
    assert pre["claim_a"] == co_primary_verdict(verdicts["primary"], verdicts["co_primary"])


def test_the_readme_quotes_the_recorded_run_as_its_results_file_holds_it():
    """The README's recorded-run table and verdict intervals are typed by hand; each must be what
    `benchmarks/results/lab_recorded_home.json` holds, rounded as printed. Guards a quoted figure that drifts from
    the file, or an interval quoted from the wrong test (the comparisons' are the exact sign-flip test's)."""
    results = json.loads((ROOT / "benchmarks" / "results" / "lab_recorded_home.json").read_text())
    readme = (ROOT / "README.md").read_text().replace("**", "")
    pre = results["preregistered"]

    def signed(x: float) -> str:
        return f"{100 * x:+.1f}".replace("-", "−")

    def quoted(test: dict) -> str:
        flip = test["sign_flip"]
        return f"{signed(flip['mean'])} pp [{signed(flip['lo'])}, {signed(flip['hi'])}]"

    arms = list(pre["by_arm"])  # cold start, GRPO, RLVMR, GiGPO: the table's columns
    for metric, label in (("avoidable", "avoidable repetition, unseen L0 + L1"), ("wasted", "wasted steps, unseen L0 + L1")):
        cells = " | ".join(f"{100 * np.mean(pre['by_arm'][arm][metric]):.1f} %" for arm in arms)
        assert f"| {label} | {cells} |" in readme
    success = {(row["arm"], row["level"]): row["mean"] for row in results["table"] if row["metric"] == "success"}
    cells = " | ".join(f"{100 * success[arm, 'L0']:.1f} %" for arm in arms)
    assert f"| unseen L0 success (the reference: {100 * pre['fairness']['reference_success']:.1f} %) | {cells} |" in readme
    for test in (pre["primary"], pre["co_primary"], pre["secondaries"]["success L1 (b)"],
                 pre["exploratory"]["RLVMR - GiGPO"]):
        assert quoted(test) in readme


def test_docs_lab_quotes_the_recorded_run_as_its_results_file_holds_it():
    """docs/lab.md's 'The recorded run: result' types every figure by hand: the gate's held-in rises and unseen-L0
    differences, the success table, each verdict's estimate with its exact and paired-t intervals, the per-seed
    differences and SD. Each must be what `benchmarks/results/lab_recorded_home.json` holds, rounded as printed.
    Guards a figure that drifts from the file, or an interval quoted from the other test."""
    results = json.loads((ROOT / "benchmarks" / "results" / "lab_recorded_home.json").read_text())
    text = (ROOT / "docs" / "lab.md").read_text()
    section = text[text.index("### The recorded run: result"):text.index("### What a fair classroom costs")]
    section = " ".join(section.replace("**", "").split())  # the prose wraps lines anywhere
    pre = results["preregistered"]
    fairness = pre["fairness"]

    def pp(x: float) -> str:
        return f"{100 * x:+.1f}".replace("-", "−")

    def interval(lo: float, hi: float) -> str:
        return f"[{pp(lo)}, {pp(hi)}]"

    def percent(x: float) -> str:
        return f"{100 * x:.1f} %"

    expected = [percent(fairness["reference_success"])]
    for arm, held in fairness["heldin"].items():
        expected += [percent(held["before"]), percent(held["after"]),
                     f"{pp(held['rise'])} pp {interval(held['lo'], held['hi'])}"]
        gate = fairness["l0_vs_bar"][arm]
        expected.append(f"{arm} {pp(gate['difference'])} pp {interval(gate['interval']['lo'], gate['interval']['hi'])}")
    cold_start_bars = sorted({bar for bar in fairness["l0_vs_bar"]["GRPO"]["bar"]} - {fairness["reference_success"]})
    expected.append(" and ".join(f"{100 * bar:.1f}" for bar in cold_start_bars) + " %")
    success = {(row["arm"], row["level"]): row["mean"] for row in results["table"] if row["metric"] == "success"}
    arms = list(pre["by_arm"])  # cold start, GRPO, RLVMR, GiGPO
    expected.append("L1 " + " / ".join(f"{100 * success[arm, 'L1']:.1f}" for arm in arms) + " %")
    expected += [f"L0 cold start {percent(success['cold start', 'L0'])}"]
    expected += [f"{arm} {percent(success[arm, 'L0'])}" for arm in arms[1:]]

    primary, co_primary = pre["primary"], pre["co_primary"]
    flip = primary["sign_flip"]
    expected += [
        f"{pp(flip['mean'])} pp ({100 * np.mean(primary['a']):.1f} against {percent(np.mean(primary['b']))}",
        "per seed " + ", ".join(pp(d) for d in primary["differences"]),
        f"exact interval {interval(flip['lo'], flip['hi'])}; paired t {interval(primary['t']['lo'], primary['t']['hi'])}",
        f"per-seed SD here is {100 * primary['t']['sd']:.2f} pp",
        f"{100 * primary['power']['sd_upper']:.2f} pp",
        f"{pp(co_primary['sign_flip']['mean'])} pp ({100 * np.mean(co_primary['a']):.1f} against "
        f"{percent(np.mean(co_primary['b']))}",
        f"interval {interval(co_primary['sign_flip']['lo'], co_primary['sign_flip']['hi'])}",
    ]
    for test in (pre["secondaries"][name] for name in ("success L1 (b)", "avoidable L2", "invalid L0+L1", "success L0")):
        flip, t = test["sign_flip"], test["t"]
        expected.append(f"{pp(flip['mean'])} pp")
        expected.append(f"{interval(flip['lo'], flip['hi'])} (")
        expected.append(f"t {interval(t['lo'], t['hi'])}")
    expected.append(f"({pre['secondaries']['success L1 (b)']['p_holm']:.4f}")
    exploratory = pre["exploratory"]["RLVMR - GiGPO"]
    expected += [f"{pp(exploratory['sign_flip']['mean'])} pp, exact interval "
                 f"{interval(exploratory['sign_flip']['lo'], exploratory['sign_flip']['hi'])} (paired t "
                 f"{interval(exploratory['t']['lo'], exploratory['t']['hi'])})"]
    avoidable = {arm: percent(np.mean(pre["by_arm"][arm]["avoidable"])) for arm in arms}
    expected.append(f"(GiGPO {avoidable['GiGPO']}, GRPO {avoidable['GRPO']}, cold start {avoidable['cold start']})")
    expected.append(f"RLVMR's {avoidable['RLVMR']}")
    won = pre["repetition_by_outcome"]["won"]
    expected.append(f"{percent(np.mean(won['cold start']))} for the cold start, {percent(np.mean(won['GRPO']))} GRPO, "
                    f"{percent(np.mean(won['RLVMR']))} RLVMR, {percent(np.mean(won['GiGPO']))} GiGPO")
    missing = [quote for quote in expected if quote not in section]
    assert not missing, missing


def test_the_lab_runs_each_worker_on_the_threads_the_machine_flags_give_it(tmp_path, monkeypatch):
    """`rlvmr-nb lab --workers W --threads-per-worker T` reaches the configuration, and each worker's piece runs on
    T torch threads. Guards the many-core journey (docs/lab.md, 'What a fair classroom costs'): the workers were
    pinned to one thread each, so on a machine with more cores than pieces the slowest arm set the wall time and the
    other cores idled, whatever the flags said."""
    import torch

    from rlvmr_nb.cli import main
    from rlvmr_nb.cli import torch_commands
    from rlvmr_nb.lab import LabConfig, experiment

    ran: dict = {}

    def record_config(config, out):
        ran["config"] = config
        raise SystemExit(0)  # the flags' journey ends where the run would start

    monkeypatch.setattr(torch_commands, "run_lab", record_config)
    with pytest.raises(SystemExit):
        main(["lab", "--config", str(ROOT / "configs" / "lab" / "ci.json"), "--out", str(tmp_path),
              "--workers", "3", "--threads-per-worker", "2"])
    assert (ran["config"].workers, ran["config"].threads_per_worker) == (3, 2)
    with pytest.raises(SystemExit):  # without the flag, the configuration's own value
        main(["lab", "--config", str(ROOT / "configs" / "lab" / "ci.json"), "--out", str(tmp_path)])
    assert ran["config"].threads_per_worker == LabConfig().threads_per_worker == 1
    with pytest.raises(ValueError, match="threads_per_worker"):
        LabConfig.from_dict(dict(threads_per_worker=0))

    threads = []
    monkeypatch.setattr(experiment, "run_unit",
                        lambda config, out, seed, arm, log: threads.append(torch.get_num_threads()) or {})
    before = torch.get_num_threads()
    try:
        for count in (2, 1):
            experiment._unit_in_worker(replace(LabConfig(), threads_per_worker=count).to_dict(), str(tmp_path), 0,
                                       "grpo")
    finally:
        torch.set_num_threads(before)
    assert threads == [2, 1]


def test_docs_quote_the_threads_benchmark_as_its_results_file_holds_it():
    """docs/lab.md ('What a fair classroom costs') and the README quote `benchmarks/results/lab_threads.json`: the
    iteration at one and at two threads per piece, the speed-up, and that both drew the same run. Guards a projection
    of the many-core classroom resting on figures that drifted from the measurement."""
    measured = json.loads((ROOT / "benchmarks" / "results" / "lab_threads.json").read_text())
    lab, readme = (" ".join((ROOT / name).read_text().split()) for name in ("docs/lab.md", "README.md"))  # unwrapped
    one, two = measured["means"]["1"], measured["means"]["2"]
    speedup = measured["speedup_vs_1_thread"]["2"]["iteration_s"]
    assert f"**{one['iteration_s']:.1f} s at one thread** (rollout {one['rollout_s']:.1f}" in lab
    assert f"**{two['iteration_s']:.1f} s at two** ({two['rollout_s']:.1f}" in lab
    assert f"**{speedup:.2f}×**" in lab and f"30/{speedup:.2f}" in lab and f"{speedup:.2f}× faster" in readme
    assert measured["same_run_at_every_thread_count"] and "drew the same run" in lab
    assert measured["iterations_per_thread_count"] == {"1": 4, "2": 4}
    piece = json.loads((ROOT / "benchmarks" / "results" / "lab_threads_piece.json").read_text())
    stages = {name.split()[0]: stage["wall_s"] / 60 for name, stage in piece["stages"].items()}
    assert (piece["threads"], piece["iterations"]) == (2, 32)
    assert (f"**{piece['piece_wall_s'] / 60:.1f} min** wall (training {stages['train']:.1f} min, evaluation "
            f"{stages['eval']:.1f})") in lab
