"""`vllm`: the target's taps from a running vLLM launched with hidden-state extraction.

vLLM runs with `--speculative-config '{"method": "extract_hidden_states", "num_speculative_tokens": 1,
"draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": AUX}}}'` and
`--kv-transfer-config '{"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
"kv_connector_extra_config": {"shared_storage_path": DIR}}'`, where AUX = `numbering.to_vllm(taps, n)`.
For each sequence this source sends its exact token ids to `/v1/completions` (`max_tokens=1`,
`return_token_ids`), refuses a reply whose echoed ids differ, waits on the file's lock, reads
`hidden_states [T, len(AUX), H]` and `token_ids [T]`, checks them, and keeps the taps in the order asked.

Checks, each refusing the whole batch (never a partial feature set): the server's launch ids against
the drafter's taps (`numbering.check_launch`); the echoed prompt and the file's token ids; shape, dtype
and finiteness; the appended final layer — through the target's final norm and LM head its last row must
predict the token the server generated; optionally a reference forward of the first sequence
in-process (small targets). Transport errors, 429 and 5xx are retried with exponential backoff.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import torch
from pydantic import BaseModel, ConfigDict, Field
from safetensors.torch import load_file
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from trainer.sources.base import FeatureError, prefix_groups, taps_via_many
from trainer.sources.numbering import TapNumberingError, check_launch, from_vllm

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class VllmSourceSettings(BaseModel):
    """How to reach the extraction server; the `vllm` key of a run config."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field("http://127.0.0.1:8000", description="The vLLM server (no /v1).")
    model: str | None = Field(None, description="Served model name; default the server's first model.")
    launched_aux_layer_ids: list[int] | None = Field(
        None,
        description="eagle_aux_hidden_state_layer_ids the server was launched with (vLLM numbering, "
        "final layer last); checked against the drafter's taps.",
    )
    local_storage_path: str | None = Field(
        None, description="Where this machine mounts the server's shared_storage_path (default: same path)."
    )
    dtype: str | None = Field(None, description="Refuse files of another dtype (float32, bfloat16, float16).")
    keep_files: bool = Field(False, description="Keep each hidden-state file after reading it.")
    concurrency: int = Field(8, ge=1, description="Requests in flight at once.")
    timeout_s: float = Field(600.0, gt=0, description="Per request, and per wait for a file's lock.")
    attempts: int = Field(5, ge=1, description="Tries per request (transport errors, 429, 5xx).")
    backoff_s: float = Field(1.0, gt=0, description="First retry wait; doubles up to 60 s.")
    verify_with_reference: bool = Field(
        False, description="Compare the first sequence with an in-process forward (small targets)."
    )


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code in (
        408,
        429,
        500,
        502,
        503,
        504,
    )


