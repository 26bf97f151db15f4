"""Entry point of ``python -m transformer_lib``; the commands live in the generated ``cli`` module."""

from transformer_lib.cli import keep_freed_memory, main

keep_freed_memory()  # the process is the command's own: its allocator settings are ours to make
raise SystemExit(main())
