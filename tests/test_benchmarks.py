"""The performance chapter's FLOP count against PyTorch's operation counter, the benchmarks' peer
against our model, and the benchmark scripts' plumbing (switches, JSON, manifest). No timing is
asserted anywhere: timings are what the benchmarks report, not what tests check."""

import dataclasses
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
from helpers import assert_close, require_multi30k
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from transformer_lib.book.performance import PEAKS, forward_flops, peak_for, training_flops
from transformer_lib.book.recurrent import RecurrentConfig, RecurrentTranslator
from transformer_lib.data import multi30k_file
from transformer_lib.decoding import OneDNNDecoder
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.tokenizer import PAD_ID
from transformer_lib.training import pack_batch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import their siblings by name
import common  # noqa: E402
import eager_limits  # noqa: E402
import inference_engine  # noqa: E402
import peers  # noqa: E402
import profile_step  # noqa: E402
import resume  # noqa: E402
import scaling  # noqa: E402
import train_loop  # noqa: E402
import train_step  # noqa: E402


def counted(model, src, tgt) -> tuple[int, int]:
    """(forward, forward + backward) FLOPs as FlopCounterMode records them; attention through
    the math backend, whose products the counter sees one by one."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        logits = model(src, tgt)
        forward = counter.get_total_flops()
        logits.float().sum().backward()
    return forward, counter.get_total_flops()


@pytest.mark.parametrize(
    "sizes",
    [
        dict(d_model=32, d_ff=64, n_heads=4, n_layers=1),
        dict(d_model=48, d_ff=200, n_heads=3, n_layers=3),
        dict(d_model=64, d_ff=64, n_heads=8, n_layers=2, norm_first=True),
    ],
)
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 9, 4), (3, 5, 13)])
def test_flop_formula_equals_the_counter(sizes, shape):
    torch.manual_seed(0)
    config = TransformerConfig(300, 300, dropout=0.0, **sizes)
    batch, s, t = shape
    src, tgt = torch.randint(4, 300, (batch, s)), torch.randint(4, 300, (batch, t))
    forward, total = counted(Transformer(config), src, tgt)
    assert forward == forward_flops(config, [s] * batch, [t] * batch)
    assert total == training_flops(config, [s] * batch, [t] * batch) == 3 * forward


@pytest.mark.parametrize(
    "options",
    [
        dict(key_size=3),  # Table 3, row B: queries and keys narrower than the values
        dict(key_size=16),  # and wider
        dict(feed_forward=False),  # no position-wise feed-forward network
        dict(key_size=5, feed_forward=False, norm_first=True),
    ],
)
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 9, 4), (3, 5, 13)])
def test_flop_formula_of_the_variations_equals_the_counter(options, shape):
    torch.manual_seed(0)
    config = TransformerConfig(
        300, 300, d_model=32, d_ff=96, n_heads=4, n_layers=2, dropout=0.0, **options
    )
    batch, s, t = shape
    src, tgt = torch.randint(4, 300, (batch, s)), torch.randint(4, 300, (batch, t))
    forward, total = counted(Transformer(config), src, tgt)
    assert forward == forward_flops(config, [s] * batch, [t] * batch)
    assert total == training_flops(config, [s] * batch, [t] * batch)


@pytest.mark.parametrize("sizes", [dict(d_model=32, n_layers=1), dict(d_model=48, n_layers=3)])
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 9, 4), (3, 5, 13)])
def test_flop_formula_of_the_lstm_is_the_counter_plus_its_gates(sizes, shape):
    """The counter does not see inside nn.LSTM's fused kernel: it must record the formula less
    the LSTM layers, which cost 2 FLOPs per gate weight and token (each encoder direction reads
    every source token, the decoder every target token), counted from the module's weights."""
    torch.manual_seed(0)
    config = RecurrentConfig(300, 300, dropout=0.0, **sizes)
    model = RecurrentTranslator(config)
    batch, s, t = shape
    src, tgt = torch.randint(4, 300, (batch, s)), torch.randint(4, 300, (batch, t))
    forward, total = counted(model, src, tgt)
    assert total == 3 * forward  # outside the LSTM, backward costs twice the forward

    def gate_weights(lstm) -> int:
        return sum(p.numel() for name, p in lstm.named_parameters() if name.startswith("weight_"))

    gates = 2 * batch * (s * gate_weights(model.encoder) + t * gate_weights(model.decoder))
    assert forward + gates == forward_flops(config, [s] * batch, [t] * batch)
    assert training_flops(config, [s] * batch, [t] * batch) == 3 * (forward + gates)


