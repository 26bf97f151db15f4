"""The Table 3 sweep (paper §6.2) and the model options it needs, against independent references:
attention with narrow keys written out head by head, the no-FFN model rebuilt from PyTorch's own
attention and LayerNorm, parameter counts in closed form, the LSTM baseline's step-by-step
decoding against its full forward pass, a model without positions against one whose sinusoids
are zeroed, short training pairs against the data chapter's filter, BLEU by length against
sacreBLEU on each group, the variants each profile makes (replicas over seeds, the probes of depth),
the sweep run end to end on the CPU, and the side-by-side timing script. The verdicts that read a
sweep are tested in test_verdicts.py.
"""

import dataclasses
import json
import math
import os
import shutil
from pathlib import Path

import pytest
import sacrebleu
import torch
import torch.nn.functional as F
from helpers import assert_close, require_multi30k
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.attention import MultiHeadAttention, padding_mask, subsequent_mask
from transformer_lib.batching import BatchesByLength, encode_pairs
from transformer_lib.book.lengths import (
    bucket_scores,
    length_buckets,
    pairs_within,
    trained_lengths,
)
from transformer_lib.book.performance import training_flops
from transformer_lib.book.recurrent import RecurrentConfig, RecurrentDecoder, RecurrentTranslator
from transformer_lib.book.sweep import (
    BUCKETS_FILE,
    HYPOTHESES_FOLDER,
    MANIFEST_FILE,
    RESULTS_FILE,
    _train_variant,
    read_results,
    run_order,
    run_sweep,
    sweep_tokenizer,
)
from transformer_lib.book.variations import (
    SWEEP_PROFILES,
    SweepError,
    build_model,
    matching_recurrent,
    parameter_count,
    select_variants,
    sweep_identity,
    sweep_variants,
)
from transformer_lib.data import DATA_ENV, load_multi30k
from transformer_lib.decoding import (
    KeyValueCache,
    SearchConfig,
    beam_search,
    translate,
)
from transformer_lib.model import PositionalEncoding, Transformer, TransformerConfig
from transformer_lib.provenance import jsonable
from transformer_lib.tokenizer import BOS_ID, EOS_ID, PAD_ID, BPETokenizer

DOUBLE = torch.float64


