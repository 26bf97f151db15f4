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
