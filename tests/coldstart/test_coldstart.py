"""Cold start: expert sources without leakage, RuleTeacher on the real engines, LLMTeacher against a
local OpenAI-compatible server, dataset/manifest round trip, determinism, tag shares, and a tiny SFT run."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from alfworld_fixtures import alfworld_data_root, alfworld_engine  # noqa: F401  (session fixtures)

from rlvmr_nb.coldstart import (
    AnnotationRejected,
    LeakageError,
    LLMTeacher,
    RuleTeacher,
    TagShareError,
    assert_no_heldout,
    build_coldstart_dataset,
    check_tag_shares,
    heldout_task_types,
    read_manifest,
    read_samples,
    read_trajectories,
)
from rlvmr_nb.coldstart.experts import candidate_order, expert_episode, replay, training_tasks
from rlvmr_nb.coldstart.teachers import task_of
from rlvmr_nb.envs.base import TaskSpec
from rlvmr_nb.rollout.prompts import AgentMemory, PromptConfig
from rlvmr_nb.rollout.tags import META_TAGS, parse_output
from rlvmr_nb.records import Episode, Step, read_episodes

L2_HELDOUT = {"pick_cool_then_place_in_recep", "pick_two_obj_and_place"}


# ----------------------------------------------------------------------------------- leakage (no engine)


def test_heldout_types_per_level():
    assert heldout_task_types("alfworld", "L2") == L2_HELDOUT
    assert heldout_task_types("alfworld", "L0") == heldout_task_types("alfworld", "L1") == frozenset()
    assert len(heldout_task_types("scienceworld", "L2")) == 10
    with pytest.raises(ValueError, match="unknown level"):
        heldout_task_types("alfworld", "L3")


def test_l2_candidates_never_contain_heldout_types(alfworld_data_root):
    tasks = training_tasks("alfworld", "L2")
    types = Counter(t.task_type for t in tasks)
    assert set(types) == {"pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
                          "pick_heat_then_place_in_recep"}
    assert all(t.split == "L2/train" for t in tasks)
    # the first candidates rotate through the types (balanced), deterministically for a seed
    first = [t.task_type for t in list(candidate_order(tasks, seed=3))[:8]]
    assert Counter(first) == {t: 2 for t in types}
    assert [t.task_id for t in list(candidate_order(tasks, 3))[:8]] == [t.task_id for t in list(candidate_order(tasks, 3))[:8]]
    assert {t.task_type for t in training_tasks("alfworld", "L0")} >= L2_HELDOUT


def test_leakage_is_asserted_before_any_env_work(alfworld_data_root):
    cool = TaskSpec("json_2.1.1/train/pick_cool_then_place_in_recep-Apple-None-Fridge-1/trial/game.tw-pddl",
                    "alfworld", "train", "pick_cool_then_place_in_recep")
    with pytest.raises(LeakageError, match="pick_cool_then_place_in_recep"):
        assert_no_heldout([cool], "alfworld", "L2")
    assert_no_heldout([cool], "alfworld", "L0")  # L0 trains on every type
    with pytest.raises(LeakageError, match="never appear"):
        build_coldstart_dataset("alfworld", "L2", 1, tasks=[cool], env_instance=object(), progress=False)


def test_tag_share_check():
    assert check_tag_shares({"planning": 10, "explore": 30, "reflection": 10, "monitor": 50})["explore"] == 0.3
    with pytest.raises(TagShareError, match=r"reflection 4\.0%"):
        check_tag_shares({"planning": 10, "explore": 30, "reflection": 4, "monitor": 56})
    with pytest.raises(TagShareError, match="reflection 0.0%"):
        check_tag_shares({"planning": 10, "explore": 30, "monitor": 60})


# ----------------------------------------------------------------------------------- ALFWorld rule teacher


@pytest.fixture(scope="module")
def alf_env(alfworld_data_root, alfworld_engine):
    from rlvmr_nb.coldstart.experts import make_expert_env

    # Importing alfworld (the alfworld_engine fixture) sets $ALFWORLD_DATA to ~/.cache/alfworld when unset;
    # point it at the installed data so the builder and evaluate.py (which take no data_root) find the games.
    patch = pytest.MonkeyPatch()
    patch.setenv("ALFWORLD_DATA", str(alfworld_data_root))
    env = make_expert_env("alfworld", "mixed")
    yield env
    env.close()
    patch.undo()


def _expert_actions(episode: Episode) -> list[str]:
    return [s.action for s in episode.steps if "inserted_mistake" not in s.extra]


@pytest.mark.parametrize("expert", ["walkthrough", "handcoded"])
def test_rule_teacher_on_real_alfworld(alf_env, expert):
    """Strict-valid outputs, actions = the expert's, mistakes replay to a win with the engine's own reply."""
    tasks = list(candidate_order(training_tasks("alfworld", "L0"), seed=11))[:6]  # one game of each type
    assert len({t.task_type for t in tasks}) == 6
    teacher = RuleTeacher(seed=0, error_rate=1.0)
    tags, kinds = Counter(), Counter()
    for task in tasks:
        source = expert_episode("alfworld", task, alf_env, expert, seed=0)
        tagged = teacher.annotate(source, env=alf_env)
        assert tagged.won and tagged.length < 30
        assert _expert_actions(tagged) == [s.action for s in source.steps]
        for step in tagged.steps:
            parsed = parse_output(step.output, mode="strict")
            assert parsed.valid and parsed.action == step.action and parsed.tag == step.tag, step.output
        assert tagged.steps[0].tag == "planning" and "step 1:" in tagged.steps[0].reasoning.lower()
        tags.update(s.tag for s in tagged.steps)
        for m in tagged.info.get("inserted_mistakes", []):
            kinds[m["kind"]] += 1
            i = m["index"]
            mistake, recovery = tagged.steps[i], tagged.steps[i + 1]
            assert mistake.extra["train"] is False and recovery.tag == "reflection"
            assert mistake.action != recovery.action and mistake.feedback == m["feedback"]
            if m["kind"] != "wrong_place":
                assert mistake.feedback == "Nothing happens." and not mistake.admissible
        # the whole tagged trajectory, mistakes included, wins when replayed in the real engine
        replayed = replay(alf_env, "alfworld", task_of(tagged), [s.action for s in tagged.steps], tagged)
        assert replayed.won and [s.feedback for s in replayed.steps] == [s.feedback for s in tagged.steps]
    assert set(tags) == set(META_TAGS), tags
    assert sum(kinds.values()) >= 4, kinds  # error_rate=1: nearly every trajectory gets one


def test_rule_teacher_is_deterministic_and_seed_dependent(alf_env):
    task = next(t for t in training_tasks("alfworld", "L0") if t.task_type == "pick_clean_then_place_in_recep")
    source = expert_episode("alfworld", task, alf_env, "handcoded", seed=0)
    a = RuleTeacher(seed=5).annotate(source, env=alf_env)
    b = RuleTeacher(seed=5).annotate(source, env=alf_env)
    assert [s.output for s in a.steps] == [s.output for s in b.steps]
    outputs = {tuple(s.output for s in RuleTeacher(seed=s).annotate(source, env=alf_env).steps) for s in range(4)}
    assert len(outputs) > 1  # paraphrases and mistakes vary with the seed
    without_env = RuleTeacher(seed=5).annotate(source)  # no env: no mistakes, actions untouched
    assert [s.action for s in without_env.steps] == [s.action for s in source.steps]


# ----------------------------------------------------------------------------------- dataset


@pytest.fixture(scope="module")
def l2_dataset(tmp_path_factory, alf_env):
    out = tmp_path_factory.mktemp("coldstart") / "alf-l2"
    return build_coldstart_dataset("alfworld", "L2", 4, seed=1, out_dir=out, env_instance=alf_env, progress=False,
                                   min_tag_share=0.0)


def test_dataset_manifest_round_trip(l2_dataset):
    manifest = read_manifest(l2_dataset)
    samples = read_samples(l2_dataset)
    episodes = read_trajectories(l2_dataset)
    assert manifest["level"] == "L2" and manifest["seed"] == 1 and manifest["teacher"]["name"] == "rule"
    assert manifest["source"]["heldout_task_types_excluded"] == sorted(L2_HELDOUT)
    assert not set(manifest["counts"]["per_task_type"]) & L2_HELDOUT
    assert not {e.task_type for e in episodes} & L2_HELDOUT
    assert manifest["counts"]["trajectories"] == len(episodes) == 4
    assert manifest["counts"]["samples"] == len(samples) == sum(s.extra["train"] for e in episodes for s in e.steps)
    assert sum(manifest["tags"]["counts"].values()) == len(samples)
    assert manifest["tags"]["counts"] == {t: sum(r["tag"] == t for r in samples) for t in META_TAGS}
    assert manifest["prompt"]["show_admissible"] is True and len(manifest["git_sha"] or "x" * 40) == 40
    assert all(parse_output(r["response"], mode="strict").valid for r in samples)


def test_dataset_prompts_are_the_rollout_prompts(l2_dataset):
    """Samples equal what AgentMemory renders during a rollout, plan memory from the first step on."""
    samples = read_samples(l2_dataset)
    episode = read_trajectories(l2_dataset)[0]
    memory = AgentMemory(task=episode.task_text, config=PromptConfig(env="alfworld", max_prompt_tokens=None))
    expected = []
    for step in episode.steps:
        if step.extra["train"]:
            expected.append(memory.render(step.observation, step.admissible_actions))
        memory.record(step.observation, step.output, step.action)
    got = [r["prompt"] for r in samples if r["episode_id"] == episode.episode_id]
    assert got == expected
    plan = episode.steps[0].plan
    assert plan and f"Your current overall plan: {plan}" in got[1]  # the step-0 plan is in the next prompt
    assert "Admissible actions at this moment:" in got[0]


def test_dataset_is_deterministic_for_a_seed(l2_dataset, alf_env, tmp_path):
    again = build_coldstart_dataset("alfworld", "L2", 4, seed=1, out_dir=tmp_path / "again", env_instance=alf_env,
                                    progress=False, min_tag_share=0.0)
    for name in ("samples.jsonl", "trajectories.jsonl", "manifest.json"):
        assert (again / name).read_bytes() == (l2_dataset / name).read_bytes(), name


def test_builder_enforces_tag_shares(alf_env, tmp_path):
    with pytest.raises(TagShareError, match="reflection 0.0%"):  # no mistakes, so no reflection
        build_coldstart_dataset("alfworld", "L2", 2, seed=1, teacher=RuleTeacher(seed=1, error_rate=0.0),
                                out_dir=tmp_path / "x", env_instance=alf_env, progress=False)
    assert not (tmp_path / "x" / "manifest.json").exists()


# ----------------------------------------------------------------------------------- LLM teacher


def _tiny_episode(task_id: str, actions: list[str]) -> Episode:
    steps = [Step(t=i, observation=f"obs {i}", action=a, feedback=f"fb {i}", won=i == len(actions) - 1)
             for i, a in enumerate(actions)]
    return Episode(task_id=task_id, env="alfworld", task_type="pick_and_place_simple",
                   task_text=f"put a thing in {task_id}.", steps=steps, won=True, episode_id=task_id)


class _FakeOpenAI(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible /v1/chat/completions: answers scripted per task, records the requests."""

    scripts: dict[str, list[str]] = {}
    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        prompt = body["messages"][0]["content"]
        key = next(k for k in self.scripts if f"put a thing in {k}." in prompt)
        answer = self.scripts[key].pop(0)
        data = json.dumps({"id": "x", "object": "chat.completion", "model": body["model"],
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                                        "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture
def fake_openai():
    _FakeOpenAI.scripts, _FakeOpenAI.requests = {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", _FakeOpenAI
    server.shutdown()
    server.server_close()


def test_llm_teacher_retries_malformed_and_rejects_changed_actions(fake_openai, monkeypatch):
    base_url, handler = fake_openai
    monkeypatch.setenv("TEST_TEACHER_KEY", "sk-test")
    good = [{"reason": "<planning>step 1: go to shelf, step 2: take the book.</planning>", "action": "go to shelf 1"},
            {"reason": "<monitor>The book is here; take it.</monitor>", "action": "take book 1 from shelf 1"}]
    handler.scripts["alpha"] = ["Sure! Here is the annotation: [{'reason': oops", "```json\n" + json.dumps(good) + "\n```"]
    changed = [dict(good[0]), {"reason": "<monitor>Take it.</monitor>", "action": "take book 2 from shelf 1"}]
    handler.scripts["beta"] = [json.dumps(changed)]
    handler.scripts["gamma"] = [json.dumps(good[:1])]
    handler.scripts["delta"] = [json.dumps([good[0], {"reason": "The book is here.", "action": good[1]["action"]}])]
    teacher = LLMTeacher(model="fake-4o", base_url=base_url, api_key_env="TEST_TEACHER_KEY", retry_backoff_s=0)
    actions = ["go to shelf 1", "take book 1 from shelf 1"]

    tagged = teacher.annotate(_tiny_episode("alpha", actions))
    assert [s.tag for s in tagged.steps] == ["planning", "monitor"] and tagged.info["llm_attempts"] == 2
    assert tagged.steps[1].output == "<monitor>The book is here; take it.</monitor>\n<action>take book 1 from shelf 1</action>\n"
    assert tagged.steps[0].plan.startswith("step 1:")
    with pytest.raises(AnnotationRejected, match="action changed"):
        teacher.annotate(_tiny_episode("beta", actions))
    with pytest.raises(AnnotationRejected, match="1 entries for 2 steps"):
        teacher.annotate(_tiny_episode("gamma", actions))
    with pytest.raises(AnnotationRejected, match="does not start with a tag"):
        teacher.annotate(_tiny_episode("delta", actions))
    per_task = Counter(next(k for k in ("alpha", "beta", "gamma", "delta") if k in r["body"]["messages"][0]["content"])
                       for r in handler.requests)
    assert per_task == {"alpha": 2, "beta": 1, "gamma": 1, "delta": 1}  # rejections are not retried
    first = handler.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test"
    assert first["body"]["temperature"] == 0 and first["body"]["max_tokens"] == 1024
    assert "exactly 2 objects" in first["body"]["messages"][0]["content"]


def test_llm_teacher_gives_up_after_max_attempts(fake_openai):
    base_url, handler = fake_openai
    handler.scripts["alpha"] = ["not json"] * 3
    teacher = LLMTeacher(model="m", base_url=base_url, max_attempts=3, retry_backoff_s=0)
    with pytest.raises(AnnotationRejected, match="no parseable annotation in 3 attempts"):
        teacher.annotate(_tiny_episode("alpha", ["look"]))
    assert len(handler.requests) == 3


# ----------------------------------------------------------------------------------- ScienceWorld


@pytest.mark.slow
def test_rule_teacher_on_scienceworld_gold(tmp_path):
    pytest.importorskip("scienceworld")
    from rlvmr_nb.envs.scienceworld_splits import scienceworld_tasks

    tasks = scienceworld_tasks("L2", "train", task_names=["find-animal", "power-component"], per_task=1, seed=0)
    out = build_coldstart_dataset("scienceworld", "L2", 2, seed=0, teacher=RuleTeacher(seed=0, error_rate=1.0),
                                  out_dir=tmp_path / "sw", tasks=tasks, progress=False, min_tag_share=0.0)
    episodes = read_trajectories(out)
    assert len(episodes) == 2 and all(e.won and e.length < 30 for e in episodes)
    assert not {e.task_type for e in episodes} & set(heldout_task_types("scienceworld", "L2"))
    mistakes = [m for e in episodes for m in e.info.get("inserted_mistakes", [])]
    assert mistakes and all(m["feedback"] == "No known action matches that input." for m in mistakes)
    for e in episodes:
        assert e.steps[0].tag == "planning" and all(parse_output(s.output, mode="strict").valid for s in e.steps)
    samples = read_samples(out)
    assert "Actions available at this moment:" in samples[0]["prompt"]


# ----------------------------------------------------------------------------------- SFT pipeline (tiny model)


def test_tiny_sft_experiment_raises_format_validity(l2_dataset, tmp_path):
    """CI-sized cold start: a 2-layer random model learns the tagged format on a few training prompts, and the
    held-out evaluation runs before and after through evaluate.py."""
    pytest.importorskip("torch")
    from rlvmr_nb.coldstart.experiment import ColdStartExperimentConfig, coldstart_sft_experiment
    from rlvmr_nb.coldstart.sft import SFTConfig

    config = ColdStartExperimentConfig(
        # a 2-layer hidden-64 model needs ~80 steps to fit one response; more samples would not fit 60 s
        model="tiny-random:llama", dataset=str(l2_dataset), level="L0", max_samples=1, max_sample_tokens=1200,
        train_prompt_probe=1,
        sft=SFTConfig(epochs=80, lr=5e-3, batch_size=1, micro_batch_size=1, max_length=4096, warmup_ratio=0.0,
                      bf16_autocast=False),
        eval_games=2, eval_max_steps=2, eval_max_new_tokens=16, results_path=str(tmp_path / "coldstart.json"),
    )
    doc = coldstart_sft_experiment(config, progress=False)
    probe = doc["training_prompt_probe"]
    assert probe["format_valid_before"] == 0.0 and probe["format_valid_after"] == 1.0, probe
    assert doc["sft"]["loss_last"] < 0.5 * doc["sft"]["loss_first"] and doc["sft"]["samples"]["used"] == 1
    assert doc["before"]["format_valid_rate"] == 0.0 and 0.0 <= doc["after"]["format_valid_rate"] <= 1.0
    saved = json.loads((tmp_path / "coldstart.json").read_text())
    # what the model wrote is kept: the evaluation episodes sit next to the results file
    after = read_episodes(tmp_path / "coldstart.episodes" / "eval_after.episodes.jsonl")
    assert saved["eval"]["episodes_dir"] == str(tmp_path / "coldstart.episodes") and len(after) == 2
    assert sum(len(e.steps) for e in after) == pytest.approx(doc["after"]["episode_length"] * 2)
    assert saved["eval"]["split"] == "L0/test" and len(saved["eval"]["tasks"]) == 2
    assert saved["provenance"]["versions"]["torch"] and saved["dataset"]["manifest"]["level"] == "L2"


def test_command_line_builds_a_dataset(alf_env, l2_dataset, tmp_path, capsys):
    from rlvmr_nb.coldstart import main

    with pytest.raises(SystemExit):
        main(["--teacher", "llm"])  # an LLM teacher needs --llm-model
    assert main(["--level", "L2", "-n", "2", "--seed", "1", "--min-tag-share", "0", "--out", str(tmp_path / "cli")]) == 0
    assert "trajectories 2" in capsys.readouterr().out
    assert read_manifest(tmp_path / "cli")["counts"]["trajectories"] == 2
    # same seed and level: the CLI's first two trajectories are the library build's first two
    assert [e.episode_id for e in read_trajectories(tmp_path / "cli")] == [
        e.episode_id for e in read_trajectories(l2_dataset)[:2]]


def test_sft_sample_choice_keeps_tag_shares_under_a_token_cap():
    """A token cap alone keeps the short first-step <planning> samples; stratified choice keeps the tag mix."""
    from rlvmr_nb.coldstart.experiment import select_samples
    from rlvmr_nb.coldstart.sft import SFTSample

    class WordTokenizer:  # one token per word, plus the end-of-turn token
        eos_token_id = 0

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [1] * len(text.split())}

    mix = {"planning": (20, 5), "monitor": (50, 30), "explore": (20, 40), "reflection": (10, 40)}  # (count, words)
    samples = [SFTSample(prompt="w " * words, response="r", meta={"tag": tag})
               for tag, (count, words) in mix.items() for _ in range(count)]
    chosen, stats = select_samples(samples, WordTokenizer(), 20, 45, seed=0)
    assert stats["used"] == 20 and stats["tags_used"] == {"explore": 4, "monitor": 10, "planning": 4, "reflection": 2}
    assert select_samples(samples, WordTokenizer(), 20, 45, seed=0)[0] == chosen  # seeded
    assert all(len(s.prompt.split()) <= 44 for s in chosen)
    assert select_samples(samples, WordTokenizer(), 20, 10, seed=0)[1]["tags_used"] == {"planning": 20}  # only these fit
