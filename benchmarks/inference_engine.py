"""Time our PyTorch decoder against CTranslate2 and Hugging Face transformers on the same weights,
in one run: a Multi30k test set translated by each, with beam 4 (at the model's own length
penalty α) and greedy search; sentences per second, BLEU and peak memory of each, printed as
ratios against CTranslate2 float32.

The candidates, timed in turns round after round (``common.time_in_turns``):

- ``translate, no options``: ``transformer_lib.decoding.translate(model, tokenizer, sentences)``
  as a user calls it (greedy: with a beam of 1), the decoder it chooses for the weights
  (``default_decoder_state``) and its default batch size; at beam 4 the run also checks its
  translations against the model's committed hypotheses;
- ``ours``: the same search with PyTorch's own kernels (``SentenceGroupedDecoder``: the encoder
  side once per sentence), ``translate --engine pytorch``;
- ``ours, oneDNN``: the same search with ``transformer_lib.decoding.OneDNNDecoder`` (every product
  by oneDNN, a step written out flat with its attention), ``translate --engine onednn``;
- ``the command line``: ``translate`` with no options in a process set up as
  ``python -m transformer_lib translate`` sets itself up (``keep_freed_memory`` first, then the
  model loaded and the command's own ``make_translator``), called in turns with the others;
- ``CTranslate2 float32`` and ``CTranslate2 int8``: our model converted by ``transformer_lib.engine``;
- ``transformers generate``: our model converted to a MarianMT folder (``transformer_lib.marian``)
  and searched by ``generate`` with the folder's settings (its own length penalty, at beam 4).

Each candidate but the first gets its best batch size, chosen before the timed rounds on enough
sentences for two batches of the largest size (``calibration_length``). With more than one
thread, each CTranslate2 candidate runs in a process of its own, called in the same turns
(``EngineProcess`` says why); transformers runs PyTorch, in ours.
Beside the rows it times the whole command, start-up and loading included:
``python -m transformer_lib translate --model ...`` with the test set on its standard input, with
our decoder and with ``--engine ctranslate2`` (which converts the model as it loads), at the
model's own search and at ``--beam 1``, in turns (``whole_commands``).
Besides the times it records where one batch's decoding time goes (a profile of the decoder's
operations: matrix products, cache copies, the search's softmax and top-k, the other kernels,
and the rest, Python and dispatch; for ``ours`` and ``ours, oneDNN``), the peak memory of each engine (each in a process of its own)
and the earlier decoding goals (cached against re-running at 40 steps, ``decoding.py``'s).

Record it on a quiet machine, with the shipped German-English model (about 10 minutes):
``python benchmarks/inference_engine.py --model multi30k-de-en-laptop --threads 2``, which writes
``results/inference-engine/ctranslate2.json`` and, beside it, the translations each BLEU is of
(``ctranslate2.hyp/<search>.<candidate>.txt``, one file for candidates that wrote the same lines;
the JSON's ``translations`` names each candidate's file). A record without its translations gets
them, timing nothing, from ``--translations-only``: every candidate translates the test set once
more with the record's searches and batch sizes, and the files are written, and named in the
record with this command in its manifest, only if each reproduces its recorded BLEU exactly. A quick check on the ``ci`` model of the chapters:
``python benchmarks/inference_engine.py --ci --sentences 200 --rounds 1 --no-save``.
"""

import argparse
import gc
import json
import multiprocessing
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import common
import decoding as decoding_benchmark
import torch
from torch.profiler import ProfilerActivity, profile

from transformer_lib.book.report import hypotheses_name
from transformer_lib.book.runs import cached_run
from transformer_lib.data import load_multi30k
from transformer_lib.decoding import (
    GREEDY,
    OneDNNDecoder,
    SearchConfig,
    SentenceGroupedDecoder,
    model_search,
    translate,
)
from transformer_lib.engine import CTranslate2Translator, require_ctranslate2
from transformer_lib.evaluation import average_checkpoints, corpus_scores
from transformer_lib.marian import require_transformers, save_huggingface
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.pretrained import load_pretrained, model_folder, sha256
from transformer_lib.provenance import write_text_atomically
from transformer_lib.tokenizer import VOCAB_SIZE, BPETokenizer

