"""The oneDNN decoder (``transformer_lib.decoding.OneDNNDecoder``): the incremental decoder that
``translate`` uses, with its products computed by oneDNN and a step's attention written out.
The reference is that ``SentenceGroupedDecoder`` on the same weights: the same logits at
every step (to float32 rounding: the two libraries add a product's terms in different orders),
whatever the model's variant and the order of the rows, and the same searches' outputs."""

import contextlib
import copy
import json

import pytest
import torch
from helpers import run_cli

from transformer_lib import onednn
from transformer_lib.decoding import (
    GREEDY,
    OneDNNDecoder,
    SearchConfig,
    SentenceGroupedDecoder,
    beam_search,
    default_decoder_state,
    greedy_search,
    translate,
)
from transformer_lib.engine import EngineError, make_translator
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.onednn import OneDNNError, PackedWeights, onednn_linear
from transformer_lib.pretrained import save_pretrained
from transformer_lib.tokenizer import BOS_ID, EOS_ID, BPETokenizer

VOCAB = 50
VARIANTS = {  # the model's options that change what a decoder step computes
    "post-LN": {},
    "pre-LN": {"norm_first": True},
    "learned positions": {"positional": "learned"},
    "untied": {"tie_embeddings": False},
    "narrow keys": {"key_size": 4},
    "no feed-forward": {"feed_forward": False},
}


def seeded_model(seed: int = 0, **changes) -> Transformer:
    torch.manual_seed(seed)
    settings = dict(d_model=32, d_ff=64, n_heads=4, n_layers=2, dropout=0.0, max_len=64)
    model = Transformer(TransformerConfig(VOCAB, VOCAB, **{**settings, **changes})).eval()
    with torch.no_grad():  # peaked distributions, as a trained model's: near-ties are rare
        for name, parameter in model.named_parameters():
            if "norms" not in name:
                parameter.mul_(3.0)
    return model


