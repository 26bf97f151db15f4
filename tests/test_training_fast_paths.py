"""The training loop's fast paths (``TrainingConfig.packing``, ``length_bucket``, ``fused_adam``):
each one computes the default update, to float32 rounding, on the CPU.

The tolerance. Packed and padded batches sum the same terms in other orders and through matrix
products of other shapes (one row of N tokens against B rows of W), so float32 results differ
in their last bits: on these models, by a few parts in 10^7 of the largest value. The tests
allow 1e-5 of the largest value of each tensor (1e-5 relative for the loss), about a hundred
times that, while one token attending across a sentence boundary moves the loss and the
gradients by parts in 10^3 or more. Dropout draws its masks over tensors of another shape in
each layout, so no two layouts can drop the same units: with dropout, a packed step is checked
for its shapes and for finite values only.
"""

import functools
import json
import warnings

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch.nn.attention.flex_attention import create_block_mask
from toy_seq2seq import ToyModel, toy_batches

from transformer_lib import training
from transformer_lib.batching import collate
from transformer_lib.errors import ConfigError
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.objective import TrainingConfig, label_smoothed_loss
from transformer_lib.packing import (
    PackedTransformer,
    pack_batch,
    sentence_block_mask,
    sentence_mask,
)
from transformer_lib.schedule import make_optimizer, rate

PAD = 0
PAIRS = [  # sentence pairs of different lengths, without special tokens
    ([5, 6, 7], [8, 9, 10, 11, 12]),
    ([13, 14, 15, 16, 17, 18, 19, 20, 21], [20]),
    ([22], [23, 24, 25]),
    (list(range(4, 30)), list(range(5, 24))),
    ([31, 32, 33, 34], [35, 36, 37, 38, 39, 30]),
]


def small_model(dropout: float = 0.0, **changes) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(40, 40, d_model=16, d_ff=32, n_heads=2, n_layers=2, dropout=dropout)
    return Transformer(TransformerConfig(**{**vars(config), **changes}))


def close(found: torch.Tensor, expected: torch.Tensor, name: str = "") -> None:
    """Equal to float32 rounding: within 1e-5 of the largest value (see the module's text)."""
    scale = expected.abs().max().item()
    torch.testing.assert_close(found, expected, rtol=0, atol=1e-5 * scale, msg=name)


def loss_and_gradients(network, batch, model: Transformer) -> tuple[float, dict]:
    """The training loop's step on one batch: the label-smoothed loss summed over the target
    tokens (``backward_batch``), and the gradient of that loss per token, per parameter."""
    model.zero_grad(set_to_none=True)
    tokens = int((batch.tgt_out != PAD).sum())
    loss, _ = training.backward_batch(network, batch, tokens, TrainingConfig(), PAD)
    return loss / tokens, {name: p.grad.clone() for name, p in model.named_parameters()}


# ---------------------------------------------------------------------------- packing


@pytest.mark.parametrize("length_bucket", [None, 16, 64])
@pytest.mark.parametrize(
    "changes",
    [{}, {"positional": "learned"}, {"norm_first": True}],
    ids=["paper", "learned", "pre-LN"],
)
def test_a_packed_step_has_the_padded_steps_loss_and_gradients(changes, length_bucket):
    model = small_model(**changes).train()  # training mode, dropout 0: no unit dropped
    padded = collate(PAIRS)
    expected_loss, expected = loss_and_gradients(model, padded, model)
    packed = pack_batch(padded, PAD, "masks", length_bucket)
    real = sum(len(s) + 1 for s, _ in PAIRS), sum(len(t) + 1 for _, t in PAIRS)
    if length_bucket is None:
        assert (packed.src.shape[1], packed.tgt_in.shape[1]) == real  # no padding at all
    else:
        assert packed.src.shape == packed.tgt_in.shape and packed.src.shape[1] % length_bucket == 0
    found_loss, found = loss_and_gradients(PackedTransformer(model), packed, model)
    assert found_loss == pytest.approx(expected_loss, rel=1e-5)
    assert found.keys() == expected.keys()
    for name, gradient in expected.items():
        assert gradient.abs().max() > 0, name  # a parameter the loss reaches
        close(found[name], gradient, name)


