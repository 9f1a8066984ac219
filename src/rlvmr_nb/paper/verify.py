"""``rlvmr-nb verify`` (``make verify``): rerun the quick reproductions and judge every committed number they quote.

Each reproduction reruns one result the README quotes, in a fresh folder under ``runs/verify/``, and sets each of
its numbers beside the committed one with a verdict:

* **exact**: the same value (for a text: the same text);
* **within tolerance**: a different value inside the tolerance stated for it;
* **outside**: anything else, and the command exits 1.

What another machine can expect (docs/verification.md, 'Numbers across machines'):

========================  ==========================================  ========================================================
reproduction              committed                                   tolerance
========================  ==========================================  ========================================================
paper tables              ``figures/paper_table*.md``                 exact on any machine: text built from the shipped numbers
example group             ``benchmarks/results/demo.json``            1e-9: float64 arithmetic on ~40 shipped values
cold start (SmolLM2)      ``benchmarks/results/demo.json``            exact on the same machine; elsewhere the rates stay
                                                                      within `COLDSTART_TOLERANCE` (a bf16 SFT and sampled
                                                                      play: other rounding, other tokens)
lab demo                  ``benchmarks/results/lab_demo.json``        exact on the same machine; elsewhere within the band
                                                                      measured across machines and kernel paths
                                                                      (``benchmarks/results/lab_demo_spread.json``)
========================  ==========================================  ========================================================

"The same machine" is `runs.machine.same_machine`: the CPU, its kernel path, the BLAS and the library versions.
Each committed file records the machine that wrote it; ``--record`` rewrites the committed numbers from this run
(on purpose, like ``make demo UPDATE=1``).
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..demo import run_demo
from ..notebooks import run_notebook
from ..runs.machine import describe_machine, machine_facts, same_machine
from .tables import TABLES

VERIFY_ROOT = Path("runs/verify")
DEMO_RESULTS = Path("benchmarks/results/demo.json")
LAB_DEMO_RESULTS = Path("benchmarks/results/lab_demo.json")
LAB_DEMO_SPREAD = Path("benchmarks/results/lab_demo_spread.json")
LAB_DEMO_CONFIG = "configs/lab/demo.json"
COLDSTART_PARAMETERS = "configs/demo/01_cold_start.json"

EXAMPLE_GROUP_TOLERANCE = 1e-9
"""Absolute: rewards and advantages of the shipped group are float64 sums over a few dozen values, which another
CPU's vector path may add in another order (last bits only)."""
COLDSTART_TOLERANCE = 0.5
"""Absolute, on a rate: the cold start's rates come from 2 held-out games x 3 steps after a bf16 SFT of SmolLM2 on
24 samples. Another CPU rounds the SFT and samples other tokens, so a step's validity can flip; what the README
claims is the direction (format-valid 0 -> most steps). Half the scale keeps 'did it learn the format' and drops the
digits (measured: docs/verification.md, 'Numbers across machines')."""


@dataclass(frozen=True)
class Tolerance:
    """How far a reproduced number may be from the committed one."""

    kind: str
    """'exact', 'absolute' (|now - committed| <= `width`) or 'band' (now within [`low`, `high`])."""
    width: float = 0.0
    low: float = -math.inf
    high: float = math.inf
    why: str = ""

    def admits(self, committed: Any, now: Any) -> bool:
        if self.kind == "exact" or not isinstance(now, (int, float)):
            return committed == now
        if self.kind == "absolute":
            return abs(now - committed) <= self.width
        return self.low <= now <= self.high

    def describe(self) -> str:
        if self.kind == "exact":
            return "exact"
        if self.kind == "absolute":
            return f"±{self.width:g}"
        return f"[{self.low:+.3f}, {self.high:+.3f}]"


EXACT = Tolerance("exact", why="computed from shipped data only")


@dataclass(frozen=True)
class Check:
    """One committed number beside its reproduction."""

    reproduction: str
    name: str
    committed: Any
    now: Any
    tolerance: Tolerance

    @property
    def verdict(self) -> str:
        if self.committed == self.now:
            return "exact"
        return "within tolerance" if self.tolerance.admits(self.committed, self.now) else "outside"


@dataclass(frozen=True)
class Reproduction:
    """One quoted result: how to rerun it, its committed numbers, and the tolerance of each number."""

    name: str
    run: Callable[[Path], dict[str, Any]]
    """Reruns it in the given fresh folder; returns {number name: value}."""
    committed: Callable[[], tuple[dict[str, Any], dict[str, Any] | None]]
    """The committed numbers and the `machine_facts` of the machine that wrote them (None: not recorded)."""
    tolerance: Callable[[str], Tolerance]
    """Number name -> its tolerance."""
    record: Callable[[dict[str, Any]], Path]
    """Writes this run's numbers as the committed ones (``--record``); returns the file."""
    minutes: str
    """Its run time on this 2-core machine, for the command's progress lines."""


# --------------------------------------------------------------------------------------------------
# The reproductions
# --------------------------------------------------------------------------------------------------


