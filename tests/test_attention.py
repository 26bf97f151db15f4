"""Attention (§3.2) against independent references: PyTorch's fused kernel and its
``nn.MultiheadAttention``, masks built by hand in loops, and full attention for the decoding cache.

Everything runs in float64, so "equal" means equal to rounding (1e-10 or tighter).
"""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.attention import (
    MultiHeadAttention,
    padding_mask,
    scaled_dot_product_attention,
    subsequent_mask,
)
from transformer_lib.decoding import KeyValueCache, SourceSide

DOUBLE = torch.float64
SETTINGS = settings(max_examples=40, deadline=None)


def random_mask(kind: str, b: int, lq: int, lk: int, g: torch.Generator) -> torch.Tensor | None:
    """A mask in our sense (True = may attend), built here without the library's helpers.

    "padding": each sentence keeps a random prefix of at least one key (B, 1, 1, L_k);
    "causal": query i sees keys j <= i + max(L_k - L_q, 0), the decoder's view after a cache
    (1, 1, L_q, L_k); "both": their conjunction (every query still sees key 0); "random": any
    pattern at all, fully masked rows included.
    """
    if kind == "none":
        return None
    lengths = torch.randint(1, lk + 1, (b,), generator=g)
    padding = (torch.arange(lk)[None, :] < lengths[:, None])[:, None, None, :]
    rows = torch.arange(lq)[:, None] + max(lk - lq, 0)  # every query sees key 0 at least
    causal = (torch.arange(lk)[None, :] <= rows)[None, None]
    if kind == "padding":
        return padding
    if kind == "causal":
        return causal
    if kind == "both":
        return padding & causal
    return torch.rand(b, 1, lq, lk, generator=g) < 0.6


# ---------------------------------------------------------------------------------------------
# Masks: shapes and sense, against loops


@SETTINGS
@given(
    st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=7), min_size=1, max_size=4),
    st.integers(0, 4),
)
def test_padding_mask_marks_real_tokens_as_attendable(rows, pad_id):
    length = max(map(len, rows))
    tokens = torch.tensor([row + [pad_id] * (length - len(row)) for row in rows])
    mask = padding_mask(tokens, pad_id)
    assert mask.dtype == torch.bool
    assert mask.shape == (len(rows), 1, 1, length)
    for b, row in enumerate(tokens.tolist()):
        for j, token in enumerate(row):
            assert mask[b, 0, 0, j].item() == (token != pad_id)


@pytest.mark.parametrize("size", [1, 2, 5, 9])
def test_subsequent_mask_lets_position_i_see_j_up_to_i(size):
    mask = subsequent_mask(size)
    assert mask.dtype == torch.bool
    assert mask.shape == (1, 1, size, size)
    for i in range(size):
        for j in range(size):
            assert mask[0, 0, i, j].item() == (j <= i)


def test_masks_broadcast_to_the_scores_and_combine():
    tokens = torch.tensor([[4, 5, 6, 0], [7, 0, 0, 0]])
    combined = padding_mask(tokens, 0) & subsequent_mask(4)
    assert combined.shape == (2, 1, 4, 4)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert combined[b, 0, i, j].item() == (j <= i and tokens[b, j].item() != 0)


# ---------------------------------------------------------------------------------------------
# Scaled dot-product attention: written out vs PyTorch's fused kernel


