"""The sha256 of a model's weights identifies the weights, not the object or the file they came from."""

import copy

import torch

from grpo_lab.models.weights import weights_sha256


def test_equal_weights_hash_alike_and_one_changed_bit_does_not():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    twin = copy.deepcopy(model)
    assert weights_sha256(model) == weights_sha256(twin)
    with torch.no_grad():
        weight = twin[1].weight
        weight.view(-1).view(torch.int32)[0] ^= 1  # the last bit of one float
    assert weights_sha256(model) != weights_sha256(twin)
    assert weights_sha256(model) != weights_sha256(model.to(torch.float64))
