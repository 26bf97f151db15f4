"""What separates `translate` from an inference engine once its kernels are at their peak: the
fresh memory every operator asks for, and what compiling the decoder step would buy.

Two measurements on a shipped model (the whole test set, two threads):

- ``memory``: ``translate`` with no options (beam at the model's own settings, and greedy) in
  child processes, taken in turns with and without glibc's allocator told to keep the memory it
  frees (``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``: settings of
  a whole process, which a library must not make for its caller). Each child reports the
  seconds of a call, and the minor page faults and system CPU seconds it took: memory the
  process was given afresh by the kernel, zeroed page by page.
- ``compiled step``: one decoder step of 256 rows at step 10 (the first batch of the test set):
  ``OneDNNDecoder``'s flat step as ``translate`` runs it, the same step written as a function of
  PyTorch's own operators (``functional_step``), and that function compiled by ``torch.compile``
  (inductor, weights frozen, shapes fixed), timed in turns. Needs a C++ compiler; where the
  compilation fails, the result says why.

Record it on a quiet machine (about 5 minutes):
``python benchmarks/eager_limits.py --model multi30k-de-en-laptop --threads 2``, which writes
``results/inference-engine/eager_limits.json``.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common
import torch
import torch.nn.functional as F

from transformer_lib.data import load_multi30k
from transformer_lib.decoding import GREEDY, OneDNNDecoder, model_search, translate
from transformer_lib.pretrained import load_pretrained

# glibc's allocator told to keep what it frees (glibc manual, "Memory Allocation Tunables")
KEEP_MEMORY = {
    "MALLOC_TRIM_THRESHOLD_": str(4 * 2**30),
    "MALLOC_MMAP_THRESHOLD_": str(2**30),
    "MALLOC_TOP_PAD_": str(2**28),
}
ROWS, STEP = 256, 10  # the compiled-step comparison: a batch of 256 sentences at step 10


def sources(model) -> list[str]:
    """The test set's source sentences, in the model's own source language."""
    pairs = load_multi30k("test_2016_flickr", model.record.run["src"], model.record.run["tgt"])
    return [source for source, _ in pairs]


def child(args: argparse.Namespace) -> None:
    """Translate the test set ``args.calls`` times after one warm-up; print one JSON line."""
    torch.set_num_threads(args.threads)
    model, tokenizer = load_pretrained(args.model)
    texts = sources(model)
    search = None if args.child == "beam 4" else GREEDY  # None: the model's own, as a user calls
    translate(model, tokenizer, texts, search)
    calls = []
    for _ in range(args.calls):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        translate(model, tokenizer, texts, search)
        seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        faults, system = after.ru_minflt - before.ru_minflt, after.ru_stime - before.ru_stime
        calls.append({"seconds": seconds, "page_faults": faults, "system_s": system})
    print(json.dumps(calls))


def memory(args: argparse.Namespace) -> dict:
    """Each search in child processes, in turns with and without the allocator keeping memory."""
    results = {}
    for search in ("beam 4", "greedy"):
        runs = {"as it is": [], "memory kept": []}
        for number in range(args.rounds):
            order = list(runs) if number % 2 == 0 else list(runs)[::-1]
            for setting in order:
                extra = KEEP_MEMORY if setting == "memory kept" else {}
                command = [sys.executable, __file__, "--child", search, "--model", args.model]
                command += ["--threads", str(args.threads), "--calls", str(args.calls)]
                done = subprocess.run(
                    command, env={**os.environ, **extra}, capture_output=True, text=True, check=True
                )
                runs[setting] += json.loads(done.stdout.strip().splitlines()[-1])
        results[search] = {setting: median_of(calls) for setting, calls in runs.items()}
        kept, plain = results[search]["memory kept"], results[search]["as it is"]
        print(
            f"{search}: {plain['seconds']:.3f} s, {plain['page_faults']:,.0f} page faults, "
            f"{plain['system_s']:.2f} s system; memory kept: {kept['seconds']:.3f} s, "
            f"{kept['page_faults']:,.0f}, {kept['system_s']:.2f} s"
        )
    return {"environment": KEEP_MEMORY, "calls_per_child": args.calls, **results}


def median_of(calls: list[dict]) -> dict:
    return {key: statistics.median(call[key] for call in calls) for key in calls[0]} | {
        "calls": len(calls)
    }


def functional_step(model, tokens, length: int, keys, values, cross, bias):
    """A decoder step of ``model`` (post-LN, a feed-forward network in every layer) as one
    function of PyTorch's own operators, for ``torch.compile``: tokens (N,) at position
    ``length``; per layer the cache's keys and values (N, h, length, d), the source's keys and
    values (N, h, S, d) in ``cross`` and the padding ``bias`` (N, 1, 1, S), 0 or -inf. Returns the
    logits (N, V) and every layer's keys and values with the new position."""
    decoder = model.decoder
    x = decoder.embeddings(tokens) + decoder.positions.table[length]  # (N, d_model)
    extended = []
    for layer, cached_k, cached_v, (source_k, source_v) in zip(
        decoder.layers, keys, values, cross, strict=True
    ):
        attention, heads = layer.self_attn, layer.self_attn.n_heads
        q, k, v = F.linear(x, attention.in_proj.weight, attention.in_proj.bias).chunk(3, dim=1)
        k = torch.cat([cached_k, k.view(len(x), heads, 1, -1)], dim=2)
        v = torch.cat([cached_v, v.view(len(x), heads, 1, -1)], dim=2)
        extended.append((k, v))
        out = F.scaled_dot_product_attention(q.view(len(x), heads, 1, -1), k, v)
        x = layer.norms[0](x + attention.out_proj(out.flatten(1)))
        attention, e = layer.cross_attn, x.shape[1]
        q = F.linear(x, attention.in_proj.weight[:e], attention.in_proj.bias[:e])
        out = F.scaled_dot_product_attention(
            q.view(len(x), heads, 1, -1), source_k, source_v, attn_mask=bias
        )
        x = layer.norms[1](x + attention.out_proj(out.flatten(1)))
        x = layer.norms[2](x + layer.feed_forward(x))
    return model.generator(x), extended


def cached(caches) -> list[tuple]:
    """The keys and values each of ``caches`` (a decoder's ``KeyValueCache``) holds."""
    return [(kv.keys, kv.values) for kv in caches]


def compiled_step(args: argparse.Namespace, model, tokenizer) -> dict:
    """Per-step milliseconds of the flat step, the functional step and the compiled one."""
    encoded = tokenizer.encode_batch(sources(model)[:ROWS])
    src = torch.zeros(len(encoded), max(map(len, encoded)) + 1, dtype=torch.long)
    for row, ids in enumerate(encoded):
        src[row, : len(ids) + 1] = torch.tensor([*ids, 2])
    with torch.inference_mode():
        state, tokens = OneDNNDecoder(model, src), torch.full((len(src),), 1)
        for _ in range(STEP):
            tokens = state.step(tokens).argmax(dim=-1)
        own = [kv for kv, _ in state.cache.layers]
        keys, values = (
            [t[:, :, :STEP].clone() for t in kind] for kind in zip(*cached(own), strict=True)
        )
        mask, source = state.cache.side.mask, cached(kv for _, kv in state.cache.layers)
        bias = torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))
        inputs = (model, tokens, STEP, keys, values, source, bias)

        def flat():  # the cache put back to STEP positions, then one step as translate runs it
            for kv, k, v in zip(own, keys, values, strict=True):
                kv.keys, kv.values, kv.length = k, v, STEP
            state.cache.length = STEP
            return state.step(tokens)

        candidates = {
            "flat step (translate)": flat,
            "functional, eager": lambda: functional_step(*inputs),
        }
        expected = flat()
        torch.testing.assert_close(functional_step(*inputs)[0], expected, rtol=1e-4, atol=1e-4)
        found = {"rows": len(src), "step": STEP, "source_length": src.shape[1]}
        try:
            torch._inductor.config.freezing = True  # weights as constants, as for inference
            started = time.perf_counter()
            compiled = torch.compile(functional_step, dynamic=False)
            torch.testing.assert_close(compiled(*inputs)[0], expected, rtol=1e-4, atol=1e-4)
            found["compile_s"] = time.perf_counter() - started
            candidates["functional, compiled"] = lambda: compiled(*inputs)
        except Exception as error:  # no C++ compiler, or inductor refused: say so in the result
            found["not_compiled"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        batches = {name: lambda f=f: [f() for _ in range(10)] for name, f in candidates.items()}
        times = common.time_in_turns(batches, args.rounds, warmup=1, device=torch.device("cpu"))
    found["ms_per_step"] = {name: 100 * min(seconds) for name, seconds in times.items()}
    print({name: f"{ms:.2f} ms" for name, ms in found["ms_per_step"].items()})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="multi30k-de-en-laptop", help="a shipped model")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (2)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds in turns (4)")
    parser.add_argument("--calls", type=int, default=3, help="timed calls in each child (3)")
    parser.add_argument("--out", type=Path, default=common.ROOT / "results" / "inference-engine")
    parser.add_argument("--name", default="eager_limits", help="the JSON file's name")
    parser.add_argument("--no-save", action="store_true", help="print only, write no file")
    parser.add_argument("--child", choices=("beam 4", "greedy"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    args.device = "cpu"
    device = common.setup(parser, args)
    model, tokenizer = load_pretrained(args.model)
    results = {
        "model": args.model,
        "own search": model_search(model).recorded(),
        "memory": memory(args),
        "compiled step": compiled_step(args, model, tokenizer),
    }
    common.save(args, device, "eager_limits", results)


if __name__ == "__main__":
    main()