def test_flop_formula_counts_each_pair_of_lengths_as_often_as_it_occurs():
    config = TransformerConfig(200, 200, d_model=32, d_ff=96, n_heads=4, n_layers=2, key_size=3)
    src, tgt = [3, 11, 3, 5, 3], [7, 2, 7, 5, 8]
    one_by_one = sum(forward_flops(config, [s], [t]) for s, t in zip(src, tgt, strict=True))
    assert forward_flops(config, src, tgt) == one_by_one
    assert forward_flops(config, iter(src), (t for t in tgt)) == one_by_one  # any iterables


def test_flop_formula_with_two_vocabularies_counts_the_target_projection():
    config = TransformerConfig(120, 410, d_model=32, d_ff=64, n_heads=2, n_layers=2)
    forward, _ = counted(
        Transformer(config), torch.randint(4, 120, (2, 6)), torch.randint(4, 410, (2, 3))
    )
    assert forward == forward_flops(config, [6, 6], [3, 3])


def test_flop_formula_is_a_sum_over_pairs():
    """Each pair costs what it costs alone: the count at real lengths is the model's useful work."""
    config = TransformerConfig(200, 200, d_model=32, d_ff=96, n_heads=4, n_layers=2)
    model = Transformer(config)
    lengths = [(3, 7), (11, 2), (5, 5)]
    alone = sum(
        counted(model, torch.randint(4, 200, (1, s)), torch.randint(4, 200, (1, t)))[0]
        for s, t in lengths
    )
    assert alone == forward_flops(config, [s for s, _ in lengths], [t for _, t in lengths])
    with pytest.raises(ValueError):  # lengths of different counts are a mistake, not a zip
        forward_flops(config, [1, 2], [3])


def test_peaks_match_device_names():
    assert peak_for("NVIDIA H100 80GB HBM3").flops == pytest.approx(989.4e12)
    assert peak_for("NVIDIA H100 PCIe").flops == pytest.approx(756e12)
    assert peak_for("NVIDIA H200").name == "H200"
    assert peak_for("NVIDIA A100-SXM4-80GB").flops == pytest.approx(312e12)
    assert peak_for("AMD EPYC") is None and peak_for("NVIDIA GeForce RTX 4090") is None
    for peak in PEAKS:  # dense rates: the data sheets print twice these, "with sparsity"
        assert "sparsity" in peak.source and peak.flops > 1e14


def small_models():
    torch.manual_seed(0)
    config = TransformerConfig(100, 100, d_model=32, d_ff=64, n_heads=4, n_layers=2)
    ours = Transformer(config)
    theirs = peers.TorchTransformer(config)
    peers.copy_weights(ours, theirs)
    batch = peers.random_batch(config, 4, 9, torch.Generator().manual_seed(1), shortest=3)
    return config, ours, theirs, batch


def test_the_peer_computes_our_function():
    """nn.Transformer with our weights gives our logits: the comparison times the same work."""
    _, ours, theirs, batch = small_models()
    assert (batch.tgt_out == PAD_ID).any()  # padding is exercised
    assert peers.largest_difference(ours, theirs, batch) < 1e-4
    theirs.stacks.decoder.layers[0].linear1.bias.data += 0.1  # and the check can fail
    assert peers.largest_difference(ours, theirs, batch) > 1e-3


