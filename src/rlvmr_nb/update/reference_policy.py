"""The reference policy of the KL term (paper Eq. 5's π_ref): the initial, frozen policy.

With full fine-tuning it is a frozen copy made before training; with LoRA it is the policy itself with its
adapters switched off, which costs no memory. ``TrainConfig.placement.reference_device="cpu"`` keeps the copy in CPU
memory and moves it to the training device only for its log-prob pass (`reference_view`): its weights then
take no GPU memory during rollouts and the update, for one host-to-device copy per iteration.
"""

from __future__ import annotations

import copy
from typing import Any

import torch



def frozen_copy(policy: Any) -> Any:
    """The reference policy: a frozen copy of the initial policy (paper Eq. 5's π_ref)."""
    ref = copy.deepcopy(policy).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


class reference_view:
    """The reference model: the frozen copy, or — with LoRA — the policy with its adapters disabled.

    With `compute_device`, a copy kept elsewhere is moved there on entry and back on exit."""

    def __init__(self, policy: Any, reference: Any, compute_device: torch.device | None = None):
        self.model = reference if reference is not None else policy
        self.ctx = policy.disable_adapter() if reference is None and hasattr(policy, "disable_adapter") else None
        self.home = next(reference.parameters()).device if reference is not None and compute_device is not None else None
        self.compute_device = compute_device

    def __enter__(self) -> Any:
        if self.ctx is not None:
            self.ctx.__enter__()
        if self.home is not None:
            self.model.to(self.compute_device)
        return self.model

    def __exit__(self, *exc: object) -> bool:
        if self.home is not None:
            self.model.to(self.home)
        return bool(self.ctx.__exit__(*exc)) if self.ctx is not None else False
