"""Interop with vLLM's drafter trainer, speculators: this project's data out, its DFlash checkpoints in.

speculators is never imported here (it pins transformers/datasets versions this environment does not
meet): both layouts are written from its formats, and held against speculators itself in an environment
of its own (`env.py`, `make speculators`; tests/trainer/speculators/test_real_package.py).
"""