def test_a_packed_row_restarts_positions_and_keeps_each_token_to_its_sentence():
    packed = pack_batch(collate(PAIRS[:3]), PAD, "masks", length_bucket=16)
    # </s> ends each source, <s> starts each target; 16 source tokens take the next bucket,
    # so that the filler (padding at position 0) has at least one token in each row.
    assert packed.src.shape == packed.tgt_in.shape == (1, 32)
    assert packed.src[0, :5].tolist() == [5, 6, 7, 2, 13]
    assert packed.src_mask.positions[0, :6].tolist() == [0, 1, 2, 3, 0, 1]
    assert packed.tgt_mask.positions[0, 6:10].tolist() == [0, 1, 0, 1]
    assert (packed.tgt_out[0, 12:] == PAD).all() and (packed.tgt_mask.positions[0, 12:] == 0).all()
    target = packed.tgt_mask.attention[0, 0]  # (T, T): the decoder's self-attention
    assert target[7, 6] and not target[6, 7]  # causal within a sentence
    assert not target[8, 7] and not target[7, 5]  # nothing across a sentence boundary
    memory = packed.tgt_mask.memory[0, 0]  # (T, S): target sentence 1 sees source sentence 1
    assert memory[6, 4:14].all() and not memory[6, :4].any() and not memory[6, 14:].any()
    # The filler is one more sentence: it sees its own tokens only, and no row is empty.
    assert memory[20, 16:].all() and not memory[20, :16].any() and memory.any(-1).all()


def test_with_dropout_a_packed_step_is_finite_and_shaped_like_its_rows():
    model = small_model(dropout=0.1).train()
    packed = pack_batch(collate(PAIRS), PAD, "masks", length_bucket=16)
    logits = PackedTransformer(model)(packed.src, packed.tgt_in, packed.src_mask, packed.tgt_mask)
    assert logits.shape == (1, packed.tgt_in.shape[1], 40)
    loss, tokens = label_smoothed_loss(logits, packed.tgt_out, PAD)
    loss.backward()
    assert torch.isfinite(loss) and tokens == sum(len(t) + 1 for _, t in PAIRS)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_a_batch_wider_than_the_models_positions_is_refused():
    with pytest.raises(ConfigError, match="max_len 20"):
        pack_batch(collate(PAIRS), PAD, "masks", max_len=20)


def sentences(lengths: list[int], filler: int) -> torch.Tensor:
    """The sentence of each token of a row of sentences of ``lengths``, then ``filler`` tokens
    (one more sentence, as pack_batch numbers them)."""
    row = [i for i, n in enumerate(lengths) for _ in range(n)] + [len(lengths)] * filler
    return torch.tensor(row, dtype=torch.int32)


def tiles(count: torch.Tensor, indices: torch.Tensor, keys: int) -> torch.Tensor:
    """flex_attention's lists of key tiles (1, 1, Q) and (1, 1, Q, K) as a (Q, K) bool matrix."""
    matrix = torch.zeros(count.shape[-1], keys, dtype=torch.bool)
    for row, (n, listed) in enumerate(zip(count[0, 0], indices[0, 0], strict=True)):
        matrix[row, listed[:n].long()] = True
    return matrix