def randomise(module: nn.Module, seed: int) -> nn.Module:
    """Every parameter random (vectors around 1), so no bias or gain hides at its initial value."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.uniform_(-0.5, 0.5).add_(1.0 if parameter.dim() == 1 else 0.0)
    return module


def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def real_lengths(batch) -> tuple[list[int], list[int]]:
    """Each pair's source and target length in a batch's tensors, padding left out."""
    return (batch.src != PAD_ID).sum(1).tolist(), (batch.tgt_out != PAD_ID).sum(1).tolist()


# ---------------------------------------------------------------------------------------------
# Row B: queries and keys of width d_k, values of width d_model / h


def attention_head_by_head(mha: MultiHeadAttention, query, key, value, mask):
    """Equation 1 and §3.2.2 written out one head at a time from slices of the weights: rows
    [i d_k, (i+1) d_k) of W^Q and of W^K, rows [i d_v, (i+1) d_v) of W^V, then W^O."""
    h, d_k, d_v = mha.n_heads, mha.d_k, mha.d_model // mha.n_heads
    w, b = mha.in_proj.weight, mha.in_proj.bias
    keys_at, values_at = h * d_k, 2 * h * d_k
    heads = []
    for i in range(h):
        q_rows = slice(i * d_k, (i + 1) * d_k)
        k_rows = slice(keys_at + i * d_k, keys_at + (i + 1) * d_k)
        v_rows = slice(values_at + i * d_v, values_at + (i + 1) * d_v)
        q = query @ w[q_rows].T + b[q_rows]  # (B, L_q, d_k)
        k = key @ w[k_rows].T + b[k_rows]  # (B, L_k, d_k)
        v = value @ w[v_rows].T + b[v_rows]  # (B, L_k, d_v)
        scores = q @ k.transpose(1, 2) / math.sqrt(d_k)
        scores = scores.masked_fill(~mask[:, 0], float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ v)
    return mha.out_proj(torch.cat(heads, dim=-1))


@pytest.mark.parametrize("d_k", [1, 3, 8, 20])
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "written-out"])
def test_narrow_keys_equal_attention_written_out_head_by_head(d_k, cross, need_weights):
    attention = MultiHeadAttention(d_model=12, n_heads=3, d_k=d_k, cross=cross)
    mha = randomise(attention, d_k).double().eval()
    assert mha.in_proj.weight.shape == (2 * 3 * d_k + 12, 12)
    g = torch.Generator().manual_seed(d_k)
    x = torch.randn(2, 5, 12, generator=g, dtype=DOUBLE)
    memory = torch.randn(2, 7, 12, generator=g, dtype=DOUBLE) if cross else x
    tokens = torch.tensor([[3, 4, 5, 6, 7, 8, 9], [3, 4, 5, 0, 0, 0, 0]])[:, : memory.shape[1]]
    mask = padding_mask(tokens, 0)  # (B, 1, 1, L_k)
    if not cross:
        mask = mask & subsequent_mask(5)
    mask = mask.expand(2, 1, 5, memory.shape[1])
    ours = mha(x, memory if cross else None, mask, need_weights=need_weights)
    ours = ours[0] if need_weights else ours
    assert_close(ours, attention_head_by_head(mha, x, memory, memory, mask))


def test_default_key_width_is_the_papers_layout():
    mha = MultiHeadAttention(d_model=16, n_heads=4)
    assert (mha.d_k, mha.d_v) == (4, 4) and mha.in_proj.weight.shape == (48, 16)
    config = TransformerConfig.base(key_size=16)
    assert (config.d_k, config.d_v) == (16, 64)
    assert (TransformerConfig.base().d_k, TransformerConfig.base().d_v) == (64, 64)
    with pytest.raises(ValueError, match="key_size"):
        TransformerConfig.base(key_size=0)
    with pytest.raises(ValueError, match="d_k"):
        MultiHeadAttention(16, 4, d_k=0)


@pytest.mark.parametrize("chunks", [[1, 1, 1, 1, 1, 1], [2, 3, 1]])
def test_narrow_keys_cached_one_step_at_a_time_equal_full_causal_attention(chunks):
    mha = randomise(MultiHeadAttention(d_model=12, n_heads=2, d_k=5), 1).double().eval()
    x = torch.randn(3, sum(chunks), 12, dtype=DOUBLE, generator=torch.Generator().manual_seed(1))
    full = mha(x, mask=subsequent_mask(sum(chunks)))
    cache, pieces, start = KeyValueCache(), [], 0
    for size in chunks:
        part = x[:, start : start + size]
        mask = subsequent_mask(start + size)[:, :, start:]  # new rows see every earlier key
        pieces.append(mha(part, mask=mask, cache=cache))  # several positions at a time
        start += size
    assert cache.keys.shape[-1] == 5 and cache.values.shape[-1] == 6
    assert_close(torch.cat(pieces, dim=1), full)


# ---------------------------------------------------------------------------------------------
# Parameter counts: closed forms


def transformer_parameters(c: TransformerConfig) -> int:
    """Counted by hand: attention has W^Q, W^K (d x h d_k) and W^V, W^O (d x d) with biases; the
    FFN (when there is one) d x d_ff and back with biases; a LayerNorm per sub-layer."""
    d, qk = c.d_model, c.n_heads * c.d_k
    attention = (2 * qk + d) * d + (2 * qk + d) + d * d + d
    ffn = (2 * d * c.d_ff + c.d_ff + d) if c.feed_forward else 0
    sublayers = 1 + c.feed_forward
    encoder_layer = attention + ffn + sublayers * 2 * d
    decoder_layer = 2 * attention + ffn + (sublayers + 1) * 2 * d
    tables = c.tgt_vocab_size * d  # one shared, tied matrix in these configurations
    positions = 2 * c.max_len * d if c.positional == "learned" else 0
    return c.n_layers * (encoder_layer + decoder_layer) + tables + positions


@pytest.mark.parametrize(
    "changes",
    [
        {},
        dict(key_size=16),
        dict(key_size=32),
        dict(key_size=100, n_heads=2),
        dict(feed_forward=False),
        dict(feed_forward=False, key_size=8, n_layers=3),
        dict(positional="learned", max_len=256),
    ],
)
def test_transformer_parameters_are_the_closed_form(changes):
    config = TransformerConfig.base(vocab_size=8000, **{"n_layers": 2, **changes})
    with torch.device("meta"):
        assert count(Transformer(config)) == transformer_parameters(config)


def lstm_parameters(c: RecurrentConfig) -> int:
    """By hand: an LSTM layer of H units reading I inputs has 4H(I + H) weights and two bias
    vectors of 4H; the encoder has two directions of d/2 units per layer, all reading d inputs."""
    d, n = c.d_model, c.n_layers

    def layer(inputs, units):
        return 4 * units * (inputs + units) + 2 * 4 * units

    shared = c.tie_embeddings and c.src_vocab_size == c.tgt_vocab_size
    tables = c.tgt_vocab_size * d + (0 if shared else c.src_vocab_size * d)
    generator = 0 if c.tie_embeddings else c.tgt_vocab_size * d
    encoder = n * 2 * layer(d, d // 2)
    decoder = n * layer(d, d)
    attention = d * d + 2 * d * d + d  # W_a; W_c and its bias
    return tables + generator + encoder + decoder + attention


@pytest.mark.parametrize(
    "changes",
    [{}, dict(n_layers=1), dict(tie_embeddings=False), dict(src_vocab_size=31, tgt_vocab_size=17)],
)
def test_lstm_parameters_are_the_closed_form(changes):
    config = RecurrentConfig(
        **{"src_vocab_size": 50, "tgt_vocab_size": 50, "d_model": 24, **changes}
    )
    model = RecurrentTranslator(config)
    assert count(model) == lstm_parameters(config) == parameter_count(config)
    if config.tie_embeddings:
        assert model.generator.weight is model.tgt_embeddings.lookup.weight


def test_the_lstm_baseline_is_the_width_closest_to_the_base_in_parameters():
    base = TransformerConfig(8000, 8000, d_model=512, d_ff=2048, n_heads=8, n_layers=3)
    with torch.device("meta"):
        target = count(Transformer(base))
    lstm = matching_recurrent(base, n_layers=2)
    gap = abs(lstm_parameters(lstm) - target)
    for other in (lstm.d_model - 16, lstm.d_model + 16):
        assert abs(lstm_parameters(dataclasses.replace(lstm, d_model=other)) - target) >= gap
    assert gap / target < 0.05


# ---------------------------------------------------------------------------------------------
# The model without the position-wise FFN, against PyTorch's attention and LayerNorm


def torch_attention(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    theirs = nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True).double()
    theirs.in_proj_weight.data.copy_(ours.in_proj.weight)
    theirs.in_proj_bias.data.copy_(ours.in_proj.bias)
    theirs.out_proj.load_state_dict(ours.out_proj.state_dict())
    return theirs.eval()


def no_ffn_reference(model: Transformer, src, tgt):
    """Each encoder layer LayerNorm(x + SelfAttention(x)), each decoder layer the same followed
    by LayerNorm(y + CrossAttention(y, memory)): nothing else, with PyTorch's modules."""
    c = model.config
    src_pad, tgt_pad = src == c.pad_id, tgt == c.pad_id  # PyTorch: True = may NOT attend
    causal = ~subsequent_mask(tgt.shape[1])[0, 0]

    def norm(layer_norm, x):
        return F.layer_norm(x, (c.d_model,), layer_norm.weight, layer_norm.bias, layer_norm.eps)

    x = model.encoder.positions(model.encoder.embeddings(src))
    for layer in model.encoder.layers:
        a, _ = torch_attention(layer.self_attn)(x, x, x, key_padding_mask=src_pad)
        x = norm(layer.norms[0], x + a)
    memory = x
    y = model.decoder.positions(model.decoder.embeddings(tgt))
    for layer in model.decoder.layers:
        attention = torch_attention(layer.self_attn)
        a, _ = attention(y, y, y, attn_mask=causal, key_padding_mask=tgt_pad, is_causal=False)
        y = norm(layer.norms[0], y + a)
        a, _ = torch_attention(layer.cross_attn)(y, memory, memory, key_padding_mask=src_pad)
        y = norm(layer.norms[1], y + a)
    return model.generator(y)


