"""Dropout where §5.4 puts it: "to the output of each sub-layer, before it is added to the
sub-layer input and normalized", and "to the sums of the embeddings and the positional encodings
in both the encoder and decoder stacks".

Two independent checks. PyTorch's ``nn.Transformer`` holding our weights, in training mode under
the same seed, must give the same logits: its ``dropout1/2/3`` sit where the paper puts dropout,
and the sums of embeddings and positions are dropped out here by hand (its extra dropouts, inside
the feed-forward network and on the attention weights, are switched off). And hooks on every
``nn.Dropout`` of our model record what each one is applied to. Both are shown to catch dropout
moved after the residual addition.
"""

import pytest
import torch
import torch.nn.functional as F
from helpers import embed, torch_transformer
from torch import nn

from transformer_lib import model as model_module
from transformer_lib.attention import MultiHeadAttention
from transformer_lib.model import Transformer, TransformerConfig

DOUBLE = torch.float64
P = 0.3
PAD = 0


def make_model(seed: int = 0, **changes) -> Transformer:
    """A float64 model in training mode whose every parameter is random (LayerNorm included)."""
    sizes = dict(src_vocab_size=19, tgt_vocab_size=19, d_model=12, d_ff=20, n_heads=3, n_layers=2)
    torch.manual_seed(seed)
    model = Transformer(TransformerConfig(**{**sizes, "dropout": P, **changes})).double().train()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.uniform_(-0.5, 0.5).add_(1.0 if parameter.dim() == 1 else 0.0)
    return model


def tokens(seed: int, batch: int = 3, length: int = 5) -> torch.Tensor:
    """Tokens that are not padding, then padding after a random length of at least 1."""
    g = torch.Generator().manual_seed(seed)
    out = torch.randint(1, 19, (batch, length), generator=g)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    out[torch.arange(length)[None, :] >= lengths[:, None]] = PAD
    return out


# ---------------------------------------------------------------------------------------------
# The reference: nn.Transformer with our weights, in training mode


def reference_model(ours: Transformer) -> nn.Transformer:
    """nn.Transformer (ReLU, batch_first) with our weights and dropout only where §5.4 puts it:
    ``dropout1/2/3`` after each sub-layer; none inside the FFN, none on the attention weights."""
    theirs = torch_transformer(ours, dropout=ours.config.dropout)

    def attention(torch_attention):
        torch_attention.dropout = 0.0  # no dropout on the attention weights
        # Dropout draws its mask in memory order, and with batch_first PyTorch's attention
        # returns a (B, L, E) view of an (L, B, E) tensor: a contiguous copy makes both models
        # draw the same mask for the same element.
        forward = torch_attention.forward
        torch_attention.forward = lambda *args, **kwargs: (
            forward(*args, **kwargs)[0].contiguous(),
            None,
        )

    for layer in theirs.encoder.layers:
        attention(layer.self_attn)
        layer.dropout = nn.Identity()  # no dropout between the FFN's two matrices
    for layer in theirs.decoder.layers:
        attention(layer.self_attn)
        attention(layer.multihead_attn)
        layer.dropout = nn.Identity()
    return theirs.train()


def reference_logits(ours: Transformer, src, tgt, seed: int) -> torch.Tensor:
    """The reference's logits, drawing its dropout masks in the order our model draws them:
    the source sum, the encoder's layers, the target sum, the decoder's layers."""
    theirs = reference_model(ours)
    weight_src = ours.encoder.embeddings.lookup.weight
    weight_tgt = ours.decoder.embeddings.lookup.weight
    t = tgt.shape[1]
    torch.manual_seed(seed)
    memory = theirs.encoder(F.dropout(embed(weight_src, src), P), src_key_padding_mask=src == PAD)
    hidden = theirs.decoder(
        F.dropout(embed(weight_tgt, tgt), P),
        memory,
        tgt_mask=torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1),  # True: may NOT
        tgt_key_padding_mask=tgt == PAD,
        memory_key_padding_mask=src == PAD,
    )
    return hidden @ ours.generator.weight.T


def difference_from_reference(ours: Transformer, seed: int) -> float:
    src, tgt = tokens(seed), tokens(seed + 1, length=4)
    torch.manual_seed(seed)
    logits = ours(src, tgt)
    return (logits - reference_logits(ours, src, tgt, seed)).abs().max().item()


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # nn.Transformer's notice
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_training_mode_equals_pytorchs_transformer_under_the_same_seed(norm_first, seed):
    ours = make_model(seed, norm_first=norm_first)
    # The model's table of positions is float32; the reference's closed form is float64.
    assert difference_from_reference(ours, seed) < 1e-6


# ---------------------------------------------------------------------------------------------
# What each nn.Dropout is applied to


# The modules whose inputs and outputs the placement check compares with the dropouts'.
WATCHED = (
    nn.LayerNorm,
    MultiHeadAttention,
    model_module.PositionwiseFeedForward,
    model_module.EncoderLayer,
    model_module.DecoderLayer,
)


