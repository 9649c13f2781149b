"""Real modules exported with torch.export, for the .pt2 and package tests.

Each maker returns ``(module, example_args, dynamic_shapes)``; ``export``
writes the program to a ``.pt2`` file. The modules cover what the reader
converts: parameters, buffers mutated in place (an explicit ``add_`` and
batch norm's running statistics in training mode), a lifted tensor
constant, and a dynamic batch dimension with a range.
"""

import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class SmallCNN(torch.nn.Module):
    """Conv, batch norm (training mode: its running statistics are buffers
    the program writes), ReLU, pooling, a linear head."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.head(y.flatten(1))


class ResNetBlock(torch.nn.Module):
    """A resnet-style stem and residual block with a classifier head, in
    eval mode: torch.export's default (undecomposed) program keeps conv2d,
    batch_norm, max_pool2d, adaptive_avg_pool2d, dropout and linear as the
    CompositeImplicitAutograd operators themselves."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn0 = torch.nn.BatchNorm2d(8)
        self.conv1 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.drop = torch.nn.Dropout(0.5)
        self.fc = torch.nn.Linear(8, 10)
        self.norm = torch.nn.LayerNorm(10)
        for bn in (self.bn0, self.bn1, self.bn2):  # non-trivial statistics
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn0(self.stem(x))), 2)
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + x)
        return self.norm(self.fc(self.drop(self.pool(y).flatten(1))))


class Counter(torch.nn.Module):
    """An in-place buffer update and a lifted tensor constant."""

    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(4))
        self.scale = torch.tensor([1.0, 2.0, 3.0, 4.0])  # a constant
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.steps.add_(1)
        return self.lin(x) * self.scale + self.steps, x.sum()


def mlp():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(4, 16),), None


def cnn_training():
    torch.manual_seed(1)
    return SmallCNN().train(), (torch.randn(2, 3, 8, 8),), None


def resnet_block():
    torch.manual_seed(4)
    return ResNetBlock().eval(), (torch.randn(2, 3, 16, 16),), None


def encoder():
    """A TransformerEncoderLayer in eval mode: linear, layer_norm, dropout
    and scaled_dot_product_attention in the default program."""
    torch.manual_seed(5)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    return layer.eval(), (torch.randn(2, 5, 16),), None


def counter():
    torch.manual_seed(2)
    return Counter(), (torch.randn(3, 4),), None


def mlp_dynamic():
    torch.manual_seed(3)
    batch = torch.export.Dim("batch", min=2, max=64)
    return MLP().eval(), (torch.randn(4, 16),), {"x": {0: batch}}


MAKERS = {"mlp": mlp, "cnn_training": cnn_training, "counter": counter,
          "mlp_dynamic": mlp_dynamic, "resnet_block": resnet_block,
          "encoder": encoder}


def export(maker, path, decompose=False):
    """Exports the module `maker` makes to `path`; returns (module, args).
    The module is a copy in the state the export saw (the export does not
    run forward, so buffers are untouched). With `decompose`, the program
    is first run through run_decompositions() (functional, core ATen: its
    buffer writes become BUFFER_MUTATION outputs)."""
    import copy
    module, args, dyn = maker()
    ep = torch.export.export(copy.deepcopy(module), args, dynamic_shapes=dyn)
    if decompose:
        ep = ep.run_decompositions()
    torch.export.save(ep, str(path))
    return module, args
