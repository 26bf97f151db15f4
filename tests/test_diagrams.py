"""Figures 1 and 2 and the anatomy of a run as our code draws them: every box names code that
exists and links to the cell that defines it, the drawing follows the configuration, Figure 1's
shapes are the model's, and the anatomy's steps are those the training loop calls.

The SVG is read back with ``xml.etree.ElementTree``, as a browser would parse it.
"""

import ast
import dataclasses
import importlib
import inspect
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jupytext
import pytest
import torch
import yaml

from transformer_lib import training
from transformer_lib.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_lib.book import anatomy, diagrams
from transformer_lib.model import Transformer, TransformerConfig

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"
# A batch with padding in both sentences; vocabularies of different sizes, so V is the target's.
SRC = torch.tensor([[5, 6, 7, 8, 2, 3, 4], [9, 10, 2, 0, 0, 0, 0], [4, 4, 4, 4, 4, 2, 0]])
TGT = torch.tensor([[1, 11, 12, 13, 2], [1, 14, 0, 0, 0], [1, 7, 7, 2, 0]])


def small_model(**changes) -> Transformer:
    sizes = dict(src_vocab_size=40, tgt_vocab_size=60, d_model=24, d_ff=40, n_heads=3)
    torch.manual_seed(0)
    return Transformer(TransformerConfig(**{**sizes, "n_layers": 2, **changes})).eval()


def figures() -> dict[str, str]:
    """Both figures for several configurations: post-LN, pre-LN, without FFN, 1 to 8 heads."""
    drawn = {f"figure 2, h = {h}": diagrams.figure_2(MultiHeadAttention(48, h)) for h in (1, 3, 8)}
    for name, changes in [
        ("post-LN", {}),
        ("pre-LN", dict(norm_first=True)),
        ("no FFN", dict(feed_forward=False)),
    ]:
        drawn[f"figure 1, {name}"] = diagrams.figure_1(small_model(**changes), SRC, TGT)
    drawn["the anatomy of a run"] = anatomy.run_anatomy()
    return drawn


FIGURES = figures()


def texts(element) -> list[str]:
    return [t.text or "" for t in element.iter(f"{SVG}text")]


def links(svg: str) -> list[tuple[str, str, list[str]]]:
    """(href, the title: a dotted path, the texts shown) of every link of a drawing."""
    return [
        (a.get("href"), a.find(f"{SVG}title").text, texts(a))
        for a in ET.fromstring(svg).iter(f"{SVG}a")
    ]


