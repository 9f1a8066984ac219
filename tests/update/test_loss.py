"""The reference GRPO-MR loss (paper Eq. 5) on hand-computed values."""

import math

import pytest

torch = pytest.importorskip("torch")

from rlvmr_nb.update.loss_terms import k3_kl_term, ppo_clip_term  # noqa: E402
from rlvmr_nb.update.reference_loss import (  # noqa: E402
    LossConfig,
    aggregate,
    entropy_from_logits,
    grpo_loss,
    reference_logprobs_from_hidden,
)

pytestmark = pytest.mark.model

NO_REG = LossConfig(kl_coef=0.0, entropy_coef=0.0)


def one_token_loss(ratio: float, advantage: float, config: LossConfig = NO_REG):
    """Loss and d loss / d logp for one token with the given ratio and advantage."""
    old = torch.tensor([[-2.0]], dtype=torch.float64)
    logp = (old + math.log(ratio)).requires_grad_()
    loss, metrics = grpo_loss(
        logp, old, None, torch.tensor([advantage], dtype=torch.float64), torch.ones(1, 1, dtype=torch.bool), config=config
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.item(), grad.item(), metrics


def test_clip_inactive_inside_range():
    loss, grad, metrics = one_token_loss(1.1, 2.0)
    assert loss == pytest.approx(-2.2)
    assert grad == pytest.approx(-2.2)  # d(-A r)/dlogp = -A r
    assert metrics["clip_frac"].item() == 0.0


def test_clip_active_above_range_positive_advantage():
    loss, grad, metrics = one_token_loss(1.5, 1.0)
    assert loss == pytest.approx(-1.2)  # max(-1.5, -1.2)
    assert grad == 0.0
    assert metrics["clip_frac"].item() == 1.0


def test_clip_active_below_range_negative_advantage():
    loss, grad, _ = one_token_loss(0.5, -1.0)
    assert loss == pytest.approx(0.8)  # max(0.5, 0.8)
    assert grad == 0.0


def test_pessimistic_bound_keeps_gradient_when_ratio_moves_against_advantage():
    loss, grad, metrics = one_token_loss(0.5, 1.0)  # max(-0.5, -0.8): the unclipped branch wins
    assert loss == pytest.approx(-0.5)
    assert grad == pytest.approx(-0.5)
    assert metrics["clip_frac"].item() == 0.0


def test_clip_higher_widens_upper_range_only():
    symmetric, _, _ = one_token_loss(1.25, 1.0)
    higher, grad, _ = one_token_loss(1.25, 1.0, LossConfig(kl_coef=0.0, entropy_coef=0.0, clip_eps_high=0.28))
    assert symmetric == pytest.approx(-1.2)
    assert higher == pytest.approx(-1.25)
    assert grad == pytest.approx(-1.25)
    low, _, _ = one_token_loss(0.7, -1.0, LossConfig(kl_coef=0.0, entropy_coef=0.0, clip_eps_high=0.28))
    assert low == pytest.approx(0.8)  # the lower bound is still 1 - 0.2


def test_ppo_clip_term_reports_clipped_tokens():
    logp = torch.log(torch.tensor([0.5, 1.0, 1.5]))
    term = ppo_clip_term(logp, torch.zeros(3), torch.ones(3), 0.2, 0.2)
    loss, ratio, clipped = term.value, term.ratio, term.clipped
    assert torch.allclose(ratio, torch.tensor([0.5, 1.0, 1.5]))
    assert torch.allclose(loss, torch.tensor([-0.5, -1.0, -1.2]))
    assert clipped.tolist() == [False, False, True]


@pytest.mark.parametrize(
    "log_ratio, expected",
    [(math.log(2.0), 2.0 - math.log(2.0) - 1.0), (-1.0, math.exp(-1.0)), (0.0, 0.0)],
)
def test_k3_values(log_ratio, expected):
    logp = torch.tensor([-3.0], dtype=torch.float64)
    assert k3_kl_term(logp, logp + log_ratio).value.item() == pytest.approx(expected)


@pytest.mark.parametrize("log_ratio", [5.0, 25.0, 200.0, -15.0, -40.0])
def test_k3_clamped_to_ten_with_zero_gradient(log_ratio):
    logp = torch.tensor([-3.0], dtype=torch.float64, requires_grad=True)
    kl = k3_kl_term(logp, logp.detach() + log_ratio).value
    assert kl.item() == 10.0
    (grad,) = torch.autograd.grad(kl.sum(), logp)
    assert grad.item() == 0.0  # finite: exp never overflows because d is bounded first


def test_kl_gradient_unclamped():
    logp = torch.tensor([-3.0], dtype=torch.float64, requires_grad=True)
    kl = k3_kl_term(logp, logp.detach() + 0.5).value
    (grad,) = torch.autograd.grad(kl.sum(), logp)
    assert grad.item() == pytest.approx(1.0 - math.exp(0.5))


VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0], [7.0, 7.0, 7.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token_mean", (1 + 2 + 3 + 4) / 4),
        ("seq_mean_token_mean", (2.0 + 4.0) / 2),  # the fully masked row is left out
        ("seq_mean_token_sum_norm", (6.0 + 4.0) / (3 * 10.0)),  # all 3 rows count, constant 10
    ],
)
def test_aggregation_modes(mode, expected):
    assert aggregate(VALUES, MASK, mode, token_sum_norm=10.0).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_fully_masked_batch_gives_zero_loss_and_zero_gradient(mode):
    logp = torch.full((2, 3), -1.0, requires_grad=True)
    loss, metrics = grpo_loss(
        logp, logp.detach() - 0.1, logp.detach() + 0.2, torch.ones(2), torch.zeros(2, 3, dtype=torch.bool),
        torch.ones(2, 3), LossConfig(aggregation=mode),
    )
    (grad,) = torch.autograd.grad(loss, logp)
    assert loss.item() == 0.0
    assert torch.equal(grad, torch.zeros_like(grad))
    assert metrics["num_tokens"].item() == 0 and math.isnan(metrics["ratio_mean"].item())


