"""The PyTorch half of test/test_pyio.c (run by it; the checks are on the C side).

    python3 test/pyio_torch.py CKPT BATCH B T SAME.ckpt NEW.ckpt

Loads CKPT into tools/mlstm_torch.py's model through a state_dict, prints its loss on
BATCH (B*T input bytes, B*T target bytes, B*T reset flags, row-major (B, T)) from the
checkpoint's carried state rows 0..B-1, in float32 and float64. Writes the state_dict
back as SAME.ckpt (must equal CKPT to the byte, run record included). Takes one SGD
step in torch and writes those weights as a fresh checkpoint NEW.ckpt (mlstm_ckpt.new,
G = B rows of zero state, no run record), and prints their loss from a zero state, for
C to load and compare. Prints the byte length of both run records as Python read them
(`record`, `new_record`).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import mlstm_ckpt  # noqa: E402

ckpt, batch, B, T, same, new = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
raw = np.fromfile(batch, np.uint8)
assert raw.size == 3 * B * T, f"{batch}: {raw.size} bytes, want 3*B*T = {3 * B * T}"
x, y, reset = (torch.as_tensor(raw[k * B * T:(k + 1) * B * T].reshape(B, T).astype(np.int64)) for k in range(3))
reset = reset.bool()


def losses(ck, h, c, tag):
    """Prints the loss of ck's weights from state (h, c) in float32 and in float64."""
    for dtype, bits in ((torch.float32, 32), (torch.float64, 64)):
        model = mlstm_ckpt.torch_model(ck, dtype)
        with torch.no_grad():
            loss = model.loss(x, y, torch.tensor(h, dtype=dtype), torch.tensor(c, dtype=dtype), reset)[0]
        print(f"{tag}{bits} {loss.item():.17g}")


ck = mlstm_ckpt.load(ckpt)
print(f"record {len(ck.run)}")
losses(ck, ck.h[:B], ck.c[:B], "torch")

# state_dict -> checkpoint, everything else as loaded: the same bytes
model = mlstm_ckpt.torch_model(ck)
ck.params = mlstm_ckpt.from_state_dict(model.state_dict(), ck.wnorm)
mlstm_ckpt.save(same, ck)

# new weights: one SGD step on this batch, then a fresh checkpoint of them
loss = model.loss(x, y, torch.tensor(ck.h[:B]), torch.tensor(ck.c[:B]), reset)[0]
loss.backward()
with torch.no_grad():
    for p in model.parameters():
        p -= 0.5 * p.grad
fresh = mlstm_ckpt.new(mlstm_ckpt.from_state_dict(model.state_dict(), ck.wnorm), G=B)
mlstm_ckpt.save(new, fresh)
fresh = mlstm_ckpt.load(new)
print(f"new_record {len(fresh.run)}")
losses(fresh, np.zeros((B, ck.H), np.float32), np.zeros((B, ck.H), np.float32), "new")
