"""Merging the rank dumps of one step of a parallel run into one logical dump: planning the layout (pipeline stages,
data-parallel groups, expert-parallel ranks), then tensor/sequence-parallel shards slot by slot, with Megatron's and
vLLM's fused qkv layouts."""
