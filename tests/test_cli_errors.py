"""Errors at the command line: the user's end in one line and exit status 2, bugs propagate.

Most tests call ``cli.main`` in this process, with a library function replaced by one that raises;
a few run the real program to check what a reader sees and the process's exit status.
"""

import errno
import gzip
import io
import subprocess
import sys

import pytest
import torch

from transformer_lib import cli, engine, evaluation
from transformer_lib.book.report import ReportError
from transformer_lib.book.variations import SweepError
from transformer_lib.checkpoints import CheckpointError
from transformer_lib.data import ChecksumError, DataError, DataNotFoundError
from transformer_lib.engine import EngineError
from transformer_lib.errors import TransformerLibError
from transformer_lib.export import ExportError
from transformer_lib.onednn import OneDNNError
from transformer_lib.pretrained import ModelNotFoundError, PretrainedError
from transformer_lib.recipe import RecipeError


def average_raising(monkeypatch, tmp_path, error, *options):
    """Run ``average`` in this process with average_checkpoints raising ``error``."""

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(evaluation, "average_checkpoints", fail)
    return cli.main(
        [*options, "average", "--out", str(tmp_path / "avg.pt"), str(tmp_path / "a.pt")]
    )


USERS_ERRORS = [
    (cli.UsageError("--beam must be at least 1"), "--beam must be at least 1"),
    (DataError("a.txt has 3 lines but b.txt has 2"), "a.txt has 3 lines but b.txt has 2"),
    (ChecksumError("val.de.gz does not have the SHA-256"), "val.de.gz does not have the SHA-256"),
    (DataNotFoundError("Multi30k file val.de.gz not found"), "Multi30k file val.de.gz not found"),
    (
        CheckpointError("x.pt is not readable (first\n  second)"),
        "x.pt is not readable (first second)",
    ),
    (ReportError("run is not a complete report"), "run is not a complete report"),
    (FileNotFoundError("no checkpoint at /runs/x.pt"), "no checkpoint at /runs/x.pt"),
    (
        PermissionError(errno.EACCES, "Permission denied", "/runs/x.pt"),
        "/runs/x.pt: Permission denied",
    ),
    (
        PermissionError(errno.EACCES, "Permission denied", "/tmp/a.tmp", None, "/runs/a.pt"),
        "/tmp/a.tmp and /runs/a.pt: Permission denied",
    ),
]


@pytest.mark.parametrize(
    "error,line", USERS_ERRORS, ids=[type(e).__name__ for e, _ in USERS_ERRORS]
)
def test_an_error_of_the_users_is_one_line_and_status_2(monkeypatch, tmp_path, capsys, error, line):
    assert average_raising(monkeypatch, tmp_path, error) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {line}\n" and captured.out == ""


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("a bug"),
        ValueError("a plain ValueError"),
        KeyError("model"),
        TypeError(),
        OSError(errno.EXDEV, "Invalid cross-device link", "/tmp/a.tmp", None, "/runs/a.pt"),
        OSError(errno.ENOSPC, "No space left on device", "/runs/a.pt"),
    ],
)
def test_any_other_exception_is_a_bug_and_propagates(monkeypatch, tmp_path, capsys, error):
    with pytest.raises(type(error)) as raised:
        average_raising(monkeypatch, tmp_path, error)
    assert raised.value is error
    assert "error:" not in capsys.readouterr().err


# Every error a user can fix, with the built-in class that code may already catch it as.
USERS_CLASSES = [
    (cli.UsageError, ValueError),
    (DataError, ValueError),
    (ChecksumError, ValueError),
    (DataNotFoundError, FileNotFoundError),
    (CheckpointError, ValueError),
    (RecipeError, ValueError),
    (ReportError, ValueError),
    (PretrainedError, ValueError),
    (ModelNotFoundError, FileNotFoundError),
    (EngineError, ValueError),
    (ExportError, ValueError),
    (OneDNNError, RuntimeError),
    (SweepError, ValueError),
]


