"""polyrl_torch.target_logprobs against the composite log_softmax + gather path it replaces:
same log-probs, entropies and gradients, in float32 and in bfloat16 logits, at any temperature."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from polyrl_torch.target_logprobs import BLOCK_ELEMENTS, _rows_per_block, target_logprobs  # noqa: E402

#: Where the passes run: the CPU's L2-sized blocks, and on a GPU (where there is one) one block of every row.
DEVICES = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def composite(logits: torch.Tensor, targets: torch.Tensor, temperature: float, dtype=torch.float32):
    logp = torch.log_softmax(logits.to(dtype) / temperature, dim=-1)
    picked = logp.gather(-1, targets[:, None])[:, 0]
    full = logp.detach()
    return picked, -(full.exp() * full).sum(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("vocab", [50, BLOCK_ELEMENTS // 3 + 7])  # many rows per block; a block of 3 rows
@pytest.mark.parametrize("device", DEVICES)
def test_values_and_gradients_match_the_composite_path(dtype, temperature, vocab, device):
    gen = torch.Generator().manual_seed(0)
    rows = 11
    base = (torch.randn(rows, vocab, generator=gen) * 3).to(dtype).to(device)
    targets = torch.randint(0, vocab, (rows,), generator=gen).to(device)
    weights = torch.randn(rows, generator=gen).to(device)  # an arbitrary incoming gradient per row

    ours = base.clone().requires_grad_(True)
    picked, entropy = target_logprobs(ours, targets, temperature, with_entropy=True)
    (picked * weights).sum().backward()

    theirs = base.clone().requires_grad_(True)
    ref_picked, ref_entropy = composite(theirs, targets, temperature)
    (ref_picked * weights).sum().backward()

    assert picked.dtype == torch.float32 and ours.grad.dtype == dtype
    torch.testing.assert_close(picked, ref_picked, rtol=1e-5, atol=1e-5)
    exact = composite(base.cpu(), targets.cpu(), temperature, torch.float64)
    for got in (picked, ref_picked):
        torch.testing.assert_close(got.double().cpu(), exact[0], rtol=1e-5, atol=1e-5)
    for got in (entropy, ref_entropy):  # float32 sums over up to a million entries, either way
        torch.testing.assert_close(got.double().cpu(), exact[1], rtol=2e-4, atol=1e-4)
    # float32: both round the log-sum-exp differently (1e-4 relative over a million entries);
    # bfloat16: the gradient is rounded to bfloat16 once either way
    tol = dict(rtol=2e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=4e-3, atol=4e-3)
    torch.testing.assert_close(ours.grad.float(), theirs.grad.float(), **tol)
    assert not entropy.requires_grad
    torch.testing.assert_close(ours.detach(), base)  # the logits themselves are left as they were


def test_blocks_are_cache_sized_on_the_cpu_and_whole_elsewhere():
    """On the CPU a block's passes stay in L2; on any other device (a GPU) all rows go at once."""
    assert _rows_per_block(torch.empty(1000, 49152)) == BLOCK_ELEMENTS // 49152
    assert _rows_per_block(torch.empty(5, 10)) == BLOCK_ELEMENTS // 10
    assert _rows_per_block(torch.empty(1000, 49152, device="meta")) == 1000


def test_without_entropy_nothing_extra_is_computed():
    logits = torch.randn(4, 9, requires_grad=True)
    picked, entropy = target_logprobs(logits, torch.tensor([0, 3, 8, 1]))
    assert entropy is None and picked.shape == (4,) and picked.requires_grad
    assert torch.all(picked < 0)
