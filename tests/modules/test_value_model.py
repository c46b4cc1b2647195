"""`ValueModel.forward`: hand-checked values, and an output that is not a view (FSDP2 root output)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from verl.config.schema import CriticModelConfig
from verl.modules import ValueModel, create_model


class _FixedHidden(nn.Module):
    """A backbone stand-in whose last hidden state is a fixed `(B, T, H)` tensor (times a trainable 1)."""

    def __init__(self, hidden: torch.Tensor) -> None:
        super().__init__()
        self.hidden = hidden
        self.scale = nn.Parameter(torch.ones(()))
        self.config = SimpleNamespace(hidden_size=hidden.shape[-1])

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return SimpleNamespace(last_hidden_state=self.hidden * self.scale)


def _old_formula(model: ValueModel, hidden: torch.Tensor) -> torch.Tensor:
    """The previous forward: `(B, T)` as a view of the head's `(B, T, 1)` output."""
    return model.value_head(hidden.to(model.value_head.weight.dtype)).squeeze(-1).float()


def test_values_hand_checked_and_not_a_view() -> None:
    hidden = torch.tensor([[[1.0, 2.0], [3.0, -1.0], [0.0, 0.0]]])  # (B=1, T=3, H=2)
    model = ValueModel(_FixedHidden(hidden), hidden_size=2)
    with torch.no_grad():
        model.value_head.weight.copy_(torch.tensor([[0.5, -2.0]]))
        model.value_head.bias.fill_(0.25)
    values = model(torch.zeros(1, 3, dtype=torch.long))
    # 1*0.5 + 2*(-2) + 0.25 = -3.25;  3*0.5 + (-1)*(-2) + 0.25 = 3.75;  0 + 0.25
    torch.testing.assert_close(values, torch.tensor([[-3.25, 3.75, 0.25]]), atol=1e-6, rtol=0)
    assert values.shape == (1, 3) and values.dtype == torch.float32
    assert values._base is None, "a view output makes FSDP2 warn of wrong gradients"
    old = _old_formula(model, hidden)
    assert old._base is not None  # the fault this test guards against is real for the old formula
    torch.testing.assert_close(values, old, atol=1e-6, rtol=0)


def test_gradients_equal_old_formula_on_tiny_llama(tiny_model_dir: Path) -> None:
    torch.manual_seed(0)
    model = ValueModel.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.value_head.weight.normal_()
        model.value_head.bias.fill_(-0.5)
    ids = torch.randint(3, 20, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.long)
    target = torch.randn(2, 5)

    def grads(new: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        if new:
            values = model(ids, mask)
        else:
            hidden = model.backbone(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
            values = _old_formula(model, hidden)
        ((values - target) ** 2).mean().backward()
        return values.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    new_v, new_g = grads(True)
    old_v, old_g = grads(False)
    assert new_v.shape == (2, 5) and new_v.abs().max() > 1e-3
    torch.testing.assert_close(new_v, old_v, atol=1e-6, rtol=0)
    assert new_g.keys() == old_g.keys() and "value_head.weight" in new_g
    for name in new_g:
        torch.testing.assert_close(new_g[name], old_g[name], atol=1e-6, rtol=0, msg=name)


def test_bf16_backbone_head_follows_its_dtype(tiny_model_dir: Path) -> None:
    model = ValueModel.from_pretrained(tiny_model_dir, torch_dtype=torch.bfloat16)
    assert model.value_head.weight.dtype == torch.bfloat16
    values = model(torch.tensor([[3, 4, 5]]))
    assert values.dtype == torch.float32 and values.shape == (1, 3) and values._base is None


def test_lora_critic_forward_is_not_a_view_and_trains_the_head(tiny_model_dir: Path) -> None:
    critic = create_model("critic", CriticModelConfig(path=str(tiny_model_dir), lora_rank=2))
    values = critic(torch.tensor([[3, 4, 5, 6]]))
    assert values.shape == (1, 4) and values._base is None
    values.sum().backward()
    assert critic.value_head.weight.grad is not None and critic.value_head.weight.grad.abs().sum() > 0
