"""The reference policy of the KL term (paper Eq. 5's π_ref): the initial, frozen policy.

With full fine-tuning it is a frozen copy made before training; with LoRA it is the policy itself with its
adapters switched off, which costs no memory.
"""

from __future__ import annotations

import copy
from typing import Any


def frozen_copy(policy: Any) -> Any:
    """The reference policy: a frozen copy of the initial policy (paper Eq. 5's π_ref)."""
    ref = copy.deepcopy(policy).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


class reference_view:
    """The reference model: the frozen copy, or — with LoRA — the policy with its adapters disabled."""

    def __init__(self, policy: Any, reference: Any):
        self.model = reference if reference is not None else policy
        self.ctx = policy.disable_adapter() if reference is None and hasattr(policy, "disable_adapter") else None

    def __enter__(self) -> Any:
        if self.ctx is not None:
            self.ctx.__enter__()
        return self.model

    def __exit__(self, *exc: object) -> bool:
        return bool(self.ctx.__exit__(*exc)) if self.ctx is not None else False