def padded_sources(seed: int = 1) -> torch.Tensor:
    """Five sources of different lengths, each ending in </s>, padded with 0."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.zeros(5, 9, dtype=torch.long)
    for row, length in enumerate((9, 3, 6, 1, 7)):
        src[row, : length - 1] = torch.randint(4, VOCAB, (length - 1,), generator=generator)
        src[row, length - 1] = EOS_ID
    return src


@pytest.mark.parametrize("keys", [1, 2, 7, 15, 16, 40])
def test_softmax_in_place_is_softmax_for_short_and_long_rows(keys):
    """Large scores (no overflow: the maximum is taken off first) and padding's -inf."""
    from transformer_lib.onednn import softmax_in_place

    scores = 100 * torch.randn(96, 4, keys, generator=torch.Generator().manual_seed(keys))
    scores[::3, :, max(keys // 2, 1) :] = float("-inf")  # padded keys; every row keeps one
    expected = scores.softmax(dim=-1)
    torch.testing.assert_close(softmax_in_place(scores), expected)


def test_onednn_linear_is_a_linear_layer_and_its_relu():
    torch.manual_seed(0)
    x, weight, bias = torch.randn(7, 3, 16), torch.randn(24, 16), torch.randn(24)
    expected = torch.nn.functional.linear(x, weight, bias)
    torch.testing.assert_close(onednn_linear(x, weight, bias), expected)
    torch.testing.assert_close(onednn_linear(x, weight, bias, relu=True), expected.relu())
    torch.testing.assert_close(onednn_linear(x, weight), x @ weight.T)


class GroupsOfTwo(OneDNNDecoder):
    encoder_group = 2  # the five sources in three groups, each cut to its longest


@pytest.mark.parametrize("decoder", [OneDNNDecoder, GroupsOfTwo], ids=["one group", "groups"])
@pytest.mark.parametrize("changes", VARIANTS.values(), ids=VARIANTS.keys())
def test_every_step_gives_the_incremental_decoders_logits(changes, decoder):
    """Ten steps on padded sources, the rows grouped by sentence (beam search's layout), then
    reordered, repeated and dropped as a search would (the encoder side read by index)."""
    model, src = seeded_model(**changes), padded_sources()
    with torch.inference_mode():
        reference, fast = SentenceGroupedDecoder(model, src), decoder(model, src)
        mask = src[:, None, None, :] != 0
        found, expected = fast.encode(src, mask), reference.encode(src, mask)
        within = torch.zeros_like(src, dtype=torch.bool)  # inside its group's longest source
        for start in range(0, len(src), fast.encoder_group):
            width = int((src[start : start + fast.encoder_group] != 0).sum(1).max())
            within[start : start + fast.encoder_group, :width] = True
        torch.testing.assert_close(found[within], expected[within], rtol=1e-5, atol=1e-5)
        assert not found[~within].any() and (decoder is OneDNNDecoder) == bool(within.all())
        tokens = torch.full((5,), BOS_ID)
        for step in range(10):
            expected, found = reference.step(tokens), fast.step(tokens)
            torch.testing.assert_close(found, expected, rtol=1e-4, atol=1e-4)
            tokens = expected.argmax(dim=-1)
            if step == 1:  # three beams a sentence, grouped: the k queries over one source
                rows = torch.arange(5).repeat_interleave(3)
            elif step == 4:  # out of order, and sentence 1 gone: rows read their source by index
                rows = torch.tensor([14, 0, 2, 3, 9, 9, 7, 12, 13, 5])
            else:
                continue
            reference.select(rows), fast.select(rows)
            tokens = tokens[rows]
            assert fast.cache.side.grouped == reference.cache.side.grouped == (step == 1)


def test_a_cache_no_select_leaves_room_in_doubles_its_room():
    """Greedy search's rows stay as they are, so no select leaves room for the next position:
    the flat step copies a full cache into one with as much room again (1, 2, 4, 8, 16
    positions over 12 steps, not a copy each step), with the forward's logits at every step."""
    model, src = seeded_model(), padded_sources()
    with torch.inference_mode():
        reference, fast = SentenceGroupedDecoder(model, src), OneDNNDecoder(model, src)
        tokens, held = torch.full((5,), BOS_ID), []
        for _ in range(12):
            expected, found = reference.step(tokens), fast.step(tokens)
            torch.testing.assert_close(found, expected, rtol=1e-4, atol=1e-4)
            tokens = expected.argmax(dim=-1)
            held.append(fast.cache.layers[0][0].keys.shape[2])
    assert sorted(set(held)) == [1, 2, 4, 8, 16], held


@pytest.mark.parametrize("beam", [1, 4])
def test_the_searches_find_the_same_outputs(beam):
    model, src = seeded_model(seed=3), padded_sources(seed=4)
    limits = torch.tensor([20] * 5)
    found = []
    with torch.inference_mode():
        for state in (SentenceGroupedDecoder(model, src), OneDNNDecoder(model, src)):
            if beam == 1:
                found.append(greedy_search(state, BOS_ID, EOS_ID, limits))
            else:
                found.append([h.tokens for h in beam_search(state, BOS_ID, EOS_ID, limits, beam)])
    assert found[0] == found[1]


def test_the_flat_step_runs_only_where_it_holds(monkeypatch):
    """The flat step is for a model in eval mode whose rows come grouped by sentence: a model in
    training mode (dropout), or rows that read their source by index, take the layers' step."""
    calls = []
    flat = onednn.FlatStep.__call__
    monkeypatch.setattr(onednn.FlatStep, "__call__", lambda *a: calls.append(1) or flat(*a))
    model, src = seeded_model(), padded_sources()
    tokens = torch.full((5,), BOS_ID)
    with torch.no_grad():
        state = OneDNNDecoder(model, src)
        state.step(tokens)
        assert len(calls) == 1
        model.train()
        state.step(tokens)
        model.eval()
        assert len(calls) == 1
        state.select(torch.tensor([4, 0, 1]))  # out of sentence order: the source read by index
        state.step(tokens[:3])
        assert len(calls) == 1 and not state.cache.side.grouped


def test_translate_decodes_with_onednn_only_where_it_runs(monkeypatch):
    """translate's default: oneDNN's decoder for float32 weights on a CPU whose PyTorch has it;
    PyTorch's kernels for other weights and where oneDNN is missing."""
    model = seeded_model()
    assert isinstance(default_decoder_state(model)(model, torch.ones(2, 3).long()), OneDNNDecoder)
    assert default_decoder_state(seeded_model().double()) is SentenceGroupedDecoder
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert default_decoder_state(model) is SentenceGroupedDecoder


def test_a_model_it_cannot_run_is_refused_in_one_sentence():
    model = seeded_model().double()
    with pytest.raises(
        OneDNNError, match="float32 weights on the CPU; this model is torch.float64"
    ):
        OneDNNDecoder(model, padded_sources())


def test_quantize_needs_the_ctranslate2_engine():
    with pytest.raises(EngineError, match="needs the ctranslate2 engine"):
        make_translator(seeded_model(), None, "onednn", "int8")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    sentences = ["ein hund läuft", "zwei katzen schlafen", "ein mann fährt rad"] * 20
    tokenizer = BPETokenizer.train(sentences, 280)
    torch.manual_seed(5)
    config = TransformerConfig(tokenizer.vocab_size, tokenizer.vocab_size, d_model=32, d_ff=64,
                               n_heads=4, n_layers=2, dropout=0.0, max_len=64)  # fmt: skip
    run = {"run": {"data": "multi30k", "src": "de", "tgt": "en", "profile": "test"}}
    path = tmp_path_factory.mktemp("model") / "model"
    save_pretrained(Transformer(config).eval(), tokenizer, run, path)
    return path


def test_translate_with_the_onednn_engine_writes_our_translations(folder, monkeypatch, capsys):
    lines = ["ein hund schläft", "", "zwei männer fahren rad"]
    for beam in ("1", "4"):
        args = ["translate", "--model", str(folder), "--engine", "onednn", "--beam", beam]
        status, out, err = run_cli(args, "\n".join(lines) + "\n", monkeypatch, capsys)
        assert status == 0, err
        base = ["translate", "--model", str(folder), "--beam", beam]
        assert run_cli(base, "\n".join(lines) + "\n", monkeypatch, capsys)[1] == out
        assert out.count("\n") == 3 and out.split("\n")[1] == ""


def test_the_onednn_engine_on_a_gpu_is_a_usage_error(folder, monkeypatch, capsys):
    args = ["translate", "--model", str(folder), "--engine", "onednn", "--device", "cuda"]
    status, out, err = run_cli(args, "ein hund\n", monkeypatch, capsys)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "--engine onednn runs on the CPU: drop --device cuda" in err


def test_make_translator_runs_the_decoder_it_names(folder):
    from transformer_lib.pretrained import load_pretrained

    model, tokenizer = load_pretrained(folder)
    sentences = ["ein hund läuft", "ein mann"]
    for search in (GREEDY, SearchConfig(beam_size=3)):
        expected = translate(model, tokenizer, sentences, search, decoder_state=OneDNNDecoder)
        assert make_translator(model, tokenizer, "onednn")(sentences, search) == expected


# --- Training with oneDNN's products (transformer_lib.onednn.OneDNNProducts).


@pytest.mark.parametrize("changes", VARIANTS.values(), ids=VARIANTS.keys())
def test_the_products_give_pytorchs_loss_and_gradients(changes, monkeypatch):
    """One forward and backward of a model in training (dropout off, so both see the same
    function): the loss and every gradient as PyTorch's own products give them, to float32
    rounding (relative to each tensor's largest entry), with every product through oneDNN."""
    from transformer_lib import onednn
    from transformer_lib.onednn import OneDNNProducts

    calls = []

    def counted(*args, **kwargs):
        calls.append(args[1].shape)
        return onednn_linear(*args, **kwargs)

    monkeypatch.setattr(onednn, "onednn_linear", counted)

    src = padded_sources()
    tgt = torch.randint(4, VOCAB, (5, 7), generator=torch.Generator().manual_seed(2))
    found = []
    for mode in (contextlib.nullcontext(), OneDNNProducts()):
        model = seeded_model(**changes).train()
        with mode:
            loss = model(src, tgt).log_softmax(-1).mean()
        forward_calls = len(calls)
        loss.backward()
        found.append((loss, {n: p.grad for n, p in model.named_parameters()}))
    (loss, expected), (onednn_loss, grads) = found
    # Every nn.Linear forward went through oneDNN, and each product's gradients did too.
    linears = sum(isinstance(m, torch.nn.Linear) for m in seeded_model(**changes).modules())
    assert forward_calls >= linears and len(calls) >= 2 * forward_calls, (linears, len(calls))
    torch.testing.assert_close(onednn_loss, loss, rtol=1e-5, atol=1e-6)
    for name, grad in expected.items():
        gap = (grads[name] - grad).abs().max() / grad.abs().max().clamp_min(1e-12)
        assert gap < 1e-4, f"{name}: {gap:.1e}"


def test_other_dtypes_and_code_outside_the_block_are_untouched():
    from transformer_lib.onednn import OneDNNProducts

    x, w = torch.randn(3, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    with OneDNNProducts():
        inside = torch.nn.functional.linear(x, w)
    assert torch.equal(inside, torch.nn.functional.linear(x, w))


def toy_training(tmp_path, name: str, products, max_steps: int, resume: bool = False):
    from toy_seq2seq import ToyModel, toy_batches

    from transformer_lib.training import RunOptions, TrainingConfig, train

    config = TrainingConfig(
        max_steps=max_steps, warmup_steps=4, log_every=1, checkpoint_every=3, products=products
    )
    torch.manual_seed(0)
    model = ToyModel()
    summary = train(
        model,
        toy_batches,
        config,
        tmp_path / name,
        options=RunOptions(resume=resume, device="cpu", progress=False),
    )
    losses = [
        json.loads(line)["loss"]
        for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "train"
    ]
    return model, summary, losses


def test_training_with_onednn_follows_pytorchs_run_and_resumes_exactly(tmp_path):
    _, _, default = toy_training(tmp_path, "default", None, 6)
    straight, _, onednn = toy_training(tmp_path, "straight", "onednn", 6)
    assert onednn == pytest.approx(default, rel=1e-4)  # the same run, to rounding
    toy_training(tmp_path, "stopped", "onednn", 4)
    resumed, summary, _ = toy_training(tmp_path, "stopped", "onednn", 6, resume=True)
    assert summary["step"] == 6
    for (name, a), (_, b) in zip(
        straight.state_dict().items(), resumed.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    "products, device, error", [("mkl", "cpu", ValueError), ("onednn", "meta", OneDNNError)]
)
def test_products_it_cannot_give_are_refused(tmp_path, products, device, error):
    """A value that is not a choice is the caller's bug (ValueError); oneDNN on a device that is
    not a CPU is a user's choice, one line at the command line (a TransformerLibError)."""
    from toy_seq2seq import ToyModel, toy_batches

    from transformer_lib.training import RunOptions, TrainingConfig, train

    model = ToyModel()
    with pytest.raises(error, match=f"products={products!r} on {device}"):
        train(
            model,
            toy_batches,
            TrainingConfig(max_steps=1, products=products),
            tmp_path / "run",
            options=RunOptions(device=device, progress=False),
        )


def test_a_pytorch_without_onednn_is_refused_in_one_sentence(tmp_path, monkeypatch):
    """A build of PyTorch without oneDNN (torch.backends.mkldnn.is_available() False): the
    products, the decoder and a training run that ask for it each refuse in one sentence, and
    the run writes nothing."""
    from toy_seq2seq import ToyModel, toy_batches

    from transformer_lib.onednn import OneDNNProducts, require_onednn
    from transformer_lib.training import RunOptions, TrainingConfig, train

    require_onednn()  # this build has it
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    with pytest.raises(OneDNNError, match="this PyTorch build has no oneDNN") as refused:
        require_onednn()
    assert "\n" not in str(refused.value) and "use PyTorch's own products" in str(refused.value)
    for start in (OneDNNProducts, lambda: OneDNNDecoder(seeded_model(), padded_sources())):
        with pytest.raises(OneDNNError, match="no oneDNN"):
            start()
    with pytest.raises(OneDNNError, match="no oneDNN"):
        train(
            ToyModel(),
            toy_batches,
            TrainingConfig(max_steps=1, products="onednn"),
            tmp_path / "run",
            options=RunOptions(device="cpu", progress=False),
        )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("relu", [False, True])
def test_packed_weights_compute_the_linear_layer_and_reorder_each_weight_once(relu):
    torch.manual_seed(0)
    x, module = torch.randn(7, 3, 16), torch.nn.Linear(16, 24)
    expected = module(x).relu() if relu else module(x)
    packed = PackedWeights()
    for _ in range(2):  # the second call reads the copy the first one made
        torch.testing.assert_close(packed(x, module, relu=relu), expected)
    assert len(packed.packed) == 1


def test_rows_of_a_weight_are_reordered_once_each():
    """The decoder multiplies by W^Q, the first rows of in_proj, and by W^K and W^V, the next:
    each its own reordered matrix, made at the first call only."""
    torch.manual_seed(0)
    x, module = torch.randn(5, 16), torch.nn.Linear(16, 24)
    packed = PackedWeights()
    for _ in range(3):
        for rows in (slice(8), slice(8, 16), slice(16, None)):
            expected = x @ module.weight[rows].T + module.bias[rows]
            torch.testing.assert_close(packed(x, module, rows), expected)
    assert len(packed.packed) == 3


def test_translate_sees_weights_changed_in_place_between_calls(folder):
    """Each translate call packs the weights afresh: after load_state_dict (which copies into
    the model's tensors), the model translates as the model whose weights it loaded."""
    from transformer_lib.pretrained import load_pretrained

    model, tokenizer = load_pretrained(folder)
    other = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(torch.randn_like(parameter))
    sentences = ["ein hund läuft", "zwei katzen schlafen", "ein mann"]
    before, theirs = (translate(m, tokenizer, sentences, GREEDY) for m in (model, other))
    assert before != theirs  # the change shows in the translations
    model.load_state_dict(other.state_dict())
    assert translate(model, tokenizer, sentences, GREEDY) == theirs


def test_packed_weights_multiply_the_plain_weight_without_the_reordering_operator():
    torch.manual_seed(0)
    x, module = torch.randn(5, 8), torch.nn.Linear(8, 6)
    packed = PackedWeights()
    packed.reorder = None  # as in a PyTorch without it
    assert torch.equal(packed(x, module), onednn_linear(x, module.weight, module.bias))
