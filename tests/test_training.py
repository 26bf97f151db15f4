"""Training (§5): the schedule against formula (3), label smoothing against a written-out
computation, checkpoints that survive crashes and refuse code, and exact resumption."""

import copy
import dataclasses
import json
import math
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
import torch.nn.functional as F
from toy_seq2seq import PAD, ToyModel, concat, toy_batches

from transformer_lib import objective, recipe, training
from transformer_lib.checkpoints import (
    CheckpointError,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from transformer_lib.data import DataError
from transformer_lib.errors import TransformerLibError
from transformer_lib.objective import TrainingConfig, label_smoothed_loss, smoothed_targets
from transformer_lib.schedule import cooldown, make_optimizer, rate

# ---------------------------------------------------------------------------- the schedule


@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (512, 8000), (256, 4000), (64, 7)])
def test_rate_is_formula_3(d_model, warmup):
    for step in [1, 2, warmup - 1, warmup, warmup + 1, 10 * warmup]:
        expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert math.isclose(rate(step, d_model, warmup), expected, rel_tol=1e-12)
    # The two branches meet at the end of warm-up, where the rate peaks.
    peak = (d_model * warmup) ** -0.5
    assert math.isclose(rate(warmup, d_model, warmup), peak, rel_tol=1e-12)
    assert rate(warmup + 1, d_model, warmup) < peak and rate(warmup - 1, d_model, warmup) < peak


def test_step_zero_has_no_rate():
    with pytest.raises(ValueError, match="counted from 1"):
        rate(0, 512, 4000)


def test_optimizer_uses_rate_of_update_n_at_update_n():
    model = torch.nn.Linear(2, 2)
    optimizer, scheduler = make_optimizer(model, d_model=32, warmup_steps=5, scale=2.0)
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    for update in range(1, 20):
        assert math.isclose(
            optimizer.param_groups[0]["lr"], rate(update, 32, 5, 2.0), rel_tol=1e-12
        )
        optimizer.step()
        scheduler.step()


def test_cooldown_ramps_the_last_updates_linearly_and_spares_the_rest():
    model = torch.nn.Linear(2, 2)
    max_steps, last = 30, 10
    optimizer, scheduler = make_optimizer(
        model, d_model=32, warmup_steps=5, max_steps=max_steps, cooldown_steps=last
    )
    used = []
    for _ in range(max_steps):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    plain = [rate(n, 32, 5) for n in range(1, max_steps + 1)]
    # Written out: update n of the last ten uses (31 - n) / 10 of formula (3).
    expected = plain[:20] + [plain[n - 1] * (31 - n) / 10 for n in range(21, 31)]
    assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(used, expected, strict=True))
    assert used[-1] > 0 and math.isclose(used[-1], plain[-1] / 10, rel_tol=1e-12)


@pytest.mark.parametrize("cooldown_steps", [0, None])
def test_no_cooldown_is_formula_3(cooldown_steps):
    assert all(cooldown(n, 10, cooldown_steps) == 1.0 for n in range(1, 11))


@pytest.mark.parametrize("cooldown_steps,max_steps", [(-1, 10), (11, 10), (5, 0)])
def test_a_cooldown_longer_than_the_run_is_refused_at_once(cooldown_steps, max_steps):
    with pytest.raises(ValueError, match="must be 1..max_steps"):
        make_optimizer(
            torch.nn.Linear(1, 1), 32, max_steps=max_steps, cooldown_steps=cooldown_steps
        )


# ---------------------------------------------------------------------------- label smoothing


def test_cross_entropy_equals_written_out_smoothed_targets():
    torch.manual_seed(0)
    vocab, pad, eps = 11, 0, 0.1
    logits = torch.randn(3, 7, vocab, dtype=torch.float64)
    target = torch.randint(1, vocab, (3, 7))
    target[0, 5:] = pad
    target[2, 3:] = pad
    loss, count = label_smoothed_loss(logits, target, pad, eps)
    q = smoothed_targets(target, vocab, eps, pad).double()
    written_out = -(q * logits.reshape(-1, vocab).log_softmax(-1)).sum()
    assert count == (target != pad).sum()
    assert torch.allclose(loss.double(), written_out, rtol=1e-6)


