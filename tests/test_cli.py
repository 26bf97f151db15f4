"""`python -m transformer_lib` answers --help and reports a bad command clearly."""

import subprocess
import sys


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "transformer_lib", *args], capture_output=True, text=True
    )


def test_help_lists_the_commands():
    result = run("--help")
    assert result.returncode == 0, result.stderr
    assert "usage: python -m transformer_lib" in result.stdout
    assert "commands:" in result.stdout


def test_no_command_prints_help():
    result = run()
    assert result.returncode == 0
    assert "usage:" in result.stdout


def test_unknown_command_is_a_usage_error():
    result = run("no-such-command")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
    assert "Traceback" not in result.stderr


def test_importing_the_package_is_light():
    """The package imports without torch or plotting libraries being loaded."""
    code = "import sys, transformer_lib; print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_average_writes_the_mean(tmp_path):
    import torch

    from transformer_lib.training import load_checkpoint, save_checkpoint

    for step, value in [(1, 2.0), (2, 4.0)]:
        state = {"model": {"w": torch.full((3,), value)}, "step": step, "config": {"model": {}}}
        save_checkpoint(state, tmp_path / f"step-{step}.pt")
    result = run(
        "average",
        "--out",
        str(tmp_path / "avg.pt"),
        *(str(tmp_path / f"step-{s}.pt") for s in (1, 2)),
    )
    assert result.returncode == 0, result.stderr
    assert torch.equal(load_checkpoint(tmp_path / "avg.pt")["model"]["w"], torch.full((3,), 3.0))


def test_average_of_a_missing_checkpoint_is_one_line_and_status_2(tmp_path):
    result = run("average", "--out", str(tmp_path / "avg.pt"), str(tmp_path / "none.pt"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: no checkpoint at {tmp_path / 'none.pt'}"
    assert not (tmp_path / "avg.pt").exists()


def test_average_into_a_missing_folder_is_a_usage_error(tmp_path):
    result = run("average", "--out", str(tmp_path / "no" / "avg.pt"), str(tmp_path / "x.pt"))
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr
