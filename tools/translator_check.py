"""The translator page in a real browser: load each model, translate, and compare with Python.

``tools/site_check.py`` runs this on a built book that has ``book/translator.html`` (``make
site-test``), and ``tools/translator_report.py`` runs it to time the page. In headless Chromium it

* opens the page and checks that nothing of the translator is downloaded before it is asked for;
* refuses bad input with a message and stays usable (an empty text, a text longer than the graphs
  serve);
* translates the sentences of ``SENTENCES`` in both directions (umlauts and ß, a single word, 60
  words, an emoji, 15 words, an ordinary caption) with greedy search, in float32 and 8-bit, and
  some with beam search; each translation's source and output pieces must equal those that
  Python's onnxruntime computes with the same graph files (``transformer_lib.export``) and the
  same search (``transformer_lib.decoding``), and its text the Python tokenizer's (an 8-bit
  greedy output may part from Python's at a near-tie, ``NEAR_TIE``);
* checks the heatmap: one row per piece written, one column per source piece, the labels the
  recorded runs use, each row summing to one, and the weights of the chosen layer and head equal
  to Python's (to the three decimals the page shows; see ``WEIGHT_TOLERANCE`` for 8 bits), also
  after another layer and head are chosen;
* fails on any console error, failed request or request to another host (through ``watch``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

TRANSLATOR_PAGE = "book/translator.html"
MODELS = "_static/translator/models"  # the exported models, as the site serves them
FIFTEEN_WORDS = {
    "de": "Ein älterer Mann in einer blauen Jacke sitzt mit seinem kleinen Hund auf einer Parkbank.",
    "en": "An older man in a blue jacket sits with his small dog on a bench.",
}
SENTENCES = {  # what each direction translates, by what it tests
    "de": {
        "umlauts and ß": "Ein Mädchen in einem grünen Kleid läuft mit einem großen Hund über die "
        "Straße.",
        "one word": "Hund",
        "60 words": "Auf einem belebten Marktplatz in der Altstadt steht ein junger Mann mit einer "
        "roten Mütze neben einem Stand voller Äpfel, Birnen und Orangen, während eine ältere Frau "
        "in einem langen grauen Mantel mit ihrem kleinen weißen Hund an der Leine vorbeigeht und "
        "zwei Kinder auf Fahrrädern lachend über das nasse Kopfsteinpflaster fahren, weil es "
        "gerade eben aufgehört hat zu regnen.",
        "an emoji": "Zwei Kinder spielen 🎈 mit einem Ball am Strand.",
        "15 words": FIFTEEN_WORDS["de"],
        "a caption": "Zwei Hunde spielen im Schnee.",
    },
    "en": {
        "umlauts and ß": "A man in a Müller shirt walks down the Königstraße in Düsseldorf.",
        "one word": "dog",
        "60 words": "On a busy market square a young man in a red cap stands next to a stall full "
        "of apples, pears and oranges, while an older woman in a long gray coat walks past with "
        "her small white dog on a leash and two children ride their bicycles laughing across the "
        "wet old cobblestones because it has just stopped raining.",
        "an emoji": "A child 🙂 is eating an ice cream in the park.",
        "15 words": FIFTEEN_WORDS["en"],
        "a caption": "Two dogs are playing in the snow.",
    },
}
BEAM_KINDS = ("a caption", "15 words")  # also translated with beam search (float32)
FORMS = ("float32", "8bit")
# How far the heatmap's weights (shown to 3 decimals) may be from Python's: the rounding, and in
# 8 bits the activations' quantization, whose rounding the browser's WebAssembly kernels may do
# differently by one step. Measured: up to 0.001 with the width-128 models, up to 0.019 with the
# width-192 ones on the 60-word sentence, where a step's difference carries through 3 layers and
# 60 decoding steps (on processors with AVX-512, where the pieces written stayed equal).
WEIGHT_TOLERANCE = {"float32": 0.0005 + 1e-6, "8bit": 0.025}
# In 8 bits that step of rounding may also part the page's greedy output from Python's where
# Python finds two pieces almost equally likely: on a processor with AVX2 and no AVX-512 the
# 60-word German sentence parted at its 44th piece, where Python's two log-probabilities were
# 0.0056 apart. An 8-bit translation that parts where Python's gap is below NEAR_TIE (in nats)
# is checked up to the parting piece, not after it.
NEAR_TIE = 0.02
SETTLED = "['done', 'error'].includes(document.getElementById('translator').dataset.state)"
TIMEOUT_MS = 120_000


@dataclass
class TranslatorReport:
    """The translator's check, reported as site_check reports a page."""

    page: str = f"{TRANSLATOR_PAGE} (translator)"
    problems: list[str] = field(default_factory=list)
    translations: int = 0  # compared with Python and found equal
    timings: dict = field(default_factory=dict)  # milliseconds, measured by the page
    seconds: float = 0.0
    math: int = 0  # as PageReport counts them: the translator draws neither
    charts: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        status = "ok  " if self.ok else "FAIL"
        return (
            f"{status} {self.page}: {self.translations} translations equal "
            f"to Python's, {self.seconds:.1f} s"
        )


