"""How the stop policy moves the invalid-action rate: one policy, the same held-out games, `--stop action` vs `none`.

The official runs set no stop string (EOS or 1,024 tokens), so whatever a model writes after `</action>`
reaches the parser (docs/method.md, 'Generation settings'). This script compares two `rlvmr-nb eval`
results files that differ only in `--stop` and writes benchmarks/results/stop_string_comparison.json:

* each run's success, invalid, malformed and non-admissible rates, generated tokens per step and how
  its responses ended (the stop string, EOS, the token budget);
* on the `none` run's own outputs, how many steps wrote text after their first `</action>` and how many
  would change validity if cut there, which isolates the parser effect from sampling differences;
* the episodes that stayed identical step by step across the two runs (seeded sampling: once one
  response differs, the batch's later draws differ too).

    rlvmr-nb eval --model runs/demo/coldstart/alfworld-L0-n10-seed0/sft --env alfworld --level L0 \\
        --max-tasks 10 --max-steps 6 --max-new-tokens 96 --seed 0 --stop action \\
        --out benchmarks/results/stop_string_action.json        # and the same with --stop none
    .venv/bin/python benchmarks/stop_string.py
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
RATES = ("success", "invalid", "invalid_malformed", "invalid_non_admissible", "episode_length")


def run_summary(results_file: Path) -> tuple[dict, list]:
    """Metrics, config and per-step generation facts of one eval results file, and its episodes."""
    from rlvmr_nb.records import read_episodes

    doc = json.loads(results_file.read_text())
    episodes = read_episodes(results_file.with_suffix(".episodes.jsonl"))
    steps = [s for ep in episodes for s in ep.steps]
    return {
        "file": str(results_file.relative_to(RESULTS.parent.parent)),
        "stop": doc["config"]["stop"],
        "steps": len(steps),
        **{k: doc["metrics"][k] for k in RATES},
        "invalid_reasons": dict(Counter(r for s in steps for r in s.invalid_reasons)),
        "finish_reasons": dict(Counter(s.extra.get("finish_reason") for s in steps)),
        "tokens_per_step": statistics.mean(len(s.response_token_ids or []) for s in steps),
        "git_sha": doc["provenance"]["git_sha"],
    }, episodes


def text_after_action(episodes: list, parser_mode: str) -> dict:
    """Steps with text after their first </action>, and validity flips if each output were cut there."""
    from rlvmr_nb.rollout.tags import parse_output

    steps = [s for ep in episodes for s in ep.steps]
    close = "</action>"
    after, flips = 0, 0
    for s in steps:
        end = s.output.find(close)
        cut = s.output if end < 0 else s.output[: end + len(close)]
        after += end >= 0 and bool(s.output[end + len(close):].strip())
        flips += parse_output(cut, parser_mode).valid != s.valid
    return {"steps_with_text_after_action": after, "steps_whose_validity_the_cut_changes": flips}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--action", type=Path, default=RESULTS / "stop_string_action.json")
    p.add_argument("--none", type=Path, default=RESULTS / "stop_string_none.json")
    p.add_argument("--parser-mode", default="strict", help="the eval's parser mode (ALFWorld meta-think: strict)")
    p.add_argument("--out", type=Path, default=RESULTS / "stop_string_comparison.json")
    args = p.parse_args(argv)
    action, action_eps = run_summary(args.action)
    none, none_eps = run_summary(args.none)
    same = [a.task_id for a, b in zip(action_eps, none_eps)
            if [s.output.strip() for s in a.steps] == [s.output.strip() for s in b.steps]]
    doc = {
        "question": "how the stop policy moves the invalid-action rate (paper Figs. 3 and 5)",
        "runs": {"action": action, "none": none},
        "none_minus_action": {k: none[k] - action[k] for k in RATES},
        "none_outputs_cut_at_action": text_after_action(none_eps, args.parser_mode),
        "episodes_identical_in_both": len(same),
        "episodes": len(action_eps),
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
