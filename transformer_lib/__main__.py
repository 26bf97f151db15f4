"""Entry point of ``python -m transformer_lib``; the commands live in the generated ``cli`` module."""

from transformer_lib.cli import main

raise SystemExit(main())
