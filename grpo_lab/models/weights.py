"""The identity of a model's weights: a sha256 over its state dict (every tensor's name, dtype, shape
and bytes, in name order), so two runs can be shown to start from the same weights whatever file
format or loader produced them. Runs record it (`training.trainer`) and the store keys runs by the
embedded model's value (`experiments.store`): runs from different starts never meet."""

import hashlib

import torch


def weights_sha256(model: torch.nn.Module) -> str:
    """The sha256 of `model`'s state dict: each entry's name, dtype, shape and raw bytes, in sorted
    name order (a tied weight is hashed under each of its names, as the state dict lists it)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        data = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}|".encode())
        digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