def test_masked_garbage_is_ignored():
    logp = torch.tensor([[-1.0, float("nan")]])
    loss, _ = grpo_loss(
        logp, torch.tensor([[-1.0, float("-inf")]]), None, torch.tensor([1.0]),
        torch.tensor([[True, False]]), config=NO_REG,
    )
    assert loss.item() == pytest.approx(-1.0)


def test_total_is_sum_of_terms_and_entropy_is_a_bonus():
    torch.manual_seed(0)
    logp = -torch.rand(2, 4) - 0.5
    entropy = torch.rand(2, 4) + 1.0
    mask = torch.ones(2, 4, dtype=torch.bool)
    config = LossConfig(kl_coef=0.01, entropy_coef=0.001)
    loss, m = grpo_loss(logp, logp - 0.1, logp + 0.3, torch.tensor([1.0, -1.0]), mask, entropy, config)
    assert loss.item() == pytest.approx(m["pg_loss"].item() + 0.01 * m["kl"].item() - 0.001 * m["entropy"].item())
    more_entropy, _ = grpo_loss(logp, logp - 0.1, logp + 0.3, torch.tensor([1.0, -1.0]), mask, entropy + 1.0, config)
    assert more_entropy.item() == pytest.approx(loss.item() - 0.001)  # higher entropy lowers the loss
    assert m["approx_kl"].item() == pytest.approx(-0.1, abs=1e-6)
    assert m["ratio_mean"].item() == pytest.approx(math.exp(0.1), rel=1e-6)


def test_per_token_advantages_equal_broadcast_sequence_advantages():
    logp = -torch.rand(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    adv = torch.tensor([0.5, -2.0])
    a, _ = grpo_loss(logp, logp - 0.05, logp, adv, mask, torch.ones(2, 3))
    b, _ = grpo_loss(logp, logp - 0.05, logp, adv[:, None].expand(2, 3), mask, torch.ones(2, 3))
    assert a.item() == pytest.approx(b.item())


def test_bad_inputs_raise_helpful_errors():
    logp = torch.zeros(1, 2)
    mask = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="aggregation"):
        LossConfig(aggregation="mean")
    with pytest.raises(ValueError, match="ref_logprobs is None"):
        grpo_loss(logp, logp, None, torch.zeros(1), mask, torch.zeros(1, 2))
    with pytest.raises(ValueError, match="entropy is None"):
        grpo_loss(logp, logp, logp, torch.zeros(1), mask)
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(logp, logp, logp, torch.zeros(3), mask, torch.zeros(1, 2))


def test_reference_logprobs_match_manual_softmax_with_temperature():
    torch.manual_seed(1)
    hidden, weight = torch.randn(3, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    targets = torch.tensor([0, 5, 2])
    logp, entropy = reference_logprobs_from_hidden(hidden, weight, targets, temperature=0.5, return_entropy=True)
    logits = (hidden @ weight.T) / 0.5
    probs = logits.exp() / logits.exp().sum(-1, keepdim=True)
    assert torch.allclose(logp, probs.log()[torch.arange(3), targets])
    assert torch.allclose(entropy, -(probs * probs.log()).sum(-1))
    assert logp.dtype == torch.float64  # no silent downcast of fp64


def test_entropy_of_uniform_logits_is_log_vocab():
    assert entropy_from_logits(torch.zeros(2, 7)).allclose(torch.full((2,), math.log(7)))


def test_the_importance_weight_is_a_factor_of_the_policy_term_only():
    """The sampler correction's weight w multiplies the PPO-clip term (as the advantage's factor, A·w: the same
    bits as folding it into a per-token advantage) and leaves the KL and entropy terms unweighted."""
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(3, 4, generator=gen)).requires_grad_()
    old, ref, entropy = -torch.rand(3, 4, generator=gen), -torch.rand(3, 4, generator=gen), torch.rand(3, 4, generator=gen)
    adv, weight = torch.randn(3, generator=gen), torch.rand(3, 4, generator=gen) * 2
    mask = torch.ones(3, 4, dtype=torch.bool)
    config = LossConfig(kl_coef=0.1, entropy_coef=0.01)
    named, m_named = grpo_loss(logp, old, ref, adv, mask, entropy, config, importance_weight=weight)
    folded, m_folded = grpo_loss(logp, old, ref, adv[:, None] * weight, mask, entropy, config)
    assert torch.equal(named, folded) and torch.equal(m_named["kl"], m_folded["kl"])
    unweighted, m_plain = grpo_loss(logp, old, ref, adv, mask, entropy, config)
    assert torch.equal(m_named["kl"], m_plain["kl"]) and torch.equal(m_named["entropy"], m_plain["entropy"])
    assert not torch.equal(m_named["pg_loss"], m_plain["pg_loss"])
    with pytest.raises(ValueError, match="importance_weight"):
        grpo_loss(logp, old, ref, adv, mask, entropy, config, importance_weight=weight[:, :2])
