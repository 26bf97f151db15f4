"""The model (§3) against independent references: PyTorch's ``nn.Transformer`` with the same
weights, closed forms written here (parameter counts, sinusoids, initialisation bounds), and
properties that hold for any weights (causality, padding invariance, permutation equivariance).
"""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close, embed, torch_transformer
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.model import Transformer, TransformerConfig, sinusoidal_encoding

DOUBLE = torch.float64
SETTINGS = settings(max_examples=25, deadline=None)


def small_config(**changes) -> TransformerConfig:
    sizes = dict(src_vocab_size=23, tgt_vocab_size=23, d_model=12, d_ff=20, n_heads=3, n_layers=2)
    return TransformerConfig(**{**sizes, "dropout": 0.0, **changes})


def random_model(config: TransformerConfig, seed: int) -> Transformer:
    """A float64 model in eval mode whose every parameter (LayerNorm and biases included) is
    random, so that a misplaced norm or bias cannot hide behind its initial value of 1 or 0."""
    torch.manual_seed(seed)
    model = Transformer(config).double().eval()
    with torch.no_grad():
        for parameter in model.parameters():  # vectors (biases, LayerNorm) in [0.5, 1.5]
            parameter.uniform_(-0.5, 0.5).add_(1.0 if parameter.dim() == 1 else 0.0)
    return model


def random_tokens(g, batch, length, vocab, pad_id, min_length=1):
    """Tokens that are never ``pad_id``, then padding at the end of each row after a random length."""
    tokens = torch.randint(0, vocab - 1, (batch, length), generator=g)
    tokens = tokens + (tokens >= pad_id).long()  # skip the pad id
    lengths = torch.randint(min_length, length + 1, (batch,), generator=g)
    tokens[torch.arange(length)[None, :] >= lengths[:, None]] = pad_id
    return tokens


# ---------------------------------------------------------------------------------------------
# The configuration


def test_config_is_frozen():
    config = TransformerConfig.base()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 256


def test_presets_are_the_papers_base_and_big_models():
    """Table 3: base N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1; big 1024, 4096, 16, 0.3
    (§6.1: 0.3 for English-German). Shared 37,000-token vocabulary (§5.1), post-LN, tied."""
    base, big = TransformerConfig.base(), TransformerConfig.big()
    paper_base = dict(n_layers=6, d_model=512, d_ff=2048, n_heads=8, dropout=0.1)
    paper_big = dict(n_layers=6, d_model=1024, d_ff=4096, n_heads=16, dropout=0.3)
    for config, sizes in [(base, paper_base), (big, paper_big)]:
        for name, value in sizes.items():
            assert getattr(config, name) == value, name
        assert config.src_vocab_size == config.tgt_vocab_size == 37000
        assert config.positional == "sinusoidal"
        assert not config.norm_first
        assert config.tie_embeddings and config.shared_vocabulary
        assert config.d_k == 64
    assert TransformerConfig.big(dropout=0.1, vocab_size=100).dropout == 0.1
    assert TransformerConfig.big(vocab_size=100).src_vocab_size == 100
    assert not TransformerConfig(10, 12).shared_vocabulary
    assert not TransformerConfig.base(tie_embeddings=False).shared_vocabulary


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(n_heads=7), "n_heads"),
        (dict(n_heads=0), "n_heads"),
        (dict(n_heads=-8), "n_heads"),
        (dict(positional="rotary"), "positional"),
        (dict(d_model=0), "d_model"),
        (dict(d_ff=0), "d_ff"),
        (dict(n_layers=0), "n_layers"),
        (dict(max_len=0), "max_len"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(dropout=1.0), "dropout"),
        (dict(dropout=-0.1), "dropout"),
        (dict(pad_id=37000), "pad_id"),
        (dict(pad_id=-1), "pad_id"),
    ],
)
def test_impossible_configurations_are_refused_with_the_field_named(changes, field):
    with pytest.raises(ValueError, match=field):
        TransformerConfig.base(**changes)


def test_pad_id_must_belong_to_both_vocabularies():
    with pytest.raises(ValueError, match="pad_id"):
        TransformerConfig(src_vocab_size=50, tgt_vocab_size=10, pad_id=20)
    TransformerConfig(src_vocab_size=50, tgt_vocab_size=10, pad_id=9)


# ---------------------------------------------------------------------------------------------
# Weight tying (§3.4)


def embedding_weights(model: Transformer):
    return (
        model.encoder.embeddings.lookup.weight,
        model.decoder.embeddings.lookup.weight,
        model.generator.weight,
    )