class PythonReference:
    """What Python's onnxruntime writes with the graph files the site serves."""

    def __init__(self, models: Path):
        self.models = models
        self.index = json.loads((models / "translator.json").read_text(encoding="utf-8"))
        self._loaded: dict = {}

    def _load(self, name: str, form: str):
        from transformer_lib.export import OnnxGraphs
        from transformer_lib.tokenizer import BPETokenizer

        if (name, form) not in self._loaded:
            tokenizer = BPETokenizer.load(self.models / name / "tokenizer.json")
            self._loaded[name, form] = (tokenizer, OnnxGraphs.load(self.models / name / form))
        return self._loaded[name, form]

    def parting_gap(self, name: str, form: str, text: str, ours: list[int], theirs: list[int]):
        """Where two outputs of ``text`` part: Python's log-probability of the piece of ``ours``
        there minus that of ``theirs`` (``</s>`` after an output that ended), and the piece."""
        import torch

        entry = self.index["models"][name]
        tokenizer, graphs = self._load(name, form)
        mine, other = ours + [entry["eos_id"]], theirs + [entry["eos_id"]]
        at = next(i for i, (a, b) in enumerate(zip(mine, other, strict=False)) if a != b)
        source = tokenizer.encode(text) + [entry["eos_id"]]
        state = graphs.decoder_state(None, torch.tensor([source]))
        for token in [entry["bos_id"], *mine[:at]]:
            log_probs = state.step(torch.tensor([token])).log_softmax(-1)[0]
        return float(log_probs[mine[at]] - log_probs[other[at]]), at

    def translate(self, name: str, form: str, text: str, beam: bool, layer: int, head: int):
        """Source and output ids, whether it ended with </s>, the text, the labels and the
        encoder-decoder attention of ``layer`` and ``head`` (counted from 0) of each piece."""
        import torch

        from transformer_lib.book.report import token_labels
        from transformer_lib.decoding import beam_search, greedy_search

        entry = self.index["models"][name]
        tokenizer, graphs = self._load(name, form)
        source = tokenizer.encode(text) + [entry["eos_id"]]
        limit = min(len(source) + 50, entry["served_length"])
        limits = torch.tensor([limit])
        state = graphs.decoder_state(None, torch.tensor([source]))
        bos, eos = entry["bos_id"], entry["eos_id"]
        if beam:
            output = beam_search(state, bos, eos, limits, 4, entry["alpha"])[0].tokens
        else:
            output = greedy_search(state, bos, eos, limits)[0]
        ended = len(output) < limit  # the searches stop at the limit without writing </s>
        written = output + [eos] if ended else output
        state = graphs.decoder_state(None, torch.tensor([source]))  # fed the output back
        attention = []
        for token in [bos, *written[:-1]]:
            state.step(torch.tensor([token]))
            attention.append(state.cross_attention[0, layer, head].tolist())  # (S,)
        return {
            "source": source,
            "output": output,
            "ended": ended,
            "text": tokenizer.decode(output),
            "rows": token_labels(tokenizer, written),
            "columns": token_labels(tokenizer, source),
            "attention": attention,
        }