BATCH_SIZES = (32, 64, 128, 256, 512)
PEER = "CTranslate2 float32"
INT8 = "CTranslate2 int8"
DEFAULT = "translate, no options"
COMMAND = "the command line"
ONEDNN = "ours, oneDNN"
HUGGING_FACE = "transformers generate"
GOAL = 1.0  # translate with no options takes at most CTranslate2 float32's time
INT8_BLEU_LOSS = 0.5  # int8 weights lose less BLEU than this
# The profile's groups, by PyTorch operator (self time); everything else is "other kernels".
GROUPS = {
    "matrix products": (
        *("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "flash_attention"),
        "mkldnn::_linear_pointwise",
    ),
    "cache copies": ("aten::index", "aten::index_select", "aten::cat", "aten::copy_"),
    "softmax and top-k of the search": ("aten::_log_softmax", "aten::topk", "aten::sort"),
}


def searches(model) -> dict[str, SearchConfig]:
    """Beam 4 at the model's own length penalty (``model_search``: a shipped model's report's α,
    else §6.1's 0.6), as ``translate`` searches it with no options, and greedy search."""
    return {"beam 4": SearchConfig(beam_size=4, alpha=model_search(model).alpha), "greedy": GREEDY}


def ci_model() -> tuple[Transformer, BPETokenizer, str]:
    """The chapters' ``ci`` model (German to English), its last 5 checkpoints averaged (§6.1)
    as the decoding chapter averages them, its tokenizer, and the run's folder name."""
    run = cached_run("ci", "de", "en")
    steps = sorted(
        (run / "checkpoints").glob("step-*.pt"), key=lambda path: int(path.stem.split("-")[1])
    )
    averaged = average_checkpoints(steps[-5:])
    model = Transformer(TransformerConfig(**averaged["config"]["model"]))
    model.load_state_dict(averaged["model"])
    return model.eval(), BPETokenizer.from_json(averaged["tokenizer"]), run.name


def load(args: argparse.Namespace) -> tuple[Transformer, BPETokenizer, dict]:
    """The model, its tokenizer, and what it is (name, languages, checksum) for the manifest."""
    if args.ci:
        model, tokenizer, run = ci_model()
        about = {"model": f"ci run {run}, last 5 checkpoints averaged", "src": "de", "tgt": "en"}
        return model, tokenizer, about
    model, tokenizer = load_pretrained(args.model)
    folder = model_folder(args.model)
    about = {"model": args.model, "model_sha256": sha256(folder / "model.safetensors")}
    run = model.record.run
    return model, tokenizer, {**about, "src": run["src"], "tgt": run["tgt"]}


def engines(model, tokenizer, threads: int, apart: dict | None = None) -> dict:
    """Each candidate as a function (sentences, search) -> translations; with ``apart`` (an
    ``EngineProcess`` by name), each CTranslate2 candidate runs in its process of its own, and
    the command line's process (``CommandProcess``) joins when ``apart`` holds one."""
    if apart is None:
        float32 = CTranslate2Translator(model, tokenizer, threads=threads).translate
        int8 = CTranslate2Translator(model, tokenizer, quantize="int8", threads=threads).translate
    else:
        float32, int8 = apart[PEER].translate, apart[INT8].translate
    return {
        **{name: our_translator(model, tokenizer, state) for name, state in OUR_STATES.items()},
        **({COMMAND: apart[COMMAND].translate} if apart and COMMAND in apart else {}),
        PEER: float32,
        INT8: int8,
        HUGGING_FACE: huggingface_translator(model, tokenizer),
    }


# Our decoders, by the decoder state translate is given (None: its default, as a user calls it).
OUR_STATES = {
    DEFAULT: None,
    "ours": SentenceGroupedDecoder,
    ONEDNN: OneDNNDecoder,
}


def our_translator(model, tokenizer, state) -> Callable:
    """``translate`` with the decoder state ``state`` as a function (sentences, search)."""
    return lambda sentences, search: translate(
        model, tokenizer, sentences, search, decoder_state=state
    )


def huggingface_translator(model, tokenizer) -> Callable:
    """``generate`` of transformers on our model converted to a MarianMT folder, as a function
    (sentences, search) -> translations: sentences sorted by length into batches (as ``translate``
    sorts them), ``num_beams`` the search's beam, at most the source's length + the search's
    extra tokens, every other setting the folder's (transformers' own length penalty)."""
    require_transformers()
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()  # no bars of its saving and loading among the timings

    with tempfile.TemporaryDirectory() as scratch:  # read into memory, then not needed
        folder = save_huggingface(model, tokenizer, Path(scratch) / "marian")
        marian = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        marian_tokenizer = AutoTokenizer.from_pretrained(folder)

    def translate_with_generate(sentences, search: SearchConfig) -> list[str]:
        lengths = [len(ids) for ids in tokenizer.encode_batch(list(sentences))]
        order = sorted(range(len(sentences)), key=lambda i: lengths[i], reverse=True)
        found = [""] * len(sentences)
        for start in range(0, len(order), search.batch_size):
            rows = order[start : start + search.batch_size]
            batch = marian_tokenizer(
                [sentences[i] for i in rows], return_tensors="pt", padding=True
            )
            limit = batch.input_ids.shape[1] + search.extra_length
            with torch.inference_mode():
                ids = marian.generate(**batch, num_beams=search.beam_size, max_new_tokens=limit)
            texts = marian_tokenizer.batch_decode(ids, skip_special_tokens=True)
            for i, text in zip(rows, texts, strict=True):
                found[i] = text
        return found

    return translate_with_generate


class EngineProcess:
    """One of CTranslate2's translators (``name``: float32 or int8) in a process of its own,
    called in turns with ours.

    CTranslate2 and PyTorch each bring a copy of GNU OpenMP, and in one process they end up
    sharing one runtime. Once CTranslate2's worker thread has a team of its own, the process
    manages more OpenMP threads than the machine has cores, and the runtime stops letting idle
    threads spin: every parallel region of PyTorch (a LayerNorm, an addition) then waits for its
    threads to wake, which slows a decoder of small operations far more than the engine. Apart,
    each has the cores to itself while it runs, as when deployed. The same holds between the
    engine's two translators: each has a worker thread with a team of its own, so two in one
    process slow the engine itself. One translator to a process, as a deployment runs it.
    """

    def __init__(self, args: argparse.Namespace, name: str):
        context = multiprocessing.get_context("spawn")  # a fresh interpreter, no inherited pools
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_engine_worker, args=(child, args, name), daemon=True)
        self.process.start()
        child.close()
        self.connection.recv()  # the translator is ready

    def translate(self, sentences, search: SearchConfig) -> list[str]:
        self.connection.send((list(sentences), search))
        return self.connection.recv()

    def close(self) -> None:
        self.connection.send(None)
        self.process.join()