def test_shared_vocabulary_ties_three_ways_and_stays_tied_after_a_step():
    model = Transformer(small_config())
    src_w, tgt_w, out_w = embedding_weights(model)
    assert src_w is tgt_w and tgt_w is out_w
    before = out_w.detach().clone()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    src, tgt = torch.tensor([[3, 4, 5, 2]]), torch.tensor([[1, 6, 7]])
    F.cross_entropy(model(src, tgt).flatten(0, 1), torch.tensor([6, 7, 2])).backward()
    optimizer.step()
    src_w, tgt_w, out_w = embedding_weights(model)
    assert src_w is tgt_w and tgt_w is out_w
    assert not torch.equal(out_w, before)  # it did move, as one matrix
    assert torch.equal(src_w, tgt_w) and torch.equal(tgt_w, out_w)


def test_tied_matrix_collects_the_gradient_of_all_three_uses():
    """The gradient of the shared matrix is the sum of the gradients its three roles would get
    as separate matrices (computed here with an untied copy of the same weights)."""
    tied = random_model(small_config(), seed=0)
    untied = Transformer(small_config(tie_embeddings=False)).double().eval()
    shared = tied.generator.weight
    state = {k: v for k, v in tied.state_dict().items()}
    untied.load_state_dict(state)
    src, tgt = torch.tensor([[3, 4, 5, 2], [6, 7, 0, 0]]), torch.tensor([[1, 6, 7], [1, 8, 0]])
    tied(src, tgt).pow(2).sum().backward()
    untied(src, tgt).pow(2).sum().backward()
    assert_close(shared.grad, sum(w.grad for w in embedding_weights(untied)))


def test_separate_vocabularies_tie_only_target_embedding_and_generator():
    model = Transformer(small_config(src_vocab_size=31, tgt_vocab_size=17))
    src_w, tgt_w, out_w = embedding_weights(model)
    assert tgt_w is out_w
    assert src_w is not tgt_w
    assert src_w.shape == (31, 12) and tgt_w.shape == (17, 12)


@pytest.mark.parametrize("vocabularies", [(23, 23), (31, 17)])
def test_without_tying_nothing_is_shared(vocabularies):
    src_vocab, tgt_vocab = vocabularies
    model = Transformer(
        small_config(src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, tie_embeddings=False)
    )
    src_w, tgt_w, out_w = embedding_weights(model)
    assert len({id(src_w), id(tgt_w), id(out_w)}) == 3
    assert not torch.equal(tgt_w, out_w)


# ---------------------------------------------------------------------------------------------
# Parameter counts: a closed form


def expected_parameters(c: TransformerConfig) -> int:
    """Counted from §3 by hand: attention has W^Q, W^K, W^V, W^O (d x d) with biases; the FFN
    W_1 (d x d_ff), W_2 (d_ff x d) with biases; LayerNorm a gain and a bias per component."""
    d, d_ff = c.d_model, c.d_ff
    attention = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    final_norms = 2 * norm if c.norm_first else 0  # pre-LN ends each stack with a LayerNorm
    stacks = c.n_layers * (encoder_layer + decoder_layer) + final_norms
    if c.tie_embeddings and c.src_vocab_size == c.tgt_vocab_size:
        tables = c.tgt_vocab_size * d  # one matrix: source, target, generator
    elif c.tie_embeddings:
        tables = c.src_vocab_size * d + c.tgt_vocab_size * d  # generator = target embedding
    else:
        tables = c.src_vocab_size * d + 2 * c.tgt_vocab_size * d  # generator has no bias
    positions = 2 * c.max_len * d if c.positional == "learned" else 0  # one table per stack
    return stacks + tables + positions


@pytest.mark.parametrize(
    "config",
    [
        small_config(),
        small_config(norm_first=True),
        small_config(src_vocab_size=31, tgt_vocab_size=17),
        small_config(tie_embeddings=False),
        small_config(src_vocab_size=31, tgt_vocab_size=17, tie_embeddings=False),
        small_config(positional="learned", max_len=40),
        small_config(positional="none", n_layers=3, d_ff=7),
        TransformerConfig.base(),
        TransformerConfig.big(positional="learned", max_len=512, norm_first=True),
    ],
    ids=lambda c: (
        f"d{c.d_model}-N{c.n_layers}-V{c.src_vocab_size}/{c.tgt_vocab_size}"
        f"-tie{int(c.tie_embeddings)}-{c.positional}-pre{int(c.norm_first)}"
    ),
)
def test_parameter_count_is_the_closed_form(config):
    with torch.device("meta"):  # shapes only, no memory
        model = Transformer(config)
    assert sum(p.numel() for p in model.parameters()) == expected_parameters(config)


# ---------------------------------------------------------------------------------------------
# Positional encoding (§3.5)