def _page_state(page) -> dict:
    """What the page shows after a translation: its data- attributes, text and heatmap."""
    return page.evaluate(
        """() => {
      const root = document.getElementById('translator');
      const svg = document.querySelector('#translator-attention svg');
      const texts = (cls) => svg ? [...svg.querySelectorAll(cls)].map((t) => t.textContent) : [];
      const cells = svg ? [...svg.querySelectorAll('rect.translator-cell')] : [];
      return {
        data: Object.assign({}, root.dataset),
        status: document.getElementById('translator-status').textContent,
        output: document.getElementById('translator-output').textContent,
        layer: Number(document.getElementById('translator-layer').value),
        head: Number(document.getElementById('translator-head').value),
        rows: svg ? Number(svg.dataset.rows) : null,
        columns: svg ? Number(svg.dataset.columns) : null,
        rowLabels: texts('.translator-row-label'),
        columnLabels: texts('.translator-column-label'),
        weights: cells.map((c) => [Number(c.dataset.row), Number(c.dataset.column),
                                   Number(c.dataset.weight)]),
      };
    }"""
    )


def _ids(text: str | None) -> list[int]:
    return [int(x) for x in (text or "").split()]


def _run(page, text: str) -> dict:
    page.fill("#translator-input", text)
    page.click("#translator-run")
    page.wait_for_function(SETTLED, timeout=TIMEOUT_MS)
    return _page_state(page)


def compare(shown: dict, expected: dict, what: str, tolerance: float) -> list[str]:
    """The differences between the page's translation and Python's, one sentence each; the
    heatmap's weights may differ from Python's by ``tolerance``."""
    problems = []
    if shown["data"].get("state") != "done":
        return [f"{what}: the page did not translate: {shown['status']}"]
    checks = [
        ("source pieces", _ids(shown["data"].get("sourceIds")), expected["source"]),
        ("output pieces", _ids(shown["data"].get("targetIds")), expected["output"]),
        ("text", shown["output"], expected["text"]),
        ("heatmap rows", shown["rowLabels"], expected["rows"]),
        ("heatmap columns", shown["columnLabels"], expected["columns"]),
        (
            "heatmap size",
            (shown["rows"], shown["columns"]),
            (len(expected["rows"]), len(expected["columns"])),
        ),
    ]
    for name, got, want in checks:
        if got != want:
            problems.append(
                f"{what}: the page's {name} differ from Python's: {str(got)[:200]} != {str(want)[:200]}"
            )
    if len(shown["weights"]) != len(expected["rows"]) * len(expected["columns"]):
        problems.append(f"{what}: the heatmap has {len(shown['weights'])} cells")
        return problems
    columns = len(expected["columns"])
    for row in range(len(expected["rows"])):
        weights = [w for r, _, w in shown["weights"] if r == row]
        if abs(sum(weights) - 1) > columns * 0.0005 + 1e-6:  # rounded to 3 decimals
            problems.append(f"{what}: heatmap row {row + 1} sums to {sum(weights):.4f}, not 1")
    worst = max(abs(w - expected["attention"][r][c]) for r, c, w in shown["weights"])
    if worst > tolerance:
        problems.append(f"{what}: heatmap weights differ from Python's by up to {worst:.4f}")
    return problems


def _unless_near_tie(reference, case, shown: dict, expected: dict, problems, log) -> list[str]:
    """``problems`` of an 8-bit translation unlike Python's, or none if its output parts from
    Python's where Python's two pieces are within ``NEAR_TIE`` (equal up to there by definition)."""
    found = _ids(shown["data"].get("targetIds"))
    name, form, text = case
    same_source = _ids(shown["data"].get("sourceIds")) == expected["source"]
    if shown["data"].get("state") != "done" or not same_source or found == expected["output"]:
        return problems
    gap, at = reference.parting_gap(name, form, text, expected["output"], found)
    what = f"{name}, {form}, greedy, {text[:24]!r}"
    if gap >= NEAR_TIE:
        return [
            *problems,
            f"{what}: parts from Python's at piece {at + 1}, no near-tie ({gap:.4f})",
        ]
    log(f"     {what}: parts from Python's at piece {at + 1}, at a near-tie ({gap:.4f} nats)")
    return []


