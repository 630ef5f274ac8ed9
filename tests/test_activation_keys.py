"""Which dump keys name activation-like modules: by the tokens of the module's own name and class, the same answer for
every call of a module (remembered per key head), and for keys that are not module calls by the key's own tokens."""

from __future__ import annotations

import pytest

from rca_lsp.model.keys import is_activation_like


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("Module.model.layers.0.mlp.act_fn.SiluAndMul.forward.0", True),
        ("Module.model.layers.0.mlp.act_fn.SiluAndMul.forward.257", True),
        ("Module.decoder.layers.3.mlp.activation_func.GELU.forward.1", True),
        ("Module.model.layers.0.mlp.down_proj.RowParallelLinear.forward.0", False),
        ("Module.model.layers.0.self_attn.multi_head.Attention.forward.0", False),  # "multi" is no token of "mul"
        ("Module.model.layers.0.cumulative.Sum.forward.0", False),
        ("Functional.gelu.0.forward", True),  # not a module call: the key's own tokens
        ("Tensor.relu", True),  # no call index: its last part is a name
        ("Tensor.add", False),
        ("Functional.silu.3", True),
        ("Functional.linear.3", False),
    ],
)
def test_activation_like_by_name_and_class_tokens(key: str, expected: bool) -> None:
    assert is_activation_like(key) is expected


def test_keys_sharing_a_head_but_not_a_call_index_are_told_apart() -> None:
    # "Tensor" heads both; only a digit part is a call index that leaves the answer to the head
    assert is_activation_like("Tensor.relu") and not is_activation_like("Tensor.add")
    assert is_activation_like("Tensor.relu") and not is_activation_like("Tensor.7")


def test_every_call_of_a_module_answers_as_its_first() -> None:
    keys = [f"Module.model.layers.{layer}.mlp.act.SiLU.forward.{call}" for layer in range(3) for call in range(300)]
    assert all(map(is_activation_like, keys))
    keys = [f"Module.model.layers.{layer}.mlp.up.Linear.forward.{call}" for layer in range(3) for call in range(300)]
    assert not any(map(is_activation_like, keys))