@SETTINGS
@given(
    batch=st.integers(1, 3),
    heads=st.integers(1, 3),
    lq=st.integers(1, 7),
    lk=st.integers(1, 7),
    d_k=st.integers(1, 9),
    d_v=st.integers(1, 9),
    kind=st.sampled_from(["none", "padding", "causal", "both", "random"]),
    seed=st.integers(0, 2**16),
)
def test_written_out_attention_equals_pytorchs_kernel(batch, heads, lq, lk, d_k, d_v, kind, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, lq, d_k, generator=g, dtype=DOUBLE)
    k = torch.randn(batch, heads, lk, d_k, generator=g, dtype=DOUBLE)
    v = torch.randn(batch, heads, lk, d_v, generator=g, dtype=DOUBLE)
    mask = random_mask(kind, batch, lq, lk, g)
    ours, weights = scaled_dot_product_attention(q, k, v, mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert ours.shape == (batch, heads, lq, d_v)
    assert weights.shape == (batch, heads, lq, lk)
    assert_close(ours, theirs)
    # The weights are a distribution over the allowed keys, and zero elsewhere.
    allowed = (
        torch.ones_like(weights, dtype=torch.bool) if mask is None else mask.expand_as(weights)
    )
    assert torch.all(weights[~allowed] == 0)
    has_key = allowed.any(-1)
    assert_close(weights.sum(-1)[has_key], torch.ones_like(weights.sum(-1)[has_key]))


def test_written_out_attention_is_equation_1_for_one_query():
    """A single query and two keys, the softmax computed by hand with exp."""
    q = torch.tensor([[1.0, 2.0, 0.5, -1.0]], dtype=DOUBLE)  # (L_q, d_k)
    k = torch.tensor([[0.5, 0.0, 1.0, 1.0], [-1.0, 1.0, 0.0, 2.0]], dtype=DOUBLE)
    v = torch.tensor([[3.0, -1.0], [0.0, 2.0]], dtype=DOUBLE)
    s = [sum(a * b for a, b in zip(q[0].tolist(), key, strict=True)) / 2.0 for key in k.tolist()]
    p = [math.exp(x) / sum(math.exp(y) for y in s) for x in s]
    expected = [p[0] * 3.0 + p[1] * 0.0, p[0] * -1.0 + p[1] * 2.0]
    out, weights = scaled_dot_product_attention(q, k, v)
    assert weights[0].tolist() == pytest.approx(p, abs=1e-12)
    assert out[0].tolist() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_another_scale_replaces_one_over_root_d_k_in_both_paths(scale):
    """``scale`` (for the first example's experiment) is the factor of the scores in the written-out
    function, in PyTorch's kernel and in both paths of the module."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=DOUBLE) for _ in range(3))
    expected = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v
    assert_close(scaled_dot_product_attention(q, k, v, scale=scale)[0], expected)
    assert_close(F.scaled_dot_product_attention(q, k, v, scale=scale), expected)
    mha = random_module(d_k=4, heads=2, seed=3)
    x = torch.randn(2, 5, 8, dtype=DOUBLE)
    default = mha(x)
    mha.scale = scale
    fast, (written_out, _) = mha(x), mha(x, need_weights=True)
    assert_close(fast, written_out)
    assert not torch.allclose(fast, default)  # the factor took effect
    mha.scale = 1 / math.sqrt(mha.d_k)
    assert_close(mha(x), default)  # None means the paper's 1/sqrt(d_k)


# ---------------------------------------------------------------------------------------------
# A query with no key to attend to: zero weights, zero attention output, no NaN anywhere


def test_a_query_with_no_allowed_key_gets_zeros_and_finite_gradients():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 3, 4, generator=g, dtype=DOUBLE) for _ in range(3))
    for t in (q, k, v):
        t.requires_grad_(True)
    mask = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    mask = mask[None, None].repeat(2, 1, 1, 1)  # (B, 1, L_q, L_k)
    mask[1, 0, 2] = False  # a second empty row, in the other sentence
    empty = ~mask.any(-1).expand(2, 2, 3)  # (B, h, L_q)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(weights[empty] == 0) and torch.all(out[empty] == 0)
    # The other rows are what attention over their own keys gives.
    full, _ = scaled_dot_product_attention(q, k, v, mask | empty[..., None])
    assert_close(out[~empty], full[~empty])
    (out * torch.randn(out.shape, generator=g, dtype=DOUBLE)).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.all(q.grad[empty] == 0)  # the empty rows' queries do not matter


@pytest.mark.parametrize("need_weights", [False, True])
def test_multi_head_attention_with_an_empty_row_has_no_nan(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, cross=True).double()
    nn.init.normal_(mha.out_proj.bias)
    x = torch.randn(2, 4, 8, dtype=DOUBLE, requires_grad=True)
    memory = torch.randn(2, 3, 8, dtype=DOUBLE, requires_grad=True)
    mask = torch.tensor([True, True, False])[None, None, None].repeat(2, 1, 1, 1)
    mask[1] = False  # the second "source sentence" is all padding
    out, weights = (
        mha(x, memory, mask, need_weights=True)
        if need_weights
        else (
            mha(x, memory, mask),
            None,
        )
    )
    assert torch.isfinite(out).all()
    # Zero attention output, so the row is W^O 0 + b^O: the output projection's bias.
    assert_close(out[1], mha.out_proj.bias.detach().expand(4, 8))
    out.pow(2).sum().backward()
    for t in [x, memory, *mha.parameters()]:
        assert torch.isfinite(t.grad).all()
    if need_weights:
        assert torch.all(weights[1] == 0)


# ---------------------------------------------------------------------------------------------
# Multi-head attention: the fast path, the written-out path and nn.MultiheadAttention


def copy_into_torch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    theirs = nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True, dtype=DOUBLE)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.in_proj.weight)
        theirs.in_proj_bias.copy_(ours.in_proj.bias)
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    return theirs.eval()


def random_module(d_k: int, heads: int, seed: int, cross: bool = False) -> MultiHeadAttention:
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d_k * heads, heads, cross=cross).double().eval()
    with torch.no_grad():  # non-zero biases, so that a misplaced bias shows
        for bias in (mha.in_proj.bias, mha.out_proj.bias):
            bias.normal_()
    return mha


MHA_CASES = dict(
    kind=st.sampled_from(["none", "padding", "causal", "both"]),  # no empty rows: PyTorch's are NaN
    batch=st.integers(1, 3),
    heads=st.integers(1, 4),
    d_k=st.integers(1, 5),
    lq=st.integers(1, 6),
    lk=st.integers(1, 6),
    cross=st.booleans(),
    seed=st.integers(0, 2**16),
)


def mha_inputs(batch, heads, d_k, lq, lk, cross, kind, seed):
    g = torch.Generator().manual_seed(seed)
    d_model = heads * d_k
    x = torch.randn(batch, lq, d_model, generator=g, dtype=DOUBLE)
    if cross:
        memory = torch.randn(batch, lk, d_model, generator=g, dtype=DOUBLE)
    else:
        memory, lk = x, lq
    mask = random_mask(kind, batch, lq, lk, g)
    return x, memory, mask


def attention(mha: MultiHeadAttention, x, memory, mask=None, **kwargs):
    """``mha`` as self-attention when ``memory`` is ``x``, else as encoder-decoder attention
    (one module, the same weights, its ``cross`` switched)."""
    mha.cross = memory is not x
    return mha(x, memory if mha.cross else None, mask, **kwargs)


@SETTINGS
@given(**{**MHA_CASES, "kind": st.sampled_from(["none", "padding", "causal", "both", "random"])})
def test_fast_path_equals_written_out_path(batch, heads, d_k, lq, lk, cross, kind, seed):
    mha = random_module(d_k, heads, seed)
    x, memory, mask = mha_inputs(batch, heads, d_k, lq, lk, cross, kind, seed)
    x.requires_grad_(True)
    fast = attention(mha, x, memory, mask)
    (grad_fast,) = torch.autograd.grad(fast.sum(), x)
    written, weights = attention(mha, x, memory, mask, need_weights=True)
    (grad_written,) = torch.autograd.grad(written.sum(), x)
    assert_close(fast, written)
    assert_close(grad_fast, grad_written)
    assert weights.shape == (batch, heads, lq, memory.shape[1])
    assert_close(weights.sum(-1), (weights.sum(-1) > 0.5).to(DOUBLE))  # rows sum to 1 (or 0)


@SETTINGS
@given(**MHA_CASES)
def test_multi_head_attention_equals_pytorchs(batch, heads, d_k, lq, lk, cross, kind, seed):
    mha = random_module(d_k, heads, seed)
    theirs = copy_into_torch(mha)
    x, memory, mask = mha_inputs(batch, heads, d_k, lq, lk, cross, kind, seed)
    lk = memory.shape[1]
    # PyTorch's boolean masks mean "may NOT attend": invert at this boundary. Our (B, 1, L_q, L_k)
    # mask becomes PyTorch's (B * h, L_q, L_k) attn_mask, one copy per head.
    their_mask = None
    if mask is not None:
        their_mask = ~mask.expand(batch, 1, lq, lk).repeat_interleave(heads, dim=0)[:, 0]
    expected, _ = theirs(x, memory, memory, attn_mask=their_mask, need_weights=False)
    assert_close(attention(mha, x, memory, mask), expected)
    assert_close(attention(mha, x, memory, mask, need_weights=True)[0], expected)


def test_multi_head_attention_equals_pytorchs_with_its_two_kinds_of_mask():
    """PyTorch's key_padding_mask (B, L_k) and attn_mask (L_q, L_k), given separately."""
    mha = random_module(d_k=3, heads=4, seed=1)
    theirs = copy_into_torch(mha)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 12, generator=g, dtype=DOUBLE)
    tokens = torch.tensor([[3, 4, 5, 6, 7], [3, 4, 5, 0, 0], [3, 0, 0, 0, 0]])
    mask = padding_mask(tokens, 0) & subsequent_mask(5)
    expected, _ = theirs(
        x,
        x,
        x,
        key_padding_mask=tokens == 0,
        attn_mask=torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1),
    )
    assert_close(mha(x, mask=mask), expected)