def paper_tables(_: Path) -> dict[str, Any]:
    """Every paper table as Markdown, from the shipped numbers (what ``rlvmr-nb figures`` writes)."""
    return {f"paper_{name}.md": build(None, None).to_markdown() for name, build in TABLES.items()}


def _committed_tables() -> tuple[dict[str, Any], None]:
    return {f"paper_{name}.md": (Path("figures") / f"paper_{name}.md").read_text(encoding="utf-8")
            for name in TABLES}, None


def _record_tables(numbers: dict[str, Any]) -> Path:
    for name, text in numbers.items():
        (Path("figures") / name).write_text(text, encoding="utf-8")
    return Path("figures")


def example_group(out: Path) -> dict[str, Any]:
    """The quick-start group (``rlvmr-nb demo``): its summary metrics and every step's reward and advantage."""
    result = run_demo(out_dir=out)
    numbers = {f"summary/{k}": v for k, v in result.summary.items() if isinstance(v, (int, float))}
    for ep in result.episodes:
        for s in ep.steps:
            numbers[f"{ep.episode_id}/step{s.t + 1}/r_mr"] = s.scores.mr_reward
            numbers[f"{ep.episode_id}/step{s.t + 1}/advantage"] = s.scores.advantage
    return numbers


def cold_start(out: Path) -> dict[str, Any]:
    """Notebook 01 with the demo's parameters (the ``make demo`` stage): rates before and after the SFT."""
    parameters = json.loads(Path(COLDSTART_PARAMETERS).read_text())
    run_notebook("01_cold_start", COLDSTART_PARAMETERS, out / "notebooks", progress=True,
                 parameters={"runs_root": str(out), "out_dir": str(out / "figures")})
    run = f"{parameters['env']}-{parameters['level']}-n{parameters['n_trajectories']}-seed{parameters['seed']}"
    results = json.loads((out / "coldstart" / run / "results.json").read_text())
    return {f"{when}/{k}": results[when][f"{k}_rate"] for when in ("before", "after")
            for k in ("format_valid", "admissible_action", "success")}


def lab_demo(out: Path) -> dict[str, Any]:
    """``rlvmr-nb lab-demo``: RLVMR from the lab's (cached) cold start on 4 layouts."""
    # torch (the 'train' extra) is loaded here only: importing paper.verify needs none of it
    from ..lab.config import load_lab_config
    from ..lab.learning_demo import run_learning_demo

    run_learning_demo(load_lab_config(LAB_DEMO_CONFIG), out, figures_dir=out / "figures")
    return lab_demo_numbers(json.loads((out / "learning_demo.json").read_text()))


def lab_demo_numbers(document: dict[str, Any]) -> dict[str, Any]:
    """The numbers the README quotes from a lab demo's results (``learning_demo.json``)."""
    t, h = document["training"], document["heldin"]
    return {"training/first": t["head_success"], "training/last": t["tail_success"], "training/rise": t["rise"],
            "heldin/before": h["before"], "heldin/after": h["after"], "heldin/rise": h["rise"]}


def _committed_lab_demo() -> tuple[dict[str, Any], dict[str, Any] | None]:
    document = json.loads(LAB_DEMO_RESULTS.read_text())
    return lab_demo_numbers(document), document.get("machine_facts")


def _record_lab_demo(_: dict[str, Any]) -> Path:
    shutil.copyfile(VERIFY_ROOT / "lab-demo" / "learning_demo.json", LAB_DEMO_RESULTS)
    return LAB_DEMO_RESULTS


def prediction_band(values: list[float], low: float = -1.0, high: float = 1.0) -> tuple[float, float]:
    """Where one more draw from the distribution `values` came from falls, 95 %: mean ± t·sd·√(1 + 1/n) (normal
    prediction interval), clipped to [`low`, `high`]."""
    from scipy import stats  # here: `rlvmr-nb --help` stays quick

    n = len(values)
    if n < 3:
        raise ValueError(f"a prediction band needs >= 3 measured values, got {n}")
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = float(stats.t.ppf(0.975, n - 1)) * sd * math.sqrt(1 + 1 / n)
    return max(low, mean - half), min(high, mean + half)


def lab_demo_tolerance(name: str) -> Tolerance:
    """The 95 % prediction band of `name` from the runs measured on other machines and kernel paths.

    A run whose numbers equal another's to the last bit took the same rounding path (measured: one thread with
    MKL's AVX-512 path is the default path on the AMD EPYC), so it counts once: a band of repeats would be narrow
    for no reason. A rise keeps its sign: the README claims the demo learns, so a rerun without a rise is outside
    whatever the band says."""
    spread = json.loads(LAB_DEMO_SPREAD.read_text())
    distinct = {json.dumps(run["numbers"], sort_keys=True): run["numbers"] for run in spread["runs"]}
    values = [numbers[name] for numbers in distinct.values()]
    rise = name.endswith("rise")
    low, high = prediction_band(values, -1.0 if rise else 0.0, 1.0)
    why = f"95 % prediction band of {len(values)} distinct runs on other machines and kernel paths"
    if rise and low <= 0.0:
        low, why = math.nextafter(0.0, 1.0), why + ", and above 0 (the claim is a rise)"
    return Tolerance("band", low=low, high=high, why=why)