def _engine_worker(connection, args: argparse.Namespace, name: str) -> None:
    # PyTorch only loads and converts the weights here: on one thread it starts no OpenMP team,
    # so the engine's team is the only one (the reason for a process of its own).
    torch.set_num_threads(1)
    model, tokenizer, _ = load(args)
    quantize = {PEER: None, INT8: "int8"}[name]
    translator = CTranslate2Translator(model, tokenizer, quantize=quantize, threads=args.threads)
    connection.send("ready")
    while (request := connection.recv()) is not None:
        sentences, search = request
        connection.send(translator.translate(sentences, search))


# The command's process, as ``python -m transformer_lib translate --model NAME`` starts: the
# allocator's setting first (its __main__), then the model and the command's own translator.
COMMAND_PROCESS = """
import json, sys
from transformer_lib.cli import keep_freed_memory
keep_freed_memory()
from transformer_lib.decoding import SearchConfig
from transformer_lib.engine import make_translator
from transformer_lib.pretrained import load_pretrained
model, tokenizer = load_pretrained(sys.argv[1])
translator = make_translator(model, tokenizer, "ours", None)
print(json.dumps("ready"), flush=True)
for request in sys.stdin:
    sentences, search = json.loads(request)
    print(json.dumps(translator(sentences, SearchConfig(**search), False)), flush=True)
"""