def test_smoothed_targets_differ_from_the_kl_form_exactly_as_documented():
    """PyTorch's form gives eps/V to every token, pad included; the KL form gives pad nothing."""
    vocab, pad, eps = 9, 0, 0.2
    target = torch.tensor([3, 1, 8])
    q = smoothed_targets(target, vocab, eps, pad)
    # The KL form, written out: 1-eps on the target, 0 on pad, eps/(V-2) on the rest.
    kl = torch.full((3, vocab), eps / (vocab - 2))
    kl[:, pad] = 0
    kl[torch.arange(3), target] = 1 - eps
    assert torch.allclose(q.sum(1), torch.ones(3)) and torch.allclose(kl.sum(1), torch.ones(3))
    assert torch.allclose(q[:, pad], torch.full((3,), eps / vocab))
    assert torch.allclose(q[torch.arange(3), target], torch.full((3,), 1 - eps + eps / vocab))
    others = torch.ones(3, vocab, dtype=torch.bool)
    others[:, pad] = False
    others[torch.arange(3), target] = False
    assert torch.allclose(q[others], torch.tensor(eps / vocab))
    assert not torch.allclose(q, kl)


def test_padding_positions_do_not_count():
    torch.manual_seed(1)
    logits = torch.randn(2, 5, 6)
    target = torch.tensor([[1, 2, 3, 0, 0], [4, 5, 0, 0, 0]])
    changed = logits.clone()
    changed[target == 0] += 100.0  # anything at padded positions
    assert torch.equal(
        label_smoothed_loss(logits, target, 0)[0], label_smoothed_loss(changed, target, 0)[0]
    )


# ---------------------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip(tmp_path):
    state = {
        "model": {"w": torch.randn(3)},
        "step": 7,
        "config": {"a": [1, 2]},
        "rng": rng_state(),
    }
    save_checkpoint(state, tmp_path / "c.pt")
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["step"] == 7