def _demo_section(key: str) -> tuple[Callable[[], tuple[dict[str, Any], dict[str, Any] | None]],
                                     Callable[[dict[str, Any]], Path]]:
    """Reader and recorder of one section of `DEMO_RESULTS`."""

    def committed() -> tuple[dict[str, Any], dict[str, Any] | None]:
        section = json.loads(DEMO_RESULTS.read_text()).get(key, {}) if DEMO_RESULTS.is_file() else {}
        return section.get("numbers", {}), section.get("machine_facts")

    def record(numbers: dict[str, Any]) -> Path:
        document = json.loads(DEMO_RESULTS.read_text()) if DEMO_RESULTS.is_file() else {}
        document[key] = {"numbers": numbers, "machine_facts": machine_facts()}
        DEMO_RESULTS.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
        return DEMO_RESULTS

    return committed, record


_committed_example_group, _record_example_group = _demo_section("example_group")
_committed_coldstart, _record_coldstart = _demo_section("coldstart")

REPRODUCTIONS: dict[str, Reproduction] = {
    "paper-tables": Reproduction("paper-tables", paper_tables, _committed_tables, lambda _: EXACT, _record_tables,
                                 "seconds"),
    "example-group": Reproduction(
        "example-group", example_group, _committed_example_group,
        lambda _: Tolerance("absolute", width=EXAMPLE_GROUP_TOLERANCE, why="float64 sums in another order"),
        _record_example_group, "seconds"),
    "cold-start": Reproduction(
        "cold-start", cold_start, _committed_coldstart,
        lambda _: Tolerance("absolute", width=COLDSTART_TOLERANCE, why="a sampled play after a bf16 SFT"),
        _record_coldstart, "~4 min"),
    "lab-demo": Reproduction("lab-demo", lab_demo, _committed_lab_demo, lab_demo_tolerance, _record_lab_demo,
                             "~4 min with the lab's cold start cached, ~8 min more to build it"),
}
"""Every quick reproduction, in the order `verify` runs them."""


# --------------------------------------------------------------------------------------------------
# Running and judging
# --------------------------------------------------------------------------------------------------


def verify(names: list[str] | None = None, root: Path = VERIFY_ROOT, record: bool = False,
           say: Callable[[str], None] = print) -> list[Check]:
    """Rerun `names` (default: all of `REPRODUCTIONS`) in fresh folders under `root` and return every check; with
    `record`, write this run's numbers as the committed ones instead of judging them."""
    unknown = sorted(set(names or ()) - set(REPRODUCTIONS))
    if unknown:
        raise ValueError(f"no reproduction {', '.join(unknown)}; choose from {', '.join(REPRODUCTIONS)}")
    here = machine_facts()
    say(f"this machine: {describe_machine(here)}")
    checks: list[Check] = []
    for name in names or list(REPRODUCTIONS):
        reproduction = REPRODUCTIONS[name]
        out = root / name
        shutil.rmtree(out, ignore_errors=True)  # a fresh run, never a resumed one
        out.mkdir(parents=True)
        say(f"--- {name} ({reproduction.minutes}) ...")
        numbers = reproduction.run(out)
        if record:
            say(f"recorded {len(numbers)} numbers in {reproduction.record(numbers)}")
            continue
        committed, wrote = reproduction.committed()
        if name != "paper-tables":
            say(f"{name}: committed on {describe_machine(wrote)}"
                + (" (this machine: expect exact)" if same_machine(wrote, here) else ""))
        for key in sorted(set(committed) | set(numbers)):
            checks.append(Check(name, key, committed.get(key), numbers.get(key), reproduction.tolerance(key)))
    return checks


def format_checks(checks: list[Check], most: int = 12) -> str:
    """One line per check (texts shown as 'text'), then a count per verdict. A reproduction with more than `most`
    numbers lists the ones that are not exact and counts the exact rest in one line."""
    lines = [f"{'reproduction':<14} {'number':<44} {'committed':>10} {'now':>10} {'tolerance':>18}  verdict"]
    for name in dict.fromkeys(c.reproduction for c in checks):
        mine = [c for c in checks if c.reproduction == name]
        shown = mine if len(mine) <= most else [c for c in mine if c.verdict != "exact"]
        for c in shown:
            values = [("text" if isinstance(v, str) else "missing" if v is None else f"{v:.4f}")
                      for v in (c.committed, c.now)]
            lines.append(f"{c.reproduction:<14} {c.name[:44]:<44} {values[0]:>10} {values[1]:>10} "
                         f"{c.tolerance.describe():>18}  {c.verdict}")
        if len(shown) < len(mine):
            rest = f"{len(mine) - len(shown)} {'more ' if shown else ''}numbers"
            lines.append(f"{name:<14} {rest:<44} {'':>10} {'':>10} "
                         f"{mine[0].tolerance.describe():>18}  exact")
    counts = {v: sum(c.verdict == v for c in checks) for v in ("exact", "within tolerance", "outside")}
    lines.append(", ".join(f"{n} {v}" for v, n in counts.items()))
    return "\n".join(lines)