class CommandProcess:
    """``translate`` with no options in a process set up as the command line sets itself up
    (``COMMAND_PROCESS``), called in turns with the others: each call sends the sentences and
    the search, and reads the translations back, as JSON lines."""

    def __init__(self, args: argparse.Namespace):
        command = [sys.executable, "-c", COMMAND_PROCESS, args.model]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8"
        )
        assert json.loads(self.process.stdout.readline()) == "ready"

    def translate(self, sentences, search: SearchConfig) -> list[str]:
        self.process.stdin.write(json.dumps([list(sentences), vars(search)]) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def whole_commands(args: argparse.Namespace, sources: list[str]) -> dict:
    """Seconds of ``python -m transformer_lib translate --model ...`` from start to exit, the
    sources on its standard input, with our decoder and with CTranslate2, at the model's own
    search and at ``--beam 1``, in turns (``args.rounds``, after one untimed round); and whether
    each wrote one line a sentence."""
    lines = {}
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch, "source.txt")
        source.write_text("".join(line + "\n" for line in sources), encoding="utf-8")

        def run(argv: list[str], name: str) -> None:
            with source.open("rb") as stdin:
                done = subprocess.run(argv, stdin=stdin, capture_output=True, check=True)
            lines[name] = len(done.stdout.decode("utf-8").splitlines())

        calls = {}
        for label, options in (("beam 4", []), ("greedy", ["--beam", "1"])):
            for engine in ("ours", "ctranslate2"):
                name = f"{label}, {engine}"
                argv = [sys.executable, "-m", "transformer_lib", "translate", "--model"]
                argv += [args.model, "--engine", engine, *options]
                calls[name] = partial(run, argv, name)
        times = common.time_in_turns(calls, args.rounds, 1, torch.device("cpu"))
    return {
        name: {**common.summary(seconds), "seconds": seconds, "lines": lines[name]}
        for name, seconds in times.items()
    }


def with_batch_size(search: SearchConfig, size: int) -> SearchConfig:
    return SearchConfig(search.beam_size, search.alpha, search.extra_length, size)


def best_batch_size(function, sources, search, sizes, clock=time.perf_counter):
    """The batch size of ``sizes`` that translates ``sources`` fastest (one run each, after one
    untimed run), and each size's seconds; with one size, only the untimed run."""
    function(sources, with_batch_size(search, sizes[0]))  # warm-up
    if len(sizes) == 1:
        return sizes[0], {}
    seconds = {}
    for size in sizes:
        started = clock()
        function(sources, with_batch_size(search, size))
        seconds[size] = clock() - started
    return min(seconds, key=seconds.get), seconds


def calibration_length(sentences: int, sizes) -> int:
    """How many of the sentences choose a candidate's batch size: enough for two batches of the
    largest size, else every size at or above their number translates them as one batch, and the
    choice among those is noise (a size that is fast on 200 sentences may be slow on 1,000)."""
    return min(sentences, 2 * max(sizes))


def measure_search(
    candidates,
    sources,
    references,
    search,
    rounds,
    sizes,
    calibrate,
    clock=time.perf_counter,
    outputs: dict | None = None,
) -> dict:
    """Every candidate on ``sources`` with its best batch size (``translate, no options`` with
    the default one), timed in turns (wall time, or the process's CPU time with
    ``clock=time.process_time``); ``outputs``, when given, receives each one's translations."""
    chosen, calls = {}, {}
    outputs = {} if outputs is None else outputs
    for name, function in candidates.items():
        tried = (SearchConfig().batch_size,) if name in (DEFAULT, COMMAND) else sizes
        size, tried = best_batch_size(function, sources[:calibrate], search, tried, clock)
        chosen[name] = {"batch_size": size, "calibration_s": tried}
        config = with_batch_size(search, size)

        def call(function=function, config=config, name=name):
            outputs[name] = function(sources, config)

        calls[name] = call
    times = common.time_in_turns(calls, rounds, 0, torch.device("cpu"), clock)
    found = {}
    for name, seconds in times.items():
        found[name] = {
            **chosen[name],
            **common.summary(seconds),
            "seconds": seconds,  # round by round: the same round of every candidate pairs
            "sentences_per_s": len(sources) / statistics.median(seconds),
            "bleu": corpus_scores(outputs[name], references)["bleu"],
        }
    return found


def categorise(events) -> dict[str, float]:
    """Self time (seconds) of the profiled operators, by group."""
    groups = dict.fromkeys([*GROUPS, "other kernels"], 0.0)
    for event in events:
        name = event.key
        group = next((g for g, ops in GROUPS.items() if any(op in name for op in ops)), None)
        groups[group or "other kernels"] += event.self_cpu_time_total / 1e6
    return groups


