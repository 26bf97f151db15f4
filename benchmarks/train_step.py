"""Time training steps (forward, backward, Adam update) of our Transformer against PyTorch's
``nn.Transformer`` with the same sizes, embeddings, generator, optimizer, batches and precision,
in one run; print target tokens/s of each and the ratio, the model FLOPs utilisation (MFU) of
both, and the effect of each speed-up, one at a time, on our model. On a GPU, also the peak memory
of a step against the peer's and the largest token budget that fits.

The batches are Multi30k's (a joint BPE vocabulary learned at the start, token-budget batches by
length, as the training loop makes them); ``--data random`` uses random tokens instead. The FLOP
count is the performance chapter's (``transformer_lib.book.performance``), over the real tokens of each
batch, so padding counts as waste; the peak rate is the device's dense bf16 rate, with its source.

The speed-ups, each measured against our default in the same rounds (a ratio above 1 = it helps):
bf16 autocast (against float32), the fused Q/K/V projection (against three products),
``scaled_dot_product_attention`` (against the written-out softmax), ``torch.compile``, Adam's
fused and for-each kernels (against PyTorch's default on the device), batches by length (against
batches filled in random order under the same budget), padding widths to a multiple of 8, CUDA
graphs (``torch.compile``'s "reduce-overhead" mode, against eager and against its default mode)
and, on a CPU, oneDNN's products (``TrainingConfig(products="onednn")``, against PyTorch's MKL).

``--fast-paths`` times the training loop's three fast paths instead, beside our eager step and
``nn.Transformer`` eager: ``packing`` times batches packed without padding
(``TrainingConfig.packing``: ``flex_attention`` on a GPU, boolean masks on a CPU) against padded
batches, both compiled for any shape as the loop compiles them; ``buckets`` times packed rows
rounded to multiples of ``--length-bucket`` (``TrainingConfig.length_bucket``), compiled a graph
per length with CUDA graphs, with fused Adam (``TrainingConfig.fused_adam``): every fast path at
once. Fused Adam alone (``ours, fused Adam``) is timed in both. Each run compiles at most two
models (``buckets``: one, a graph for each length its batches take).

Run: ``python benchmarks/train_step.py`` (CPU, small model; ``make bench`` runs every benchmark),
``python benchmarks/train_step.py --device cuda --size base`` on a GPU (``tools/gpu/perf.sh``).
"""

import argparse
import gc
import os
import statistics
import warnings
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import common
import peers
import torch
from torch import nn

from transformer_lib.batching import Batch, collate, encode_pairs, plan_batches
from transformer_lib.book.performance import peak_for, training_flops
from transformer_lib.data import DataError, load_multi30k
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.onednn import OneDNNProducts
from transformer_lib.schedule import make_optimizer
from transformer_lib.tokenizer import PAD_ID, BPETokenizer
from transformer_lib.training import PackedTransformer, label_smoothed_loss, pack_batch

FAST_PATHS = ("packing", "buckets")  # --fast-paths: the candidates of each, see fast_candidates


@dataclass(frozen=True)
class Size:
    """How big a measurement is: the model, its batches, and how long to time it."""

    model: TransformerConfig  # vocabulary sizes included: the BPE vocabulary is learned to match
    max_tokens: int  # padded tokens per side and batch, as in TrainingConfig
    batches: int  # batches per round: each candidate trains on all of them once per round
    rounds: int  # timed rounds (after one untimed round)


SIZES = {
    "small": Size(
        TransformerConfig(2000, 2000, d_model=256, d_ff=1024, n_heads=4, n_layers=3),
        max_tokens=1024,
        batches=3,
        rounds=3,
    ),
    "base": Size(TransformerConfig.base(8000), max_tokens=25_000, batches=10, rounds=3),
}


def multi30k_batches(
    config: TransformerConfig, max_tokens: int, count: int, data_dir: Path | None = None
) -> tuple[list[Batch], list[Batch]]:
    """``count`` batches of Multi30k train by length, and ``count`` filled in random order.

    The BPE vocabulary is learned here with the model's vocabulary size (a second or two)."""
    pairs_text = load_multi30k("train", "de", "en", data_dir)
    bpe = BPETokenizer.train([s for pair in pairs_text for s in pair], config.tgt_vocab_size)
    if bpe.vocab_size != config.tgt_vocab_size:
        raise DataError(f"the BPE vocabulary has {bpe.vocab_size} symbols, not the model's")
    pairs = encode_pairs(bpe, pairs_text, max_len=128)  # as the training profiles do
    lengths = [(len(s) + 1, len(t) + 1) for s, t in pairs]
    chosen = []
    for by_length in (True, False):
        plan = plan_batches(lengths, max_tokens, seed=0, epoch=0, by_length=by_length)
        chosen.append([collate([pairs[i] for i in batch]) for batch in plan[:count]])
    return chosen[0], chosen[1]


