"""The scripted brain: an upstream shaped like vLLM's Chat Completions (token ids included) whose policy
drives a coding agent through a realistic session — 5 to 60 turns of listing, reading, searching, one edit
and test runs, with completion lengths and latencies drawn from configured distributions — so a campaign
can be rehearsed on CPUs before GPUs are rented (`python -m rehearsal serve`, `make rehearse`,
`make harvest TARGET=scripted`).

Every answer carries the `x-dflash-rehearsal` header; the proxy tags such calls `rehearsal`, which keeps
them out of every training sequence (docs/factory.md, "Rehearsing a campaign").
"""
