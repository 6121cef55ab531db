"""Interop with vLLM's drafter trainer, speculators: this project's data out, its DFlash checkpoints in.

speculators is never imported (it pins transformers/datasets versions this environment does not meet):
both layouts are written from its documented formats; see docs/trainer.md, "speculators".
"""