def test_a_peer_that_computes_another_function_stops_the_benchmark():
    """train_step checks the candidates before it times any: a peer whose logits differ from
    ours by more than 1e-3 ends the run, naming it, rather than being timed on other work."""
    _, ours, theirs, batch = small_models()
    models, cpu = {"ours": ours, "nn.Transformer": theirs}, torch.device("cpu")
    assert train_step.check_same_functions(models, batch, cpu) < 1e-4
    theirs.stacks.decoder.layers[0].linear1.bias.data += 0.1
    with pytest.raises(AssertionError, match="nn.Transformer differs from ours by"):
        train_step.check_same_functions(models, batch, cpu)


@pytest.mark.parametrize("switch", ["separate_projections", "written_out"])
def test_variants_compute_our_function(switch):
    _, ours, _, batch = small_models()
    other = peers.variant(ours, **{switch: True})
    assert peers.largest_difference(ours, other, batch) < 1e-5
    assert all(
        isinstance(layer.self_attn, peers.AttentionVariant) for layer in other.encoder.layers
    )


def test_padding_to_a_multiple_keeps_the_logits_of_real_tokens():
    _, ours, _, batch = small_models()
    ours.eval()
    wide = peers.pad_to_multiple(batch, 8)
    assert wide.src.shape[1] % 8 == 0 and wide.tgt_in.shape[1] % 8 == 0
    assert int((wide.tgt_out != PAD_ID).sum()) == int((batch.tgt_out != PAD_ID).sum())
    with torch.no_grad():
        narrow_logits = ours(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        wide_logits = ours(wide.src, wide.tgt_in, wide.src_mask, wide.tgt_mask)
    t = batch.tgt_in.shape[1]
    real = batch.tgt_out != PAD_ID
    assert_close(wide_logits[:, :t][real], narrow_logits[real], atol=1e-5)


def test_turns_start_one_candidate_later_each_round():
    calls = []
    candidates = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = common.time_in_turns(candidates, rounds=3, warmup=1, device=torch.device("cpu"))
    assert calls == [*"abc", *"bca", *"cab", *"abc"]  # the warm-up round, then three timed
    assert {name: len(seconds) for name, seconds in times.items()} == dict.fromkeys("abc", 3)


def test_the_profile_groups_operators_by_what_they_compute():
    assert profile_step.group("aten::addmm") == "matrix products"
    assert profile_step.group("aten::mm") == profile_step.group("aten::bmm") == "matrix products"
    assert profile_step.group("aten::_efficient_attention_backward") == "attention kernels"
    assert profile_step.group("aten::_scaled_dot_product_flash_attention") == "attention kernels"
    assert profile_step.group("aten::bernoulli_") == "everything else"
    assert profile_step.group("aten::mm_like") == "everything else"  # whole names only


def test_the_profile_accounts_for_a_step_on_the_cpu():
    """Every operator's own time is counted once: the groups share the whole step, and the
    products of a Transformer's layers are among its operators."""
    config, *_ = small_models()
    batches, _ = train_step.random_batches(config, 64, 2)
    model = Transformer(config)
    cpu = torch.device("cpu")
    # Every operator listed (no timing decides which are shown), then the five costliest.
    figures = profile_step.profile_model(model, batches, cpu, config.d_model, top=10**6)
    assert figures["updates"] == 2 and figures["total_s"] > 0 and figures["wall_s"] > 0
    assert figures["busy"] == pytest.approx(figures["total_s"] / figures["wall_s"])
    assert sum(figures["groups"].values()) == pytest.approx(1)
    assert figures["groups"]["matrix products"] > 0
    shares = [op["share"] for op in figures["operators"]]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1)
    assert {"aten::mm", "aten::addmm"} & {op["name"] for op in figures["operators"]}
    products = sum(op["share"] for op in figures["operators"] if op["group"] == "matrix products")
    assert products == pytest.approx(figures["groups"]["matrix products"])
    top = profile_step.profile_model(model, batches, cpu, config.d_model, top=5)["operators"]
    assert len(top) == 5 and [op["share"] for op in top] == sorted(
        (op["share"] for op in top), reverse=True
    )