def resolve(path: str):
    """The object a dotted path names: a module's attribute, a class's attribute, or a sub-module
    that the class's ``__init__`` assigns (``Transformer.generator``), found in its source or in
    a base class's (``Encoder.layers``, made by ``Stack``)."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for i, part in enumerate(parts[cut:], start=cut):
            if hasattr(obj, part):
                obj = getattr(obj, part)
            elif inspect.isclass(obj) and i == len(parts) - 1:
                sources = [
                    inspect.getsource(c) for c in obj.__mro__ if c.__module__ == obj.__module__
                ]
                assert any(f"self.{part} = " in source for source in sources), path
                return obj
            else:
                raise AssertionError(f"{path}: {part} not found")
        return obj
    raise AssertionError(f"{path}: no module")


def chapters_of(module: str) -> list[str]:
    """The chapters that build a module of the library, as its generated header names them."""
    header = (ROOT / "transformer_lib" / f"{module}.py").read_text().splitlines()[0]
    return re.findall(r"book/(\w+)\.md", header)


def chapter_cells(page: str) -> list:
    return jupytext.read(ROOT / "book" / f"{page}.md").cells


@pytest.mark.parametrize("name", FIGURES)
def test_the_drawing_is_well_formed_svg(name):
    svg = FIGURES[name]
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    defined = {element.get("id") for element in root.iter() if element.get("id")}
    used = set(re.findall(r"url\(#([^)]+)\)", svg))
    assert used and used <= defined  # every arrowhead refers to the marker of this drawing


@pytest.mark.parametrize("name", FIGURES)
def test_every_box_names_code_that_exists(name):
    found = links(FIGURES[name])
    assert len(found) >= 6
    for _, path, shown in found:
        obj = resolve(path)
        assert path.startswith(("transformer_lib.", "torch.")), path
        assert callable(obj), path  # a class, a function or a module's forward
        last = path.rsplit(".", 1)[1]
        assert any(last in text for text in shown), (path, shown)  # the box says which code


def test_figure_2_shows_the_lines_of_the_code():
    """The five steps on the left are lines of scaled_dot_product_attention, the concatenation a
    line of MultiHeadAttention.forward."""
    source = inspect.getsource(scaled_dot_product_attention)
    for _, line in diagrams.ATTENTION_STEPS:
        assert line in source, line
    assert "transpose(1, 2).flatten(2)" in inspect.getsource(MultiHeadAttention.forward)


def test_every_link_points_to_a_target_before_the_cell_that_defines_it():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    chapters = {Path(e["file"]).name for part in toc["parts"] for e in part["chapters"]}
    hrefs = {(href, path) for svg in FIGURES.values() for href, path, _ in links(svg)}
    for href, path in sorted(hrefs):
        page, fragment = re.fullmatch(r"(\w+)\.html#([\w-]+)", href).groups()
        assert page in chapters, href
        cells = chapter_cells(page)
        marks = [i for i, c in enumerate(cells) if f"({fragment})=" in c.source.splitlines()]
        assert len(marks) == 1, f"{href}: the target ({fragment})= is missing from {page}.md"
        if path.startswith("torch."):
            continue  # not our code: the target is the cell whose prose says where it is used
        name = path.split(".")[2]  # transformer_lib.<module>.<name>[.<attribute>]
        assert fragment == diagrams.code_target(name)
        prose, code = cells[marks[0]].source.splitlines(), cells[marks[0] + 1]
        after = prose[prose.index(f"({fragment})=") + 1 :]  # only targets: it marks the cell
        assert all(re.fullmatch(r"(\([\w-]+\)=)?", line) for line in after), href
        assert code.cell_type == "code", href
        source = "\n".join(line for line in code.source.splitlines() if not line.startswith("#|"))
        defined = {
            node.name
            for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef | ast.ClassDef)
        }
        assert name in defined, f"{href}: the cell after the target does not define {name}"
        assert page in chapters_of(path.split(".")[1])  # a chapter that builds the module


def test_targets_are_unique_in_the_book():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    labels = []
    for part in toc["parts"]:
        for entry in part["chapters"]:
            text = (ROOT / f"{entry['file']}.md").read_text(encoding="utf-8")
            labels += re.findall(r"^\(([\w-]+)\)=$", text, flags=re.MULTILINE)
    assert len(labels) == len(set(labels))


@pytest.mark.parametrize("n_layers", [1, 3, 6])
def test_figure_1_stacks_one_outline_per_layer(n_layers):
    root = ET.fromstring(diagrams.figure_1(small_model(n_layers=n_layers), SRC, TGT))
    assert len(root.findall(f".//{SVG}rect[@class='layer']")) == 2 * n_layers
    assert texts(root).count(f"N = {n_layers} ×") == 2
    assert [t.get("data-layers") for t in root.iter(f"{SVG}text") if t.get("data-layers")] == [
        str(n_layers)
    ] * 2


@pytest.mark.parametrize("n_heads", [1, 2, 4, 16])
def test_figure_2_stacks_one_box_per_head(n_heads):
    attention = MultiHeadAttention(d_model=64, n_heads=n_heads)
    root = ET.fromstring(diagrams.figure_2(attention))
    assert len(root.findall(f".//{SVG}rect[@class='head']")) == n_heads
    assert len(root.findall(f".//{SVG}rect[@class='projection']")) == 3 * n_heads  # Q, K, V
    assert f"h = {n_heads} heads, d_k = {64 // n_heads}, d_v = {64 // n_heads}, d_model = 64" in (
        texts(root)
    )


def test_figure_1_follows_the_layers_options():
    boxes = {name: texts(ET.fromstring(svg)) for name, svg in FIGURES.items()}
    post, pre, no_ffn = (
        boxes["figure 1, post-LN"],
        boxes["figure 1, pre-LN"],
        boxes["figure 1, no FFN"],
    )
    assert post.count("Add & Norm") == 2 + 3 and "Norm" not in post  # encoder 2, decoder 3
    assert pre.count("Norm") == 5 and pre.count("Add") == 5 and "Add & Norm" not in pre
    assert "Encoder.norm" in pre and "Decoder.norm" in pre and "Encoder.norm" not in post
    assert post.count("PositionwiseFeedForward") == 2 and "PositionwiseFeedForward" not in no_ffn
    assert post.count("MultiHeadAttention") == 3  # self-attention twice, cross-attention once


def test_the_shapes_on_figure_1_are_those_of_a_forward_pass():
    model = small_model()
    root = ET.fromstring(diagrams.figure_1(model, SRC, TGT))
    labels = [t for t in root.iter(f"{SVG}text") if t.get("data-tensor")]
    shown = {t.get("data-tensor"): t.text for t in labels}
    with torch.no_grad():  # the reference: the model's own outputs, no hooks
        memory, logits = model.encode(SRC), model(SRC, TGT)
    (b, s), t, d = SRC.shape, TGT.shape[1], model.config.d_model
    assert shown["src"] == str((b, s)) and shown["tgt"] == str((b, t))
    memory_labels = [x.text for x in labels if x.text.startswith("memory")]
    assert memory_labels == [f"memory {tuple(memory.shape)}"] and memory.shape == (b, s, d)
    assert shown["generator"] == shown["probabilities"] == str(tuple(logits.shape))
    assert logits.shape == (b, t, model.config.tgt_vocab_size)
    # each stack: into the positions, into the layer, between its sub-layers, out of the stack
    inside = [key for key in shown if key.startswith(("encoder", "decoder"))]
    assert len(inside) == (2 + 3 + 1) + (2 + 5 + 1)
    for key in inside:
        length = s if key.startswith("encoder") else t
        assert shown[key].removeprefix("memory ") == str((b, length, d)), key
    legend = f"Transformer: B = {b}, S = {s}, T = {t}, d_model = {d}, V = {logits.shape[-1]}"
    assert legend in texts(root)


def test_forward_shapes_removes_its_hooks():
    model = small_model()
    shapes = diagrams.forward_shapes(model, SRC, TGT)
    assert shapes[""] == tuple(model(SRC, TGT).shape)
    assert all(not m._forward_hooks for m in model.modules())


def test_a_class_defined_in_a_notebook_links_to_the_library():
    """A chapter redefines the library's classes in its own kernel (module ``__main__``)."""
    notebook_class = type("Embeddings", (), {"__module__": "__main__"})
    assert diagrams.code_link(notebook_class) == (
        "Embeddings",
        "transformer_lib.model.Embeddings",
        "model.html#code-embeddings",
    )
    with pytest.raises(ValueError, match="no chapter"):
        diagrams.code_link(type("Elsewhere", (), {"__module__": "__main__"}))


