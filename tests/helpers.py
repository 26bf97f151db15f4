"""Small helpers the tests share: the data, throw-away books, comparing tensors exactly."""

import gzip
import math
import os
import shutil
from collections.abc import Callable
from itertools import islice
from pathlib import Path

import pytest
import torch
from torch import nn

# The Multi30k copy the tests read: $TRANSFORMER_LIB_DATA, else ../shared/data/multi30k.
MULTI30K = Path(
    os.environ.get("TRANSFORMER_LIB_DATA")
    or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
)


def require_multi30k() -> Path:
    """The Multi30k folder; a test that needs it fails (never skips) when the files are missing,
    so that a run without the data cannot pass by testing less."""
    if not (MULTI30K / "train.de.gz").is_file():
        pytest.fail(
            f"the Multi30k files are missing from {MULTI30K}: set TRANSFORMER_LIB_DATA to a folder "
            "that holds them (the Makefile uses ../shared/data/multi30k when it exists)",
            pytrace=False,
        )
    return MULTI30K


def multi30k_slice(folder: Path, train: int = 3000, other: int = 100) -> Path:
    """The first ``train`` training pairs and ``other`` pairs of every other split of Multi30k,
    as uncompressed files in ``folder`` (which the library reads as Multi30k, unchecked): for a
    script's dry run, which checks the plumbing, not what the whole data set teaches."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in sorted(require_multi30k().glob("*.gz")):
        count = train if path.name.startswith("train") else other
        with gzip.open(path, "rt", encoding="utf-8") as file:
            text = "".join(islice(file, count))
        (folder / path.name.removesuffix(".gz")).write_text(text, encoding="utf-8")
    return folder


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` that ``build`` fills, built once in a session however many pytest
    workers ask for it: the first builds it under a lock while the others wait, then every worker
    reads it. (A module-scoped fixture is built again by each worker that runs one of its tests.)
    Its readers must leave it as it is."""
    if "PYTEST_XDIST_WORKER" not in os.environ:  # one process: the session's own folder
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    import fcntl  # the tests run on Linux and macOS

    shared = tmp_path_factory.getbasetemp().parent  # one per session, above each worker's own
    folder, built = shared / name, shared / f"{name}.built"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not built.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
            folder.mkdir()
            build(folder)
            built.touch()
    return folder


HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""


def code_cell(source: str) -> str:
    return f"```{{code-cell}} ipython3\n{source.strip()}\n```\n"


def write_chapter(path: Path, title: str, *cells: str) -> Path:
    """A MyST notebook with a title and the given code cells, separated by prose."""
    body = "\n".join(f"Some prose.\n\n{code_cell(cell)}" for cell in cells)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{HEADER}\n# {title}\n\n{body}", encoding="utf-8")
    return path


def write_toc(root: Path, *chapters: str) -> None:
    """A Jupyter Book table of contents: the first chapter is the root page."""
    lines = ["format: jb-book", f"root: {chapters[0]}"]
    if len(chapters) > 1:
        lines.append("chapters:")
        lines += [f"  - file: {name}" for name in chapters[1:]]
    (root / "_toc.yml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def assert_close(actual, expected, atol=1e-10):
    """Equal within ``atol`` and no relative slack: for float64 comparisons with a reference."""
    torch.testing.assert_close(actual, expected, rtol=0.0, atol=atol)


def torch_transformer(ours, dropout: float = 0.0) -> nn.Transformer:
    """An nn.Transformer (ReLU, batch_first, float64) holding the weights of our ``Transformer``.

    Post-LN: the paper's model has no LayerNorm after the last layer, but nn.Transformer always
    ends each stack with one, so those two become identities. Pre-LN: both have one; copy it.
    ``dropout`` is nn.Transformer's own (inside its layers); the caller switches modes.
    """
    c = ours.config
    theirs = nn.Transformer(
        c.d_model,
        c.n_heads,
        c.n_layers,
        c.n_layers,
        c.d_ff,
        dropout=dropout,
        batch_first=True,
        norm_first=c.norm_first,
        dtype=torch.float64,
    )
    if c.norm_first:
        theirs.encoder.norm.load_state_dict(ours.encoder.norm.state_dict())
        theirs.decoder.norm.load_state_dict(ours.decoder.norm.state_dict())
    else:
        theirs.encoder.norm, theirs.decoder.norm = nn.Identity(), nn.Identity()

    def attention(mine, torch_attention):
        torch_attention.in_proj_weight.data.copy_(mine.in_proj.weight)
        torch_attention.in_proj_bias.data.copy_(mine.in_proj.bias)
        torch_attention.out_proj.load_state_dict(mine.out_proj.state_dict())

    def sublayers(mine, torch_layer, norms):
        torch_layer.linear1.load_state_dict(mine.feed_forward.linear_1.state_dict())
        torch_layer.linear2.load_state_dict(mine.feed_forward.linear_2.state_dict())
        for our_norm, their_norm in zip(mine.norms, norms, strict=True):
            their_norm.load_state_dict(our_norm.state_dict())

    for mine, layer in zip(ours.encoder.layers, theirs.encoder.layers, strict=True):
        attention(mine.self_attn, layer.self_attn)
        sublayers(mine, layer, [layer.norm1, layer.norm2])
    for mine, layer in zip(ours.decoder.layers, theirs.decoder.layers, strict=True):
        attention(mine.self_attn, layer.self_attn)
        attention(mine.cross_attn, layer.multihead_attn)
        sublayers(mine, layer, [layer.norm1, layer.norm2, layer.norm3])
    return theirs


def embed(weight: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """sqrt(d_model) E[token] + PE(pos), with PE in closed form (§3.4, §3.5), in float64."""
    length, d_model = tokens.shape[1], weight.shape[1]
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(d_model)[None, :] // 2
    angle = pos / 10000 ** (2 * i / d_model)
    pe = torch.where(torch.arange(d_model) % 2 == 0, torch.sin(angle), torch.cos(angle))
    return weight[tokens] * math.sqrt(d_model) + pe


def run_cli(args: list[str], stdin: str, monkeypatch, capsys) -> tuple[int, str, str]:
    """``python -m transformer_lib`` in this process, with ``stdin`` as standard input: its exit
    status, standard output and standard error."""
    import io
    import sys

    from transformer_lib import cli

    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    status = cli.main(args)
    out, err = capsys.readouterr()
    return status, out, err
