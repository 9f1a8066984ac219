"""Each per-token term of the GRPO-MR loss (paper Eq. 5): its closed-form gradient equals autograd of its value.

float64, with tokens placed exactly on the kinks: ratios on both clip bounds, ties of the two PPO
branches (ratio 1, advantage 0), k3 values exactly on the clamp and log-ratios exactly on the overflow
bound. Each kink case asserts that it really is on the kink, so a closed form that broke a tie the
other way (``>`` for ``>=``, an exclusive clamp) would fail here.
"""

import math

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.update.loss_terms import LossConfig
from rlvmr_nb.update.loss_terms import (
    KL_LOG_RATIO_BOUND,
    entropy_bonus_term,
    k3_kl_term,
    ppo_clip_term,
    token_terms,
    weighted_total,
)

pytestmark = pytest.mark.model

F64 = torch.float64


def autograd_of(value_fn, *inputs):
    """d sum(value_fn(*inputs)) / d input for every input (each token's value depends on its own inputs only)."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    return torch.autograd.grad(value_fn(*leaves).sum(), leaves)


def assert_same(closed_form, autograd, what):
    torch.testing.assert_close(closed_form, autograd, rtol=1e-14, atol=0.0, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_ppo_clip_gradient_equals_autograd_at_bounds_and_ties(sign):
    # Ratios whose clip bounds are set *from the computed ratios*, so two tokens sit exactly on them:
    # for r in [0.5, 2], r - 1 and 1 - r are exact in float64 and so are 1 + (r - 1) and 1 - (1 - r).
    ratios = torch.tensor([1.1, 1.3, 0.6, 1.25, 0.85, 1.0, 1.7, 0.3], dtype=F64)
    old = torch.full_like(ratios, -2.0)
    logp = old + torch.log(ratios)
    ratio = torch.exp(logp - old)
    clip_high, clip_low = ratio[3].item() - 1.0, 1.0 - ratio[4].item()
    assert 1.0 + clip_high == ratio[3].item() and 1.0 - clip_low == ratio[4].item()
    assert ratio[5].item() == 1.0

    advantages = sign * torch.tensor([1.0, 2.0, 0.5, 1.5, 0.7, 1.2, 0.0, 0.0], dtype=F64)
    term = ppo_clip_term(logp, old, advantages, clip_low, clip_high)
    (autograd,) = autograd_of(lambda lp: ppo_clip_term(lp, old, advantages, clip_low, clip_high).value, logp)
    assert_same(term.grad_logp(), autograd, f"PPO-clip, advantage sign {sign}")

    tie = term.unclipped == term.clipped_branch
    assert tie[[0, 3, 4, 5, 6, 7]].all(), "in-range, on-bound, ratio 1 and zero-advantage tokens are ties"
    on_bound_or_inside = [0, 3, 4, 5]
    assert torch.equal(term.grad_logp()[on_bound_or_inside], term.unclipped[on_bound_or_inside])
    assert (term.grad_logp()[on_bound_or_inside] != 0).all(), "a tie inside the range keeps its gradient"
    assert (term.grad_logp()[[6, 7]] == 0).all()
    # Outside the range the side the advantage pushes toward is clipped (no gradient), the other is not.
    clipped_token = 1 if sign > 0 else 2
    kept_token = 2 if sign > 0 else 1
    assert term.clipped[clipped_token] and term.grad_logp()[clipped_token] == 0
    assert not term.clipped[kept_token] and term.grad_logp()[kept_token] != 0
    assert not term.clipped[tie].any(), "ties count as unclipped, like their gradient"


@pytest.mark.parametrize(
    "log_ratios, clamp, passes",
    [
        ([0.125, 0.5, -1.0, 2.3, -9.0], 10.0, [True] * 5),  # k3(-9) = 8 < 10
        ([5.0, -15.0, 25.0, 200.0, -40.0], 10.0, [False] * 5),  # value clamp (and overflow bound) active
        ([KL_LOG_RATIO_BOUND, -KL_LOG_RATIO_BOUND], 1e9, [True, True]),  # exactly on the bound: passes
        ([KL_LOG_RATIO_BOUND + 0.5, -KL_LOG_RATIO_BOUND - 0.5], 1e9, [False, False]),  # bound active
    ],
)
def test_k3_gradient_equals_autograd_at_clamps(log_ratios, clamp, passes):
    logp = torch.full((len(log_ratios),), -3.0, dtype=F64)
    ref = logp + torch.tensor(log_ratios, dtype=F64)
    assert torch.equal(ref - logp, torch.tensor(log_ratios, dtype=F64)), "log-ratios must be exact"
    term = k3_kl_term(logp, ref, clamp)
    (autograd,) = autograd_of(lambda lp: k3_kl_term(lp, ref, clamp).value, logp)
    assert_same(term.grad_logp(), autograd, f"k3 at {log_ratios}")
    assert torch.isfinite(term.grad_logp()).all()
    assert ((term.grad_logp() != 0) == torch.tensor(passes)).all()


def test_k3_gradient_passes_when_value_is_exactly_on_the_clamp():
    logp = torch.tensor([-3.0, -3.0], dtype=F64)
    ref = logp + torch.tensor([1.5, 1.6], dtype=F64)
    clamp = k3_kl_term(logp, ref).unclamped[0].item()  # token 0 lands exactly on the clamp, token 1 above
    term = k3_kl_term(logp, ref, clamp)
    assert term.value[0].item() == clamp == term.unclamped[0].item() and term.unclamped[1].item() > clamp
    (autograd,) = autograd_of(lambda lp: k3_kl_term(lp, ref, clamp).value, logp)
    assert_same(term.grad_logp(), autograd, "k3 on the clamp")
    assert term.grad_logp()[0].item() == pytest.approx(1.0 - math.exp(1.5)) and term.grad_logp()[1].item() == 0.0


def test_entropy_bonus_gradient_equals_autograd():
    entropy = torch.tensor([0.0, 0.3, 2.5], dtype=F64)
    term = entropy_bonus_term(entropy)
    (autograd,) = autograd_of(lambda h: entropy_bonus_term(h).value, entropy)
    assert torch.equal(term.value, -entropy)
    assert_same(term.grad_entropy(), autograd, "entropy bonus")


@pytest.mark.parametrize("with_ref", [True, False])
@pytest.mark.parametrize("kl_coef, entropy_coef", [(0.05, 0.01), (0.0, 0.0), (0.01, 0.0)])
def test_total_gradients_equal_autograd(with_ref, kl_coef, entropy_coef):
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(12, generator=gen, dtype=F64) - 0.5
    old = logp + 0.4 * torch.randn(12, generator=gen, dtype=F64)
    old[0] = logp[0]  # a tie at ratio 1
    ref = logp + 0.5 * torch.randn(12, generator=gen, dtype=F64)
    ref[1] = logp[1] + 12.0  # k3 clamp active
    ref = ref if with_ref else None
    advantages = torch.randn(12, generator=gen, dtype=F64)
    advantages[2] = 0.0
    entropy = torch.rand(12, generator=gen, dtype=F64) + 1.0
    config = LossConfig(kl_coef=kl_coef, entropy_coef=entropy_coef, clip_eps_high=0.28)

    def token_loss(lp, h):
        terms = token_terms(lp, old, ref, advantages, h, config)
        kl = None if terms.kl is None else terms.kl.value
        return weighted_total(terms.surrogate.value, kl, terms.entropy_bonus.value, config)

    terms = token_terms(logp, old, ref, advantages, entropy, config)
    grad_logp, grad_entropy = autograd_of(token_loss, logp, entropy)
    assert_same(terms.grad_logp(), grad_logp, "d loss_t / d logp")
    if entropy_coef == 0.0:
        assert terms.grad_entropy() is None and not grad_entropy.any()
    else:
        assert_same(terms.grad_entropy(), grad_entropy, "d loss_t / d entropy")
    expected = terms.surrogate.value - entropy_coef * entropy + (kl_coef * terms.kl.value if with_ref else 0.0)
    torch.testing.assert_close(token_loss(logp, entropy), expected, rtol=1e-14, atol=1e-15)


def test_terms_of_missing_inputs_are_absent():
    logp = torch.zeros(3, dtype=F64)
    terms = token_terms(logp, logp, None, torch.ones(3, dtype=F64), None, LossConfig(kl_coef=0.0, entropy_coef=0.0))
    assert terms.kl is None and terms.entropy_bonus is None
    assert torch.equal(weighted_total(terms.surrogate.value, None, None, LossConfig()), terms.surrogate.value)
