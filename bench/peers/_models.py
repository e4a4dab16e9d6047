"""The PyTorch peers' models, defined once (torch_mlp.py, torch_cnn.py, torch_ddp.py).

mlp: the default MLP 784-256-128-10 (relu), logits.
cnn: TensorFlow's tutorial CNN, NCHW input (N,1,28,28): conv(32,5x5,same,relu) -> maxpool2 ->
     conv(64,5x5,same,relu) -> maxpool2 -> flatten -> dense(1024,relu) -> dropout(0.4) -> dense(10) logits.
"""


def build(torch, name):
    nn = torch.nn
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(7 * 7 * 64, 1024), nn.ReLU(), nn.Dropout(0.4), nn.Linear(1024, 10))
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    raise ValueError("unknown model %r (mlp or cnn)" % name)
