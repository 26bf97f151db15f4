"""No option of the model is ignored by an engine: for every field of ``TransformerConfig``, each
engine that runs our models (PyTorch's cached step, the oneDNN step, the ONNX graphs, CTranslate2
and the Hugging Face MarianMT folder) either computes what the model itself computes with the
option changed, or refuses the model in one sentence that names the option.

The reference is the model's own forward pass, teacher-forced. An engine is tried on one model
with every option it runs changed at once (a second for the options with a third value), which
keeps the costly ones (an ONNX export, a CTranslate2 conversion) to a few; each option it
refuses gets a model of its own, with that option alone changed. A new field of the config
fails ``test_every_option_has_a_changed_value`` until it gets one, and then every engine is held
to it.
"""

import dataclasses

import pytest
import torch

from transformer_lib.decoding import OneDNNDecoder, SentenceGroupedDecoder
from transformer_lib.engine import CTranslate2Translator
from transformer_lib.errors import TransformerLibError
from transformer_lib.export import OnnxGraphs, export_graphs
from transformer_lib.marian import save_huggingface
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.tokenizer import BOS_ID, EOS_ID, BPETokenizer

TEXTS = ["ein hund läuft im park", "a dog runs in the park", "zwei hunde", "two dogs run"]
PLAIN = dict(d_model=16, d_ff=32, n_heads=2, n_layers=2, dropout=0.0, max_len=40)
# Other values of every field; the first goes into the combined model, the others into one each.
CHANGED = {
    "src_vocab_size": [+7],  # added to the tokenizer's size: two vocabularies
    "tgt_vocab_size": [+5],
    "d_model": [24],
    "d_ff": [48],
    "n_heads": [4],
    "n_layers": [3],
    "dropout": [0.3],  # in eval mode, as every engine runs: the same function
    "pad_id": [3],
    "positional": ["learned", "none"],
    "norm_first": [True],
    "tie_embeddings": [False],
    "max_len": [32],
    "key_size": [4],
    "feed_forward": [False],
}
VOCABULARY = ("src_vocab_size", "tgt_vocab_size")
# The options each engine refuses (an engine runs every other).
REFUSED = {
    "pytorch": set(),
    "onednn": set(),
    "onnx": set(),
    "ctranslate2": {*VOCABULARY, "key_size", "feed_forward"},
    # MarianMT: post-LN layers, its own sinusoids, one matrix for all embeddings
    "huggingface": {*VOCABULARY, "norm_first", "positional", "tie_embeddings", "key_size"}
    | {"feed_forward"},
}


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(TEXTS * 5, 300)


def make_model(tokenizer, changes: dict) -> Transformer:
    """A seeded model of the tokenizer's vocabulary with ``changes``, its weights moved away from
    their initial values (LayerNorms at 1 and biases at 0 would hide a misplaced one)."""
    v = tokenizer.vocab_size
    sizes = {name: v + changes.pop(name, 0) for name in VOCABULARY}
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**sizes, **{**PLAIN, **changes})).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def combined(engine: str) -> list[dict]:
    """The changes of the models an engine must compute: every option it runs, at its first
    other value, in one model; then one model for each further value."""
    runs = [name for name in CHANGED if name not in REFUSED[engine]]
    first = {name: CHANGED[name][0] for name in runs}
    return [first, *({**first, name: value} for name in runs for value in CHANGED[name][1:])]


def batch(model) -> tuple[torch.Tensor, torch.Tensor]:
    """Three sources padded with the model's pad_id, and a target prefix for each."""
    c, g = model.config, torch.Generator().manual_seed(1)
    src = torch.full((3, 7), c.pad_id)
    for row, length in enumerate((7, 4, 2)):
        src[row, : length - 1] = torch.randint(5, c.src_vocab_size, (length - 1,), generator=g)
        src[row, length - 1] = EOS_ID
    tgt = torch.randint(5, c.tgt_vocab_size, (3, 6), generator=g)
    tgt[:, 0] = BOS_ID
    return src, tgt


def stepped(model, state, tgt: torch.Tensor) -> torch.Tensor:
    """The logits (B, T, V) a decoder state gives when fed ``tgt`` one token at a time."""
    return torch.stack([state.step(tgt[:, t]) for t in range(tgt.shape[1])], dim=1)


def run_engine(engine: str, model, tokenizer, folder) -> tuple[torch.Tensor, torch.Tensor]:
    """What the engine computes for the model, and what the model computes itself."""
    src, tgt = batch(model)
    expected = model(src, tgt)  # (B, T, V)
    if engine in ("pytorch", "onednn"):
        state = (SentenceGroupedDecoder if engine == "pytorch" else OneDNNDecoder)(model, src)
        return stepped(model, state, tgt), expected
    if engine == "onnx":
        export_graphs(model, folder, served_length=model.config.max_len)
        return stepped(model, OnnxGraphs.load(folder).decoder_state(model, src), tgt), expected
    if engine == "ctranslate2":
        # The engine appends </s> itself.
        sources = [
            [i for i in row if i not in (model.config.pad_id, EOS_ID)] for row in src.tolist()
        ]
        scores = CTranslate2Translator(model, tokenizer).score(sources, tgt[:, 1:].tolist())
        found = torch.tensor([row[:-1] for row in scores])  # the </s> after each target apart
        return found, expected.log_softmax(-1)[:, :-1].gather(2, tgt[:, 1:, None])[..., 0]
    from transformers import AutoModelForSeq2SeqLM

    theirs = AutoModelForSeq2SeqLM.from_pretrained(save_huggingface(model, tokenizer, folder))
    mask = (src != model.config.pad_id).long()
    found = theirs.eval()(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    return found, expected


def test_every_option_has_a_changed_value():
    fields = [field.name for field in dataclasses.fields(TransformerConfig)]
    assert sorted(CHANGED) == sorted(fields), "give the new option a value in CHANGED"
    assert all(REFUSED[engine] <= set(fields) for engine in REFUSED)


@pytest.mark.parametrize("engine", list(REFUSED))
def test_an_engine_computes_every_option_it_does_not_refuse(engine, tokenizer, tmp_path):
    for number, changes in enumerate(combined(engine)):
        model = make_model(tokenizer, dict(changes))
        with torch.inference_mode():
            found, expected = run_engine(engine, model, tokenizer, tmp_path / str(number))
        torch.testing.assert_close(found, expected, rtol=1e-4, atol=1e-4, msg=str(changes))


@pytest.mark.parametrize(
    "engine, option",
    [(engine, option) for engine, options in REFUSED.items() for option in sorted(options)],
)
def test_an_engine_refuses_an_option_in_one_sentence_naming_it(engine, option, tokenizer, tmp_path):
    model = make_model(tokenizer, {option: CHANGED[option][0]})
    with pytest.raises(TransformerLibError) as refused, torch.inference_mode():
        run_engine(engine, model, tokenizer, tmp_path)
    message = str(refused.value)
    assert option in message and "\n" not in message, message
