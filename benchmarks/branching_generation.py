"""What branching rollouts save in generation (`rlvmr_nb.rollout.branching`; SPARK, arXiv 2601.20209): the same
N leaves per task as a tree (M = 4 roots, B = 2) and as N independent rollouts, counting the steps and response
tokens each actually generated (a branch's copies of its parent's steps are not generated again).

Setting: `rlvmr-nb train --algo spark` on the toy world with the tiny random model, 2 iterations of 4 tasks x
N = 8 leaves x 8 steps, 8 tokens a step. The tiny model never writes <explore>, so the trigger is the ablation's
'random:0.3' (seeded): the share saved depends on where forks happen, so read the numbers as the mechanism's
accounting, not as SPARK's saving with a trained policy. Rollout seconds are recorded but not compared: on the
2 shared cores they vary more than the difference.

Reproduce (about 5 minutes on 2 shared cores):

    PYTHONPATH=src .venv/bin/python benchmarks/branching_generation.py

Writes benchmarks/results/branching_generation.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from rlvmr_nb.cli import main
from rlvmr_nb.records import read_episodes
from rlvmr_nb.runs.logs import read_metrics

RESULTS = Path(__file__).parent / "results" / "branching_generation.json"
ARGS = ["train", "--algo", "spark", "--env", "toy", "--model", "tiny-random:llama", "--tasks", "4", "--group-size", "8",
        "--branch-trigger", "random:0.3", "--max-steps", "8", "--max-new-tokens", "8", "--iterations", "2",
        "--stop", "action", "--mini-batch-size", "16", "--micro-batch-size", "8", "--validate-every", "0"]
ARMS = {"tree (M=4, B=2)": ["--branch-roots", "4", "--branch-factor", "2"], "independent": ["--branch-roots", "0"]}


def accounting(run_dir: Path) -> dict:
    """Leaves, their steps, and the steps and tokens that were generated (copies carry no tokens)."""
    episodes = read_episodes(run_dir / "episodes.jsonl")
    steps = [s for ep in episodes for s in ep.steps]
    generated = [s for s in steps if s.response_token_ids]
    rows = read_metrics(run_dir)
    return {"leaves": len(episodes), "leaf_steps": len(steps), "generated_steps": len(generated),
            "generated_tokens": sum(len(s.response_token_ids) for s in generated),
            "rollout_s": [round(r["rollout_s"], 2) for r in rows],
            "per_iteration": [{k: round(v, 4) for k, v in r.items() if k.startswith("branch/")} for r in rows]}


def run() -> dict:
    out = {"command": " ".join(ARGS), "load_average_at_start": os.getloadavg()[0], "arms": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in ARMS.items():
            run_dir = Path(tmp) / name.split()[0]
            if main([*ARGS, *extra, "--out", str(run_dir)]) != 0:
                raise SystemExit(f"the {name} run failed")
            out["arms"][name] = accounting(run_dir)
    tree, plain = out["arms"]["tree (M=4, B=2)"], out["arms"]["independent"]
    out["generated_steps_saved"] = round(1 - tree["generated_steps"] / plain["generated_steps"], 4)
    out["generated_tokens_saved"] = round(1 - tree["generated_tokens"] / plain["generated_tokens"], 4)
    return out


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help says what it measures
    results = run()
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
