"""The model out of PyTorch (book/export.md): the ONNX graphs compute what the model computes, at
sizes other than the examples they were traced with; the searches give the same tokens through
them; the 8-bit form is unsigned and smaller; the page's export is done once and refuses a
missing model in one line."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from transformer_lib.book.inspection import attention_maps
from transformer_lib.book.translator_page import (
    PAGE_MODELS,
    export_key,
    export_page_models,
    quantize_graph,
)
from transformer_lib.decoding import GREEDY, IncrementalDecoder, SearchConfig, translate
from transformer_lib.export import (
    GRAPHS,
    ExportError,
    OnnxGraphs,
    export_graphs,
    serving_copy,
)
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.pretrained import save_pretrained
from transformer_lib.tokenizer import BOS_ID, EOS_ID, BPETokenizer

ROOT = Path(__file__).resolve().parent.parent
SERVED = 64  # positions of the test graphs
TEXTS = [
    "ein hund läuft im schnee",
    "zwei kinder spielen am strand mit einem ball",
    "a dog runs in the snow",
    "two children are playing on the beach with a ball",
    "eine frau",
]


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(TEXTS * 3, 300)


def seeded_model(vocab: int, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(vocab, vocab, d_model=32, d_ff=64, n_heads=2, n_layers=2)
    return Transformer(config).eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tokenizer):
    """A seeded model, its graphs (float32 and 8-bit) and their sessions."""
    folder = tmp_path_factory.mktemp("graphs")
    model = seeded_model(tokenizer.vocab_size)
    export_graphs(model, folder / "float32", SERVED)
    (folder / "8bit").mkdir()
    for name in GRAPHS:
        quantize_graph(folder / "float32" / name, folder / "8bit" / name)
    return {"model": model, "folder": folder, "graphs": OnnxGraphs.load(folder / "float32")}


def padded_batch(tokenizer, texts) -> torch.Tensor:
    """Sources with </s>, padded: three sentences of other lengths than the export's examples."""
    ids = [tokenizer.encode(text) + [EOS_ID] for text in texts]
    src = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
    for row, sentence in enumerate(ids):
        src[row, : len(sentence)] = torch.tensor(sentence)
    return src


def test_the_encoder_graph_computes_the_models_encoder(exported, tokenizer):
    model, graphs = exported["model"], exported["graphs"]
    src = padded_batch(tokenizer, TEXTS[1:4])
    memory, keys, values, weights = graphs.encoder.run(None, {"src": src.numpy()})
    tgt = torch.full((len(src), 1), BOS_ID)
    with torch.no_grad():
        expected = model.encode(src)
        maps = attention_maps(model, src, tgt)
    torch.testing.assert_close(torch.from_numpy(memory), expected, rtol=0, atol=1e-5)
    # attention_maps stacks layers first: (N, B, h, S, S); the graph puts the batch first.
    torch.testing.assert_close(
        torch.from_numpy(weights), maps["encoder"].transpose(0, 1), rtol=0, atol=1e-5
    )
    assert keys.shape == values.shape == (3, 2, 2, src.shape[1], 16)


def test_the_decoder_step_graph_computes_incremental_decoding(exported, tokenizer):
    """Step by step, from an empty cache, the graph's logits equal IncrementalDecoder's and its
    encoder-decoder attention equals the weights of the whole decoder run on the same tokens."""
    model, graphs = exported["model"], exported["graphs"]
    src = padded_batch(tokenizer, TEXTS[:3])
    state = graphs.decoder_state(model, src)
    reference = IncrementalDecoder(model, src)
    fed = torch.tensor(
        [[BOS_ID, 7, 9, 11, 5, 30], [BOS_ID, 8, 8, 8, 8, 8], [BOS_ID, 4, 40, 6, 7, 9]]
    )
    crosses = []
    with torch.no_grad():
        for position in range(fed.shape[1]):
            logits = state.step(fed[:, position])
            torch.testing.assert_close(logits, reference.step(fed[:, position]), rtol=0, atol=1e-5)
            crosses.append(torch.from_numpy(state.cross_attention))  # (B, N, h, S)
        maps = attention_maps(model, src, fed)
    expected = maps["cross"].permute(1, 3, 0, 2, 4)  # (N, B, h, T, S) -> (B, T, N, h, S)
    torch.testing.assert_close(torch.stack(crosses, dim=1), expected, rtol=0, atol=1e-5)


def test_select_keeps_rows_of_the_state_like_the_incremental_decoder(exported, tokenizer):
    model, graphs = exported["model"], exported["graphs"]
    src = padded_batch(tokenizer, TEXTS[:3])
    state, reference = graphs.decoder_state(model, src), IncrementalDecoder(model, src)
    tokens = torch.tensor([BOS_ID] * 3)
    with torch.no_grad():
        for rows in ([2, 0, 0, 1], [3, 1]):
            state.step(tokens), reference.step(tokens)
            state.select(torch.tensor(rows)), reference.select(torch.tensor(rows))
            tokens = torch.arange(5, 5 + len(rows))
            torch.testing.assert_close(
                state.step(tokens), reference.step(tokens), rtol=0, atol=1e-5
            )