def test_rng_state_restores_every_generator():
    import random

    import numpy as np

    torch.manual_seed(3)
    saved = rng_state()
    first = (random.random(), np.random.rand(), torch.rand(2))
    set_rng_state(saved)
    again = (random.random(), np.random.rand(), torch.rand(2))
    assert first[0] == again[0] and first[1] == again[1] and torch.equal(first[2], again[2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_rng_state_restores_from_a_checkpoint_loaded_onto_a_gpu(tmp_path):
    """A resume on a GPU loads the checkpoint there (``map_location``); the generators' states
    must still restore, the GPU's own included."""
    import numpy as np

    torch.manual_seed(3)
    save_checkpoint({"model": {}, "step": 1, "config": {}, "rng": rng_state()}, tmp_path / "c.pt")
    first = (np.random.rand(), torch.rand(2), torch.rand(2, device="cuda"))
    loaded = load_checkpoint(tmp_path / "c.pt", map_location="cuda")
    assert loaded["rng"]["torch"].device.type == "cuda"  # what made the restore fail before
    set_rng_state(loaded["rng"])
    again = (np.random.rand(), torch.rand(2), torch.rand(2, device="cuda"))
    assert first[0] == again[0] and torch.equal(first[1], again[1])
    assert torch.equal(first[2], again[2])


def test_a_crash_while_writing_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint({"model": {}, "step": 1, "config": {}}, path)

    def half_write(obj, file):
        file.write(b"partial bytes")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", half_write)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"model": {}, "step": 2, "config": {}}, path)
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left behind


class Payload:
    def __reduce__(self):  # what a malicious pickle does: call a function while loading
        return (print, ("this ran while loading",))


def test_loading_never_runs_code_from_the_file(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as file:
        pickle.dump({"model": Payload(), "step": 0, "config": {}}, file, protocol=2)
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(path)
    assert "this ran" not in capsys.readouterr().out


def test_missing_and_foreign_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "absent.pt")
    torch.save({"weights": torch.ones(1)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a training checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


# ---------------------------------------------------------------------------- the loop


def run(tmp_path, max_steps, resume=False, name="run", time_limit=None, **overrides):
    settings = dict(
        max_steps=max_steps, warmup_steps=4, log_every=3, checkpoint_every=5, keep_checkpoints=2
    )
    config = TrainingConfig(**{**settings, **overrides})
    torch.manual_seed(0)
    model = ToyModel()
    summary = training.train(
        model,
        toy_batches,
        config,
        tmp_path / name,
        training.Validation(toy_batches(-1)[:2]),
        training.RunOptions(resume=resume, time_limit=time_limit, device="cpu", progress=False),
    )
    return model, summary


def test_resuming_gives_bitwise_identical_weights(tmp_path):
    """20 updates in one go == 10 updates, stop (mid-epoch), resume to 20. Dropout is on."""
    assert 10 % len(toy_batches(0)) != 0  # the stop falls inside an epoch
    straight, _ = run(tmp_path, 20, name="straight")
    run(tmp_path, 10, name="stopped", accumulation=1)
    resumed, summary = run(tmp_path, 20, resume=True, name="stopped")
    assert summary["step"] == 20
    for (name, a), (_, b) in zip(
        straight.state_dict().items(), resumed.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    # The metrics continue without repeating a step; validations are the same numbers.
    lines = [json.loads(x) for x in (tmp_path / "stopped/metrics.jsonl").read_text().splitlines()]
    straight_lines = [
        json.loads(x) for x in (tmp_path / "straight/metrics.jsonl").read_text().splitlines()
    ]
    steps = [r["step"] for r in lines if r["kind"] == "train"]
    assert steps == sorted(set(steps)) and steps[-1] == 20
    valid = [(r["step"], r["loss"]) for r in lines if r["kind"] == "valid"]
    # The first call validated after its last update (10); otherwise the same numbers.
    assert 10 in [step for step, _ in valid]
    straight_valid = [(r["step"], r["loss"]) for r in straight_lines if r["kind"] == "valid"]
    assert [v for v in valid if v[0] != 10] == straight_valid
    assert len(straight_valid) >= 6  # an epoch is 3 updates


def test_the_logging_window_resumes_exactly(tmp_path):
    """A run cut after every update (a time limit far below one update) writes the same train
    records as a run that never stopped: each checkpoint carries the window of updates since the
    last record, and the resumed call sums them in."""

    run(tmp_path, 8, name="straight")
    calls, (_, summary) = 1, run(tmp_path, 8, name="cut", time_limit=1e-9)
    while not summary["finished"]:
        calls, (_, summary) = calls + 1, run(tmp_path, 8, True, "cut", time_limit=1e-9)
    assert calls == 8  # one update a call: every record's window spans several calls

    def train_records(name):
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        return [(r["step"], r["loss"], r["nll"], r["lr"]) for r in records if r["kind"] == "train"]

    assert train_records("cut") == train_records("straight")
    assert [step for step, *_ in train_records("straight")] == [3, 6, 8]  # log_every 3


def test_run_folder_layout_and_checkpoint_rotation(tmp_path):
    run(tmp_path, 17)
    folder = tmp_path / "run"
    assert json.loads((folder / "config.json").read_text())["training"]["max_steps"] == 17
    names = sorted(p.name for p in (folder / "checkpoints").iterdir())
    assert names == ["last.pt", "step-15.pt", "step-17.pt"]  # every 5, the end, keep 2
    last = load_checkpoint(folder / "checkpoints/last.pt")
    assert last["step"] == 17 and {"model", "optimizer", "scheduler", "rng", "data"} <= set(last)
    records = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train_records] == [3, 6, 9, 12, 15, 17]
    fields = {"loss", "nll", "ppl", "lr", "tokens_per_s", "wall_s", "elapsed_s", "cpu_peak_mib"}
    assert fields <= set(train_records[0])
    peaks = [r["cpu_peak_mib"] for r in records]  # the process's resident peak: it never falls
    assert peaks[0] > 50 and peaks == sorted(peaks)  # PyTorch alone holds more than 50 MiB
    assert all(r["elapsed_s"] >= r["wall_s"] for r in records)  # the updates are part of it
    valid_steps = [r["step"] for r in records if r["kind"] == "valid"]
    assert valid_steps == [3, 6, 9, 12, 15, 17]  # after each epoch, and after the last update


def test_valid_metrics_join_every_validation_record(tmp_path):
    seen = []

    def probe(model):
        seen.append(model.training)
        return {"probe": len(seen)}

    model = ToyModel()
    config = training.TrainingConfig(max_steps=7, warmup_steps=2, validate_every=3)
    training.train(
        model,
        toy_batches,
        config,
        tmp_path / "run",
        training.Validation(toy_batches(-1)[:2], probe),
        training.RunOptions(device="cpu", progress=False),
    )
    records = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    valid = [(r["step"], r["probe"]) for r in records if r["kind"] == "valid"]
    assert valid == [(3, 1), (6, 2), (7, 3)]
    assert seen == [False, False, False]  # measured in eval mode
    assert model.training  # and put back to training


def test_a_resumed_run_removes_what_a_killed_call_left_half_written(tmp_path):
    """A process killed while it wrote a checkpoint or the settings leaves atomic_file's
    temporary file behind; the next call of the same run deletes it, and nothing else."""
    run(tmp_path, 5)
    leftovers = [
        tmp_path / "run/checkpoints/.last.pt.k1l2ed.tmp",
        tmp_path / "run/.config.json.x.tmp",
    ]
    for path in leftovers:
        path.write_bytes(b"half a file")
    kept = tmp_path / "run/notes.tmp"  # not one of atomic_file's: the reader's own
    kept.write_text("mine")
    run(tmp_path, 10, resume=True)
    assert not any(path.exists() for path in leftovers) and kept.read_text() == "mine"


def test_a_second_run_into_the_same_folder_is_refused(tmp_path):
    run(tmp_path, 5)
    with pytest.raises(FileExistsError, match="--resume") as refused:
        run(tmp_path, 10)
    assert isinstance(refused.value, TransformerLibError)  # the command line's one-line error


def test_a_checkpoint_from_another_configuration_is_refused(tmp_path):
    run(tmp_path, 5)
    with pytest.raises(CheckpointError, match="label_smoothing"):
        run(tmp_path, 10, resume=True, label_smoothing=0.2)


DE_EN = {"data": "multi30k", "src": "de", "tgt": "en", "profile": "ci"}


def described_run(tmp_path, max_steps, resume, model_config, metadata):
    """A toy run that records ``model_config`` and ``metadata`` as its configuration."""
    torch.manual_seed(0)
    model = ToyModel()
    model.config = model_config  # what the run records: the weights' shapes stay the same
    config = TrainingConfig(max_steps=max_steps, warmup_steps=4, checkpoint_every=5)
    return training.train(
        model,
        toy_batches,
        config,
        tmp_path / "run",
        options=training.RunOptions(metadata=metadata, resume=resume, device="cpu", progress=False),
    )


@pytest.mark.parametrize(
    "changed,message",
    [
        ("model", "model.dropout: 0.1 in the checkpoint, 0.3 now"),
        ("languages", "'src': 'de'"),
    ],
)
def test_a_resume_with_another_model_or_language_pair_is_refused(tmp_path, changed, message):
    """Each check on its own: the weights would load either way (the toy model's shapes do not
    change), so without the check the resumed run would silently continue another run."""
    model_config = ToyModel().config
    described_run(tmp_path, 5, False, model_config, DE_EN)
    if changed == "model":
        other = (dataclasses.replace(model_config, dropout=0.3), DE_EN)
    else:
        other = (model_config, {**DE_EN, "src": "en", "tgt": "de"})
    with pytest.raises(CheckpointError, match=re.escape(message)):
        described_run(tmp_path, 10, True, *other)
    # The same model and languages resume.
    assert described_run(tmp_path, 10, True, model_config, DE_EN)["step"] == 10


def kill_after(tmp_path, name: str, step: int, killed: str) -> None:
    """Make run ``killed`` the run ``name`` as it was had it been killed after update ``step``
    (a checkpoint of that update must have been kept)."""
    (tmp_path / killed / "checkpoints").mkdir(parents=True)
    shutil.copy(tmp_path / name / "config.json", tmp_path / killed / "config.json")
    shutil.copy(tmp_path / name / "metrics.jsonl", tmp_path / killed / "metrics.jsonl")
    shutil.copy(
        tmp_path / name / f"checkpoints/step-{step}.pt", tmp_path / killed / "checkpoints/last.pt"
    )


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_a_run_cooling_down_resumes_exactly_but_cannot_be_lengthened(tmp_path):
    straight, _ = run(tmp_path, 20, name="straight", cooldown_steps=8, keep_checkpoints=9)
    kill_after(tmp_path, "straight", 15, "killed")  # updates 14 and 15 were cooled
    with pytest.raises(CheckpointError, match="max_steps"):
        run(tmp_path, 30, resume=True, name="killed", cooldown_steps=8)
    with pytest.raises(CheckpointError, match="cooldown_steps"):
        run(tmp_path, 20, resume=True, name="killed", cooldown_steps=4)
    resumed, _ = run(tmp_path, 20, resume=True, name="killed", cooldown_steps=8)
    assert_same_weights(straight, resumed)


def test_a_run_that_has_not_cooled_yet_branches_into_another_cooldown_exactly(tmp_path):
    plain, _ = run(tmp_path, 25, name="plain", keep_checkpoints=9)  # the paper's schedule
    cooled, _ = run(tmp_path, 25, name="cooled", cooldown_steps=10)  # from the start
    kill_after(tmp_path, "plain", 15, "branch")  # 15 <= 25 + 1 - 10: nothing cooled yet
    branched, summary = run(tmp_path, 25, resume=True, name="branch", cooldown_steps=10)
    assert summary["step"] == 25
    assert_same_weights(cooled, branched)
    settings = json.loads((tmp_path / "branch/config.json").read_text())["training"]
    assert settings["cooldown_steps"] == 10 and settings["max_steps"] == 25  # what it ran with
    with pytest.raises(AssertionError):  # the check can fail: the same updates, but cooled
        assert_same_weights(plain, branched)


def test_a_checkpoint_of_a_version_without_cooldowns_or_compile_still_resumes(tmp_path):
    run(tmp_path, 5)
    path = tmp_path / "run/checkpoints/last.pt"
    state = torch.load(path, weights_only=True)
    for later in ("cooldown_steps", "compile"):  # as checkpoints written before them lack them
        del state["config"]["training"][later]
    torch.save(state, path)
    _, summary = run(tmp_path, 10, resume=True)
    assert summary["step"] == 10


def test_a_compiled_run_reaches_the_eager_runs_weights_to_rounding(tmp_path):
    """compile="default" changes the kernels, not the arithmetic: without dropout (whose masks
    compiled code draws its own way) the same updates reach the eager run's weights to rounding,
    and the model the loop leaves behind is the eager module, with its own state dict."""
    models = {}
    for mode in (None, "default"):
        torch.manual_seed(0)
        models[mode] = ToyModel(dropout=0.0)
        config = TrainingConfig(max_steps=6, warmup_steps=4, log_every=3, compile=mode)
        training.train(
            models[mode],
            toy_batches,
            config,
            tmp_path / str(mode),
            options=training.RunOptions(device="cpu", progress=False),
        )
    eager, compiled = (models[mode].state_dict() for mode in (None, "default"))
    assert list(compiled) == list(eager)  # no wrapper's prefix in the checkpoints' keys
    start = ToyModel(dropout=0.0).state_dict()
    for name, weight in eager.items():
        assert not torch.equal(weight, start[name]), name  # trained, so the check means something
        torch.testing.assert_close(compiled[name], weight, rtol=1e-5, atol=1e-6)


def test_a_run_may_continue_compiled_and_stop_compiling_again(tmp_path):
    """compile is a resumable change: the kernels differ, the recipe does not."""
    run(tmp_path, 3)
    _, summary = run(tmp_path, 6, resume=True, compile="default")
    assert summary["step"] == 6
    _, summary = run(tmp_path, 8, resume=True)
    assert summary["step"] == 8


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"compile": "reduce-overhead"}, "CUDA graphs need one batch shape"),
        ({"compile": "fast"}, "choose None"),
        ({"compile": "default", "products": "onednn"}, "choose one of the two"),
    ],
)
def test_a_compile_mode_the_loop_cannot_use_is_refused_before_any_file(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        run(tmp_path, 2, **changes)
    assert not (tmp_path / "run").exists()


def read_records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def without_clocks(records: list[dict]) -> list[dict]:
    clocks = {"wall_s", "elapsed_s", "tokens_per_s", "cpu_peak_mib", "cuda_peak_mib"}
    return [{k: v for k, v in r.items() if k not in clocks} for r in records]


@pytest.mark.parametrize("smoothing", [0.1, 0.0])
def test_the_logged_nll_is_the_unsmoothed_cross_entropy_of_the_same_predictions(
    tmp_path, smoothing
):
    """One update, one train record: ``loss`` is the label-smoothed cross-entropy the update
    minimised and ``nll`` that of the same logits without smoothing, each against PyTorch's
    ``F.cross_entropy`` on the model as it was before the update; ``ppl`` is exp(nll)."""
    torch.manual_seed(0)
    model = ToyModel(dropout=0.0)
    before = copy.deepcopy(model)
    config = TrainingConfig(max_steps=1, warmup_steps=1, log_every=1, label_smoothing=smoothing)
    training.train(
        model,
        toy_batches,
        config,
        tmp_path / "run",
        training.Validation(toy_batches(-1)[:1]),
        training.RunOptions(device="cpu", progress=False),
    )
    train_record, valid_record = read_records(tmp_path / "run")
    batch = toy_batches(0)[0]
    with torch.no_grad():
        logits = before(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask).flatten(0, 1)
    target = batch.tgt_out.flatten()
    smoothed = F.cross_entropy(logits, target, ignore_index=0, label_smoothing=smoothing)
    nll = F.cross_entropy(logits, target, ignore_index=0)
    assert train_record["loss"] == pytest.approx(smoothed.item(), rel=1e-6)
    assert train_record["nll"] == pytest.approx(nll.item(), rel=1e-6)
    assert train_record["ppl"] == pytest.approx(math.exp(nll.item()), rel=1e-6)
    if smoothing:
        assert abs(train_record["loss"] - train_record["nll"]) > 1e-3  # two different measures
    else:
        assert train_record["loss"] == train_record["nll"]
    # validation is never smoothed: its loss is its nll, under both names
    assert valid_record["kind"] == "valid" and valid_record["nll"] == valid_record["loss"]
    assert valid_record["ppl"] == pytest.approx(math.exp(valid_record["nll"]))


def test_a_checkpoint_without_the_nll_window_still_resumes(tmp_path):
    """A checkpoint written before the unsmoothed NLL was logged, between two train records:
    the resumed run's next record lacks nll and ppl (half its window is unknown), later records
    have them, and the smoothed losses are those of a run that never stopped."""
    run(tmp_path, 10, name="straight")
    run(tmp_path, 10, time_limit=1e-9)  # stops after update 1, before the first record (3)
    path = tmp_path / "run/checkpoints/last.pt"
    state = torch.load(path, weights_only=True)
    assert state["step"] == 1 and state["log_window"][0]["tokens"] > 0
    for window in state["log_window"]:
        del window["nll"]
    torch.save(state, path)
    _, summary = run(tmp_path, 10, resume=True)
    assert summary["step"] == 10
    train = [r for r in read_records(tmp_path / "run") if r["kind"] == "train"]
    straight = [r for r in read_records(tmp_path / "straight") if r["kind"] == "train"]
    assert [("nll" in r, "ppl" in r) for r in train] == [(False, False)] + [(True, True)] * 3
    assert [r["loss"] for r in train] == [r["loss"] for r in straight]
    assert [r["nll"] for r in train[1:]] == [r["nll"] for r in straight[1:]]


def test_a_killed_runs_log_is_cut_back_to_its_checkpoint(tmp_path):
    """A run killed after update 17 whose last checkpoint is of update 10: the resumed call
    drops the records logged after 10, logs them again, and the log is that of a run that
    never stopped (the clocks aside)."""
    run(tmp_path, 17, name="straight", keep_checkpoints=9)
    kill_after(tmp_path, "straight", 10, "killed")
    assert read_records(tmp_path / "killed")[-1]["step"] == 17  # logged past the checkpoint
    run(tmp_path, 17, resume=True, name="killed")
    killed, straight = (read_records(tmp_path / name) for name in ("killed", "straight"))
    assert without_clocks(killed) == without_clocks(straight)


def test_a_resume_with_another_number_of_processes_is_refused(tmp_path):
    """A checkpoint holds each process's random generators: one written by two processes
    cannot continue exactly in one, and says so."""
    run(tmp_path, 5)
    path = tmp_path / "run/checkpoints/last.pt"
    state = torch.load(path, weights_only=True)
    state["rng"], state["log_window"] = state["rng"] * 2, state["log_window"] * 2
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="written by 2 processes and this run has 1"):
        run(tmp_path, 10, resume=True)