def test_model_without_ffn_equals_attention_and_layernorm_alone():
    config = TransformerConfig(29, 29, d_model=12, d_ff=20, n_heads=3, n_layers=2, dropout=0.0)
    model = randomise(Transformer(dataclasses.replace(config, feed_forward=False)), 4)
    model = model.double().eval()
    assert all(layer.feed_forward is None for layer in model.encoder.layers)
    assert not any("feed_forward" in name for name, _ in model.named_parameters())
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    tgt = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 16]])  # the decoder's input, no padding
    assert_close(model(src, tgt), no_ffn_reference(model, src, tgt), atol=1e-9)


# ---------------------------------------------------------------------------------------------
# The LSTM baseline as a decoder state


def random_lstm(seed: int, **changes) -> RecurrentTranslator:
    settings = dict(src_vocab_size=30, tgt_vocab_size=30, d_model=16, n_layers=2, dropout=0.0)
    torch.manual_seed(seed)
    return RecurrentTranslator(RecurrentConfig(**{**settings, **changes})).double().eval()


SOURCES = torch.tensor([[5, 6, 7, 8, 9, 2], [9, 10, 2, 0, 0, 0], [4, 2, 0, 0, 0, 0]])


@pytest.mark.parametrize("seed", range(3))
def test_lstm_steps_equal_its_full_forward_pass_also_after_reordering(seed):
    model = random_lstm(seed, n_layers=1 + seed % 2)
    g = torch.Generator().manual_seed(seed)
    tgt = torch.cat([torch.full((3, 1), BOS_ID), torch.randint(3, 30, (3, 6), generator=g)], 1)
    rows = torch.tensor([2, 0, 0])  # beam search reorders, duplicates and drops rows
    with torch.no_grad():
        full = model(SOURCES, tgt)  # (B, T, V)
        reordered = model(SOURCES[rows], tgt[rows])
        state = RecurrentDecoder(model, SOURCES)
        for t in range(tgt.shape[1]):
            if t == 3:
                state.select(rows)
            expected = full[:, t] if t < 3 else reordered[:, t]
            assert_close(state.step(tgt[:, t] if t < 3 else tgt[rows, t]), expected, atol=1e-12)


