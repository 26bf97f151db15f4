"""The models that ship with the book: a folder written by save_pretrained reloads into the same
model, every damaged or missing file is refused by name, the command line takes --model, and each
shipped model translates the test set into the hypotheses its report committed."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import require_multi30k

import transformer_lib
from transformer_lib.book.report import hypotheses_name
from transformer_lib.data import load_multi30k
from transformer_lib.decoding import SearchConfig, translate
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.pretrained import (
    MODEL_FILES,
    ModelNotFoundError,
    PretrainedError,
    available_models,
    load_pretrained,
    save_pretrained,
    sha256,
)
from transformer_lib.tokenizer import BPETokenizer

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "results"
SHIPPED = sorted(path.parent for path in (ROOT / "results").glob("*/model.safetensors"))
FIRST = 100  # sentences of test_2016_flickr translated again from each shipped model

SENTENCES = ["ein hund läuft im schnee", "a dog runs in the snow", "zwei kinder", "two children"]


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(SENTENCES * 3, 300)


def small_model(vocab: int, seed: int = 0, d_model: int = 16) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(vocab, vocab, d_model=d_model, d_ff=32, n_heads=2, n_layers=1)
    return Transformer(config).eval()


@pytest.fixture
def folder(tmp_path, tokenizer) -> Path:
    model = small_model(tokenizer.vocab_size)
    run = {"run": {"data": "multi30k", "src": "de", "tgt": "en", "profile": "test"}}
    save_pretrained(model, tokenizer, run, tmp_path / "model")
    return tmp_path / "model"


def test_a_saved_folder_reloads_into_the_same_model(folder, tokenizer):
    original = small_model(tokenizer.vocab_size)
    model, reloaded_tokenizer = load_pretrained(folder)
    assert not model.training
    assert model.config == original.config and model.record.run["tgt"] == "en"
    mine, theirs = original.state_dict(), model.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[name], theirs[name]) for name in mine)
    # The tied matrices of §3.4 are one tensor again, and stored once in the file.
    generator = model.generator.weight
    assert generator is model.decoder.embeddings.lookup.weight
    assert generator is model.encoder.embeddings.lookup.weight
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", "pt") as stored:
        names = set(stored.keys())
    assert "generator.weight" not in names and len(names) == len(mine) - 2
    assert reloaded_tokenizer.to_json() == tokenizer.to_json()
    # The manifest records every file's SHA-256.
    recorded = json.loads((folder / "manifest.json").read_text())["shipped_model"]["sha256"]
    assert recorded == {name: sha256(folder / name) for name in MODEL_FILES}


def test_weights_saved_in_float16_load_as_the_float16_rounded_model(tmp_path, tokenizer):
    original = small_model(tokenizer.vocab_size)
    run = {"run": {"src": "de", "tgt": "en"}}
    entry = save_pretrained(original, tokenizer, run, tmp_path / "half", dtype=torch.float16)
    assert entry["dtype"] == "float16"
    from safetensors import safe_open

    with safe_open(tmp_path / "half" / "model.safetensors", "pt") as stored:
        assert {stored.get_tensor(name).dtype for name in stored.keys()} == {torch.float16}
    model, _ = load_pretrained(tmp_path / "half")
    # The model computes in float32 again, with exactly the weights that float16 can hold.
    for name, weight in original.state_dict().items():
        loaded = model.state_dict()[name]
        assert loaded.dtype == torch.float32
        assert torch.equal(loaded, weight.half().float())
    assert model.generator.weight is model.encoder.embeddings.lookup.weight
    with pytest.raises(PretrainedError, match="floating-point"):
        save_pretrained(original, tokenizer, run, tmp_path / "int", dtype=torch.int8)


def test_the_package_offers_load_pretrained_at_its_top():
    assert transformer_lib.load_pretrained is load_pretrained


@pytest.mark.parametrize("name", [*MODEL_FILES, "manifest.json"])
def test_a_missing_file_is_named(folder, name):
    (folder / name).unlink()
    with pytest.raises(ModelNotFoundError, match=name.replace(".", r"\.")):
        load_pretrained(folder)


@pytest.mark.parametrize("name", MODEL_FILES)
def test_a_damaged_file_is_named(folder, name):
    data = bytearray((folder / name).read_bytes())
    data[len(data) // 2] ^= 1  # one bit
    (folder / name).write_bytes(bytes(data))
    with pytest.raises(PretrainedError, match=f"{name.replace('.', '[.]')} is damaged"):
        load_pretrained(folder)


def rehash(folder: Path) -> None:
    """Record the files' present checksums, as a writer of another version would have."""
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["shipped_model"]["sha256"] = {name: sha256(folder / name) for name in MODEL_FILES}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_files_of_another_version_are_refused(folder, tokenizer, tmp_path):
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["shipped_model"]["format"] = 99
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PretrainedError, match="format 99"):
        load_pretrained(folder)
    manifest["shipped_model"]["format"] = 1
    (folder / "manifest.json").write_text(json.dumps(manifest))
    # A configuration with a setting this version does not know.
    config = json.loads((folder / "config.json").read_text())
    config["model"]["rotary"] = True
    (folder / "config.json").write_text(json.dumps(config))
    rehash(folder)
    with pytest.raises(PretrainedError, match=r"config\.json does not describe"):
        load_pretrained(folder)
    # Weights of another model than the configuration describes.
    del config["model"]["rotary"]
    (folder / "config.json").write_text(json.dumps(config))
    wider = small_model(tokenizer.vocab_size, d_model=32)
    save_pretrained(wider, tokenizer, {}, tmp_path / "wider")
    (folder / "model.safetensors").write_bytes(
        (tmp_path / "wider" / "model.safetensors").read_bytes()
    )
    rehash(folder)
    with pytest.raises(PretrainedError, match=r"model\.safetensors holds other tensors"):
        load_pretrained(folder)