def check_translator(
    browser, site: Path, base: str, watch, log=print, shots: Path | None = None
) -> TranslatorReport:
    """Open the translator page of ``site`` (served at ``base``) and check it (module docstring).
    ``watch(page, problems)`` registers the site check's request and console checks on a page
    and returns the set of refused off-site requests. With ``shots``, a screenshot of the page
    after its last translation goes there."""
    report = TranslatorReport()
    started = time.perf_counter()
    reference = PythonReference(site / MODELS)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    refused = watch(page, report.problems)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    try:
        page.goto(base + TRANSLATOR_PAGE, wait_until="load", timeout=TIMEOUT_MS)
        report.timings["page_load_ms"] = page.evaluate(
            "performance.getEntriesByType('navigation')[0].loadEventEnd"
        )
        page.wait_for_timeout(300)
        early = [u for u in requested if "/translator/models/" in u or "/translator/vendor/" in u]
        report.problems += [f"downloaded before the reader asked: {u}" for u in early]
        for text, expected in (("", "Type a sentence"), ("Hund " * 300, "pieces long")):
            shown = _run(page, text)
            if shown["data"].get("state") != "error" or expected not in shown["status"]:
                report.problems.append(
                    f"bad input {text[:12]!r}... got no clear message: {shown['status']!r}"
                )
        names = {(e["src"], e["tgt"]): name for name, e in reference.index["models"].items()}
        for (src, tgt), name in sorted(names.items()):
            page.select_option("#translator-direction", f"{src}-{tgt}")
            for form in FORMS:
                page.select_option("#translator-weights", form)
                cases = [(kind, text, False) for kind, text in SENTENCES[src].items()]
                if form == "float32":
                    cases += [(kind, SENTENCES[src][kind], True) for kind in BEAM_KINDS]
                for kind, text, beam in cases:
                    page.select_option("#translator-search", "beam" if beam else "greedy")
                    shown = _run(page, text)
                    last = (form, text, beam)
                    if "loadMs" in shown["data"] and f"load_ms {name} {form}" not in report.timings:
                        report.timings[f"load_ms {name} {form}"] = float(shown["data"]["loadMs"])
                    search = "beam" if beam else "greedy"
                    what = f"{name}, {form}, {search}, {kind}"
                    shown_map = (shown["layer"] - 1, shown["head"] - 1)  # the page's choice
                    expected = reference.translate(name, form, text, beam, *shown_map)
                    problems = compare(shown, expected, what, WEIGHT_TOLERANCE[form])
                    if problems and form == "8bit" and not beam:
                        case = (name, form, text)
                        problems = _unless_near_tie(reference, case, shown, expected, problems, log)
                    report.problems += problems
                    report.translations += not problems
                    if kind == "15 words":
                        for timing in ("searchMs", "attentionMs"):
                            key = f"{timing} {name} {form} {search} 15 words"
                            report.timings[key] = float(shown["data"].get(timing, "nan"))
            # The selectors: another layer and head redraw the map with their own weights.
            entry = reference.index["models"][name]
            layer = 1 if shown["layer"] != 1 else entry["n_layers"]
            head = min(2, entry["n_heads"]) if shown["head"] == 1 else 1
            page.select_option("#translator-layer", str(layer))
            page.select_option("#translator-head", str(head))
            shown = _page_state(page)
            expected = reference.translate(name, *last, layer - 1, head - 1)
            what = f"{name}, layer {layer}, head {head}"
            report.problems += compare(shown, expected, what, WEIGHT_TOLERANCE[last[0]])
        if shots is not None:
            page.screenshot(path=str(shots / "book__translator__translated.png"), full_page=True)
    except Exception as err:  # a page that cannot be driven is one more problem
        report.problems.append(f"could not check the translator: {err}")
    finally:
        context.close()
    report.problems += [
        f"request to another host (the site must work offline): {u}" for u in refused
    ]
    report.seconds = time.perf_counter() - started
    log(report.summary())
    for problem in report.problems:
        log(f"     {problem}")
    return report