def profile_decoding(
    model, tokenizer, sources, search: SearchConfig, decoder_state=SentenceGroupedDecoder
) -> dict:
    """Where one batch's decoding time goes: the operators' self time by group, and the rest of
    the wall time (Python, dispatch, the profiler's own overhead) as "Python and dispatch"."""
    config = with_batch_size(search, len(sources))

    def run():
        translate(model, tokenizer, sources, config, decoder_state=decoder_state)

    run()  # warm-up
    started = time.perf_counter()
    run()
    unprofiled = time.perf_counter() - started
    with common.native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU]) as profiler:
        started = time.perf_counter()
        run()
        wall = time.perf_counter() - started
    groups = categorise(profiler.key_averages())
    groups["Python and dispatch"] = max(wall - sum(groups.values()), 0.0)
    return {"sentences": len(sources), "wall_s": wall, "unprofiled_s": unprofiled, **groups}


def peak_memory(args: argparse.Namespace, engine: str, batch_size: int) -> dict:
    """Peak resident memory of a process that loads the model and translates the test set with
    ``engine`` at beam 4: its own process, so that the other engines' memory is not counted."""
    command = [sys.executable, __file__, "--memory-of", engine, "--memory-batch", str(batch_size)]
    command += ["--ci"] if args.ci else ["--model", args.model]
    command += ["--threads", str(args.threads)]
    command += ["--sentences", str(args.sentences)] if args.sentences else []  # else all of them
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _status(field: str) -> float:
    """A field of /proc/self/status in MiB (VmRSS: now, VmHWM: the peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory_child(args: argparse.Namespace) -> None:
    """The ``--memory-of`` process: load the model and build the engine, reset the peak,
    translate, print the peaks as JSON."""
    model, tokenizer, about = load(args)
    sources = [s for s, _ in load_multi30k("test_2016_flickr", about["src"], about["tgt"])]
    sources = sources[: args.sentences or None]
    function = engines_for_memory(model, tokenizer, args.threads)[args.memory_of]()
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from here
    loaded = _status("VmRSS")
    function(sources, with_batch_size(searches(model)["beam 4"], args.memory_batch))
    peak = _status("VmHWM")
    print(json.dumps({"loaded_mib": loaded, "peak_mib": peak, "added_mib": peak - loaded}))


def engines_for_memory(model, tokenizer, threads) -> dict[str, Callable[[], Callable]]:
    """Each engine's maker: only the engine measured is built (before the peak is reset, so that
    a conversion is not counted), and no other holds memory in the process."""
    ours = {name: OUR_STATES[name] for name in (DEFAULT, "ours", ONEDNN)}
    return {
        **{name: partial(our_translator, model, tokenizer, s) for name, s in ours.items()},
        PEER: lambda: CTranslate2Translator(model, tokenizer, threads=threads).translate,
        INT8: lambda: (
            CTranslate2Translator(model, tokenizer, quantize="int8", threads=threads).translate
        ),
        HUGGING_FACE: lambda: huggingface_translator(model, tokenizer),
    }


def cached_against_rerunning(steps: int = 40) -> dict:
    """The decoding benchmark's two CPU goals on its own random model, in this run: incremental
    against re-running decoding for 32 sentences (5x) and for one (2x), at 40 steps."""
    torch.manual_seed(0)
    config = TransformerConfig(
        VOCAB_SIZE, VOCAB_SIZE, dropout=0.0, **decoding_benchmark.SIZES["small"]
    )
    model = Transformer(config).eval()
    src = torch.randint(4, VOCAB_SIZE, (decoding_benchmark.BATCH, decoding_benchmark.SOURCE_LENGTH))
    rows = dict(decoding_benchmark.rows_for(model, src, steps, with_slow_rows=False))
    cpu = torch.device("cpu")
    with torch.inference_mode():
        seconds = {label: decoding_benchmark.best_time(f, cpu) for label, f in rows.items()}
    found = []
    for (slow, fast), target in decoding_benchmark.TARGETS.items():
        if slow in seconds and fast in seconds:
            ratio = seconds[slow] / seconds[fast]
            found.append({"slow": slow, "fast": fast, "ratio": ratio, "target": target})
    return {"steps": steps, "seconds": seconds, "ratios": found}


def measure(args: argparse.Namespace) -> tuple[dict, dict]:
    """Every figure of the run, and each candidate's translations by search (the last round's)."""
    model, tokenizer, about = load(args)
    pairs = load_multi30k(args.split, about["src"], about["tgt"])[: args.sentences or None]
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    # With more than one thread, each of CTranslate2's translators runs in a process of its own
    # (see EngineProcess).
    apart = {name: EngineProcess(args, name) for name in (PEER, INT8)} if args.threads > 1 else None
    if apart is not None and not args.ci:  # the command loads a model by name
        apart[COMMAND] = CommandProcess(args)
    candidates = engines(model, tokenizer, args.threads, apart)
    results = {
        **about,
        "split": args.split,
        "sentences": len(sources),
        "clock": args.clock,
        "ctranslate2_process": "its own" if apart else "ours",
        "config": vars(model.config),
    }
    results["ctranslate2"] = require_ctranslate2().__version__
    results["transformers"] = require_transformers().__version__
    results["search_settings"] = {k: vars(s) for k, s in searches(model).items()}
    results["searches"], translations = {}, {}
    with torch.inference_mode():
        for label, search in searches(model).items():
            print(f"-- {label}: {len(sources)} sentences, {args.rounds} rounds in turns")
            clock = time.process_time if args.clock == "cpu" else time.perf_counter
            outputs = translations[label] = {}
            found = measure_search(
                candidates, sources, references, search, args.rounds, args.batch_sizes,
                calibration_length(len(sources), args.batch_sizes), clock, outputs,
            )  # fmt: skip
            results["searches"][label] = found
            if label == "beam 4":
                results["committed"] = against_committed(args, about, search, outputs[DEFAULT])
        print("-- where the time goes: one batch of 64 sentences at beam 4, profiled")
        beam = searches(model)["beam 4"]
        results["profile"] = profile_decoding(model, tokenizer, sources[:64], beam)
        results["profile, oneDNN"] = profile_decoding(
            model, tokenizer, sources[:64], beam, OneDNNDecoder
        )
    del candidates
    for process in (apart or {}).values():
        process.close()
    gc.collect()
    if not args.no_memory:
        print("-- peak memory, each engine in a process of its own")
        results["memory"] = {
            name: peak_memory(args, name, results["searches"]["beam 4"][name]["batch_size"])
            for name in (DEFAULT, "ours", ONEDNN, PEER, INT8, HUGGING_FACE)
        }
    if not args.ci:
        print("-- the whole command, start-up and loading included")
        results["whole command"] = whole_commands(args, sources)
    if not args.no_goals:
        print("-- cached against re-running decoding, the decoding benchmark's goals")
        results["cached_vs_rerun"] = cached_against_rerunning()
    return results, translations


def slug(name: str) -> str:
    """A search's or a candidate's name as part of a file name: ``beam 4`` -> ``beam_4``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def write_translations(folder: Path, name: str, translations: dict) -> dict:
    """Write each search's translations under ``folder/<name>.hyp/``, one a line in the order of
    the test set, one file for the candidates that wrote the same lines (our decoders all write
    one search's), and remove the files of an earlier run there. Returns search -> candidate ->
    file, relative to ``folder``, for the JSON, so that every BLEU it records can be recomputed."""
    files, texts = {}, {}
    for label, found in translations.items():
        written = {}  # a text -> its file, the first candidate that wrote it naming it
        for candidate, lines in found.items():
            text = "".join(line + "\n" for line in lines)
            written.setdefault(text, f"{name}.hyp/{slug(label)}.{slug(candidate)}.txt")
            files.setdefault(label, {})[candidate] = written[text]
        texts.update({path: text for text, path in written.items()})
    for path, text in texts.items():
        write_text_atomically(folder / path, text)
    for stale in (folder / f"{name}.hyp").glob("*.txt"):
        if str(stale.relative_to(folder)) not in texts:
            stale.unlink()
    return files


