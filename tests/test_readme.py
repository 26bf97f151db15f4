"""The README is the newcomer's entry: short, its one-line translation true, and no measured number
typed by hand (those live in the chapters, computed from the records, and drift here unseen)."""

import re
import shlex
from pathlib import Path

from transformer_lib.decoding import translate
from transformer_lib.pretrained import load_pretrained

README = Path(__file__).resolve().parent.parent / "README.md"
MAX_LINES = 150
# A number with a unit of time, size, speed or ratio: what a run measures, not what a reader types.
MEASURED = re.compile(
    r"\b\d[\d,.]*\s*(?:s|ms|µs|seconds?|minutes?|hours?|MB|GB|KiB|MiB|GiB|times|×|%|x|"
    r"tokens/s|BLEU)(?![\w.-])"
)


def text() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_is_an_entry_not_a_chapter():
    lines = text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; keep it to {MAX_LINES}"


def test_the_readme_types_no_measured_number():
    found = [m.group(0) for m in MEASURED.finditer(text())]
    assert not found, (
        f"measured numbers in README.md (link the chapter that computes them): {found}"
    )


def test_the_measured_number_rule_catches_what_it_must():
    for typed in [
        "took 1.94 times as long",
        "5.0 s at beam 4",
        "57 minutes",
        "15.5 MB",
        "42.18 BLEU",
    ]:
        assert MEASURED.search(typed), typed
    for fine in ["Python 3.11", "torch==2.13.0", "at most ten minutes", "exit status 2", "beam 4"]:
        assert not MEASURED.search(fine), fine


def test_the_one_line_translation_writes_what_the_readme_says():
    """The first example: its sentence through the model it names, as the command does (the model's
    own search), gives the line printed under it; the Python example translates the same sentence
    with the same model."""
    example = re.search(r'echo (".*?") \| .*?--model (\S+)\n# (.*)\n', text())
    assert example, "README.md's first example (echo ... | translate --model NAME, then # output)"
    sentence, name, written = shlex.split(example[1])[0], example[2], example[3]
    model, tokenizer = load_pretrained(name)
    assert translate(model, tokenizer, [sentence]) == [written]
    assert f'load_pretrained("{name}")' in text() and f'["{sentence}"]' in text()