def test_training_data_without_a_batch_is_refused(tmp_path):
    model = ToyModel()
    with pytest.raises(TransformerLibError, match="the training data is empty"):
        training.train(
            model,
            lambda epoch: [],
            TrainingConfig(max_steps=2, warmup_steps=1),
            tmp_path / "run",
            options=training.RunOptions(device="cpu", progress=False),
        )


def test_accumulation_equals_one_big_batch(tmp_path):
    """Two batches accumulated == their concatenation as one batch (dropout off, float64)."""
    from toy_seq2seq import ToyBatch, concat

    torch.manual_seed(0)
    parts = toy_batches(0)[:2]
    whole = concat(parts)
    assert isinstance(whole, ToyBatch)
    results = []
    for batches, accumulation in [(lambda e: parts, 2), (lambda e: [whole], 1)]:
        torch.manual_seed(0)
        model = ToyModel(dropout=0.0).double()
        training.train(
            model,
            batches,
            TrainingConfig(max_steps=1, warmup_steps=1, accumulation=accumulation),
            tmp_path / f"acc{accumulation}",
            options=training.RunOptions(device="cpu", progress=False),
        )
        results.append(model.state_dict())
    for name in results[0]:
        assert torch.allclose(results[0][name], results[1][name], rtol=0, atol=1e-12), name


