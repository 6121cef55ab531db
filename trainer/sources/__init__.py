"""Feature sources: where training gets the target's taps (`hf`, `cache`, `vllm`); see `base`.

`select.SOURCES` registers each by name; `select.make_source(kind, target, ...)` builds the one a run config
names (`feature_source`).

Nothing is imported here: `cache` (the features file format) is read on machines that have only torch and
safetensors (benchmarks/gpu_trainer.py), while `vllm` needs the HTTP client stack. Import the module you use.
"""
