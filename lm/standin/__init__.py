"""The CPU stand-in server: an OpenAI-compatible server shaped like vLLM (docs/vllm-api.md) on the model layer's
in-process target, for where vLLM cannot run (`make target-standin`, `python -m trainer serve-target`), and
its vLLM-style hidden-state extraction (`extract.py`). The rest of `lm` never imports it."""