def against_committed(args, about: dict, search: SearchConfig, translations: list[str]) -> dict:
    """How many of ``translations`` are the shipped model's committed hypotheses of the split
    (a folder's report, searched as it was scored); empty for a model with no such report."""
    if args.ci:
        return {}
    folder = model_folder(args.model)
    path = folder / hypotheses_name(args.split, about["tgt"])
    report = json.loads((folder / "bleu.json").read_text()) if path.is_file() else {}
    if (report.get("beam_size"), report.get("alpha")) != (search.beam_size, search.alpha):
        return {}
    committed = path.read_text(encoding="utf-8").splitlines()[: len(translations)]
    same = sum(a == b for a, b in zip(translations, committed, strict=True))
    return {"file": path.name, "sentences": len(translations), "identical": same}


def round_ratios(row: dict, peer: dict) -> list[float]:
    """``row``'s time over ``peer``'s in each timed round (the two ran in the same turns)."""
    return [ours / theirs for ours, theirs in zip(row["seconds"], peer["seconds"], strict=True)]


def report(results: dict) -> list[dict]:
    """Print every figure against CTranslate2 float32's, and the goals' verdicts."""
    lines = []
    for label, found in results["searches"].items():
        peer = found[PEER]
        search = results["search_settings"][label]
        alpha = f", alpha {search['alpha']}" if search["beam_size"] > 1 else ""
        print(f"{label}{alpha}: sentences/s (ratio above 1 = faster than {PEER}), BLEU")
        for name, row in found.items():
            line = common.compare(
                f"{label}, {name} (batch {row['batch_size']})",
                row["sentences_per_s"],
                peer["sentences_per_s"],
                "sent/s",
            )
            print(f"  {'':46} BLEU {row['bleu']:.2f} (CTranslate2 float32 {peer['bleu']:.2f})")
            lines.append({**line, "search": label, "engine": name, "bleu": row["bleu"]})
        slower = peer["sentences_per_s"] / found[DEFAULT]["sentences_per_s"]
        verdict = "meets" if slower <= GOAL else "MISSES"
        each = round_ratios(found[DEFAULT], peer)
        print(
            f"  {DEFAULT} takes {slower:.2f}x {PEER}'s time ({verdict} the goal {GOAL}x; "
            f"round by round {min(each):.2f}x to {max(each):.2f}x)"
        )
        for name in ("ours", ONEDNN, HUGGING_FACE, COMMAND):
            if name in found:
                slower = peer["sentences_per_s"] / found[name]["sentences_per_s"]
                print(f"  {name} takes {slower:.2f}x")
        delta = found[INT8]["bleu"] - peer["bleu"]  # variant - reference
        verdict = "meets" if -delta < INT8_BLEU_LOSS else "MISSES"
        print(
            f"  int8: delta BLEU {delta:+.2f} against float32 "
            f"({verdict} the goal: a loss under {INT8_BLEU_LOSS})"
        )
    for key in ("profile", "profile, oneDNN"):
        p = results[key]
        print(
            f"{key}: one batch of {p['sentences']} at beam 4: {p['wall_s']:.2f} s profiled "
            f"({p['unprofiled_s']:.2f} s not)"
        )
        for group in [*GROUPS, "other kernels", "Python and dispatch"]:
            print(f"  {group:34} {p[group]:6.2f} s  {p[group] / p['wall_s']:6.1%}")
    for name, memory in results.get("memory", {}).items():
        print(
            f"peak memory, {name:22} {memory['peak_mib']:7.0f} MiB ({memory['added_mib']:+.0f} MiB translating)"
        )
    for name, row in results.get("whole command", {}).items():
        print(f"whole command, {name}: {row['median_s']:.2f} s ({row['lines']} lines out)")
    if results.get("committed"):
        c = results["committed"]
        print(f"{DEFAULT}, beam 4: {c['identical']} of {c['sentences']} lines are {c['file']}'s")
    for row in results.get("cached_vs_rerun", {}).get("ratios", []):
        verdict = "meets" if row["ratio"] >= row["target"] else "MISSES"
        print(
            f"{row['slow']} / {row['fast']}: {row['ratio']:.1f}x ({verdict} the target {row['target']}x)"
        )
    return lines