def test_an_unknown_name_lists_the_shipped_models():
    with pytest.raises(ModelNotFoundError, match="no model named 'no-such-model'") as caught:
        load_pretrained("no-such-model")
    for name in available_models():
        assert name in str(caught.value)


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "transformer_lib", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_translate_takes_a_model_folder(folder, tokenizer):
    done = run_cli("translate", "--model", str(folder), "--beam", "1", stdin="ein hund\n\n")
    assert done.returncode == 0, done.stderr
    model, _ = load_pretrained(folder)
    expected = translate(model, tokenizer, ["ein hund", ""], SearchConfig(beam_size=1))
    assert done.stdout.split("\n")[:-1] == expected


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "no-such-model"], "no model named 'no-such-model'"),
        (["--model", "x", "--checkpoint", "y.pt"], "not allowed with argument"),
    ],
)
def test_translate_refuses_a_bad_model_in_one_line(args, message):
    done = run_cli("translate", *args, stdin="ein hund\n")
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_damaged_model_ends_the_command_in_one_line(folder):
    (folder / "tokenizer.json").write_text("{}")
    done = run_cli("translate", "--model", str(folder), stdin="ein hund\n")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "tokenizer.json is damaged" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("folder", SHIPPED, ids=[folder.name for folder in SHIPPED])
def test_each_shipped_model_translates_into_its_committed_hypotheses(folder):
    """The weights are those that bleu.json scored: the first sentences of test_2016_flickr,
    translated again with the report's search settings, are the committed lines, every one."""
    require_multi30k()
    bleu = json.loads((folder / "bleu.json").read_text())
    model, tokenizer = load_pretrained(folder.name)
    search = SearchConfig(bleu["beam_size"], bleu["alpha"], int(bleu["max_length"].split()[-1]))
    pairs = load_multi30k("test_2016_flickr", bleu["src"], bleu["tgt"])[:FIRST]
    torch.set_num_threads(1)
    again = translate(model, tokenizer, [source for source, _ in pairs], search)
    committed = (folder / hypotheses_name("test_2016_flickr", bleu["tgt"])).read_text()
    assert again == committed.splitlines()[:FIRST]


def test_the_search_travels_in_config_json_and_comes_back_as_model_search(tmp_path, tokenizer):
    model = small_model(tokenizer.vocab_size)
    run = {"run": {"src": "de", "tgt": "en"}}
    save_pretrained(model, tokenizer, run, tmp_path / "a", search=SearchConfig(2, 1.1, 9))
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["search"] == {"beam_size": 2, "alpha": 1.1, "extra_length": 9}
    loaded, _ = load_pretrained(tmp_path / "a")
    assert loaded.record.search == SearchConfig(2, 1.1, 9)
    save_pretrained(loaded, tokenizer, run, tmp_path / "b")  # the model's own goes with it
    assert load_pretrained(tmp_path / "b")[0].record.search == SearchConfig(2, 1.1, 9)


def test_a_folder_without_a_search_entry_is_searched_as_its_report_scored_it(folder):
    assert load_pretrained(folder)[0].record.search == SearchConfig()  # no report either: §6.1's
    report = {"beam_size": 3, "alpha": 1.3, "max_length": "input + 20"}
    (folder / "bleu.json").write_text(json.dumps(report))
    assert load_pretrained(folder)[0].record.search == SearchConfig(3, 1.3, 20)
    (folder / "bleu.json").write_text(json.dumps({**report, "max_length": "twice the input"}))
    with pytest.raises(PretrainedError, match="search settings"):
        load_pretrained(folder)


@pytest.mark.parametrize("folder", SHIPPED, ids=[folder.name for folder in SHIPPED])
def test_each_shipped_model_is_searched_as_its_report(folder):
    bleu = json.loads((folder / "bleu.json").read_text())
    search = load_pretrained(folder)[0].record.search
    assert (search.beam_size, search.alpha) == (bleu["beam_size"], bleu["alpha"])
    assert f"input + {search.extra_length}" == bleu["max_length"]


def test_python_and_the_command_line_translate_a_shipped_model_alike():
    """translate() without a search and the translate command without options search the model
    with its own settings (α = 1.8 for the laptop model: its report's hypotheses come back);
    --alpha, like a SearchConfig given in Python, replaces the model's α."""
    require_multi30k()
    name = "multi30k-de-en-laptop"
    pairs = load_multi30k("test_2016_flickr", "de", "en")[:6]
    # A sentence whose translation depends on α, so that the override is seen to act.
    sources = [source for source, _ in pairs] + ["Ein Mann in einem roten Hemd fährt Fahrrad."]
    model, tokenizer = load_pretrained(name)
    python = translate(model, tokenizer, sources)
    done = run_cli("translate", "--model", name, stdin="\n".join(sources) + "\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == python
    committed = (RESULTS_DIR / name / hypotheses_name("test_2016_flickr", "en")).read_text()
    assert python[:6] == committed.splitlines()[:6]  # the report's search, α 1.8
    paper = dataclasses.replace(model.record.search, alpha=0.6)
    python_06 = translate(model, tokenizer, sources, paper)
    done = run_cli("translate", "--model", name, "--alpha", "0.6", stdin="\n".join(sources) + "\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == python_06 != python
