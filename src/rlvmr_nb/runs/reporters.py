"""Optional reporting of training and evaluation metrics to Weights & Biases or Trackio.

Off by default (``report_to=()``); the run folder's JSONL/CSV/TensorBoard logs (`logs.MetricsLog`)
are written either way and stay the record of the run. A name in ``TrainConfig.report_to`` /
``EvalConfig.report_to`` (``--report-to wandb trackio`` on the command line) opens one run of that
service per training or evaluation run and sends it the same numeric rows, stepped by iteration.

Credentials are the services' own business: wandb reads ``WANDB_API_KEY`` or its login file, trackio
logs locally (or to a Hugging Face Space with the user's HF token). Nothing here takes, stores or
logs a key: the config a service receives is the run's settings, which hold service names only.
Both packages are imported only when asked for; a missing one is an error that says how to install it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .logs import flatten

PROJECT = "rlvmr-nb"
"""Project name every reported run goes to."""

REPORTERS: dict[str, str] = {"wandb": "wandb", "trackio": "trackio"}
"""Service name (``report_to`` entry) -> the module that reports to it. Both expose the same calls:
``init(project=, name=, config=)``, ``log(dict, step=)``, ``finish()``."""


def check_report_to(names: Iterable[str]) -> tuple[str, ...]:
    """The services as a tuple, each known and listed once; raises naming the choices otherwise."""
    if isinstance(names, str):  # a single name, not its letters
        names = (names,)
    names = tuple(dict.fromkeys(names))
    unknown = [n for n in names if n not in REPORTERS]
    if unknown:
        raise ValueError(f"report_to: unknown service(s) {unknown}; choose from {sorted(REPORTERS)} (or none)")
    return names


def _numbers(row: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries of a flat metrics row (services plot numbers; text and None are left out)."""
    return {k: float(v) for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v}  # v == v drops NaN


@dataclass
class Reporter:
    """One open run of one service."""

    service: str
    module: Any

    def log(self, row: Mapping[str, Any], step: int | None = None) -> None:
        """Send the numeric entries of a flat metrics row."""
        self.module.log(_numbers(row), step=step)

    def finish(self) -> None:
        self.module.finish()


def _import(service: str) -> Any:
    try:
        return importlib.import_module(REPORTERS[service])
    except ImportError as err:
        raise ImportError(f"report_to={service!r} needs the {service} package: "
                          f"pip install {REPORTERS[service]}") from err


def open_reporters(names: Iterable[str], *, run_name: str, config: Mapping[str, Any],
                   project: str = PROJECT) -> list[Reporter]:
    """Start one run per service in `names` (none: an empty list, nothing imported).

    `config` is the run's settings as written to its ``config.json``; it holds no credentials.
    """
    reporters = []
    for service in check_report_to(names):
        module = _import(service)
        module.init(project=project, name=run_name, config=dict(config))
        reporters.append(Reporter(service, module))
    return reporters


def report_once(names: Iterable[str], row: Mapping[str, Any], *, run_name: str, config: Mapping[str, Any],
                project: str = PROJECT) -> None:
    """One row to a run of each service, then close it: an evaluation's summary."""
    for reporter in open_reporters(names, run_name=run_name, config=config, project=project):
        try:
            reporter.log(flatten(row))
        finally:
            reporter.finish()