def translations_only(args: argparse.Namespace, device: torch.device) -> int:
    """Translate again as the recorded run did (``<out>/<name>.json``: its model, searches,
    batch sizes and threads), time nothing, and only if every candidate's BLEU is the recorded
    one write the translations and name them in the record (``translations``, and the command
    in its manifest's ``translations``); 1 and nothing written otherwise."""
    path = args.out / f"{args.name}.json"
    saved = json.loads(path.read_text())
    recorded, args.threads = saved["results"], saved["manifest"]["threads"]
    torch.set_num_threads(args.threads)  # the record's, for our decoders as for the engine
    model, tokenizer, about = load(args)
    if (about["model"], about.get("model_sha256")) != (recorded["model"], recorded["model_sha256"]):
        print(f"{path} measured another model than {args.model}", file=sys.stderr)
        return 1
    pairs = load_multi30k(recorded["split"], about["src"], about["tgt"])[: recorded["sentences"]]
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    own = recorded["ctranslate2_process"] == "its own"
    apart = {name: EngineProcess(args, name) for name in (PEER, INT8)} if own else None
    if apart is not None and COMMAND in recorded["searches"]["beam 4"]:
        apart[COMMAND] = CommandProcess(args)
    candidates, translations, problems = engines(model, tokenizer, args.threads, apart), {}, []
    with torch.inference_mode():
        for label, found in recorded["searches"].items():
            search = SearchConfig(**recorded["search_settings"][label])
            for name, row in found.items():
                if name not in candidates:  # a decoder the race no longer runs: its files stay
                    print(f"{label}, {name}: not run by this benchmark any more, skipped")
                    continue
                lines = candidates[name](sources, with_batch_size(search, row["batch_size"]))
                translations.setdefault(label, {})[name] = lines
                bleu = corpus_scores(lines, references)["bleu"]
                print(f"{label}, {name}: BLEU {bleu} (recorded {row['bleu']})")
                if abs(bleu - row["bleu"]) > 1e-9:
                    problems.append(f"{label}, {name}: BLEU {bleu}, recorded {row['bleu']}")
    for process in (apart or {}).values():
        process.close()
    if problems:
        print(f"{path} is not reproduced; nothing written:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    recorded["translations"] = write_translations(args.out, args.name, translations)
    saved["manifest"]["translations"] = common.manifest(device)  # this command, not the race's
    write_text_atomically(path, json.dumps(saved, indent=1) + "\n")
    print(f"every BLEU of {path} reproduced; the translations in {args.out / args.name}.hyp")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", default="multi30k-de-en-laptop", help="a shipped model or folder")
    which.add_argument("--ci", action="store_true", help="the chapters' cached ci model instead")
    parser.add_argument("--split", default="test_2016_flickr", help="the Multi30k test set")
    parser.add_argument("--sentences", type=int, help="only the first N sentences (a quick check)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every engine (2)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds in turns (5)")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time (default, for a quiet machine) or the process's CPU time (steadier on a "
        "shared one; with one thread it equals wall time on an idle machine)",
    )
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES))
    parser.add_argument("--no-memory", action="store_true", help="skip the peak memory")
    parser.add_argument(
        "--no-goals", action="store_true", help="skip the cached-against-re-running goals"
    )
    parser.add_argument("--out", type=Path, default=common.ROOT / "results" / "inference-engine")
    parser.add_argument("--name", default="ctranslate2", help="the JSON file's name")
    parser.add_argument("--no-save", action="store_true", help="print only, write no file")
    parser.add_argument(
        "--translations-only",
        action="store_true",
        help="only the translations of the recorded run, written if they reproduce its BLEU",
    )
    parser.add_argument("--memory-of", help=argparse.SUPPRESS)
    parser.add_argument("--memory-batch", type=int, default=64, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.device = "cpu"
    device = common.setup(parser, args)
    if args.sentences is not None and args.sentences < 1:
        parser.error(f"--sentences must be at least 1, got {args.sentences}")
    if args.clock == "cpu" and args.threads > 1:
        parser.error(
            "--clock cpu counts this process's CPU time, and with more than one thread "
            "CTranslate2 runs in a process of its own: use --clock wall, or --threads 1"
        )
    if args.memory_of:
        memory_child(args)
        return
    if args.translations_only:
        sys.exit(translations_only(args, device))
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads on {common.device_name(device)}"
    )
    results, translations = measure(args)
    results["comparisons"] = report(results)
    if not args.no_save:  # the translations beside the JSON, which names them
        results["translations"] = write_translations(args.out, args.name, translations)
    common.save(args, device, "ctranslate2", results)


if __name__ == "__main__":
    main()