class VllmSource:
    name = "vllm"

    def __init__(
        self,
        settings: VllmSourceSettings,
        num_layers: int,
        hidden_size: int,
        head: Callable[[torch.Tensor], torch.Tensor] | None = None,
        reference: Callable[[Sequence[int], Sequence[int]], torch.Tensor] | None = None,
    ) -> None:
        if settings.launched_aux_layer_ids is None:
            raise FeatureError("vllm.launched_aux_layer_ids: say which aux ids the server was launched with")
        self.settings, self.n, self.h = settings, num_layers, hidden_size
        self.launched = list(settings.launched_aux_layer_ids)
        self.project_ids = from_vllm(self.launched, num_layers)  # refuses a list without the final layer
        self.head, self.reference = head, reference
        if settings.verify_with_reference and reference is None:
            raise FeatureError("vllm.verify_with_reference needs the whole target loaded in-process")
        self.http = httpx.Client(base_url=settings.url.rstrip("/"), timeout=settings.timeout_s)
        self.requests = 0  # sent, for the prefix-sharing figures and tests
        self._send = retry(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(settings.attempts),
            wait=wait_exponential(multiplier=settings.backoff_s, max=60),
            reraise=True,
        )(self._post)
        self._verified = not settings.verify_with_reference

    # ---- one request ---------------------------------------------------------------------------------
    def _model(self) -> str:
        if self.settings.model is None:
            self.settings.model = str(self.http.get("/v1/models").raise_for_status().json()["data"][0]["id"])
        return self.settings.model

    def _post(self, ids: list[int]) -> dict[str, Any]:
        body = {
            "model": self._model(),
            "prompt": ids,
            "max_tokens": 1,
            "temperature": 0.0,
            "return_token_ids": True,
        }
        self.requests += 1
        return dict(self.http.post("/v1/completions", json=body).raise_for_status().json())

    def _path(self, reply: dict[str, Any]) -> Path:
        params = reply.get("kv_transfer_params") or {}
        named = params.get("hidden_states_path")
        if not named:
            raise FeatureError("the reply names no kv_transfer_params.hidden_states_path: is extraction on?")
        path = Path(named)
        return (
            Path(self.settings.local_storage_path) / path.name if self.settings.local_storage_path else path
        )

    def _read(self, path: Path) -> dict[str, torch.Tensor]:
        lock = Path(str(path) + ".lock")
        deadline = time.monotonic() + self.settings.timeout_s
        if lock.exists():  # the connector holds it exclusively until the file is written
            with lock.open() as fh:
                while True:
                    try:
                        fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise FeatureError(
                                f"{path} still locked after {self.settings.timeout_s}s"
                            ) from None
                        time.sleep(0.05)
        if not path.exists():
            raise FeatureError(
                f"{path} does not exist here (set vllm.local_storage_path to the shared mount)"
            )
        data = load_file(str(path))
        if not self.settings.keep_files:
            path.unlink(missing_ok=True)
            lock.unlink(missing_ok=True)
        return data

    def _check(self, ids: list[int], reply: dict[str, Any], data: dict[str, torch.Tensor]) -> torch.Tensor:
        states, token_ids = data.get("hidden_states"), data.get("token_ids")
        if states is None or token_ids is None:
            raise FeatureError(f"the hidden-state file holds {sorted(data)}, not hidden_states and token_ids")
        if token_ids.tolist() != ids:
            raise FeatureError("the hidden-state file's token_ids differ from the sequence sent")
        want = (len(ids), len(self.launched), self.h)
        if tuple(states.shape) != want:
            raise TapNumberingError(
                f"hidden_states {tuple(states.shape)}, expected [T, aux ids, H] = {want} for aux ids {self.launched}"
            )
        if not states.is_floating_point() or (
            self.settings.dtype and states.dtype != DTYPES[self.settings.dtype]
        ):
            raise FeatureError(
                f"hidden_states dtype {states.dtype}, expected {self.settings.dtype or 'floating'}"
            )
        if not torch.isfinite(states).all():
            raise FeatureError("hidden_states hold NaN or inf")
        if self.head is not None:
            self._check_final_layer(states, reply)
        return states

    def _check_final_layer(self, states: torch.Tensor, reply: dict[str, Any]) -> None:
        """The appended slot is the last layer's output iff norm + LM head of its last row predict the
        token the server generated (greedy; within the top 5 when the server ran in reduced precision)."""
        generated = (reply["choices"][0].get("token_ids") or [None])[0]
        if generated is None:
            return
        head = self.head
        assert head is not None
        with torch.no_grad():
            logits = head(states[-1, -1].float()).float()
        top = 1 if states.dtype == torch.float32 else 5
        if int(generated) not in logits.topk(top).indices.tolist():
            raise TapNumberingError(
                f"the last extracted slot does not predict the generated token {generated}: it is not the "
                f"final layer {self.n} (launch vLLM with the final layer appended to the aux ids)"
            )

    def _one(self, ids: list[int]) -> torch.Tensor:
        try:
            reply = self._send(ids)
        except httpx.HTTPError as exc:
            raise FeatureError(
                f"extraction request failed after {self.settings.attempts} tries: {exc}"
            ) from exc
        echoed = (reply.get("choices") or [{}])[0].get("prompt_token_ids")
        if echoed != ids:
            raise FeatureError("the server echoed other prompt ids than were sent (a retokenized prompt?)")
        return self._check(ids, reply, self._read(self._path(reply)))

    # ---- the seam ------------------------------------------------------------------------------------
    def taps_many(self, sequences: Sequence[Sequence[int]], layer_ids: Sequence[int]) -> list[torch.Tensor]:
        check_launch(layer_ids, self.launched, self.n)
        slots = [self.project_ids.index(k) for k in layer_ids]
        owner = prefix_groups(sequences)
        todo = sorted(set(owner))
        with ThreadPoolExecutor(self.settings.concurrency) as pool:  # any failure propagates: all or none
            states = dict(zip(todo, pool.map(lambda i: self._one(list(sequences[i])), todo), strict=True))
        out = [states[owner[i]][: len(s), slots].flatten(1) for i, s in enumerate(sequences)]
        if not self._verified and self.reference is not None and sequences:
            self._verify(list(sequences[0]), layer_ids, out[0])
        return out

    def _verify(self, ids: list[int], layer_ids: Sequence[int], got: torch.Tensor) -> None:
        reference = self.reference
        assert reference is not None
        ref = reference(ids, layer_ids).float()
        tol = 1e-4 if got.dtype == torch.float32 else 5e-2
        err = ((got.float() - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-6)).max().item()
        if err > tol:
            raise TapNumberingError(
                f"the server's features differ from an in-process forward of the same taps (relative error "
                f"{err:.3g} > {tol}): the server extracts other layers than vllm.launched_aux_layer_ids says"
            )
        self._verified = True

    def taps(self, input_ids: torch.Tensor, layer_ids: Sequence[int]) -> torch.Tensor:
        return taps_via_many(self, input_ids, layer_ids)