def test_lstm_encoder_ignores_source_padding():
    model = random_lstm(7)
    tgt = torch.tensor([[BOS_ID, 5, 6], [BOS_ID, 7, 8], [BOS_ID, 9, 3]])
    padded = torch.cat([SOURCES, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        assert_close(model(SOURCES, tgt), model(padded, tgt), atol=1e-12)
        alone = model(SOURCES[1:2, :3], tgt[1:2])  # the second sentence without padding
    assert_close(model(SOURCES, tgt)[1:2].detach(), alone, atol=1e-12)


def test_lstm_beam_search_finds_the_same_outputs_batched_or_alone():
    model = random_lstm(8)
    limits = torch.tensor([9, 7, 5])
    with torch.no_grad():
        together = beam_search(RecurrentDecoder(model, SOURCES), BOS_ID, EOS_ID, limits, 3)
        alone = [
            beam_search(
                RecurrentDecoder(model, SOURCES[i : i + 1]), BOS_ID, EOS_ID, limits[i : i + 1], 3
            )[0]
            for i in range(3)
        ]
    assert [h.tokens for h in together] == [h.tokens for h in alone]
    for a, b in zip(together, alone, strict=True):
        assert math.isclose(a.score, b.score, rel_tol=1e-9)


def test_translate_drives_the_lstm_state():
    sentences = ["Ein Hund rennt.", "", "Zwei Männer spielen Fußball auf einem Feld."]
    tokenizer = BPETokenizer.train([s for s in sentences if s] * 5, vocab_size=300)
    model = random_lstm(9, src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size)
    model = model.float()
    search = SearchConfig(beam_size=3, extra_length=5)
    together = translate(
        model,
        tokenizer,
        sentences,
        dataclasses.replace(search, batch_size=2),
        decoder_state=RecurrentDecoder,
    )
    alone = [
        translate(model, tokenizer, [s], search, decoder_state=RecurrentDecoder)[0]
        for s in sentences
    ]
    assert together == alone and together[1] == ""


@pytest.mark.parametrize(
    "changes, field",
    [(dict(d_model=15), "even"), (dict(n_layers=0), "n_layers"), (dict(dropout=1.0), "dropout")],
)
def test_impossible_lstm_configurations_are_refused(changes, field):
    with pytest.raises(ValueError, match=field):
        RecurrentConfig(**{"src_vocab_size": 30, "tgt_vocab_size": 30, **changes})


# ---------------------------------------------------------------------------------------------
# Row E and the fourth question: no positions, learned rows never reached, short training pairs


def test_no_positions_equals_sinusoids_set_to_zero():
    """positional="none" is the sinusoidal model with its table zeroed, weight for weight."""
    sizes = dict(src_vocab_size=23, tgt_vocab_size=23, d_model=12, d_ff=20, n_heads=3)
    none = randomise(Transformer(TransformerConfig(**sizes, n_layers=2, positional="none")), 0)
    sines = Transformer(TransformerConfig(**sizes, n_layers=2))
    sines.load_state_dict(none.state_dict())  # the table is a buffer, not saved: same keys
    for stack in (sines.encoder, sines.decoder):
        stack.positions.table.zero_()
    none, sines = none.double().eval(), sines.double().eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    tgt = torch.tensor([[1, 11, 12], [1, 14, 0]])
    assert_close(none(src, tgt), sines(src, tgt))
    assert count(none) == count(sines)
    x = torch.randn(2, 4, 12)
    assert torch.equal(PositionalEncoding(12, 8, 0.0, "none")(x, offset=3), x)


def test_learned_rows_beyond_the_training_lengths_stay_as_initialised():
    """Adam leaves a row whose gradient is always zero where it started: the E-short question."""
    config = TransformerConfig(23, 23, d_model=12, d_ff=20, n_heads=3, n_layers=1)
    config = dataclasses.replace(config, positional="learned", max_len=16)
    torch.manual_seed(0)
    model = Transformer(config)
    before = [
        stack.positions.learned.weight.detach().clone() for stack in (model.encoder, model.decoder)
    ]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        src = torch.randint(3, 23, (4, 5), generator=g)  # positions 0-4 only
        tgt = torch.randint(3, 23, (4, 6), generator=g)  # positions 0-5 only
        model(src, tgt).logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    for stack, start, reached in zip((model.encoder, model.decoder), before, (5, 6), strict=True):
        after = stack.positions.learned.weight.detach()
        assert not torch.equal(after[:reached], start[:reached])  # trained
        assert torch.equal(after[reached:], start[reached:])  # never reached: untouched


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=30),
    limit=st.integers(0, 10),
)
def test_pairs_within_keeps_exactly_the_pairs_whose_sides_fit(lengths, limit):
    pairs = [(list(range(s)), list(range(t))) for s, t in lengths]
    kept = pairs_within(pairs, limit)
    assert kept == [p for p in pairs if max(len(p[0]), len(p[1])) <= limit]
    buckets = length_buckets(pairs, limit)
    assert sorted(buckets["short"] + buckets["long"]) == list(range(len(pairs)))
    assert [pairs[i] for i in buckets["short"]] == kept
    assert pairs_within(pairs, None) == pairs


def test_pairs_within_is_the_data_chapters_filter():
    sentences = [("Ein Hund.", "A dog."), ("Zwei Hunde rennen über eine Wiese.", "Two dogs run.")]
    tokenizer = BPETokenizer.train([s for pair in sentences for s in pair] * 5, vocab_size=300)
    for limit in range(0, 12):
        assert pairs_within(encode_pairs(tokenizer, sentences), limit) == encode_pairs(
            tokenizer, sentences, limit
        )


def test_bleu_by_length_is_sacrebleu_on_each_group():
    references = ["a dog runs on the grass", "two men play", "a woman sings a song loudly", "cats"]
    hypotheses = ["a dog runs on grass", "two men are playing", "a woman sings a song", "a cat"]
    buckets = {"short": [1, 3], "long": [0, 2], "empty": []}
    scores = bucket_scores(hypotheses, references, buckets)
    assert set(scores) == {"short", "long"}  # BLEU of no sentences is left out
    for name in ("short", "long"):
        chosen = buckets[name]
        expected = sacrebleu.corpus_bleu(
            [hypotheses[i] for i in chosen], [[references[i] for i in chosen]]
        )
        assert scores[name]["bleu"] == expected.score and scores[name]["sentences"] == 2
        assert scores[name]["bleu_signature"].startswith("nrefs:1")


# ---------------------------------------------------------------------------------------------
# The table of variants


FULL = SWEEP_PROFILES["full"]


SHORT = ["E-short-sin", "E-short-learned", "E-short-none", "FFN-none"]


def test_the_full_sweep_has_every_row_of_table_3_and_the_four_questions():
    variants = sweep_variants(FULL, 8000)
    names = [v.name for v in variants]
    assert len(names) == len(set(names))
    expected = ["base", "base-seed1", "base-seed2", "A-h1", "A-h4", "A-h16", "A-h32"]
    expected += ["B-dk16", "B-dk32", "C-N2", "C-N4", "C-N8", "C-d256", "C-d1024"]
    expected += ["C-ff1024", "C-ff4096", "D-drop0.0", "D-drop0.2", "D-ls0.0", "D-ls0.2"]
    expected += ["E-learned", "E-none", *SHORT, "FFN-dff512", "RNN-lstm"]
    assert names == expected
    steps = {v.training.max_steps for v in variants}
    assert steps == {FULL.training.max_steps}  # the same steps for every variant
    by_name = {v.name: v for v in variants}
    assert by_name["B-dk16"].model.d_k == 16 and by_name["B-dk16"].model.d_v == 64
    assert by_name["base-seed2"].training.seed == 2
    assert by_name["D-ls0.2"].training.label_smoothing == 0.2
    assert isinstance(by_name["RNN-lstm"].model, RecurrentConfig)


CPU = SWEEP_PROFILES["cpu"]


