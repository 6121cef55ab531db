"""The target model in-process: chat rendering, cached forwards and hidden-state taps.

One `Target` serves both the stand-in server (which renders prompts and runs forwards with a KV cache)
and the trainer (which renders the same conversations and extracts the tapped hidden states), so the
two can never disagree about what the model saw.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import torch
from torch import nn
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from lm.taps import default_target_layer_ids
from wire.chat_view import normalize_message

# Rows of the LM head computed at once by `Target.greedy_ids` (512 x a 49k vocabulary: 100 MB of float32).
GREEDY_ROWS = 512


@dataclass
class ForwardOutput:
    """What one cached forward returns: logits for the last `logits_to_keep` positions (all when 0) and,
    when layer ids were asked for, their features concatenated in the order asked ([B, T, len(ids)·H])."""

    logits: torch.Tensor
    taps: torch.Tensor | None = None


class RenderOptions(TypedDict, total=False):
    """The chat template's options `Target.render` passes on to `Target.render_text`."""

    add_generation_prompt: bool
    continue_final_message: bool
    chat_template_kwargs: Mapping[str, Any] | None


@dataclass
class Target:
    """A causal LM (eval mode, float32 on CPU) and its tokenizer, plus what the server needs to stop."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    stop_token_ids: tuple[int, ...]
    max_position_embeddings: int
    # Where the weights and tokenizer were read from (a folder, or a Hub name): what /v1/models reports as
    # `root`, like vLLM's model path, so a client (the export's id redaction) can load the same tokenizer.
    source: str | None = None
    _cache_kwarg: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # transformers 5 renamed `past_key_values` to `cache` (the old name warns until 5.40).
        params = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"

    # ---- shape -------------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    @property
    def fingerprint(self) -> str:
        """What decides its hidden states, as far as it can be read without hashing weights: where they
        were read from and the config (RoPE scaling included), less what varies with how it was loaded.
        Features stored for one fingerprint are not another's (plain RoPE and YaRN differ past 8k)."""
        config = {
            k: v
            for k, v in self.model.config.to_dict().items()
            if not k.startswith("_") and k not in ("dtype", "torch_dtype", "transformers_version")
        }
        blob = json.dumps([self.source or self.name, config], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def layers(self) -> nn.ModuleList:
        """The decoder layers, in order (`layers[k]`'s output is tap id k)."""
        base = getattr(self.model, self.model.base_model_prefix)
        layers = base.layers
        assert isinstance(layers, nn.ModuleList)
        return layers

    @property
    def final_norm(self) -> nn.Module:
        """The norm between the last layer's output (its tap) and the LM head: logits = head(norm(tap))."""
        norm = getattr(getattr(self.model, self.model.base_model_prefix), "norm")  # noqa: B009
        assert isinstance(norm, nn.Module)
        return norm

    @property
    def embed_tokens(self) -> nn.Module:
        return self.model.get_input_embeddings()

    @property
    def device(self) -> torch.device:
        """Where input ids go: the embedding's device (the first layer's, for a target sharded by a
        `device_map`)."""
        return next(self.embed_tokens.parameters()).device

    @property
    def lm_head(self) -> nn.Module:
        head = self.model.get_output_embeddings()
        assert head is not None
        return head

    def default_layer_ids(self, n_draft: int) -> list[int]:
        """DFlash's tap choice for this target: `n_draft` ids spread evenly from 1 to num_layers − 3
        (Qwen3-8B, 36 layers, 5 → [1, 9, 17, 25, 33]), never the last layer; see
        `lm.taps.default_target_layer_ids`, where that convention lives."""
        return default_target_layer_ids(self.num_layers, n_draft)

    # ---- chat rendering ----------------------------------------------------------------------------
    @property
    def chat_template(self) -> str:
        template = self.tokenizer.chat_template
        if not isinstance(template, str):
            raise ValueError(f"{self.name} has no (single) chat template")
        return template

    @property
    def tool_call_format(self) -> str | None:
        """'hermes' when the template asks for `<tool_call>{json}</tool_call>` (Qwen3), else None."""
        return "hermes" if "<tool_call>" in self.chat_template else None

    @property
    def reasoning_format(self) -> str | None:
        """'think' when the template knows `<think>` blocks (Qwen3), else None."""
        return "think" if "<think>" in self.chat_template else None

    def render_text(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> str:
        """The prompt text the chat template makes of OpenAI-style messages (after vLLM's normalisation)."""
        kwargs = dict(chat_template_kwargs or {})
        text = self.tokenizer.apply_chat_template(
            [normalize_message(m) for m in messages],
            tools=[dict(t) for t in tools] if tools else None,
            add_generation_prompt=add_generation_prompt and not continue_final_message,
            continue_final_message=continue_final_message,
            tokenize=False,
            **kwargs,
        )
        assert isinstance(text, str)
        return text

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Unpack[RenderOptions],
    ) -> list[int]:
        """Prompt token ids exactly as the server feeds them to the model (and reports as
        `prompt_token_ids`): the template's text (`render_text`, with the same options), tokenized
        without added special tokens, as vLLM does."""
        return self.encode(self.render_text(messages, tools, **options), add_special_tokens=False)

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
        assert isinstance(text, str)
        return text

    # ---- forwards ----------------------------------------------------------------------------------
    def new_cache(self) -> DynamicCache:
        try:
            return DynamicCache(config=self.model.config)
        except TypeError:  # transformers 4.x
            return DynamicCache()

    @staticmethod
    def crop_cache(cache: DynamicCache, length: int) -> None:
        """Keep only the first `length` positions of `cache` (drop rejected draft tokens)."""
        extra = cache.get_seq_length() - length
        if extra > 0:
            cache.crop(-extra)  # a negative count removes that many positions in 4.x and 5.x alike

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        cache: DynamicCache | None = None,
        *,
        layer_ids: Sequence[int] = (),
        logits_to_keep: int = 0,
        attention_mask: torch.Tensor | None = None,
    ) -> ForwardOutput:
        """One forward of `input_ids` ([B, T]) appended to `cache` (which it extends in place), returning
        logits and, for `layer_ids`, the tapped features of the new positions."""
        kwargs: dict[str, Any] = {"attention_mask": attention_mask, "logits_to_keep": logits_to_keep}
        if cache is not None:
            kwargs[self._cache_kwarg] = cache
            kwargs["use_cache"] = True
        else:
            kwargs["use_cache"] = False
        with self._capture(layer_ids) as captured:
            out = self.model(input_ids=input_ids, **kwargs)
        taps = _concat(captured, layer_ids) if layer_ids else None
        return ForwardOutput(logits=out.logits, taps=taps)

    @torch.no_grad()
    def tap(
        self,
        input_ids: torch.Tensor,
        layer_ids: Sequence[int],
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states for `layer_ids` in the DFlash convention, concatenated: [B, T, len(ids)·H].

        Id k is the OUTPUT of decoder layer k, i.e. Hugging Face's `hidden_states[k + 1]` — except for the
        last layer, where `hidden_states[num_layers]` has the final norm applied and this returns the
        pre-norm output (what every other layer's entry is). Captured with forward hooks; the LM head is
        not run. No autograd graph, but no inference-mode tensors either, so a trainer can feed them on.
        """
        if not layer_ids:
            raise ValueError("layer_ids is empty")
        base = getattr(self.model, self.model.base_model_prefix)
        with self._capture(layer_ids) as captured:
            base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return _concat(captured, layer_ids)

    @contextlib.contextmanager
    def greedy_ids(self) -> Iterator[list[torch.Tensor]]:
        """The target's greedy next token at every position of the forwards run inside the block ([B, T]
        long per forward, in order): the argmax of its LM head over the final norm's output. A forward
        that keeps the logits of its last position only (``forward(..., logits_to_keep=1)``, ``tap``)
        still norms every position, so the trainer gets greedy labels from the forward it runs for the
        features anyway. The head runs ``GREEDY_ROWS`` rows at a time: a 13k-token prompt's whole logits
        would be 2.6 GB of float32."""
        found: list[torch.Tensor] = []
        head = self.lm_head

        def record(_module: nn.Module, _args: Any, output: Any) -> None:
            h = output[0] if isinstance(output, tuple) else output
            flat = h.reshape(-1, h.shape[-1])
            parts = [head(flat[i : i + GREEDY_ROWS]).argmax(-1) for i in range(0, flat.shape[0], GREEDY_ROWS)]
            found.append(torch.cat(parts).view(h.shape[:-1]))

        handle = self.final_norm.register_forward_hook(record)
        try:
            yield found
        finally:
            handle.remove()

    @contextlib.contextmanager
    def _capture(self, layer_ids: Sequence[int]) -> Iterator[dict[int, torch.Tensor]]:
        for k in layer_ids:
            if not 0 <= k < self.num_layers:
                raise ValueError(f"layer id {k} out of range for {self.num_layers} layers")
        captured: dict[int, torch.Tensor] = {}

        def hook(k: int) -> Any:
            def record(_module: nn.Module, _args: Any, output: Any) -> None:
                # transformers 5 decoder layers return a tensor; 4.x returns a tuple.
                captured[k] = output[0] if isinstance(output, tuple) else output

            return record

        handles = [self.layers[k].register_forward_hook(hook(k)) for k in sorted(set(layer_ids))]
        try:
            yield captured
        finally:
            for handle in handles:
                handle.remove()


def _concat(captured: Mapping[int, torch.Tensor], layer_ids: Sequence[int]) -> torch.Tensor:
    """The taps side by side, on the device of the first one (a target sharded with a `device_map` has
    its layers, and so its taps, on several GPUs)."""
    first = captured[layer_ids[0]].device
    return torch.cat([captured[k].to(first) for k in layer_ids], dim=-1)