# ---------------------------------------------------------------------------- the anatomy of a run


def step_name(path: str) -> str:
    """A step as RUN_STEPS names it, from the dotted path of its link."""
    return path.removeprefix("transformer_lib.").removeprefix("training.")


def test_the_anatomy_draws_every_step_that_train_calls_and_no_other():
    """The steps are read from train's source; the test reads it a second way, as text."""
    source = inspect.getsource(training.train)
    called = set(re.findall(r"\b(_[a-z_]+|distributed\.[a-z_]+)\(", source))
    drawn = [step_name(path) for _, path, _ in links(FIGURES["the anatomy of a run"])]
    assert sorted(drawn) == sorted(called) == sorted(anatomy.train_steps())
    loop = source[source.index("while run.step") :]
    order = sorted(called & set(re.findall(r"\b(_[a-z_]+)\(", loop)), key=loop.index)
    assert drawn[-len(order) :] == order  # each turn of the loop, in train's order


def test_the_anatomy_colours_each_step_by_the_processes_that_run_it():
    """A step that holds a collective operation is drawn for every process together; the steps
    of the first process alone are those that return on every other."""
    kinds = {
        step_name(a.find(f"{SVG}title").text): a.find(f"{SVG}rect").get("class")
        for a in ET.fromstring(FIGURES["the anatomy of a run"]).iter(f"{SVG}a")
    }
    assert kinds == {step.name: f"step-{step.who}" for step in anatomy.RUN_STEPS}
    assert [name for name, kind in kinds.items() if kind == "step-first"] == ["_maybe_validate"]
    assert kinds["_update"] == kinds["_maybe_checkpoint"] == "step-together"


def redrawn(name: str, who: str) -> list:
    """RUN_STEPS with the step ``name`` drawn as ``who``."""
    return [dataclasses.replace(s, who=who) if s.name == name else s for s in anatomy.RUN_STEPS]


@pytest.mark.parametrize(
    "steps, message",
    [
        (anatomy.RUN_STEPS[:-1], "the anatomy draws"),  # a step of train left out
        ([*anatomy.RUN_STEPS, anatomy.RunStep("_gone", "", "each")], "the anatomy draws"),
        (redrawn("_update", "each"), "_update is drawn as 'each'"),  # its collective unseen
        (redrawn("_open", "first"), "_open is drawn as 'first'"),  # all processes run it
        (redrawn("_maybe_validate", "each"), "_maybe_validate is drawn as 'each'"),
    ],
)
def test_the_anatomy_refuses_to_drift_from_the_loop(monkeypatch, steps, message):
    monkeypatch.setattr(anatomy, "RUN_STEPS", steps)
    with pytest.raises(ValueError, match=message):
        anatomy.run_anatomy()