def test_the_cpu_sweep_has_every_row_and_the_base_three_times():
    variants = sweep_variants(CPU, CPU.vocab_size)
    names = [v.name for v in variants]
    expected = ["base", "base-seed1", "base-seed2", "A-h1", "A-h2", "A-h8", "A-h16"]
    expected += ["B-dk8", "B-dk16", "C-N1", "C-N4", "C-d64", "C-d256", "C-ff256", "C-ff1024"]
    expected += ["D-drop0.0", "D-drop0.2", "D-ls0.0", "D-ls0.2", "E-learned", "E-none"]
    expected += [*SHORT, "FFN-dff128", "RNN-lstm", "C-N4-warmup400", "C-N4-preLN", "base-preLN"]
    replicas = [f"{name}-seed{seed}" for seed in (1, 2) for name in CPU.replicated]
    assert names == expected + replicas and len({v.training.max_steps for v in variants}) == 1
    assert {v.training.seed for v in variants if v.row in ("base", "noise")} == {0, 1, 2}
    assert min(v.model.d_k for v in variants if v.row in ("A", "B")) >= 8  # no head too narrow
    assert CPU.device == "cpu"


QUESTIONS = ["FFN-none", "FFN-dff128", "A-h1", "A-h16", "B-dk8", "B-dk16", "E-learned", "E-none"]
QUESTIONS += [*SHORT[:3], "C-N4", "RNN-lstm"]


def test_every_question_variant_of_the_cpu_sweep_has_the_bases_three_seeds():
    """A replica is its variant with another seed, and nothing else: the same model, the same
    training but for the seed, the same training pairs; the seeds are the base's."""
    variants = {v.name: v for v in sweep_variants(CPU, CPU.vocab_size)}
    assert sorted(CPU.replicated) == sorted(QUESTIONS)
    base_seeds = sorted(v.training.seed for v in variants.values() if v.row in ("base", "noise"))
    for name in QUESTIONS:
        runs = [v for v in variants.values() if v.name == name or v.replica_of == name]
        assert sorted(v.training.seed for v in runs) == base_seeds, name
        first = variants[name]
        for replica in runs[1:]:
            assert replica.model == first.model and replica.row == first.row
            assert replica.train_max_len == first.train_max_len
            assert dataclasses.replace(replica.training, seed=first.training.seed) == first.training
    with pytest.raises(SweepError, match="A-h7"):
        sweep_variants(dataclasses.replace(CPU, replicated=("A-h7",)), CPU.vocab_size)


def test_a_seed_gives_a_variant_the_bases_batches_and_its_weights_where_the_shapes_agree():
    """What the paired test over seeds relies on. Seed s of a variant trained on the base's pairs
    plans the base's batches (the same pairs, budget and seed); built as the sweep builds it (the
    seed, then the model), it starts from the base's initial weights wherever the shapes agree:
    every weight for one head or sixteen (h * d_k stays d_model), none for the LSTM."""
    variants = {v.name: v for v in sweep_variants(CPU, CPU.vocab_size)}
    base = variants["base"]
    for name in QUESTIONS:
        t = variants[name].training
        assert (t.seed, t.max_tokens, t.max_steps) == (0, base.training.max_tokens, 900), name
        assert (variants[name].train_max_len == base.train_max_len) == (name not in SHORT[:3])

    def first_weights(name: str) -> dict:
        torch.manual_seed(0)  # as _train_variant does before it builds the model
        return build_model(variants[name].model).state_dict()

    weights = first_weights("base")
    for name in ("A-h1", "A-h16", "E-none"):
        assert all(torch.equal(w, weights[k]) for k, w in first_weights(name).items()), name
    lstm = first_weights("RNN-lstm").items()
    assert not [k for k, w in lstm if k in weights and w.shape == weights[k].shape]
    narrow = first_weights("FFN-dff128")  # the embeddings come first: the same; then no longer
    embeddings = "encoder.embeddings.lookup.weight"
    assert torch.equal(narrow[embeddings], weights[embeddings])
    assert not all(
        torch.equal(w, weights[k]) for k, w in narrow.items() if w.shape == weights[k].shape
    )


def test_the_depth_probe_changes_only_the_layer_norm_or_the_warm_up():
    variants = {v.name: v for v in sweep_variants(CPU, CPU.vocab_size)}
    deep, base = variants["C-N4"], variants["base"]
    pre = variants["C-N4-preLN"]
    assert pre.model == dataclasses.replace(deep.model, norm_first=True)
    assert pre.training == deep.training
    longer = variants["C-N4-warmup400"]
    assert longer.model == deep.model
    assert longer.training == dataclasses.replace(deep.training, warmup_steps=400)
    assert 400 == 2 * base.training.warmup_steps
    assert variants["base-preLN"].model == dataclasses.replace(base.model, norm_first=True)
    assert not any(v.row == "depth" for v in sweep_variants(FULL, 8000))  # the GPU's has none


def test_every_first_run_comes_before_any_replica_and_one_seed_before_the_next():
    order = [v.name for v in sorted(sweep_variants(CPU, CPU.vocab_size), key=run_order)]
    first_replica = order.index(f"{CPU.replicated[0]}-seed1")
    assert order[:3] == ["base", "base-seed1", "base-seed2"]
    assert all("-seed" not in name for name in order[3:first_replica])
    seeds = [int(name.rsplit("seed", 1)[1]) for name in order[first_replica:]]
    assert seeds == sorted(seeds) and set(seeds) == {1, 2}
    assert order.index("C-N4-preLN") < first_replica  # the probes of depth are first runs