def test_a_profile_writes_no_log_line_into_the_output():
    """The profiler's native "profiler_start" lines stay out of what a chapter shows, and what
    the process writes to standard error afterwards still arrives."""
    code = (
        "import sys, torch; sys.path.insert(0, 'benchmarks'); import common\n"
        "from torch.profiler import profile\n"
        "with common.native_stderr_silenced(), profile() as p:\n"
        "    torch.ones(3) + 1\n"
        "print('after', file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "profiler_start" not in done.stderr and done.stderr.strip() == "after"
    unsilenced = code.replace("common.native_stderr_silenced(), ", "")
    done = subprocess.run(
        [sys.executable, "-c", unsilenced], cwd=ROOT, capture_output=True, text=True
    )
    assert "profiler_start" in done.stderr  # what the test guards against is there without it


def test_train_step_measures_every_candidate_on_random_batches():
    config, *_ = small_models()
    size = train_step.Size(config, max_tokens=64, batches=2, rounds=1)
    batches = train_step.random_batches(config, size.max_tokens, size.batches)
    results = train_step.measure(size, torch.device("cpu"), batches)
    figures = results["candidates"]
    assert {"ours", "nn.Transformer", "ours, random batches"} <= set(figures)
    for f in figures.values():
        assert f["tokens_per_s"] > 0 and f["rounds"] == 1 and "mfu" not in f  # no CPU peak
    by_length = figures["ours"]
    expected = sum(training_flops(config, *train_step.real_lengths(b)) for b in batches[0])
    assert by_length["model_flops"] == expected
    assert {t["trick"] for t in results["tricks"]} >= {
        "batches by length",
        "fused Adam (one kernel)",
        "oneDNN products (CPU)",
    }


def test_cuda_graphs_are_timed_against_the_compiled_model():
    """``--compile graphs``: the graphs' rows compare our model compiled with them to ours
    eager and compiled without them (compiling is lazy, so nothing compiles here), and a step
    that marks each update runs on a CPU."""
    config, ours, _, _ = small_models()
    batches = train_step.random_batches(config, 64, 2)
    cpu = torch.device("cpu")
    plain, plain_tricks = train_step.candidates(ours, *batches, cpu, compile_models=True)
    both, tricks = train_step.candidates(ours, *batches, cpu, compile_models=True, graphs=True)
    graphs = "ours, torch.compile + CUDA graphs"
    assert set(both) - set(plain) == {graphs} and both[graphs].graphs
    assert [t for t in tricks if t not in plain_tricks] == [
        ("torch.compile + CUDA graphs", graphs, "ours"),
        ("CUDA graphs (on torch.compile)", graphs, "ours, torch.compile"),
    ]
    before = [p.detach().clone() for p in ours.parameters()]
    train_step.Candidate(ours, batches[0], bf16=False, graphs=True).step_function(cpu, 32)()
    assert any(not torch.equal(b, p) for b, p in zip(before, ours.parameters(), strict=True))


def test_the_fast_paths_are_timed_against_the_steps_without_them():
    """``--fast-paths``: packing against padded batches, both compiled for any shape; every
    fast path at once (packed rows in buckets, a graph a bucket, fused Adam) against ours; a step
    of each trains on a CPU (compiling is lazy: aot_eager compiles on the first step only)."""
    config, ours, _, _ = small_models()
    batches = train_step.random_batches(config, 64, 2)[0]
    cpu = torch.device("cpu")
    packing, packing_tricks = train_step.fast_candidates(ours, batches, cpu, "packing", 16)
    assert [(w, wo) for _, w, wo in packing_tricks] == [
        ("ours, torch.compile (any shape)", "ours"),
        ("ours, packed, torch.compile", "ours, torch.compile (any shape)"),
    ]
    assert packing["ours, packed, torch.compile"].packing == "masks"  # no flex backward on a CPU
    every, tricks = train_step.fast_candidates(ours, batches, cpu, "buckets", 16, "aot_eager")
    ((name, candidate),) = every.items()
    assert tricks == [("every fast path, compiled", name, "ours")]
    assert (candidate.adam, candidate.length_bucket, candidate.graphs) == ("fused", 16, False)
    before = [p.detach().clone() for p in candidate.model.parameters()]
    candidate.step_function(cpu, config.d_model)()
    assert any(
        not torch.equal(b, p) for b, p in zip(before, candidate.model.parameters(), strict=True)
    )


def test_a_packed_step_that_computes_another_function_stops_the_benchmark(monkeypatch):
    _, ours, _, batch = small_models()
    cpu = torch.device("cpu")
    assert train_step.check_packed_function(ours, batch, cpu) < 1e-4

    def leaky(*arguments, **options):  # every source token sees the other sentences too
        packed = pack_batch(*arguments, **options)
        everywhere = torch.ones_like(packed.src_mask.attention)
        source = dataclasses.replace(packed.src_mask, attention=everywhere)
        return dataclasses.replace(packed, src_mask=source)

    monkeypatch.setattr(train_step, "pack_batch", leaky)
    with pytest.raises(AssertionError, match="packed rows differ"):
        train_step.check_packed_function(ours, batch, cpu)


@pytest.mark.parametrize("threshold", [0, 5000, 8192, 100_000, 3_000_000, 10**9])
def test_search_for_the_largest_budget(threshold):
    """The search the GPU run uses to find the largest token budget that fits in memory."""
    probes = []

    def fits(tokens):
        probes.append(tokens)
        return tokens <= threshold

    found = train_step.search_largest(fits, start=8192, cap=2**22)
    assert found <= threshold and fits(found) or found == 0
    assert found >= 0.95 * min(threshold, 2**22) and len(probes) < 40


def test_scaling_reports_the_formulas_crossover():
    config, *_ = small_models()
    results = scaling.measure(
        config, tokens=64, device=torch.device("cpu"), rounds=1, lengths=(8, 16, 32)
    )
    c = config
    expected = 2 * c.d_model + 2 / 3 * c.d_ff + c.tgt_vocab_size / (6 * c.n_layers)
    assert results["crossover_length_flops"] == pytest.approx(expected)
    assert [r["length"] for r in results["rows"]] == [8, 16, 32]


def run_script(*arguments, cwd=ROOT):
    return subprocess.run(
        [sys.executable, *arguments], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_the_step_it_compiles_is_the_step_translate_runs():
    """eager_limits compiles a functional decoder step: on a small post-LN model it gives the
    logits of OneDNNDecoder's flat step, whose cache it is handed, for padded sources."""
    torch.manual_seed(0)
    config = TransformerConfig(40, 40, d_model=32, d_ff=64, n_heads=4, n_layers=2, dropout=0.0)
    model = Transformer(config).eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0], [11, 2, 0, 0, 0]])
    with torch.inference_mode():
        state, tokens = OneDNNDecoder(model, src), torch.full((3,), 1)
        for _ in range(3):
            tokens = state.step(tokens).argmax(dim=-1)
        own = eager_limits.cached(kv for kv, _ in state.cache.layers)
        keys, values = ([t[:, :, :3].clone() for t in kind] for kind in zip(*own, strict=True))
        mask, source = (
            state.cache.side.mask,
            eager_limits.cached(kv for _, kv in state.cache.layers),
        )
        bias = torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))
        found, extended = eager_limits.functional_step(model, tokens, 3, keys, values, source, bias)
        expected = state.step(tokens)
    torch.testing.assert_close(found, expected, atol=1e-5, rtol=1e-5)
    own = eager_limits.cached(kv for kv, _ in state.cache.layers)
    for (k, v), (cached_k, cached_v) in zip(extended, own, strict=True):
        torch.testing.assert_close(k, cached_k[:, :, :4], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(v, cached_v[:, :, :4], atol=1e-6, rtol=1e-6)


def test_a_benchmark_writes_its_result_with_a_manifest(tmp_path):
    out = tmp_path / "perf-test"
    done = run_script(
        "benchmarks/train_step.py",
        "--data", "random", "--max-tokens", "64", "--batches", "1", "--rounds", "1",
        "--no-tricks", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ratio" in done.stdout
    saved = json.loads((out / "train_step.json").read_text())
    manifest = saved["manifest"]
    assert manifest["device"] and manifest["versions"]["torch"] == torch.__version__
    assert "git_commit" in manifest
    assert "train_step.py" in manifest["command"] and manifest["library_hash"]
    assert saved["results"]["comparisons"][0]["label"] == "training, target tokens/s"
    loaded = common.load_results(tmp_path)
    assert loaded["perf-test"]["train_step"] == saved


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--device", "cuda"] if not torch.cuda.is_available() else ["--device", "tpu"], "device"),
        (["--threads", "0"], "--threads"),
        (["--size", "huge"], "invalid choice"),
        (["--batches", "0", "--data", "random"], "--batches"),
        (["--length-bucket", "0", "--data", "random"], "--length-bucket"),
        (
            ["--fast-paths", "packing", "--compile", "yes", "--data", "random"],
            "leave out --compile",
        ),
    ],
)
def test_bad_switches_end_with_status_2(arguments, message):
    done = run_script("benchmarks/train_step.py", "--no-save", *arguments)
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.slow
def test_a_resumed_run_on_the_cpu_reaches_the_weights_of_an_unbroken_one(tmp_path):
    results = resume.main(["--updates", "4", "--out", str(tmp_path)])
    assert results["two_unbroken_runs"]["identical"], results
    assert results["unbroken_and_resumed"]["identical"], results
    written = json.loads((tmp_path / "resume.json").read_text())
    assert written["results"] == results and written["manifest"]["device_type"] == "cpu"


