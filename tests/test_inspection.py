"""Attention maps read out of a whole Transformer: checked against a computation by hand."""

import math

import pytest
import torch

from transformer_lib.attention import padding_mask
from transformer_lib.book.inspection import KINDS, attention_maps, attention_records
from transformer_lib.model import Transformer, TransformerConfig

PAD = 0


@pytest.fixture
def model() -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=20,
        tgt_vocab_size=20,
        d_model=16,
        d_ff=32,
        n_heads=4,
        n_layers=2,
        dropout=0.1,
        pad_id=PAD,
    )
    return Transformer(config).double()


SRC = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, PAD, PAD]])  # (B, S), the second padded
TGT = torch.tensor([[1, 9, 8, 7], [1, 7, 6, PAD]])  # (B, T)


def test_shapes_and_every_row_a_distribution_over_the_keys_it_may_see(model):
    maps = attention_maps(model, SRC, TGT)
    assert set(maps) == set(KINDS)
    assert maps["encoder"].shape == (2, 2, 4, 5, 5)  # (N, B, h, S, S)
    assert maps["decoder"].shape == (2, 2, 4, 4, 4)  # (N, B, h, T, T)
    assert maps["cross"].shape == (2, 2, 4, 4, 5)  # (N, B, h, T, S)
    for kind, weights in maps.items():
        assert torch.allclose(weights.sum(-1), torch.ones_like(weights.sum(-1))), kind
    assert (maps["encoder"][:, 1, :, :, 3:] == 0).all()  # padded source keys get nothing
    assert (maps["cross"][:, 1, :, :, 3:] == 0).all()
    assert (maps["decoder"][:, 0].triu(diagonal=1) == 0).all()  # no looking ahead
    assert (maps["decoder"][:, 1, :, :, 3] == 0).all()  # nor at target padding


def test_first_encoder_layer_equals_the_softmax_computed_by_hand(model):
    """Equation (1) from the layer's own projections: softmax(Q K^T / sqrt(d_k)), masked."""
    maps = attention_maps(model.eval(), SRC, TGT)
    attention = model.encoder.layers[0].self_attn
    x = model.encoder.positions(model.encoder.embeddings(SRC))  # (B, S, d_model), no dropout
    q, k, _ = (attention.in_proj(x)).chunk(3, dim=-1)  # (B, S, d_model) each
    q = q.unflatten(-1, (4, 4)).transpose(1, 2)  # (B, h, S, d_k)
    k = k.unflatten(-1, (4, 4)).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(4)  # (B, h, S, S)
    scores = scores.masked_fill((SRC == PAD)[:, None, None, :], float("-inf"))
    assert torch.allclose(maps["encoder"][0], scores.softmax(-1), atol=1e-12)


def test_reading_the_maps_changes_nothing_and_leaves_no_hook(model):
    model.train()
    maps = attention_maps(model, SRC, TGT)
    assert model.training  # the mode it was in
    again = attention_maps(model, SRC, TGT)
    for kind in KINDS:  # eval mode inside: no dropout, the same weights each time
        assert torch.equal(maps[kind], again[kind])
    for module in model.modules():
        assert not module._forward_pre_hooks
    model.eval()
    with torch.no_grad():
        plain = model(SRC, TGT)
        src_mask = padding_mask(SRC, PAD)
        memory = model.encode(SRC, src_mask, weights=[])
        with_weights = model.generator(model.decode(TGT, memory, src_mask, weights=[]))
    assert torch.allclose(plain, with_weights, atol=1e-12)  # the written-out path agrees


def test_records_are_one_row_per_kind_layer_head_query_and_key(model):
    maps = attention_maps(model, SRC, TGT)
    src_words, tgt_words = ["a", "b", "c"], ["<s>", "c", "b"]  # the second sentence, unpadded
    rows = attention_records(maps, src_words, tgt_words, index=1)
    assert len(rows) == 2 * 4 * (3 * 3 + 3 * 3 + 3 * 3)
    row = next(
        r
        for r in rows
        if (r["kind"], r["layer"], r["head"], r["query_pos"], r["key_pos"]) == ("cross", 2, 3, 1, 0)
    )
    assert row["query"] == "c" and row["key"] == "a"
    assert row["weight"] == round(maps["cross"][1, 1, 2, 1, 0].item(), 4)
    assert {r["kind"] for r in rows} == set(KINDS)


def test_padding_is_found_from_the_models_pad_id():
    """With pad id 3 and token 0 an ordinary word, a padded sentence's maps are those it has alone
    (the padded keys get no weight, and the real ones what they get without padding)."""
    torch.manual_seed(1)
    config = TransformerConfig(
        src_vocab_size=20,
        tgt_vocab_size=20,
        d_model=16,
        d_ff=32,
        n_heads=4,
        n_layers=2,
        dropout=0.0,
        pad_id=3,
    )
    model = Transformer(config).double()
    src = torch.tensor([[5, 0, 7, 8, 9], [0, 6, 7, 3, 3]])  # (B, S), the second padded with 3
    tgt = torch.tensor([[1, 9, 0, 7], [1, 0, 6, 3]])  # (B, T)
    together = attention_maps(model, src, tgt)
    alone = attention_maps(model, src[1:, :3], tgt[1:, :3])
    assert (together["encoder"][:, 1, :, :, 3:] == 0).all()
    assert (together["cross"][:, 1, :, :, 3:] == 0).all()
    for kind in KINDS:
        torch.testing.assert_close(
            together[kind][:, 1:, :, :3, :3], alone[kind], atol=1e-12, rtol=0
        )