def random_batches(config: TransformerConfig, max_tokens: int, count: int):
    """Stand-ins without the data set: widths 16 to 64, random lengths, the same token budget."""
    generator = torch.Generator().manual_seed(0)
    by_width, mixed = [], []
    for _ in range(count):
        width = int(torch.randint(16, 65, (1,), generator=generator))
        # "By length": rows between 3/4 of the width and the width; "random": 4 to the width.
        by_width.append(
            peers.random_batch(config, max_tokens // width, width, generator, width * 3 // 4)
        )
        mixed.append(peers.random_batch(config, max_tokens // width, width, generator, 4))
    return by_width, mixed


def real_lengths(batch: Batch) -> tuple[list[int], list[int]]:
    """Each pair's source and target length without padding (with </s> and <s>)."""
    return (batch.src != PAD_ID).sum(1).tolist(), (batch.tgt_out != PAD_ID).sum(1).tolist()


@dataclass
class Candidate:
    """One way of training: a model, its batches, its precision and its Adam."""

    model: nn.Module
    batches: Sequence[Batch]
    bf16: bool
    adam: str = "default"  # default | loop | foreach | fused
    products: str | None = None  # "onednn": the linear layers by oneDNN (a CPU only)
    graphs: bool = False  # a model compiled with CUDA graphs: each update starts a new step
    packing: str | None = None  # "flex" or "masks": each batch packed before each step
    length_bucket: int | None = None  # packed rows rounded up to a multiple of it

    def step_function(self, device: torch.device, d_model: int) -> Callable[[], None]:
        """A function that trains on every batch once (one optimizer update per batch)."""
        model = self.model.to(device).train()
        fused = True if self.adam == "fused" else None
        optimizer, scheduler = make_optimizer(model, d_model, warmup_steps=4000, fused=fused)
        if self.adam in ("loop", "foreach"):
            for group in optimizer.param_groups:
                group["foreach"] = self.adam == "foreach"
        batches = [batch.to(device) for batch in self.batches]
        autocast = torch.autocast(device.type, torch.bfloat16) if self.bf16 else nullcontext()
        if self.products == "onednn":
            autocast = OneDNNProducts()

        def train_once() -> None:
            for batch in batches:
                if self.graphs:  # the last update's graph outputs may be overwritten now
                    torch.compiler.cudagraph_mark_step_begin()
                if self.packing is not None:  # timed: the loop packs each batch as it comes
                    batch = pack_batch(batch, PAD_ID, self.packing, self.length_bucket)
                with autocast:
                    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
                loss, tokens = label_smoothed_loss(logits, batch.tgt_out, PAD_ID)
                (loss / tokens).backward()
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)

        return train_once


def candidates(
    ours: Transformer,
    by_length: list[Batch],
    unordered: list[Batch],
    device: torch.device,
    compile_models: bool,
    graphs: bool = False,
) -> tuple[dict[str, Candidate], list[tuple[str, str, str]]]:
    """Every way of training to time, and the speed-ups as (trick, with, without) names."""
    bf16 = device.type == "cuda"  # what the training loop does: bf16 autocast on CUDA only
    peer = peers.TorchTransformer(ours.config)
    peers.copy_weights(ours, peer)
    as_is = peers.TorchTransformer(ours.config, paper_dropout=False)
    peers.copy_weights(ours, as_is)
    c = {
        "ours": Candidate(ours, by_length, bf16),
        "nn.Transformer": Candidate(peer, by_length, bf16),
        "nn.Transformer as it comes": Candidate(as_is, by_length, bf16),
        "ours, float32" if bf16 else "ours, bf16 autocast": Candidate(
            peers.variant(ours), by_length, not bf16
        ),
        "ours, an identical copy": Candidate(peers.variant(ours), by_length, bf16),
        "ours, separate Q/K/V": Candidate(
            peers.variant(ours, separate_projections=True), by_length, bf16
        ),
        "ours, written-out attention": Candidate(
            peers.variant(ours, written_out=True), by_length, bf16
        ),
        "ours, fused Adam": Candidate(peers.variant(ours), by_length, bf16, "fused"),
        "ours, Adam loop" if bf16 else "ours, for-each Adam": Candidate(
            peers.variant(ours), by_length, bf16, "loop" if bf16 else "foreach"
        ),
        "ours, random batches": Candidate(peers.variant(ours), unordered, bf16),
        "ours, widths padded to 8": Candidate(
            peers.variant(ours), [peers.pad_to_multiple(b, 8) for b in by_length], bf16
        ),
    }
    tricks = [
        ("none (the noise floor: a copy of ours)", "ours, an identical copy", "ours"),
        (
            "bf16 autocast",
            "ours" if bf16 else "ours, bf16 autocast",
            "ours, float32" if bf16 else "ours",
        ),
        ("fused Q/K/V projection", "ours", "ours, separate Q/K/V"),
        ("scaled_dot_product_attention", "ours", "ours, written-out attention"),
        ("fused Adam (one kernel)", "ours, fused Adam", "ours"),
        (
            "for-each Adam",
            "ours" if bf16 else "ours, for-each Adam",
            "ours, Adam loop" if bf16 else "ours",
        ),
        ("batches by length", "ours", "ours, random batches"),
        ("widths padded to a multiple of 8", "ours, widths padded to 8", "ours"),
    ]
    if compile_models:
        c["ours, torch.compile"] = Candidate(torch.compile(peers.variant(ours)), by_length, bf16)
        peer_compiled = peers.TorchTransformer(ours.config)
        peers.copy_weights(ours, peer_compiled)
        c["nn.Transformer, torch.compile"] = Candidate(
            torch.compile(peer_compiled), by_length, bf16
        )
        tricks.append(("torch.compile", "ours, torch.compile", "ours"))
    if compile_models and graphs:
        # CUDA graphs: each batch shape's kernels recorded once and replayed by one launch, which
        # removes the host's per-kernel cost. The benchmark's batches repeat every round, so each
        # shape is recorded in the untimed rounds; the training loop's shapes vary from batch to
        # batch, and would have to be bucketed into a few for the graphs to be reused.
        graphs_name = "ours, torch.compile + CUDA graphs"
        c[graphs_name] = Candidate(
            torch.compile(peers.variant(ours), mode="reduce-overhead"), by_length, bf16, graphs=True
        )
        tricks.append(("torch.compile + CUDA graphs", graphs_name, "ours"))
        tricks.append(("CUDA graphs (on torch.compile)", graphs_name, "ours, torch.compile"))
    if device.type == "cpu":
        c["ours, oneDNN products"] = Candidate(
            peers.variant(ours), by_length, bf16, products="onednn"
        )
        tricks.append(("oneDNN products (CPU)", "ours, oneDNN products", "ours"))
    return c, tricks


def compiled(module: nn.Module, mode: str | None, dynamic: bool, backend: str) -> nn.Module:
    """``torch.compile`` as the training loop calls it; another ``backend`` than inductor (a
    plumbing check on a CPU, e.g. aot_eager) takes no mode."""
    if backend != "inductor":
        return torch.compile(module, backend=backend, dynamic=dynamic)
    return torch.compile(module, mode=mode, dynamic=dynamic)


def fast_candidates(
    ours: Transformer,
    batches: list[Batch],
    device: torch.device,
    which: str,
    length_bucket: int,
    backend: str = "inductor",
) -> tuple[dict[str, Candidate], list[tuple[str, str, str]]]:
    """The candidates and speed-ups of ``--fast-paths which`` (FAST_PATHS), beside "ours".

    ``packing``: our model compiled for any shape (``dynamic=True``, as the loop compiles
    padded batches), and the same packed. ``buckets``: packed in length buckets, compiled a
    graph per length (as the loop compiles them) with CUDA graphs ("reduce-overhead"), with
    fused Adam: every fast path at once; one compiled model only, since each bucket's graph is
    compiled on its own. Packing runs flex_attention on a GPU, boolean masks on a CPU
    (flex_attention has no backward there)."""
    bf16, packing = device.type == "cuda", "flex" if device.type == "cuda" else "masks"
    network = PackedTransformer(peers.variant(ours))
    if which == "packing":
        padded, packed = "ours, torch.compile (any shape)", "ours, packed, torch.compile"
        return {
            padded: Candidate(compiled(peers.variant(ours), None, True, backend), batches, bf16),
            packed: Candidate(
                compiled(network, None, True, backend), batches, bf16, packing=packing
            ),
        }, [
            ("torch.compile (any shape)", padded, "ours"),
            (f"packing ({packing}), both compiled", packed, padded),
        ]
    graphs = device.type == "cuda"
    every = "ours, packed, buckets, fused Adam, torch.compile" + " + CUDA graphs" * graphs
    mode = "reduce-overhead" if graphs else None
    return {
        every: Candidate(
            compiled(network, mode, False, backend),
            batches,
            bf16,
            adam="fused",
            graphs=graphs,
            packing=packing,
            length_bucket=length_bucket,
        )
    }, [("every fast path, compiled", every, "ours")]


def check_packed_function(ours: Transformer, batch: Batch, device: torch.device) -> float:
    """Packed rows compute our function: the logits of the real target tokens of (at most) the
    first 16 pairs of ``batch``, packed (flex_attention on a GPU, uncompiled; boolean masks on a
    CPU) against padded, in float32 without TF32. Returns the largest difference."""
    rows = min(len(batch), 16)
    fields = ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask")
    batch = Batch(*(getattr(batch, name)[:rows] for name in fields)).to(device)
    packed = pack_batch(batch, PAD_ID, "flex" if device.type == "cuda" else "masks")
    model = ours.to(device).eval()
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention uncompiled says it is slow: it is
        padded = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        row = PackedTransformer(model)(packed.src, packed.tgt_in, packed.src_mask, packed.tgt_mask)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    model.train()
    real = batch.tgt_out != PAD_ID
    difference = (row[0, : int(real.sum())] - padded[real]).abs().max().item()
    if difference > 1e-3:
        raise AssertionError(f"packed rows differ from padded batches by {difference:.1e}")
    return difference


def check_same_functions(models: dict[str, nn.Module], batch: Batch, device: torch.device) -> float:
    """Every model computes the same function as the first (in float32, without TF32)."""
    if device.type == "cuda":
        tf32, torch.backends.cuda.matmul.allow_tf32 = torch.backends.cuda.matmul.allow_tf32, False
    batch = batch.to(device)
    (name, first), *others = models.items()
    largest = 0.0
    for other_name, other in others:
        difference = peers.largest_difference(first.to(device), other.to(device), batch)
        if difference > 1e-3:
            raise AssertionError(f"{other_name} differs from {name} by {difference:.1e}")
        largest = max(largest, difference)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return largest


def peak_memory(function: Callable[[], None], device: torch.device) -> int:
    """The most bytes allocated on the GPU while ``function`` runs (after one run to settle)."""
    function()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    function()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device)


def largest_budget(
    make_model: Callable[[], nn.Module], config: TransformerConfig, length: int, device
) -> int:
    """The largest token budget (pairs x ``length`` per side) one bf16 training step fits in,
    within 5%: doubling from 8,192 tokens until the GPU runs out of memory, then bisecting.
    Stops at 4M tokens (a small model may fit more; the figure is then a lower bound)."""

    def fits(tokens: int) -> bool:
        generator = torch.Generator().manual_seed(0)
        batch = peers.random_batch(config, max(tokens // length, 1), length, generator)
        model = make_model()
        try:
            Candidate(model, [batch], bf16=True).step_function(device, config.d_model)()
            torch.cuda.synchronize(device)
            return True
        except torch.OutOfMemoryError:
            return False
        finally:
            del model
            gc.collect()  # the failed step's tensors, before the next probe allocates
            torch.cuda.empty_cache()

    return search_largest(fits)


def search_largest(fits: Callable[[int], bool], start: int = 8192, cap: int = 2**22) -> int:
    """The largest n with ``fits(n)``, within 5%, for a ``fits`` true up to some threshold:
    double from ``start``, then bisect. Returns ``cap`` if that fits (the base model fits far
    fewer tokens on an 80 GB GPU), 0 if nothing does."""
    low, high = 0, start
    while fits(high):
        low, high = high, high * 2
        if low >= cap:
            return low
    while high - low > max(1, 0.05 * high):
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def measure(
    size: Size,
    device: torch.device,
    batches: tuple[list[Batch], list[Batch]],
    rounds: int | None = None,
    compile_models: bool = False,
    memory: bool = False,
    graphs: bool = False,
    only: Sequence[str] | None = None,
    fast_paths: str | None = None,
    length_bucket: int = 1024,
    backend: str = "inductor",
) -> dict:
    """Time every candidate in turns and return the figures (see the module's docstring).

    ``only``: the names of the candidates to time ("ours" and "nn.Transformer" always are).
    ``graphs``: with ``compile_models``, time our compiled model with CUDA graphs too.
    ``fast_paths``: add the candidates of :func:`fast_candidates` (with ``length_bucket`` and
    ``backend``, their compiler); ``only`` may name them.
    """
    torch.manual_seed(0)
    ours = Transformer(size.model)
    by_length, unordered = batches
    everything, tricks = candidates(ours, by_length, unordered, device, compile_models, graphs)
    if fast_paths is not None:
        fast, fast_tricks = fast_candidates(
            ours, by_length, device, fast_paths, length_bucket, backend
        )
        everything, tricks = {**everything, **fast}, [*tricks, *fast_tricks]
        graphs = graphs or any(cand.graphs for cand in fast.values())
        only = [*fast, "ours, fused Adam"] if only is None else only
    keep = {"ours", "nn.Transformer", *(only if only is not None else everything)}
    chosen = {name: cand for name, cand in everything.items() if name in keep}
    tricks = [t for t in tricks if t[1] in chosen and t[2] in chosen]
    eager = {
        name: cand.model
        for name, cand in chosen.items()
        if "compile" not in name and "as it comes" not in name and cand.packing is None
    }
    largest = check_same_functions(eager, by_length[0], device)
    if fast_paths is not None:
        largest = max(largest, check_packed_function(ours, by_length[0], device))

    functions = {
        name: cand.step_function(device, size.model.d_model) for name, cand in chosen.items()
    }
    # Compiled models compile on the first batch, and again (for varying shapes) on the second:
    # two untimed rounds keep compilation out of the timings. CUDA graphs record each shape
    # after one run of it that warms up: a third untimed round.
    warmup = 1 + (compile_models or fast_paths is not None) + graphs
    times = common.time_in_turns(functions, rounds or size.rounds, warmup, device)

    peak = peak_for(common.device_name(device)) if device.type == "cuda" else None
    results: dict = {
        "config": {k: v for k, v in vars(size.model).items()},
        "max_tokens": size.max_tokens,
        "largest_difference": largest,
        "peak": None
        if peak is None
        else {"name": peak.name, "flops": peak.flops, "source": peak.source},
        "candidates": {},
    }
    for name, cand in chosen.items():
        tokens = sum(int((b.tgt_out != PAD_ID).sum()) for b in cand.batches)
        padded = sum(b.tgt_out.numel() for b in cand.batches)
        if cand.packing is not None:  # the target rows' tokens, with a bucket's filler
            rows = [pack_batch(b, PAD_ID, "flex", cand.length_bucket) for b in cand.batches]
            padded = sum(row.tgt_out.numel() for row in rows)  # flex: no (T, T) mask to build
        flops = sum(training_flops(size.model, *real_lengths(b)) for b in cand.batches)
        median = statistics.median(times[name])
        figures = {
            **common.summary(times[name]),
            "target_tokens": tokens,
            "padded_target_tokens": padded,
            "tokens_per_s": tokens / median,
            "model_flops": flops,
            "model_flops_per_s": flops / median,
            "bf16": cand.bf16,
            "adam": cand.adam,
            "packing": cand.packing,
            "length_bucket": cand.length_bucket,
            "timings_s": times[name],
        }
        if peak is not None and cand.bf16:
            figures["mfu"] = flops / median / peak.flops
        results["candidates"][name] = figures
    rate = {name: f["tokens_per_s"] for name, f in results["candidates"].items()}
    results["tricks"] = [
        {"trick": trick, "with": w, "without": wo, "ratio": rate[w] / rate[wo]}
        for trick, w, wo in tricks
    ]
    if memory and device.type == "cuda":
        # The timed candidates hold their weights and Adam states on the GPU: free them first, so
        # that the memory figures see one model at a time.
        del functions, chosen, everything, eager
        gc.collect()
        torch.cuda.empty_cache()
        results["memory"] = memory_figures(ours, size, by_length, device)
    return results


def memory_figures(ours: Transformer, size: Size, batches: list[Batch], device) -> dict:
    """Peak memory of a step on the widest batch, ours and the peer's; the largest budgets."""
    widest = max(batches, key=lambda b: b.tgt_out.shape[1] + b.src.shape[1])
    peer = peers.TorchTransformer(size.model)
    peers.copy_weights(ours, peer)
    figures: dict = {"batch_shape": [list(widest.src.shape), list(widest.tgt_out.shape)]}
    for name, model in (("ours", ours), ("nn.Transformer", peer)):
        step = Candidate(model, [widest], bf16=True).step_function(device, size.model.d_model)
        figures[f"peak_bytes {name}"] = peak_memory(step, device)
        model.cpu()
        torch.cuda.empty_cache()
    for length in (32, 128):  # a typical Multi30k width, and the longest the profiles keep
        for name, make in (
            ("ours", lambda: peers.variant(ours)),
            ("nn.Transformer", lambda: peers.TorchTransformer(size.model)),
        ):
            figures[f"largest_budget {name} L={length}"] = largest_budget(
                make, size.model, length, device
            )
    return figures


def fast_path_lines(figures: dict) -> list[dict]:
    """Each packed candidate against nn.Transformer eager: tokens/s and, on a GPU, MFU."""
    lines, peer = [], figures["nn.Transformer"]
    for name, ours in figures.items():
        if not name.startswith("ours, packed"):
            continue
        label = "every fast path" if "buckets" in name else "packed, compiled"
        lines.append(
            common.compare(
                f"{label} / nn.Transformer", ours["tokens_per_s"], peer["tokens_per_s"], "tokens/s"
            )
        )
        if "mfu" in ours and "mfu" in peer:
            lines.append(
                common.compare(f"{label}: MFU", 100 * ours["mfu"], 100 * peer["mfu"], "% of peak")
            )
    return lines


def report(results: dict, device: torch.device) -> list[dict]:
    """Print the comparison lines and the table of speed-ups; return the comparison lines."""
    figures = results["candidates"]
    c = results["config"]
    print(
        f"training steps, d_model={c['d_model']}, h={c['n_heads']}, d_ff={c['d_ff']}, "
        f"N={c['n_layers']}+{c['n_layers']}, V={c['tgt_vocab_size']}, dropout={c['dropout']}, "
        f"max_tokens={results['max_tokens']}, {common.device_name(device)}, "
        f"{torch.get_num_threads()} thread(s); the models agree within "
        f"{results['largest_difference']:.1e}"
    )
    for name, f in figures.items():
        mfu = f" MFU {100 * f['mfu']:4.1f}%" if "mfu" in f else ""
        print(
            f"    {f['tokens_per_s']:10,.0f} tokens/s  {f['model_flops_per_s'] / 1e12:7.3f} TFLOP/s"
            f"{mfu}  (median {1e3 * f['median_s']:.0f} ms for {f['target_tokens']:,} target "
            f"tokens, {1e3 * f['best_s']:.0f}-{1e3 * f['worst_s']:.0f})  {name}"
        )
    lines = [
        common.compare(
            "training, target tokens/s",
            figures["ours"]["tokens_per_s"],
            figures["nn.Transformer"]["tokens_per_s"],
            "tokens/s",
        )
    ]
    # Both trained on the same batches, one after the other, in every round: the ratio within a
    # round is the least disturbed by load that changes from round to round.
    ours_s, peer_s = figures["ours"]["timings_s"], figures["nn.Transformer"]["timings_s"]
    rounds = [p / o for o, p in zip(ours_s, peer_s, strict=True)]
    lines[0]["round_ratios"] = rounds
    print(
        f"  {'  the same, round by round':46} median ratio {statistics.median(rounds):.2f}, "
        f"from {min(rounds):.2f} to {max(rounds):.2f} over {len(rounds)} rounds"
    )
    if "mfu" in figures["ours"]:
        lines.append(
            common.compare(
                "model FLOPs utilisation",
                100 * figures["ours"]["mfu"],
                100 * figures["nn.Transformer"]["mfu"],
                "% of peak",
            )
        )
    if "nn.Transformer, torch.compile" in figures:
        lines.append(
            common.compare(
                "training, both compiled",
                figures["ours, torch.compile"]["tokens_per_s"],
                figures["nn.Transformer, torch.compile"]["tokens_per_s"],
                "tokens/s",
            )
        )
    lines += fast_path_lines(figures)
    memory = results.get("memory")
    if memory:
        lines.append(
            common.compare(
                "peak memory of a step",
                memory["peak_bytes ours"] / 2**30,
                memory["peak_bytes nn.Transformer"] / 2**30,
                "GiB",
                higher_is_better=False,
            )
        )
        for length in (32, 128):
            lines.append(
                common.compare(
                    f"largest token budget, width {length}",
                    memory[f"largest_budget ours L={length}"],
                    memory[f"largest_budget nn.Transformer L={length}"],
                    "tokens",
                )
            )
    if results["peak"]:
        print(f"  peak {results['peak']['flops'] / 1e12:.1f} TFLOP/s: {results['peak']['source']}")
    print("  speed-ups on our model (tokens/s with / without):")
    for t in results["tricks"]:
        print(f"    {t['trick']:36} {t['ratio']:5.2f}  ({t['with']} / {t['without']})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_arguments(parser)
    parser.add_argument("--data", choices=("multi30k", "random"), default="multi30k")
    parser.add_argument("--data-dir", type=Path, default=None, help="Multi30k's files")
    parser.add_argument("--max-tokens", type=int, default=None, help="token budget per batch")
    parser.add_argument("--batches", type=int, default=None, help="batches per round")
    parser.add_argument(
        "--compile",
        choices=("auto", "yes", "no", "graphs"),
        default="auto",
        help="time torch.compile too (auto: on CUDA only; compiling on a CPU takes minutes); "
        "graphs: our model compiled with CUDA graphs only, beside ours and the peer",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the GPU memory figures")
    parser.add_argument(
        "--no-tricks", action="store_true", help="time ours and the peer only, no speed-ups"
    )
    parser.add_argument(
        "--fast-paths",
        choices=FAST_PATHS,
        default=None,
        help="time the training loop's fast paths instead of the speed-ups: packing (packed "
        "against padded, both compiled) or buckets (every fast path against packing alone)",
    )
    parser.add_argument(
        "--length-bucket",
        type=int,
        default=1024,
        help="--fast-paths buckets: packed rows rounded up to a multiple of it (default 1024)",
    )
    parser.add_argument(
        "--compile-backend",
        default="inductor",
        help="the compiler of --fast-paths (default inductor; aot_eager runs PyTorch's own "
        "kernels, a quick check of the plumbing on a CPU)",
    )
    args = parser.parse_args()
    device = common.setup(parser, args)
    size = SIZES[args.size]
    for name in ("max_tokens", "batches"):
        value = getattr(args, name)
        if value is not None:
            if value < 1:
                parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
            size = replace(size, **{name: value})
    if args.fast_paths is not None and args.compile in ("yes", "graphs"):
        parser.error("--fast-paths compiles its own candidates: leave out --compile")
    if args.length_bucket < 1:
        parser.error(f"--length-bucket must be at least 1, got {args.length_bucket}")
    if args.data == "multi30k":
        try:
            batches = multi30k_batches(size.model, size.max_tokens, size.batches, args.data_dir)
        except (DataError, FileNotFoundError) as err:
            parser.error(f"{err} (or run with --data random)")
    else:
        batches = random_batches(size.model, size.max_tokens, size.batches)
    compile_models = args.fast_paths is None and (
        args.compile in ("yes", "graphs") or (args.compile == "auto" and device.type == "cuda")
    )
    graphs = args.compile == "graphs"
    only = None
    if args.no_tricks:
        only = ["nn.Transformer as it comes"]
    elif graphs:  # one compilation: the rest, torch.compile alone included, is `--compile yes`'s
        only = ["ours, torch.compile + CUDA graphs"]
    results = measure(
        size,
        device,
        batches,
        args.rounds,
        compile_models=compile_models,
        memory=not args.no_memory,
        only=only,
        graphs=graphs,
        fast_paths=args.fast_paths,
        length_bucket=args.length_bucket,
        backend=args.compile_backend,
    )
    results["comparisons"] = report(results, device)
    results["data"] = args.data
    common.save(args, device, "train_step", results)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