def test_the_distributed_update_is_the_update_on_one_process_bit_for_bit(tmp_path):
    """On one process, the update that train makes (distributed_update_step) is the training
    chapter's update_step: the same weights, optimizer state and sums, bit for bit, with dropout,
    smoothing, clipping and accumulation over batches of different sizes."""
    results = []
    for distributed in (False, True):
        torch.manual_seed(0)
        model = ToyModel(dropout=0.1)
        config = TrainingConfig(warmup_steps=2, clip_grad_norm=0.5)
        run = training._prepare(model, config, tmp_path, torch.device("cpu"), {})
        sums = [
            training.distributed_update_step(run, model, toy_batches(epoch))
            if distributed
            else objective.update_step(
                model, toy_batches(epoch), run.optimizer, run.scheduler, config, pad_id=PAD
            )
            for epoch in range(4)
        ]
        results.append((model.state_dict(), run.optimizer.state_dict()["state"], sums))
    (weights, moments, sums), (other_weights, other_moments, other_sums) = results
    assert sums == other_sums
    for name in weights:
        assert torch.equal(weights[name], other_weights[name]), name
    for index, state in moments.items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[key], other_moments[index][key]), (index, key)


@pytest.mark.slow
def test_two_processes_with_gloo_hold_identical_weights(tmp_path):
    worker = Path(__file__).parent / "ddp_worker.py"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            worker,
            tmp_path,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rank0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    initial = torch.load(tmp_path / "initial.pt", weights_only=True)
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name
    assert any(not torch.equal(rank0[n], initial[n]) for n in rank0)  # and they did train
    assert (tmp_path / "run/checkpoints/last.pt").is_file()  # written by rank 0


