"""A decoding rollout one of whose steps ran a module under bfloat16 autocast (as fixtures/autocast_down_proj does in
one forward: fp32 input and weight, bf16 output) joined as calls against a float32 train gave no finding: the joined
output's dtype was lost (None, dtype_match "unknown"), so the dtype path the module changes went unseen. A tensor
joined from parts in several float dtypes is as precise as its least precise part: bfloat16 here."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.diagnose.run import SideOptions, analyze_paths
from rca_lsp.dumps.sources import StepSpan
from rca_lsp.model.stats import TensorStats, aggregate


def _bf16(value: object) -> object:
    """A float32 statistic rounded to bfloat16 (round to nearest even), as a bf16 tensor's statistics are."""
    if not isinstance(value, float):
        return value
    bits = struct.unpack(">I", struct.pack(">f", value))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(struct.unpack(">f", struct.pack(">I", bits))[0])


def _autocast_in_step(variant: str, step: int, into: Path) -> Path:
    """The rollout's layer 1 down_proj under bf16 autocast in one decode step: its output (and the Qwen2MLP's, which
    returns it) bf16, statistics rounded to bf16; the decoder layer's residual add promotes back to fp32."""
    folder = into / variant
    shutil.copytree(FIXTURES / variant, folder)
    path = folder / "rollout" / f"step{step}" / "rank0" / "dump.json"
    document = json.loads(path.read_text())
    for key in ("Module.model.layers.1.mlp.down_proj.Linear.forward.0", "Module.model.layers.1.mlp.Qwen2MLP.forward.0"):
        output = document["data"][key]["output"][0]
        output["dtype"] = "torch.bfloat16"
        for name in ("Max", "Min", "Mean", "Norm"):
            output[name] = _bf16(output[name])
    path.write_text(json.dumps(document, indent=1))
    return folder


def test_parts_in_several_float_dtypes_make_a_tensor_of_the_least_precise() -> None:
    fp32 = TensorStats("torch.float32", [2, 4], 1.0, -1.0, 0.0, 2.0)
    bf16 = TensorStats("torch.bfloat16", [1, 4], 1.0, -1.0, 0.0, 2.0)
    assert aggregate([fp32, bf16, fp32]).dtype == "torch.bfloat16"
    assert aggregate([fp32, fp32]).dtype == "torch.float32"
    assert aggregate([fp32, TensorStats("torch.int64", [1, 4], 1, 0, None, None)]).dtype is None


FC2 = "Module.module.module.decoder.layers.1.mlp.linear_fc2.RowParallelLinear.forward.0"


@pytest.mark.parametrize("step", [1, 3])
def test_a_module_autocast_in_one_decode_step_is_found(tmp_path: Path, step: int) -> None:
    folder = _autocast_in_step("decode_steps_healthy", step, tmp_path)
    analysis = analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=SideOptions(StepSpan())
    )
    assert analysis.suspects, "no finding"
    first = analysis.suspects[0]
    assert (first.train_key, first.classification) == (FC2, "in_module_impl_difference")
    output = first.record.comparison.output
    assert output.rollout is not None and output.rollout.dtype == "torch.bfloat16" and output.dtype_match == "mismatch"


def test_a_healthy_joined_rollout_stays_clean(tmp_path: Path) -> None:
    folder = FIXTURES / "decode_steps_healthy"
    analysis = analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=SideOptions(StepSpan())
    )
    assert analysis.suspects == []