@pytest.mark.parametrize("max_len, d_model", [(50, 16), (30, 7), (8, 2)])
def test_sinusoidal_encoding_is_the_papers_formula(max_len, d_model):
    table = sinusoidal_encoding(max_len, d_model)
    assert table.shape == (max_len, d_model)
    expected = torch.empty(max_len, d_model, dtype=DOUBLE)
    for pos in range(max_len):
        for dim in range(d_model):
            i = dim // 2
            angle = pos / 10000 ** (2 * i / d_model)
            expected[pos, dim] = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
    assert_close(table.double(), expected, atol=1e-6)  # the table is float32


@pytest.mark.parametrize("k", [1, 7, 60])
def test_a_fixed_offset_is_a_linear_map(k):
    """PE(pos + k) = PE(pos) M_k for one matrix M_k: found by least squares, and written in
    closed form as a rotation of each (sin, cos) pair by the angle k / 10000^(2i/d)."""
    d_model, max_len = 32, 400
    table = sinusoidal_encoding(max_len, d_model).double()
    before, after = table[: max_len - k], table[k:]
    solution = torch.linalg.lstsq(before, after, driver="gelsd").solution  # (d, d)
    assert (before @ solution - after).abs().max() < 1e-5
    rotation = torch.zeros(d_model, d_model, dtype=DOUBLE)
    for i in range(d_model // 2):
        angle = k / 10000 ** (2 * i / d_model)
        s, c = 2 * i, 2 * i + 1  # the sin and cos columns of frequency i
        rotation[s, s], rotation[c, s] = math.cos(angle), math.sin(angle)
        rotation[s, c], rotation[c, c] = -math.sin(angle), math.cos(angle)
    assert (before @ rotation - after).abs().max() < 1e-5


# ---------------------------------------------------------------------------------------------
# Equivalence with nn.Transformer


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # nn.Transformer's notice
@SETTINGS
@given(
    heads=st.integers(1, 3),
    d_k=st.integers(1, 4),
    d_ff=st.integers(1, 16),
    n_layers=st.integers(1, 2),
    shape=st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 6)),
    norm_first=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_equal_to_pytorchs_transformer(heads, d_k, d_ff, n_layers, shape, norm_first, seed):
    config = small_config(
        d_model=heads * d_k, n_heads=heads, d_ff=d_ff, n_layers=n_layers, norm_first=norm_first
    )
    ours = random_model(config, seed)
    theirs = torch_transformer(ours).eval()
    batch, s, t = shape
    g = torch.Generator().manual_seed(seed)
    src = random_tokens(g, batch, s, config.src_vocab_size, config.pad_id)
    tgt = random_tokens(g, batch, t, config.tgt_vocab_size, config.pad_id)
    logits = ours(src, tgt)  # our masks: the defaults, from pad_id
    # PyTorch's boolean masks mean "may NOT attend": True at padding, True above the diagonal.
    hidden = theirs(
        embed(ours.encoder.embeddings.lookup.weight, src),
        embed(ours.decoder.embeddings.lookup.weight, tgt),
        tgt_mask=torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1),
        src_key_padding_mask=src == config.pad_id,
        tgt_key_padding_mask=tgt == config.pad_id,
        memory_key_padding_mask=src == config.pad_id,
    )
    assert_close(logits, hidden @ ours.generator.weight.T, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Properties that hold for any weights


@SETTINGS
@given(
    t=st.integers(1, 7),
    norm_first=st.booleans(),
    positional=st.sampled_from(["sinusoidal", "learned"]),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_outputs_never_depend_on_later_target_tokens(t, norm_first, positional, seed, data):
    config = small_config(norm_first=norm_first, positional=positional)
    model = random_model(config, seed)
    g = torch.Generator().manual_seed(seed)
    src = random_tokens(g, 2, 5, 23, 0)
    tgt = random_tokens(g, 2, 8, 23, 0, min_length=8)
    changed = tgt.clone()
    changed[:, t:] = torch.randint(0, 23, (2, 8 - t), generator=g)  # padding allowed there too
    assert_close(model(src, changed)[:, :t], model(src, tgt)[:, :t])
    position = data.draw(st.integers(t, 7))  # and a change at t does change position t
    changed = tgt.clone()
    changed[:, position] = tgt[:, position] % 22 + 1  # another non-pad token
    assert not torch.allclose(model(src, changed)[:, position], model(src, tgt)[:, position])


@SETTINGS
@given(
    extra=st.integers(1, 4),
    norm_first=st.booleans(),
    tie=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_extra_source_padding_changes_nothing(extra, norm_first, tie, seed):
    config = small_config(norm_first=norm_first, tie_embeddings=tie, pad_id=3)
    model = random_model(config, seed)
    g = torch.Generator().manual_seed(seed)
    src = random_tokens(g, 3, 5, 23, 3)
    tgt = random_tokens(g, 3, 4, 23, 3)
    padded = torch.cat([src, torch.full((3, extra), 3)], dim=1)
    assert_close(model(padded, tgt), model(src, tgt))
    real = src != 3
    assert_close(model.encode(padded)[:, :5][real], model.encode(src)[real])


@SETTINGS
@given(norm_first=st.booleans(), seed=st.integers(0, 2**16))
def test_without_positions_the_encoder_is_permutation_equivariant(norm_first, seed):
    """With positional="none", permuting the source permutes the memory the same way, and the
    decoder, which reads the memory through attention, does not notice at all."""
    model = random_model(small_config(positional="none", norm_first=norm_first), seed)
    g = torch.Generator().manual_seed(seed)
    src = random_tokens(g, 2, 6, 23, 0)
    tgt = random_tokens(g, 2, 4, 23, 0)
    permutation = torch.randperm(6, generator=g)
    assert_close(model.encode(src[:, permutation]), model.encode(src)[:, permutation])
    assert_close(model(src[:, permutation], tgt), model(src, tgt))


def test_with_positions_the_encoder_sees_order():
    """The control for the test above: sinusoids make the same permutation matter."""
    model = random_model(small_config(), seed=0)
    src = torch.tensor([[3, 4, 5, 6, 7, 8]])
    assert not torch.allclose(
        model.encode(src[:, [1, 0, 2, 3, 4, 5]])[:, [1, 0]], model.encode(src)[:, :2]
    )


def test_a_source_made_only_of_padding_gives_finite_outputs_and_gradients():
    model = random_model(small_config(), seed=0).train()
    src = torch.tensor([[3, 4, 5], [0, 0, 0]])
    tgt = torch.tensor([[1, 6, 7], [1, 8, 0]])
    logits = model(src, tgt)
    assert torch.isfinite(logits).all()
    logits.pow(2).sum().backward()
    for name, parameter in model.named_parameters():
        assert torch.isfinite(parameter.grad).all(), name


# ---------------------------------------------------------------------------------------------
# Embeddings and initialisation


def test_embeddings_are_scaled_by_the_square_root_of_d_model():
    model = Transformer(small_config(d_model=16, n_heads=4))
    tokens = torch.tensor([[1, 5, 22, 5]])
    table = model.encoder.embeddings.lookup.weight
    assert_close(model.encoder.embeddings(tokens), table[tokens] * 4.0, atol=1e-6)


@pytest.mark.parametrize("tie", [True, False])
def test_embeddings_start_normal_with_variance_one_over_d_model(tie):
    """On 4000 x 64 = 256,000 draws the standard deviation is known to about 0.15%; a 3% band is
    generous, yet the usual alternatives (std 1, or Xavier's sqrt(2 / (V + d))) are far off."""
    d_model = 64
    torch.manual_seed(0)
    model = Transformer(
        small_config(
            src_vocab_size=4000,
            tgt_vocab_size=4000,
            d_model=d_model,
            n_heads=4,
            n_layers=1,
            tie_embeddings=tie,
            positional="learned",
            max_len=4000,
        )
    )
    tables = [model.encoder.embeddings.lookup.weight, model.decoder.embeddings.lookup.weight]
    tables += [model.encoder.positions.learned.weight, model.decoder.positions.learned.weight]
    for table in tables:
        values = table.detach().flatten()
        assert abs(values.mean().item()) < 3 * d_model**-0.5 / math.sqrt(values.numel())
        assert values.std().item() == pytest.approx(d_model**-0.5, rel=0.03)
        # A normal, not a uniform, distribution: about 4.55% of draws beyond two standard deviations.
        beyond = (values.abs() > 2 * d_model**-0.5).float().mean().item()
        assert beyond == pytest.approx(0.0455, abs=0.005)


def test_matrices_are_xavier_uniform_and_biases_zero():
    torch.manual_seed(0)
    model = Transformer(small_config(d_model=64, n_heads=4, d_ff=256, tie_embeddings=False))
    matrices = 0
    for name, parameter in model.named_parameters():
        values = parameter.detach()
        if "embeddings" in name or "positions" in name:
            continue
        if "norms" in name or name.endswith("norm.weight") or name.endswith("norm.bias"):
            expected = 1.0 if name.endswith("weight") else 0.0
            assert torch.all(values == expected), name
        elif parameter.dim() == 1:
            assert torch.all(values == 0), name
        else:
            fan_out, fan_in = parameter.shape
            bound = math.sqrt(6 / (fan_in + fan_out))
            assert values.abs().max().item() <= bound, name
            assert values.abs().max().item() > 0.95 * bound, name  # fills the interval
            # Uniform on [-a, a] has variance a^2 / 3.
            assert values.var().item() == pytest.approx(bound**2 / 3, rel=0.15), name
            matrices += 1
    # Per layer: in_proj and out_proj of each attention and the FFN's two; then the generator.
    assert matrices == model.config.n_layers * (4 + 6) + 1