def test_self_attention_in_one_product_equals_separate_projections():
    """Self-attention projects q, k and v in one product; encoder-decoder attention over the
    same sequence, with the same weights, projects the queries apart: the same output."""
    mha = random_module(d_k=4, heads=2, seed=2)
    x = torch.randn(2, 5, 8, dtype=DOUBLE)
    mask = subsequent_mask(5)
    one_product = mha(x, mask=mask)
    mha.cross = True
    assert_close(one_product, mha(x, x.clone(), mask))


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 4)


# ---------------------------------------------------------------------------------------------
# The decoding cache: one position at a time equals full causal attention


def cached_self_attention(mha, piece, cache: KeyValueCache, mask=None, need_weights=False):
    """Self-attention of the new positions ``piece`` over the cached ones and themselves, as the
    decoder's cache computes it (the output alone)."""
    out = mha(piece, mask=mask, need_weights=need_weights, cache=cache)
    return out[0] if need_weights else out


@SETTINGS
@given(
    heads=st.integers(1, 3),
    d_k=st.integers(1, 4),
    chunks=st.lists(st.integers(1, 3), min_size=1, max_size=5),
    need_weights=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_cached_self_attention_equals_full_causal_attention(heads, d_k, chunks, need_weights, seed):
    """Feeding the sequence in pieces (one token, or several) with the cache."""
    mha = random_module(d_k, heads, seed)
    length = sum(chunks)
    x = torch.randn(2, length, heads * d_k, dtype=DOUBLE)
    full = mha(x, mask=subsequent_mask(length))
    cache, pieces, start = KeyValueCache(), [], 0
    for size in chunks:
        piece = x[:, start : start + size]
        # The new queries see every cached key and the new keys up to themselves.
        mask = subsequent_mask(start + size)[:, :, start:] if size > 1 else None
        pieces.append(cached_self_attention(mha, piece, cache, mask, need_weights))
        start += size
        assert cache.keys.shape == (2, heads, start, d_k)
        assert cache.values.shape == (2, heads, start, d_k)
    assert_close(torch.cat(pieces, dim=1), full)


def test_one_token_at_a_time_equals_full_causal_attention_with_padding():
    mha = random_module(d_k=2, heads=3, seed=3)
    x = torch.randn(2, 6, 6, dtype=DOUBLE)
    keys_ok = torch.tensor([[True] * 6, [True, True, True, False, True, True]])  # a hole
    full = mha(x, mask=subsequent_mask(6) & keys_ok[:, None, None, :])
    cache, steps = KeyValueCache(), []
    for t in range(6):
        step_mask = keys_ok[:, None, None, : t + 1]  # (B, 1, 1, t + 1)
        steps.append(cached_self_attention(mha, x[:, t : t + 1], cache, step_mask))
    assert_close(torch.cat(steps, dim=1), full)


def test_cross_attention_over_keys_projected_once_equals_the_whole_module():
    """``project_kv`` once, into a cache; then each position's queries attend over those keys and
    values."""
    mha = random_module(d_k=3, heads=2, seed=4, cross=True)
    x = torch.randn(2, 4, 6, dtype=DOUBLE)
    memory = torch.randn(2, 5, 6, dtype=DOUBLE)
    src_ok = torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, None, :]
    full = mha(x, memory, src_ok)
    keys, values = mha.project_kv(memory)
    assert keys.shape == (2, 2, 5, 3) and values.shape == (2, 2, 5, 3)
    cache = KeyValueCache(keys, values, source=SourceSide(src_ok))
    steps = [mha(x[:, t : t + 1], cache=cache) for t in range(4)]
    assert_close(torch.cat(steps, dim=1), full)


def test_the_weights_are_returned_and_the_module_keeps_nothing():
    """With ``need_weights``, ``(out, weights)``: the written-out path's weights, whose rows sum
    to 1 and which reproduce the output; the module holds no tensor of the call afterwards."""
    mha = random_module(d_k=2, heads=3, seed=5)
    x = torch.randn(2, 4, 6, dtype=DOUBLE)
    mask = subsequent_mask(4)
    out, weights = mha(x, mask=mask, need_weights=True)
    assert_close(out, mha(x, mask=mask))
    assert weights.shape == (2, 3, 4, 4)
    assert_close(weights.sum(-1), torch.ones(2, 3, 4, dtype=DOUBLE))
    assert torch.all(weights.masked_select(~mask.expand_as(weights)) == 0)  # no later position
    _, _, v = mha.in_proj(x).split([6, 6, 6], -1)
    by_hand = (weights @ mha.split_heads(v)).transpose(1, 2).flatten(2)
    assert_close(mha.out_proj(by_hand), out)
    assert not [name for name, value in vars(mha).items() if isinstance(value, torch.Tensor)]