def test_the_flex_block_masks_list_the_tiles_pytorch_finds_by_evaluating_every_score():
    """Eager flex_attention on a CPU reads the mask function alone, never the lists of tiles,
    which only the compiled kernels of a GPU use: so the lists are checked against
    ``create_block_mask``, which evaluates the mask at every (query, key) pair."""
    generator = torch.Generator().manual_seed(0)
    for trial in range(30):
        pairs = int(torch.randint(1, 7, (), generator=generator))
        lengths = torch.randint(1, 30, (2, pairs), generator=generator).tolist()
        length = max(map(sum, lengths)) + 7 * (trial % 2)  # with filler, or one row without
        src, tgt = (sentences(n, length - sum(n) if trial % 2 else 0) for n in lengths)
        block = (4, 8, 16)[trial % 3]
        for q, k, causal in ((src, src, False), (tgt, tgt, True), (tgt, src, False)):
            ours = sentence_block_mask(q, k, causal, block).block_mask
            keys = ours.kv_indices.shape[-1]
            reference = create_block_mask(
                ours.mask_mod, 1, 1, q.numel(), k.numel(), device="cpu", BLOCK_SIZE=block
            )
            # Ours lists every tile that holds an allowed score (the kernels apply mask_mod in
            # each); PyTorch's splits them into tiles with some and tiles with only such scores.
            theirs = tiles(reference.kv_num_blocks, reference.kv_indices, keys)
            theirs |= tiles(reference.full_kv_num_blocks, reference.full_kv_indices, keys)
            assert ours.full_kv_num_blocks is None
            assert torch.equal(tiles(ours.kv_num_blocks, ours.kv_indices, keys), theirs), trial
            # The mask function is the boolean mask, score for score.
            dense = sentence_mask(q, k, causal)[0, 0]
            rows, columns = torch.meshgrid(
                torch.arange(q.numel()), torch.arange(k.numel()), indexing="ij"
            )
            assert torch.equal(ours.mask_mod(0, 0, rows, columns), dense)