def placement_errors(model: Transformer, src, tgt) -> list[str]:
    """Run the model once with hooks and say where dropout is not where §5.4 puts it (post-LN)."""
    calls: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    outputs: dict[str, torch.Tensor] = {}
    inputs: dict[str, torch.Tensor] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Dropout):

            def record(module, args, out, name=name):
                calls.setdefault(name, []).append((args[0], out))

            handles.append(module.register_forward_hook(record))
        elif isinstance(module, WATCHED):

            def keep(module, args, out, name=name):
                inputs[name], outputs[name] = args[0], out

            handles.append(module.register_forward_hook(keep))
    try:
        model(src, tgt)
    finally:
        for handle in handles:
            handle.remove()

    errors = []
    n = model.config.n_layers
    expected = {"encoder.positions.dropout": 1, "decoder.positions.dropout": 1}
    expected |= {f"encoder.layers.{i}.dropout": 2 for i in range(n)}
    expected |= {f"decoder.layers.{i}.dropout": 3 for i in range(n)}
    counts = {name: len(made) for name, made in calls.items()}
    if counts != expected:
        errors.append(f"dropout calls per module {counts}, expected {expected}")
        return errors

    def same(a, b, atol=1e-12) -> bool:
        return a.shape == b.shape and torch.allclose(a, b, rtol=0.0, atol=atol)

    # The sums of embeddings and positions, in both stacks (the model's table of positions is
    # float32, the closed form here float64).
    for stack, ids in (("encoder", src), ("decoder", tgt)):
        weight = getattr(model, stack).embeddings.lookup.weight
        if not same(calls[f"{stack}.positions.dropout"][0][0], embed(weight, ids), 1e-6):
            errors.append(f"{stack}: dropout is not applied to the embeddings + positions")
    # Each sub-layer: Dropout(Sublayer(x)), then LayerNorm(x + that).
    for stack, names in (
        ("encoder", ["self_attn", "feed_forward"]),
        ("decoder", ["self_attn", "cross_attn", "feed_forward"]),
    ):
        for i in range(n):
            layer = f"{stack}.layers.{i}"
            x = inputs[layer]  # the input of the first sub-layer
            for k, sublayer in enumerate(names):
                dropped_in, dropped_out = calls[f"{layer}.dropout"][k]
                if not same(dropped_in, outputs[f"{layer}.{sublayer}"]):
                    errors.append(f"{layer}: dropout {k} is not on the output of {sublayer}")
                if not same(inputs[f"{layer}.norms.{k}"], x + dropped_out):
                    errors.append(f"{layer}: norm {k} does not receive x + Dropout({sublayer})")
                x = outputs[f"{layer}.norms.{k}"]
    return errors


def test_dropout_sits_on_each_sublayers_output_and_on_the_embedding_sums():
    model = make_model(3)
    dropouts = {n: m.p for n, m in model.named_modules() if isinstance(m, nn.Dropout)}
    n = model.config.n_layers
    assert len(dropouts) == 2 + 2 * n  # one per stack's positions, one per layer (reused)
    assert set(dropouts.values()) == {P}
    torch.manual_seed(3)
    assert placement_errors(model, tokens(3), tokens(4, length=4)) == []


def test_the_model_has_no_dropout_on_the_attention_weights():
    """The paper names none: in training, with dropout elsewhere, every attention's weights still
    sum to 1 over the keys a query may see (dropped weights would leave zeros and 1 / (1 - P))."""
    model = make_model(0)
    src, tgt = tokens(1), tokens(2, length=4)
    weights = []
    memory = model.encode(src, None, weights)
    model.decode(tgt, memory, (src != PAD)[:, None, None, :], weights=weights)
    assert len(weights) == 3 * model.config.n_layers
    for found in weights:  # (B, h, L_q, L_k); a query of a padded row may see no key at all
        sums = found.sum(-1)
        assert torch.allclose(sums, (sums > 0.5).to(sums.dtype)), sums


def misplaced_residual(layer, i, x, sublayer):
    """Dropout moved after the residual addition: LayerNorm(Dropout(x + Sublayer(x)))."""
    return layer.norms[i](layer.dropout(x + sublayer(x)))


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_both_checks_catch_dropout_after_the_residual_add(monkeypatch):
    model = make_model(5)
    monkeypatch.setattr(model_module, "residual", misplaced_residual)
    torch.manual_seed(5)
    errors = placement_errors(model, tokens(5), tokens(6, length=4))
    assert errors and all("is not on the output of" in e or "does not receive" in e for e in errors)
    assert difference_from_reference(model, 5) > 1e-3


# ---------------------------------------------------------------------------------------------
# Training mode draws masks; evaluation mode is deterministic


def test_eval_mode_is_deterministic_and_training_mode_is_not():
    model = make_model(7)
    src, tgt = tokens(7), tokens(8, length=4)
    assert not torch.equal(model(src, tgt), model(src, tgt))
    model.eval()
    assert torch.equal(model(src, tgt), model(src, tgt))


def test_without_dropout_training_mode_is_deterministic():
    model = make_model(7, dropout=0.0)
    src, tgt = tokens(7), tokens(8, length=4)
    assert torch.equal(model(src, tgt), model(src, tgt))
