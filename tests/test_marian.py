"""Our models as Hugging Face MarianMT folders (book/export.md): ``transformers`` loads them with
its Auto classes and computes the same function; greedy ``generate`` writes our translations;
shapes MarianMT cannot hold, and an export without ``transformers`` installed, are refused in one
sentence."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import require_multi30k
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from transformer_lib import cli
from transformer_lib.data import load_multi30k
from transformer_lib.decoding import SearchConfig, translate
from transformer_lib.marian import MarianError, save_huggingface, sines_first
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.pretrained import load_pretrained, save_pretrained
from transformer_lib.tokenizer import BPETokenizer

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "results" / "multi30k-de-en-laptop"
SENTENCES = ["ein hund läuft im park", "a dog runs in the park", "zwei hunde", "two dogs run"]


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(SENTENCES * 5, 300)


def small_model(tokenizer, **changes) -> Transformer:
    torch.manual_seed(0)
    v = tokenizer.vocab_size
    config = TransformerConfig(v, v, d_model=16, d_ff=32, n_heads=2, n_layers=2, dropout=0.0)
    model = Transformer(dataclasses.replace(config, **changes)).eval()
    with torch.no_grad():  # LayerNorms and biases away from their initial 1 and 0
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def test_the_permutation_puts_sines_first():
    assert sines_first(6).tolist() == [0, 2, 4, 1, 3, 5]


def test_the_folder_computes_our_logits(tokenizer, tmp_path):
    model = small_model(tokenizer)
    folder = save_huggingface(model, tokenizer, tmp_path / "hf")
    theirs = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    their_tokenizer = AutoTokenizer.from_pretrained(folder)
    encoded = their_tokenizer(SENTENCES, return_tensors="pt", padding=True)
    ours_ids = [ids + [2] for ids in tokenizer.encode_batch(SENTENCES)]  # ``</s>`` appended
    assert [[i for i in row if i != 0] for row in encoded.input_ids.tolist()] == ours_ids
    tgt = torch.tensor([[1, 50, 60, 70, 80]] * len(SENTENCES))
    with torch.no_grad():
        expected = model(encoded.input_ids, tgt)
        logits = theirs(
            input_ids=encoded.input_ids,
            attention_mask=encoded.attention_mask,
            decoder_input_ids=tgt,
        ).logits
    assert (logits - expected).abs().max().item() < 1e-4
    assert their_tokenizer.decode(tokenizer.encode("zwei hunde")) == "zwei hunde"


def test_the_folder_is_written_whole(tokenizer, tmp_path):
    save_huggingface(small_model(tokenizer), tokenizer, tmp_path / "hf")
    names = {p.name for p in (tmp_path / "hf").iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= names
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no staging folder left


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"norm_first": True}, "pre-LN"),
        ({"positional": "learned"}, "'learned' positions"),
        ({"positional": "none"}, "'none' positions"),
        ({"tie_embeddings": False}, "untied embeddings"),
        ({"key_size": 4}, "key_size 4"),
        ({"feed_forward": False}, "no feed-forward"),
    ],
)
def test_shapes_marian_cannot_hold_are_refused_in_one_sentence(tokenizer, tmp_path, changes, words):
    with pytest.raises(MarianError, match=words) as error:
        save_huggingface(small_model(tokenizer, **changes), tokenizer, tmp_path / "hf")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "hf").exists()


def test_without_transformers_the_export_says_how_to_install_it(
    tokenizer, tmp_path, monkeypatch, capsys
):
    """The package is an optional extra: without it, the function and the command each end in
    one sentence that says how to install it, and nothing is written."""
    model = small_model(tokenizer)
    run = {"run": {"data": "multi30k", "src": "de", "tgt": "en", "profile": "test"}}
    save_pretrained(model, tokenizer, run, tmp_path / "model")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    with pytest.raises(MarianError, match=r"pip install 'transformer_lib\[hf\]'"):
        save_huggingface(model, tokenizer, tmp_path / "hf")
    command = ["export", "--format", "hf", "--model", str(tmp_path / "model")]
    assert cli.main([*command, "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "needs the transformers package" in err
    assert not (tmp_path / "hf").exists()


@pytest.mark.slow
def test_greedy_generate_writes_our_translations_of_a_whole_test_set(tmp_path):
    """The shipped German→English model on test_2016_flickr: every sentence the same."""
    model, tokenizer = load_pretrained(SHIPPED)
    folder = save_huggingface(model, tokenizer, tmp_path / "hf")
    theirs = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    their_tokenizer = AutoTokenizer.from_pretrained(folder)
    sources = [src for src, _ in load_multi30k("test_2016_flickr", "de", "en", require_multi30k())]
    ours = translate(model, tokenizer, sources, SearchConfig(beam_size=1))
    generated = []
    for start in range(0, len(sources), 100):
        batch = their_tokenizer(sources[start : start + 100], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = theirs.generate(
                **batch, num_beams=1, max_new_tokens=batch.input_ids.shape[1] + 50
            )
        generated += their_tokenizer.batch_decode(out, skip_special_tokens=True)
    differing = [(a, b) for a, b in zip(ours, generated, strict=True) if a != b]
    assert not differing, f"{len(differing)} of {len(sources)} differ, e.g. {differing[:2]}"


def test_the_export_command_writes_a_folder_transformers_loads(tmp_path):
    out = tmp_path / "de-en-hf"
    command = [sys.executable, "-m", "transformer_lib", "export", "--format", "hf"]
    done = subprocess.run(
        [*command, "--model", str(SHIPPED), "--out", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert AutoTokenizer.from_pretrained(out)("Ein Hund.").input_ids[-1] == 2
    again = subprocess.run(
        [*command, "--model", str(SHIPPED), "--out", str(out)], capture_output=True, text=True
    )
    assert again.returncode == 2 and "already exists" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