def test_greedy_bleu_scores_the_greedy_translations_of_the_pairs(monkeypatch):
    # Punctuation against words: sacreBLEU's 13a tokenization splits "grass." and "now!", so a
    # helper that scored with another tokenization would give another number.
    pairs = [("ein hund läuft.", "A dog runs on the grass."), ("eine katze!", "A cat sleeps, now!")]
    written = ["A dog runs on grass.", "A cat is sleeping now!"]
    calls = []

    def fake_translate(model, tokenizer, sentences, search):
        calls.append((model, tokenizer, list(sentences), search.beam_size))
        return written

    monkeypatch.setattr(recipe, "translate", fake_translate)
    measured = recipe.greedy_bleu("tokenizer", pairs)("model")
    assert calls == [("model", "tokenizer", ["ein hund läuft.", "eine katze!"], 1)]  # greedy
    references = [target for _, target in pairs]
    expected = sacrebleu.corpus_bleu(written, [references]).score
    assert measured == {"bleu": expected, "bleu_sentences": 2}
    assert 0 < measured["bleu"] < 100
    for other in ("none", "char"):  # the test can tell a helper that tokenizes otherwise
        assert sacrebleu.corpus_bleu(written, [references], tokenize=other).score != expected


def test_evaluate_loss_gives_the_model_its_mode_back_when_a_batch_fails():
    model = ToyModel().train()

    def failing_batches():
        yield toy_batches(-1)[0]
        raise RuntimeError("the data failed")

    with pytest.raises(RuntimeError, match="the data failed"):
        training.evaluate_loss(model, failing_batches(), PAD)
    assert model.training