def test_a_results_folder_is_named_by_what_decides_its_lines():
    """More variants, more seeds or another time budget leave a sweep's lines valid; a change
    of how they are trained or scored does not."""
    same = dataclasses.replace(CPU, replicated=(), depth_probe=None, minutes=1.0, heads=(1,))
    assert sweep_identity(same) == sweep_identity(CPU) == sweep_identity(jsonable(CPU))
    for changes in (dict(beam_size=2), dict(short_len=8), dict(vocab_size=4000)):
        assert sweep_identity(dataclasses.replace(CPU, **changes)) != sweep_identity(CPU)


@pytest.mark.parametrize("profile", ["full", "cpu"])
def test_the_short_rows_train_on_short_pairs_and_the_learned_table_covers_decoding(profile):
    profile = SWEEP_PROFILES[profile]
    short = [
        v
        for v in sweep_variants(profile, profile.vocab_size)
        if v.row == "E-short" and v.replica_of is None
    ]
    assert [v.model.positional for v in short] == ["sinusoidal", "learned", "none"]
    assert {v.train_max_len for v in short} == {profile.short_len}
    longest_output = profile.max_len + SearchConfig().extra_length  # beam search's limit
    assert short[1].model.max_len >= longest_output  # learned rows for every position decoded


@pytest.mark.parametrize("profile, heads", [("full", 5), ("cpu", 5)])
def test_row_a_keeps_the_computation_constant(profile, heads):
    """§3.2.2: with d_k = d_model / h, every head count costs the same and has the same size."""
    profile = SWEEP_PROFILES[profile]
    variants = sweep_variants(profile, 8000)
    variants = [v for v in variants if v.row in ("A", "base") and v.replica_of is None]
    flops = {training_flops(v.model, [20] * 50, [20] * 50) for v in variants}
    with torch.device("meta"):
        sizes = {count(Transformer(v.model)) for v in variants}
    assert len(variants) == heads and len(flops) == 1 and len(sizes) == 1


@pytest.mark.parametrize("name", ["base", "B-dk16", "FFN-none", "RNN-lstm"])
def test_training_flops_double_with_the_sentences(name):
    model = {v.name: v for v in sweep_variants(FULL, 8000)}[name].model
    src, tgt = [7, 20, 33], [9, 18, 40]
    assert training_flops(model, src * 2, tgt * 2) == 2 * training_flops(model, src, tgt)


def test_training_flops_shrink_without_the_ffn_and_with_narrow_keys():
    base = FULL.model
    one = training_flops(base, [20] * 50, [20] * 50)
    for changes in (dict(feed_forward=False), dict(key_size=16), dict(d_ff=512)):
        assert training_flops(dataclasses.replace(base, **changes), [20] * 50, [20] * 50) < one
    # With one-token sentences attention's length terms vanish: 6 x parameters outside the
    # embeddings x tokens, plus the vocabulary projection of each target token.
    with torch.device("meta"):
        model = Transformer(base)
    layers = count(model) - count(model.generator)
    approximate = 6 * (layers * 1000 + base.d_model * base.tgt_vocab_size * 1000)
    assert training_flops(base, [1] * 1000, [1] * 1000) == pytest.approx(approximate, rel=0.01)


def test_variants_are_chosen_by_name_or_row():
    variants = sweep_variants(FULL, 8000)
    assert [v.name for v in select_variants(variants, ["B", "base"])] == [
        "base",
        "B-dk16",
        "B-dk32",
    ]
    with pytest.raises(SweepError, match="A-h7"):
        select_variants(variants, ["A-h7"])


# ---------------------------------------------------------------------------------------------
# The sweep, end to end on the CPU