@pytest.mark.parametrize(
    "search", [GREEDY, SearchConfig(beam_size=4, alpha=0.6)], ids=["greedy", "beam"]
)
def test_translating_through_the_graphs_gives_translates_tokens(exported, tokenizer, search):
    """The same sentences, batched and padded by translate, through PyTorch and the graphs."""
    served = serving_copy(exported["model"], SERVED)  # the same length limits for both
    texts = TEXTS + ["", "spielen"]
    expected = translate(served, tokenizer, texts, search)
    got = translate(
        served, tokenizer, texts, search, decoder_state=exported["graphs"].decoder_state
    )
    assert got == expected
    assert any(len(text) > 10 for text in expected)  # a random model writes long outputs


def test_sizes_stay_dynamic_and_the_position_table_is_trimmed(exported):
    for name in GRAPHS:
        graph = onnx.load(exported["folder"] / "float32" / name).graph
        for value in graph.input:
            dims = value.type.tensor_type.shape.dim
            assert dims[0].dim_param, f"{name}: the batch of {value.name} was fixed"
        tables = [t for t in graph.initializer if t.name.endswith("positions.table")]
        assert [list(t.dims) for t in tables] == [[SERVED, 32]], name
    decoder = onnx.load(exported["folder"] / "float32" / "decoder.onnx").graph
    past = {v.name: v.type.tensor_type.shape.dim[3] for v in decoder.input if "self_" in v.name}
    assert all(dim.dim_param for dim in past.values()), "the cache length was fixed"


def test_no_weight_is_stored_twice(exported):
    """The tied embedding and projection (§3.4) once per graph; every attention matrix once."""
    for name in GRAPHS:
        graph = onnx.load(exported["folder"] / "float32" / name).graph
        seen = {}
        for tensor in graph.initializer:
            array = onnx.numpy_helper.to_array(tensor)
            if array.size > 100:
                key = array.tobytes()
                assert key not in seen, f"{name}: {tensor.name} repeats {seen.get(key)}"
                seen[key] = tensor.name


def test_eight_bit_weights_are_unsigned_smaller_and_close(exported, tokenizer):
    folder = exported["folder"]
    for name in GRAPHS:
        graph = onnx.load(folder / "8bit" / name).graph
        types = {t.data_type for t in graph.initializer if np.prod(t.dims) > 100}
        assert onnx.TensorProto.UINT8 in types and onnx.TensorProto.INT8 not in types, name
        assert (folder / "8bit" / name).stat().st_size < (folder / "float32" / name).stat().st_size
    src = padded_batch(tokenizer, TEXTS[:3])
    quantized = OnnxGraphs.load(folder / "8bit")
    state, reference = (
        quantized.decoder_state(None, src),
        exported["graphs"].decoder_state(None, src),
    )
    tokens = torch.tensor([BOS_ID] * 3)
    difference = (state.step(tokens) - reference.step(tokens)).abs().max().item()
    assert 0 < difference < 0.5  # changed, and only a little (the logits span several units)


def test_a_served_length_beyond_the_models_is_refused(tokenizer):
    model = seeded_model(tokenizer.vocab_size)
    with pytest.raises(ExportError, match="served_length must be between 2 and"):
        serving_copy(model, model.config.max_len + 1)


# --- the page's export --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped(tmp_path_factory, tokenizer) -> Path:
    """A folder with the page's first model, as results/ will hold it (the chapter exports both)."""
    folder = tmp_path_factory.mktemp("models")
    run = {"run": {"data": "multi30k", "src": "de", "tgt": "en", "profile": "test"}}
    save_pretrained(seeded_model(tokenizer.vocab_size), tokenizer, run, folder / PAGE_MODELS[0])
    return folder


def test_the_page_models_are_exported_once(shipped, tmp_path):
    out = tmp_path / "translator"
    index = export_page_models(out, shipped, PAGE_MODELS[:1], SERVED)
    assert json.loads((out / "translator.json").read_text()) == index
    assert [(e["src"], e["tgt"]) for e in index["models"].values()] == [("de", "en")]
    entry = index["models"][PAGE_MODELS[0]]
    for path, size in entry["bytes"].items():
        assert (out / PAGE_MODELS[0] / path).stat().st_size == size
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.onnx")}
    assert export_page_models(out, shipped, PAGE_MODELS[:1], SERVED) == index
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.onnx")} == stamps  # not again
    # Another served length (or model file, code, tool version) is another export.
    model_sha256 = entry["model_sha256"]
    assert export_key(model_sha256, SERVED) == entry["key"] != export_key(model_sha256, SERVED - 1)


def test_a_missing_model_is_one_line_and_status_2(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/export_translator.py"),
            "--models",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "TRANSFORMER_LIB_MODELS" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()