def test_a_run_with_no_batch_is_refused_before_its_log_is_opened(tmp_path):
    options = training.RunOptions(device="cpu", progress=False)
    with pytest.raises(TransformerLibError, match="returned no batch"):
        training.train(
            ToyModel(), lambda epoch: [], TrainingConfig(max_steps=2), tmp_path, None, options
        )
    assert not (tmp_path / "metrics.jsonl").exists()


def test_a_batch_over_max_tokens_is_refused_naming_the_budget(tmp_path):
    """``train`` holds the batches to ``max_tokens``, the budget the run records: the first epoch
    before the log is opened, a later one when it starts (the run's checkpoints stay whole)."""
    options = training.RunOptions(device="cpu", progress=False)
    widest = max(max(b.src.numel(), b.tgt_in.numel()) for b in toy_batches(0))
    too_small = TrainingConfig(max_steps=2, warmup_steps=1, max_tokens=widest - 1)
    with pytest.raises(DataError, match=f"{widest} padded tokens on a side, over max_tokens"):
        training.train(ToyModel(), toy_batches, too_small, tmp_path / "first", None, options)
    assert not (tmp_path / "first/metrics.jsonl").exists()
    budget = dataclasses.replace(too_small, max_tokens=widest, max_steps=2 * len(toy_batches(0)))

    def wider_later(epoch: int) -> list:
        return toy_batches(epoch) if epoch == 0 else [concat(toy_batches(epoch))]  # 12 pairs

    with pytest.raises(DataError, match="epoch 1 has a batch"):
        training.train(ToyModel(), wider_later, budget, tmp_path / "later", None, options)
    training.train(ToyModel(), toy_batches, budget, tmp_path / "within", None, options)