def test_the_resume_check_reports_a_difference():
    run = {"weights": {"w": torch.zeros(3)}, "losses": [2.0, 1.5]}
    other = {"weights": {"w": torch.tensor([0.0, 1e-7, 0.0])}, "losses": [2.0, 1.25]}
    found = resume.largest_differences(run, other)
    assert found == {"weight": pytest.approx(1e-7), "loss": 0.25, "identical": False}
    assert resume.largest_differences(run, run)["identical"]
    with pytest.raises(AssertionError, match="2 logged losses against 1"):
        resume.largest_differences(run, {**other, "losses": [2.0]})


@pytest.mark.slow
def test_the_loop_benchmark_reads_each_runs_speed_from_its_own_metrics(tmp_path):
    """One round of the ci profile's eager loop: its speed is the median of the windows after
    the warm ones, read back from the run's own metrics.jsonl, and the file holds the round."""
    arguments = ["--size", "ci", "--updates", "30", "--log-every", "10", "--rounds", "1"]
    arguments += ["--only", "eager"]
    results = train_loop.main([*arguments, "--out", str(tmp_path)])
    written = json.loads((tmp_path / "train_loop.json").read_text())
    assert written["results"] == results and results["rounds_done"] == 1
    (run,) = results["runs"]["eager"]
    assert run["tokens_per_s"] > 0 and run["wall_s"] > run["first_window_s"] > 0
    assert results["tokens_per_s"]["eager"] == run["tokens_per_s"]
    assert results["comparisons"] == []  # nothing beside eager to compare


