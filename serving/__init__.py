"""The real serving engine: vLLM (its CPU build on a CPU host) as the target of the factory, the judge of
every drafter and the reference the trainer is checked against.

- `venv.py`: vLLM in an environment of its own (`.venv-vllm`), installed idempotently, and whether it can
  run on this machine (one line saying why not);
- `launch.py`: the flags the project's agents and drafters need (tool-call parser, a chat template that
  renders tools, the served context, a speculative method) as one settings model → argv and environment;
- `check.py`: what a user's own vLLM must accept for the three agents, probed up front;
- `__main__.py`: `python -m serving install | serve | check`.

Nothing here imports vllm or torch: the server runs in its own environment, as a process.
"""