@pytest.mark.parametrize("length_bucket", [None, 16])
def test_flex_attention_computes_the_boolean_masks_forward_pass(length_bucket):
    """On a CPU flex_attention has a forward pass only (PyTorch has no backward for it there)."""
    model = small_model()
    network = PackedTransformer(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        logits = {}
        for packing in ("masks", "flex"):
            b = pack_batch(collate(PAIRS), PAD, packing, length_bucket, block=8)
            logits[packing] = network(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
    close(logits["flex"], logits["masks"])


# ---------------------------------------------------------------------------- fused Adam


def test_fused_adam_takes_the_default_adams_steps_at_the_rate_of_formula_3():
    """Six steps of each Adam on the same gradients (drawn at random, so that both see exactly
    the same ones), at the rates of formula (3): the same parameters to rounding."""
    weights, rates = {}, {}
    for fused in (None, True):
        model = small_model()
        optimizer, scheduler = make_optimizer(model, d_model=16, warmup_steps=3, fused=fused)
        assert optimizer.param_groups[0]["fused"] is fused
        generator = torch.Generator().manual_seed(1)
        rates[fused] = []
        for _ in range(6):
            rates[fused].append(optimizer.param_groups[0]["lr"])
            for parameter in model.parameters():
                parameter.grad = torch.randn(parameter.shape, generator=generator)
            optimizer.step()
            scheduler.step()
        weights[fused] = {name: p.detach() for name, p in model.named_parameters()}
    assert rates[True] == rates[None] == [rate(n, 16, 3) for n in range(1, 7)]
    start = dict(small_model().named_parameters())
    for name, weight in weights[None].items():
        assert not torch.equal(weight, start[name]), name  # the steps moved it
        close(weights[True][name], weight, name)


# ---------------------------------------------------------------------------- through train()


def copy_batches(epoch: int) -> list:
    """Batches of copy pairs of varied lengths, the same for the same epoch: widths from 2 to
    14, so that the packed rows take many lengths."""
    generator = torch.Generator().manual_seed(epoch)
    batches = []
    for _ in range(4):
        pairs = []
        for _ in range(int(torch.randint(1, 5, (), generator=generator))):
            n = int(torch.randint(1, 13, (), generator=generator))
            ids = torch.randint(4, 40, (n,), generator=generator).tolist()
            pairs.append((ids, ids[::-1]))
        batches.append(collate(pairs))
    return batches


def train_small(folder, **settings) -> tuple[Transformer, list[dict], dict]:
    """Five updates of the small model through ``train``; the model, the log, the checkpoint.
    The rate is a tenth of formula (3)'s: at width 16 after two warm-up updates formula (3)
    moves a weight by 0.18 an update, a step in which Adam turns the rounding of the smallest
    gradients into differences of 1e-4 between any two runs that round differently."""
    model = small_model()
    base = {"max_steps": 5, "warmup_steps": 2, "lr_scale": 0.1, "log_every": 1}
    config = TrainingConfig(**{**base, **settings})
    training.train(
        model,
        copy_batches,
        config,
        folder,
        options=training.RunOptions(device="cpu", progress=False),
    )
    log = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return model, log, torch.load(folder / "checkpoints" / "last.pt", weights_only=True)


def but_the_key_bias(model: Transformer) -> dict:
    """The model's weights, less the bias of each attention's keys: adding it shifts every score
    of a query alike, which the softmax ignores, so its gradient is zero but for rounding, and
    Adam, which divides a gradient by its root mean square, turns that rounding into steps the
    size of the learning rate in any two runs that round differently."""
    weights = model.state_dict()
    for name, weight in weights.items():
        if name.endswith("attn.in_proj.bias"):
            e = model.config.d_model  # the rows of W^Q, then those of W^K
            weights[name] = torch.cat([weight[:e], weight[2 * e :]])
    return weights


def test_the_loop_packed_and_fused_reaches_the_default_runs_weights(tmp_path):
    default, default_log, _ = train_small(tmp_path / "default")
    for name, settings in {
        "packed": {"packing": "masks"},
        "bucketed": {"packing": "masks", "length_bucket": 8},
        "fused": {"fused_adam": True},
    }.items():
        model, log, checkpoint = train_small(tmp_path / name, **settings)
        for a, b in zip(log, default_log, strict=True):
            assert a["loss"] == pytest.approx(b["loss"], rel=1e-5), name
        expected = but_the_key_bias(default)
        for key, weight in but_the_key_bias(model).items():
            close(weight, expected[key], f"{name}: {key}")
        assert checkpoint["optimizer"]["param_groups"][0]["fused"] is (name == "fused" or None)
        assert list(checkpoint["model"]) == list(default.state_dict())  # no wrapper's prefix


def test_bucketed_rows_compile_a_graph_per_bucket_and_the_losses_of_eager(tmp_path, monkeypatch):
    """Over 20 batches of packed rows of many lengths, compiled as the loop compiles them with
    a ``length_bucket`` (static shapes: one graph per shape), by a backend that counts the
    graphs: at most one graph per bucket, and eager's losses. The backend is aot_eager, which
    traces forward and backward as inductor does but runs PyTorch's own kernels: inductor's code
    generation takes minutes on two cores and is not what the count is about."""
    bucket = 8
    lengths = {
        (max(int((b.src != PAD).sum()), int((b.tgt_out != PAD).sum())) // bucket + 1) * bucket
        for epoch in range(5)
        for b in copy_batches(epoch)
    }
    assert len(lengths) < 20 and max(lengths) <= 64  # fewer buckets than batches
    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=counter))
    torch._dynamo.reset()
    settings = {"packing": "masks", "length_bucket": bucket, "max_steps": 20, "max_tokens": 64}
    _, compiled_log, _ = train_small(tmp_path / "compiled", compile="default", **settings)
    assert 1 <= counter.frame_count <= len(lengths) <= 64 // bucket
    _, eager_log, _ = train_small(tmp_path / "eager", **settings)
    for a, b in zip(compiled_log, eager_log, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"packing": "padded"}, "choose None"),
        ({"length_bucket": 16}, "set packing"),
        ({"packing": "masks", "length_bucket": 0}, "at least one token"),
        ({"packing": "flex"}, "trains compiled"),
        ({"packing": "flex", "compile": "default"}, "CUDA only"),
        ({"compile": "reduce-overhead"}, "CUDA graphs need one batch shape"),
    ],
)
def test_a_fast_path_that_cannot_run_is_refused_before_any_file(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        train_small(tmp_path / "run", **changes)
    assert not (tmp_path / "run").exists()


def test_packing_another_model_than_the_transformer_is_refused(tmp_path):
    config = TrainingConfig(max_steps=1, packing="masks")
    with pytest.raises(ConfigError, match="ToyModel"):
        training.train(
            ToyModel(),
            toy_batches,
            config,
            tmp_path / "run",
            options=training.RunOptions(device="cpu"),
        )
    assert not (tmp_path / "run").exists()