def test_the_loop_benchmark_compares_each_candidate_with_eager():
    args = train_loop.argparse.Namespace(size="full", updates=300)
    runs = {"eager": [{"tokens_per_s": 100.0}, {"tokens_per_s": 120.0}]}
    runs["torch.compile"] = [{"tokens_per_s": 150.0}, {"tokens_per_s": 180.0}]
    runs["eager, written-out attention"] = []  # a round cut short before it ran
    results = train_loop.report(runs, args, bf16=True)
    assert list(results["runs"]) == ["eager", "torch.compile"]
    (comparison,) = results["comparisons"]
    assert comparison["ratio"] == pytest.approx(165.0 / 110.0)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--updates", "100"], "--updates must be at least 150"),
        (["--updates", "20", "--log-every", "10"], "--updates must be at least 30"),
        (["--only", "jit"], "unknown"),
    ],
)
def test_the_loop_benchmark_refuses_bad_switches(arguments, message):
    done = run_script("benchmarks/train_loop.py", "--no-save", "--size", "ci", *arguments)
    assert done.returncode == 2 and message in done.stderr, done.stderr


# --- benchmarks/inference_engine.py: the translations behind each BLEU it records.


def test_the_engine_benchmark_writes_each_distinct_translation_once(tmp_path):
    translations = {
        "beam 4": {"ours": ["a", "b"], "ours, oneDNN": ["a", "b"], "CTranslate2 int8": ["a", "c"]},
        "greedy": {"ours": ["a", "b"]},
    }
    (tmp_path / "run.hyp").mkdir()
    (tmp_path / "run.hyp" / "beam_4.earlier.txt").write_text("x\n")  # an earlier run's
    files = inference_engine.write_translations(tmp_path, "run", translations)
    assert files == {
        "beam 4": {
            "ours": "run.hyp/beam_4.ours.txt",
            "ours, oneDNN": "run.hyp/beam_4.ours.txt",  # the same lines: one file
            "CTranslate2 int8": "run.hyp/beam_4.ctranslate2_int8.txt",
        },
        "greedy": {"ours": "run.hyp/greedy.ours.txt"},
    }
    for label, found in translations.items():
        for candidate, lines in found.items():
            assert (tmp_path / files[label][candidate]).read_text().splitlines() == lines
    assert sorted(p.name for p in (tmp_path / "run.hyp").iterdir()) == [
        "beam_4.ctranslate2_int8.txt",
        "beam_4.ours.txt",
        "greedy.ours.txt",
    ]


