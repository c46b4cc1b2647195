"""`ValueModel`: a causal-LM backbone with a scalar value head per token (the PPO critic).

``V(s_t) = w · h_t + b`` where ``h_t`` is the backbone's last hidden state at token t. The head
is zero-initialised, so a fresh critic predicts V = 0 everywhere (a neutral baseline for rewards
in [0, 1]) and its first updates are driven by the head alone; a zero head is also deterministic,
so two runs with the same checkpoint start from the same critic. (OpenRLHF initialises the head
with a small normal std instead; either is a common choice.)

On disk a value model is a Hugging Face backbone directory (``save_pretrained`` of the backbone,
loadable with ``AutoModel``) plus ``value_head.safetensors`` holding ``weight (1, H)`` and
``bias (1,)``. Loading a plain causal-LM directory gives a fresh (zero) head.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel

__all__ = ["VALUE_HEAD_FILE", "ValueModel"]

VALUE_HEAD_FILE = "value_head.safetensors"


class ValueModel(nn.Module):
    """Backbone (``AutoModel``, no LM head) + ``nn.Linear(hidden, 1)`` value head.

    Args:
        backbone: a transformers base model returning ``last_hidden_state`` (or a peft wrapper).
        hidden_size: H, the width of the backbone's hidden states.
    """

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @property
    def config(self) -> Any:
        """The backbone's Hugging Face config."""
        return self.backbone.config

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """Per-token values.

        Args:
            input_ids: `(B, T)` token ids.
            attention_mask: `(B, T)` 1 on real tokens.
            position_ids: `(B, T)` positions; pass them under left padding.
            **kwargs: forwarded to the backbone.

        Returns:
            `(B, T)` float32 values, ``values[b, t] = V(tokens[b, :t + 1])``; a tensor of its own,
            never a view (``values._base is None``), as FSDP2 expects of a root module's output.
        """
        out = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False, **kwargs
        )
        head = self.value_head
        hidden = out.last_hidden_state.to(head.weight.dtype)
        # `head(hidden).squeeze(-1)` would return a view of the (B, T, 1) output; FSDP2 warns that an
        # in-place op on a root module's view output skips its pre-backward all-gather (wrong
        # gradients). A linear map onto the 1-D weight row gives the same numbers as a fresh (B, T).
        return nn.functional.linear(hidden, head.weight[0], head.bias[0]).float()

    def save_pretrained(self, out_dir: str | Path) -> Path:
        """Write the backbone (Hugging Face format) and ``value_head.safetensors`` to ``out_dir``.

        With a LoRA backbone the backbone part is peft's adapter directory.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(out)
        head = {k: v.detach().contiguous().cpu() for k, v in self.value_head.state_dict().items()}
        save_file(head, str(out / VALUE_HEAD_FILE))
        return out

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> ValueModel:
        """Load a backbone with ``AutoModel.from_pretrained(path, **kwargs)`` and the head if saved.

        A causal-LM checkpoint loads too: its LM head is dropped and the value head starts at zero.
        """
        backbone = AutoModel.from_pretrained(str(path), **kwargs)
        model = cls(backbone, int(backbone.config.hidden_size))
        model.value_head.to(dtype=next(backbone.parameters()).dtype)
        head_file = Path(path) / VALUE_HEAD_FILE
        if head_file.is_file():
            model.value_head.load_state_dict(load_file(str(head_file)))
        return model