TOY = dataclasses.replace(SWEEP_PROFILES["ci"], valid_sentences=12, translate_batch=12)
DATA = Path(
    os.environ.get(DATA_ENV) or Path(__file__).resolve().parents[2] / "shared/data/multi30k"
)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A toy sweep of the base and the LSTM for three updates each; the rerun does nothing."""
    require_multi30k()
    root = tmp_path_factory.mktemp("table3")
    out, work = root / "out", root / "work"
    provenance = {"command": "test", "commit": "abc"}
    first = run_sweep(
        TOY, out, work, only=["base", "RNN"], max_steps=3, data_dir=DATA, provenance=provenance
    )
    text = (out / RESULTS_FILE).read_text()
    again = run_sweep(TOY, out, work, only=["base", "RNN-lstm"], max_steps=3, data_dir=DATA)
    return out, work, first, text, again


def test_the_sweep_writes_one_well_formed_line_per_variant(swept):
    out, _, first, text, _ = swept
    records = read_results(out)
    assert [r["name"] for r in records] == [r["name"] for r in first] == ["base", "RNN-lstm"]
    vocab = records[0]["config"]["model"]["tgt_vocab_size"]
    variants = {v.name: v for v in sweep_variants(TOY, vocab, 3)}
    for record in records:
        assert record == json.loads(json.dumps(record))  # plain JSON
        assert record["steps"] == 3 and record["config"]["training"]["max_steps"] == 3
        with torch.device("meta"):
            assert record["parameters"] == count(build_model(variants[record["name"]].model))
        assert 0.0 <= record["bleu"] <= 100.0
        assert record["bleu_signature"].startswith("nrefs:1")
        assert math.isclose(record["valid_ppl"], math.exp(record["valid_loss"]), rel_tol=1e-9)
        evaluation = {"split": "val", "sentences": 12, "beam_size": 4, "alpha": 0.6}
        assert record["config"]["evaluation"] == {**evaluation, "max_len": TOY.max_len}
        for key in ("train_wall_s", "eval_wall_s", "tokens_per_s", "estimated_flops"):
            assert record[key] > 0
        tokens = record["tokens_per_s"] * record["train_wall_s"]
        assert record["train_tgt_tokens"] == pytest.approx(tokens, rel=1e-9)
        assert len(record["samples"]) == 3
        assert record["config"]["train_max_len"] is None
        # Validated every update of three (validate_every = 3 // 2), against growing seconds.
        curve = record["valid_curve"]
        assert [point["step"] for point in curve] == [1, 2, 3]
        assert curve[-1]["ppl"] == record["valid_ppl"]
        assert all(a["wall_s"] <= b["wall_s"] for a, b in zip(curve, curve[1:], strict=False))
    assert records[0]["config"]["kind"] == "transformer" and records[1]["config"]["kind"] == "lstm"
    assert text.count("\n") == 2


def test_the_hypotheses_beside_the_lines_give_their_bleu(swept):
    """What the results test does for results/: rescore every line from its hypotheses file."""
    out = swept[0]
    references = [t for _, t in load_multi30k("val", "en", "de", DATA)[:12]]
    buckets = json.loads((out / BUCKETS_FILE).read_text())
    assert buckets["short_len"] == TOY.short_len
    assert sorted(buckets["short"] + buckets["long"]) == list(range(12))
    for record in read_results(out):
        text = (out / HYPOTHESES_FOLDER / f"{record['name']}.txt").read_text()
        hypotheses = text.split("\n")[:-1]  # one a line, each ended by a newline
        assert len(hypotheses) == 12
        assert sacrebleu.corpus_bleu(hypotheses, [references]).score == record["bleu"]
        for name, score in record["bleu_by_length"].items():
            chosen = buckets[name]
            again = sacrebleu.corpus_bleu(
                [hypotheses[i] for i in chosen], [[references[i] for i in chosen]]
            )
            assert again.score == score["bleu"] and score["sentences"] == len(chosen)


def test_a_short_row_trains_on_short_pairs_only(swept, tmp_path):
    work = swept[1]
    out = tmp_path / "out"
    record = run_sweep(TOY, out, work, only=["E-short-none"], max_steps=2, data_dir=DATA)[0]
    tokenizer, _ = sweep_tokenizer(TOY, work, "en", "de")
    pairs = encode_pairs(tokenizer, load_multi30k("train", "en", "de", DATA), TOY.max_len)
    short = pairs_within(pairs, TOY.short_len)
    assert record["train_pairs"] == len(short) < len(pairs)
    assert record["config"]["train_max_len"] == TOY.short_len
    assert record["config"]["model"]["positional"] == "none"
    src, tgt = trained_lengths(short, TOY.training.max_tokens, 0, 2)
    assert record["train_tgt_tokens"] == sum(tgt) and max(src + tgt) <= TOY.short_len + 1


def test_the_manifest_says_how_the_lines_were_made(swept):
    out = swept[0]
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["variants"] == ["RNN-lstm", "base"]
    assert manifest["src"] == "en" and manifest["tgt"] == "de"
    first, second = manifest["invocations"]
    assert first["commit"] == "abc" and first["ran"] == ["base", "RNN-lstm"]
    assert second["ran"] == []
    assert manifest["environment"]["device"] and "git_commit" in manifest["environment"]
    for key in ("torch", "tokenizers", "sacrebleu", "python"):
        assert manifest["environment"]["versions"][key]


def test_a_rerun_skips_what_is_done_and_refuses_other_settings(swept):
    out, work, _, text, again = swept
    assert again == [] and (out / RESULTS_FILE).read_text() == text
    with pytest.raises(SweepError, match="other settings"):
        run_sweep(TOY, out, work, only=["base"], max_steps=4, data_dir=DATA)
    other = dataclasses.replace(TOY, beam_size=2)
    with pytest.raises(SweepError, match="another profile"):
        run_sweep(other, out, work, only=["base"], max_steps=3, data_dir=DATA)


def test_a_grown_profile_adds_replicas_to_the_same_folder(swept, tmp_path):
    """A profile that replicates a variant writes its rerun beside the lines already there,
    marked as a replica, with the same settings but for the seed."""
    out, work = tmp_path / "out", swept[1]
    shutil.copytree(swept[0], out)
    grown = dataclasses.replace(TOY, replicated=("RNN-lstm",), seeds=(1,), minutes=99.0)
    written = run_sweep(grown, out, work, only=["RNN"], max_steps=3, data_dir=DATA)
    assert [r["name"] for r in written] == ["RNN-lstm-seed1"]
    lines = {r["name"]: r for r in read_results(out)}
    first, replica = lines["RNN-lstm"], lines["RNN-lstm-seed1"]
    assert replica["replica_of"] == "RNN-lstm" and first["replica_of"] is None
    assert replica["config"]["training"]["seed"] == 1 and first["config"]["training"]["seed"] == 0
    for config in (first["config"], replica["config"]):
        config["training"].pop("seed")
    assert first["config"] == replica["config"]
    assert json.loads((out / MANIFEST_FILE).read_text())["variants"] == sorted(lines)


def test_a_spent_budget_starts_no_variant_and_the_manifest_says_why(swept, tmp_path):
    work = swept[1]
    out = tmp_path / "out"
    written = run_sweep(TOY, out, work, only=["base"], max_steps=2, data_dir=DATA, budget_s=1e-3)
    assert written == [] and read_results(out) == []
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert "budget" in manifest["invocations"][0]["stopped"]


def test_a_variant_cut_off_resumes_from_its_checkpoint_to_the_same_result(swept, tmp_path, caplog):
    """A variant stopped at update 2 of 4, its checkpoint left in the work folder, ends where an
    uninterrupted run ends: the training chapter's exact resumption, through the sweep."""
    profile = dataclasses.replace(TOY, checkpoints=2)  # a checkpoint every 2 of 4 updates
    for name in ("cut", "fresh"):
        shutil.copytree(swept[1], tmp_path / name, ignore=lambda *_: ["runs"])  # the tokenizer
    tokenizer, _ = sweep_tokenizer(profile, tmp_path / "cut", "en", "de")
    variant = select_variants(sweep_variants(profile, tokenizer.vocab_size, 4), ["base"])[0]
    stopped = dataclasses.replace(variant.training, max_steps=2)  # as if killed at update 2
    pairs = encode_pairs(tokenizer, load_multi30k("train", "en", "de", DATA), profile.max_len)
    run_dir = tmp_path / "cut" / "runs" / "base"
    _train_variant(
        dataclasses.replace(variant, training=stopped), pairs, None, run_dir, "cpu", False
    )
    assert (run_dir / "checkpoints" / "step-2.pt").is_file()

    caplog.set_level("INFO")
    resumed = run_sweep(
        profile, tmp_path / "a", tmp_path / "cut", max_steps=4, only=["base"], data_dir=DATA
    )
    assert "base: resuming" in caplog.text and "cannot resume" not in caplog.text
    fresh = run_sweep(
        profile, tmp_path / "b", tmp_path / "fresh", max_steps=4, only=["base"], data_dir=DATA
    )
    assert resumed[0]["valid_loss"] == fresh[0]["valid_loss"]
    assert resumed[0]["bleu"] == fresh[0]["bleu"]
    assert resumed[0]["samples"] == fresh[0]["samples"]
    # The tokens the line reports are the targets of the first four batches the loop was given.
    batches = BatchesByLength(pairs, variant.training.max_tokens, variant.training.seed)(0)
    assert fresh[0]["train_tgt_tokens"] == sum(batch.n_tokens for batch in batches[:4])
    assert fresh[0]["train_src_tokens"] == sum(int((b.src != 0).sum()) for b in batches[:4])
    # And its FLOPs are the performance chapter's count over those batches' real lengths.
    real = [real_lengths(b) for b in batches[:4]]
    assert fresh[0]["estimated_flops"] == sum(training_flops(variant.model, *r) for r in real)
    assert trained_lengths(pairs, variant.training.max_tokens, variant.training.seed, 4) == tuple(
        sum((list(r[side]) for r in real), []) for side in (0, 1)
    )
    assert not run_dir.exists()  # weights are not kept once the line is written


