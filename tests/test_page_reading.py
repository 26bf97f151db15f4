"""The site check reads each page as a reader would (tools/page_reading.py): each rule sees its
defect planted in a small page in the shape MyST-NB writes, and a clean page passes. The same rules
run on a book that Jupyter Book really builds in tests/test_site.py."""

import json

import page_reading
import pytest

PATHS = page_reading.machine_paths(["/work/clone", "/home/reader"])


def page(*blocks: str) -> str:
    """A page of the built book: the theme's article around the given blocks."""
    return f"<html><body><nav>menu</nav><article>{''.join(blocks)}</article></body></html>"


def cell(*outputs: str, collapsed: bool = False) -> str:
    shown = f"<div class='cell_output docutils container'>{''.join(outputs)}</div>"
    if collapsed:  # MyST-NB's hide-output: the outputs behind a summary the reader opens
        shown = f"<details class='hide below-input'><summary>Show</summary>{shown}</details>"
    return f"<div class='cell docutils container'><div class='cell_input'><pre>x = 1</pre></div>{shown}</div>"


def text_output(text: str, kind: str = "text_plain") -> str:
    return f"<div class='output {kind} highlight-myst-ansi'><div class='highlight'><pre>{text}</pre></div></div>"


def image(alt: str = "A line that falls", src: str = "../_images/a.png") -> str:
    return f"<img alt='{alt}' src='{src}' />"


def figure(inner: str, caption: str = "The loss falls as training goes on.") -> str:
    return f"<figure id='fig-a'>{inner}<figcaption><p>{caption}</p></figcaption></figure>"


CLEAN = page(
    "<p>It costs $2 or $3 an hour; <span class='math'>\\(d_k\\)</span> and "
    "<code>{glue:text}`name`</code> stay as written.</p>",
    "<pre>$ python -m transformer_lib train --out runs/ci\n::: note</pre>",
    cell(text_output("step 100: loss 4.31", "stream")),
    cell(text_output("tensor([0.4963, 0.7682])")),
    cell(text_output("[0, 1, &#39;5 steps left out&#39;, 7]")),
    cell(figure(image())),
    "<p>See https://example.org/tmp/file and runs/tmp/x.</p>",
)


def problems(html: str) -> list[str]:
    return page_reading.read_page(html, PATHS).problems


def test_a_clean_page_passes_and_its_outputs_are_counted():
    reading = page_reading.read_page(CLEAN, PATHS)
    assert reading.problems == []
    assert reading.outputs == 4 and reading.collapsed == 0
    collapsed = page_reading.read_page(page(cell(text_output("done"), collapsed=True)), PATHS)
    assert (collapsed.outputs, collapsed.collapsed) == (1, 1)


@pytest.mark.parametrize(
    "shown",
    ["&#39;900&#39;", "0.06508799999999997", "&#39;225 updates&#39;", "(&#39;a&#39;, 3)", "True"],
)
def test_a_glued_or_bare_value_under_a_cell_fails(shown):
    found = problems(page(cell(text_output(shown))))
    assert len(found) == 1 and "bare value" in found[0], found
    assert problems(page(cell(text_output(shown, "stream"))))  # printed bare, the same


@pytest.mark.parametrize(
    "path",
    [
        "/tmp/tmpvo1yw2ik/cut/step-100.pt",
        "/work/clone/_build/runs/ci-de-en-5be6/metrics.jsonl",
        "/home/reader/data/multi30k",
        "/root/out/results/perf/train_step.json",
        "/home/runner/work/book",
    ],
)
def test_a_build_path_in_text_or_output_fails(path):
    for html in (page(f"<p>written to {path}.</p>"), page(cell(text_output(f"refused: {path}")))):
        found = problems(html)
        assert any("path of the machine" in p and path.split("/")[2] in p for p in found), found


@pytest.mark.parametrize(
    "text",
    [
        "$H(q) = -(1 - \\epsilon) \\log q$",
        "$H(q) = -(1 - \\epsilon) \\log(1 - \\epsilon)",  # a list item cut the math here
        "and \\)\\(V - 1\\) stray delimiters",
        "the {glue:text}`bleu` score",
        "see {ref}`the figure <fig-a>`",
        "as {term}`logits`",
        "::: {note}",
    ],
)
def test_markup_left_raw_fails(text):
    found = problems(page(f"<p>{text}</p>"))
    assert found and all("left" in p for p in found), found


def test_an_image_needs_alt_text_that_is_not_a_file_name():
    assert "without alt text" in " ".join(problems(page(figure(image(alt="")))))
    named = problems(page(figure(image(alt="../_build/jupyter_execute/abc.png"))))
    assert named and "file name" in named[0]


@pytest.mark.parametrize(
    "chart",
    [
        image(),
        "<div id='altair-viz-1' class='vega-embed'><svg class='marks'></svg></div>",
        "<div class='output text_html'><svg><rect/></svg></div>",
    ],
)
def test_a_chart_a_cell_draws_needs_a_caption(chart):
    found = problems(page(cell(chart)))
    assert len(found) == 1 and "without a caption" in found[0], found
    assert "without a caption" in " ".join(problems(page(cell(figure(chart, caption="")))))
    assert problems(page(cell(figure(chart)))) == []


def test_a_published_notebook_with_a_build_path_or_a_displayed_glue_fails(tmp_path):
    def notebook(outputs, source="x = 1"):
        path = tmp_path / "chapter.ipynb"
        cells = [{"cell_type": "code", "source": source, "outputs": outputs, "metadata": {}}]
        path.write_text(json.dumps({"cells": cells}))
        return page_reading.notebook_problems(path, PATHS)

    hidden = {"scrapbook": {"name": "bleu", "mime_prefix": "application/papermill.record/"}}
    assert notebook([{"output_type": "display_data", "metadata": hidden, "data": {}}]) == []
    shown = {"scrapbook": {"name": "bleu", "mime_prefix": ""}}
    found = notebook([{"output_type": "display_data", "metadata": shown, "data": {}}])
    assert found and "'bleu' is displayed" in found[0]
    stream = {"output_type": "stream", "name": "stdout", "text": ["saved /tmp/abc/x.pt\n"]}
    assert "/tmp/abc/x.pt" in notebook([stream])[0]
    assert "/work/clone/book" in notebook([], source="open('/work/clone/book/a.md')")[0]