@pytest.mark.parametrize("kind,builtin", USERS_CLASSES, ids=[k.__name__ for k, _ in USERS_CLASSES])
def test_every_error_of_the_users_has_the_one_base_and_its_builtin_class(
    monkeypatch, tmp_path, capsys, kind, builtin
):
    assert issubclass(kind, TransformerLibError) and issubclass(kind, builtin)
    assert average_raising(monkeypatch, tmp_path, kind("a mistake")) == 2
    assert capsys.readouterr().err == "error: a mistake\n"


def test_the_base_is_the_packages_public_name():
    import transformer_lib

    assert transformer_lib.TransformerLibError is TransformerLibError
    assert "TransformerLibError" in transformer_lib.__all__


def test_debug_prints_the_traceback_and_still_exits_2(monkeypatch, tmp_path, capsys):
    error = DataError("the files are misaligned")
    assert average_raising(monkeypatch, tmp_path, error, "--debug") == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "transformer_lib.data.DataError: the files are misaligned" in lines
    assert lines[-1] == "error: the files are misaligned"


def test_a_bug_in_the_real_program_gives_a_traceback_and_status_1(tmp_path):
    code = (
        "import transformer_lib.evaluation as e\n"
        "e.average_checkpoints = lambda *a, **k: 1 / 0\n"
        "from transformer_lib.cli import main\n"
        f"raise SystemExit(main(['average', '--out', {str(tmp_path / 'a.pt')!r}, 'x.pt']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr


def test_an_unreadable_checkpoint_is_one_line(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_lib",
            "average",
            "--out",
            str(tmp_path / "a.pt"),
            str(bad),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {bad} is not a readable checkpoint")
    assert len(result.stderr.splitlines()) == 1


def test_average_into_a_folder_is_refused(tmp_path, capsys):
    assert cli.main(["average", "--out", str(tmp_path), str(tmp_path / "a.pt")]) == 2
    assert (
        capsys.readouterr().err == f"error: --out {tmp_path} is a folder: name the file to write\n"
    )


# --- train on the reader's own files: every mistake is one line, and nothing is written.


@pytest.fixture
def corpus(tmp_path):
    """Aligned training and validation files, and a few broken ones."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, text in [
        ("train.en", "A dog.\nTwo cats.\n"),
        ("train.fr", "Un chien.\nDeux chats.\n"),
        ("valid.en", "A cat.\n"),
        ("valid.fr", "Un chat.\n"),
        ("short.fr", "Un chien.\n"),
        ("empty.fr", ""),
    ]:
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "latin.fr").write_bytes("Un chien.\nDeux chats à.\n".encode("latin-1"))
    (folder / "cut.fr").write_bytes(gzip.compress(b"Un chien.\n" * 100)[:30])
    return folder


def train(corpus, *options, src="en", tgt="fr"):
    out = corpus.parent / "run"
    return cli.main(
        [
            "train",
            "--profile",
            "ci",
            "--quiet",
            "--src",
            src,
            "--tgt",
            tgt,
            "--out",
            str(out),
            *options,
        ]
    )


def files(corpus, option, *names):
    return [option, *(str(corpus / name) for name in names)]


@pytest.mark.parametrize(
    "train_files,valid_files,message",
    [
        (("train.en", "short.fr"), ("valid.en", "valid.fr"), "has 2 lines but"),
        (("train.en", "none.fr"), ("valid.en", "valid.fr"), "none.fr does not exist"),
        (("train.en", "train.fr"), ("valid.en", "empty.fr"), "empty.fr has 0"),
        (("train.en", "latin.fr"), ("valid.en", "valid.fr"), "latin.fr is not UTF-8 text"),
        (("train.en", "cut.fr"), ("valid.en", "valid.fr"), "cut.fr is a damaged gzip file"),
        (("train.en", "train.fr"), None, "add --valid SRC_FILE TGT_FILE"),
    ],
    ids=["misaligned", "missing", "empty", "not-utf8", "damaged-gzip", "no-valid"],
)
def test_own_corpus_mistakes_are_one_line(corpus, capsys, train_files, valid_files, message):
    options = files(corpus, "--train", *train_files)
    options += files(corpus, "--valid", *valid_files) if valid_files else []
    assert train(corpus, *options) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1, err
    assert not (corpus.parent / "run").exists()


@pytest.mark.parametrize(
    "options,message",
    [
        (["--src", "de", "--tgt", "de"], "both 'de'"),
        (["--src", "en", "--tgt", "fr"], "--tgt fr: Multi30k has de and en"),
        (["--src", "de", "--tgt", "en", "--max-steps", "0"], "max_steps must be at least 1"),
        (["--src", "en", "--tgt", "fr", "--data-dir", ".", "OWN"], "--data-dir is Multi30k's"),
    ],
)
def test_language_and_option_mistakes_are_usage_errors(corpus, capsys, options, message):
    if "OWN" in options:  # the reader's own files
        options = options[:-1] + files(corpus, "--train", "train.en", "train.fr")
        options += files(corpus, "--valid", "valid.en", "valid.fr")
    assert (
        cli.main(["train", "--profile", "ci", "--out", str(corpus.parent / "run"), *options]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1, err


# --- translate reads standard input as the data pipeline reads a file.


def stdin_of(monkeypatch, data: bytes):
    # A locale whose encoding cannot read the input: the command reads UTF-8 whatever it is.
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="ascii"))


def test_translate_gives_one_line_per_line_in_even_with_unicode_separators(
    monkeypatch, capsys, tmp_path
):
    seen = []

    def translate(model, tokenizer, sentences, search, progress=False, decoder_state=None):
        seen.extend(sentences)
        return [f"<{sentence}>" for sentence in sentences]

    monkeypatch.setattr(cli, "_load", lambda args: (None, None, {}, {}))
    monkeypatch.setattr(engine, "translate", translate)  # the name the command calls
    text = "Ein Hund\u2028läuft.\r\n\nZwei\u2029Katzen\x85schlafen.\n"
    stdin_of(monkeypatch, text.encode())
    assert cli.main(["translate", "--checkpoint", str(tmp_path / "x.pt")]) == 0
    out = capsys.readouterr().out
    assert seen == ["Ein Hund\u2028läuft.", "", "Zwei\u2029Katzen\x85schlafen."]
    assert out.split("\n") == [f"<{sentence}>" for sentence in seen] + [""]
    assert len(text.splitlines()) != len(seen)  # what str.splitlines would have made of it


def test_translate_input_that_is_not_utf8_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "_load", lambda args: (None, None, {}, {}))
    stdin_of(monkeypatch, "Ein Hund läuft.\n".encode("latin-1"))
    assert cli.main(["translate", "--checkpoint", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: standard input is not UTF-8 text") and len(err.splitlines()) == 1


# --- a --device that this machine does not have is one line, before any model loads.


def run_program(*arguments: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "transformer_lib", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
    )


def assert_one_line(result: subprocess.CompletedProcess, message: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert result.stdout == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_device_cuda_without_a_gpu_is_one_line_and_status_2(tmp_path, command):
    options = ["--model", "multi30k-de-en-laptop", "--device", "cuda"]
    if command == "evaluate":
        options += ["--limit", "1", "--quiet", "--out", str(tmp_path / "scores.json")]
    result = run_program(command, *options, stdin="Ein Hund.\n")
    assert_one_line(result, "--device cuda: this machine has no CUDA GPU")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "device,message",
    [("gpu", "--device gpu is not a device"), ("cuda:99", "--device cuda:99: this machine has")],
)
def test_a_device_this_machine_lacks_is_one_line(device, message):
    result = run_program("translate", "--model", "multi30k-de-en-laptop", "--device", device)
    assert_one_line(result, message)


def test_the_device_check_accepts_the_cpu_and_the_default(monkeypatch):
    from transformer_lib.cli import check_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check_device(None) == "cpu" and check_device("cpu") == "cpu"