# ---------------------------------------------------------------------------------------------
# The command


def test_the_command_refuses_bad_options_with_status_2(swept, capsys):
    import table3

    work = swept[1]
    common = ["--profile", "ci", "--work", str(work), "--data-dir", str(DATA)]
    assert table3.main([*common, "--max-steps", "0"]) == 2
    assert "max-steps" in capsys.readouterr().err
    assert table3.main([*common, "--src", "en", "--tgt", "en"]) == 2
    assert table3.main([*common, "--data-dir", str(work / "nowhere")]) == 2
    assert "not a folder" in capsys.readouterr().err
    code = table3.main([*common, "--only", "nonsense", "--out", str(work / "o")])
    assert code == 2 and "nonsense" in capsys.readouterr().err


def test_the_command_lists_the_variants(capsys):
    import table3

    assert table3.main(["--profile", "full", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(sweep_variants(FULL, 8000))
    assert lines[1].split()[0] == "base"


# ---------------------------------------------------------------------------------------------
# The side-by-side timing


def test_the_timing_script_writes_every_rounds_times_with_a_manifest(tmp_path, capsys):
    """At toy scale, one round: the file holds each model's seconds per round at each length and
    on the sweep's batches, and the batches hold what the profile's token budget allows."""
    import table3_speed

    require_multi30k()
    out = tmp_path / "speed"
    common = ["--profile", "ci", "--work", str(tmp_path / "work"), "--data-dir", str(DATA)]
    code = table3_speed.main(
        [*common, "--rounds", "1", "--batches", "1", "--lengths", "3", "9", "--out", str(out)]
    )
    assert code == 0
    saved = json.loads((out / table3_speed.RESULT_FILE).read_text())
    manifest, results = saved["manifest"], saved["results"]
    assert manifest["rounds"] == 1 and manifest["profile_name"] == "ci" and manifest["device"]
    assert manifest["profile"] == sweep_identity(SWEEP_PROFILES["ci"]) and "git_commit" in manifest
    assert set(results["variants"]) == {"base", "RNN-lstm"}
    budget = SWEEP_PROFILES["ci"].training.max_tokens
    for row, length in zip(results["by_length"], (3, 9), strict=True):
        assert row["length"] == length and row["pairs"] == budget // (length + 1)
        assert row["target_tokens"] == row["pairs"] * (length + 1)  # every target and its </s>
        assert {name: len(s) for name, s in row["seconds"].items()} == {"base": 1, "RNN-lstm": 1}
        assert all(t > 0 for s in row["seconds"].values() for t in s)
    sweep = results["sweep_batches"]
    assert sweep["batches"] == 1 and set(sweep["seconds"]) == {"base", "RNN-lstm"}
    assert sweep["flops"]["base"] > 0


def test_the_timing_script_refuses_bad_options_with_status_2(tmp_path, capsys):
    import table3_speed

    common = ["--profile", "ci", "--out", str(tmp_path / "speed")]
    for bad, words in [
        (["--rounds", "0"], "at least 1"),
        (["--lengths", "0"], "--lengths 0"),
        (["--lengths", "100000"], "--lengths 100000"),
        (["--data-dir", str(tmp_path / "nowhere")], "not a folder"),
        (["--device", "tpu"], "choose cpu or cuda"),
    ]:
        assert table3_speed.main([*common, *bad]) == 2
        assert words in capsys.readouterr().err
    assert not (tmp_path / "speed").exists()  # nothing written