def engine_bleu_problems(path: Path) -> list[str]:
    """Where a record of benchmarks/inference_engine.py differs from sacreBLEU recomputed from the
    translations it names beside it (a record without them names none)."""
    results, problems = json.loads(path.read_text())["results"], []
    if "translations" not in results:
        return problems
    with gzip.open(multi30k_file(results["split"], results["tgt"]), "rt", encoding="utf-8") as f:
        references = f.read().splitlines()[: results["sentences"]]
    for label, files in results.get("translations", {}).items():
        for candidate, file in files.items():
            lines = (path.parent / file).read_text(encoding="utf-8").splitlines()
            score = sacrebleu.BLEU().corpus_score(lines, [references]).score
            recorded = results["searches"][label][candidate]["bleu"]
            if len(lines) != len(references) or abs(score - recorded) > 1e-9:
                problems.append(f"{label}, {candidate}: BLEU {recorded}, sacreBLEU {score}")
    return problems


ENGINE_RECORDS = sorted((ROOT / "results").glob("inference-engine/*.json"))


def test_every_engine_score_with_translations_is_recomputed_from_them(tmp_path):
    """Each record that names its translations agrees with sacreBLEU; and the check catches a
    changed line, on a record made here from the test set's own references."""
    require_multi30k()
    for path in ENGINE_RECORDS:
        assert engine_bleu_problems(path) == [], path.name
    with gzip.open(multi30k_file("test_2016_flickr", "en"), "rt", encoding="utf-8") as f:
        references = f.read().splitlines()[:20]
    hypotheses = {
        "greedy": {"ours": references[1:] + references[:1], "CTranslate2 int8": references}
    }
    files = inference_engine.write_translations(tmp_path, "run", hypotheses)
    searches = {
        "greedy": {
            name: {"bleu": sacrebleu.BLEU().corpus_score(lines, [references]).score}
            for name, lines in hypotheses["greedy"].items()
        }
    }
    results = {"split": "test_2016_flickr", "tgt": "en", "sentences": 20, "searches": searches}
    record = tmp_path / "run.json"
    record.write_text(json.dumps({"results": {**results, "translations": files}}))
    assert engine_bleu_problems(record) == []
    changed = tmp_path / files["greedy"]["ours"]
    shutil.copy(tmp_path / files["greedy"]["CTranslate2 int8"], changed)
    assert [p.split(":")[0] for p in engine_bleu_problems(record)] == ["greedy, ours"]
