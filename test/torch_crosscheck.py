#!/usr/bin/python3
"""Independent PyTorch cross-check for mlstm.c: writes test/fixtures/crosscheck.bin.

The model is tools/mlstm_torch.py (written from the equations, no code or numbers
shared with the C side): autograd in float64 on float32-rounded initial values.
Layout: test/fixtures/README.md.
Run with Debian's torch (1.13):  /usr/bin/python3 test/torch_crosscheck.py [out.bin]
"""
import os, struct, sys
import numpy as np
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from mlstm_ckpt import param_shapes  # noqa: E402 (tools/, beside the reference PyTorch model)
import mlstm_torch  # noqa: E402

torch.set_default_dtype(torch.float64)
Vv, D, H, WNORM, B, T, NSTEPS = 256, 8, 16, 1, 3, 8, 10
LR, BETA1, BETA2, EPS = 1e-2, 0.9, 0.999, 1e-8
OUT = sys.argv[1] if len(sys.argv) > 1 else \
    os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../test/fixtures/crosscheck.bin"))
rng = np.random.default_rng(20160807)
f32 = lambda a: np.asarray(a, dtype=np.float32)  # every stored input is float32-exact

SHAPES = param_shapes(D, H, WNORM)  # [(name, shape)] in the parameter buffer's order
def init(name, shape):
    if name == "E": return rng.normal(0.0, 1.0, shape) * 0.5
    if name[0] == "g": return rng.uniform(0.5, 1.5, shape)        # weight-norm gains
    if name[0] == "b": return rng.uniform(-0.1, 0.1, shape)       # b, b_out
    return rng.uniform(-0.3, 0.3, shape)                          # directions V, W_out
params0 = [f32(init(n, s)) for n, s in SHAPES]
h0, c0 = f32(rng.uniform(-0.5, 0.5, (B, H))), f32(rng.uniform(-0.5, 0.5, (B, H)))

# Data: a random sparse Markov chain over 20 byte values, so there is something to learn.
alphabet = rng.choice(np.arange(32, 127), size=20, replace=False)
trans = rng.dirichlet(np.full(20, 0.2), size=20)
data = np.zeros((NSTEPS, B, T + 1), dtype=np.uint8)
for r in range(B):
    s = rng.integers(20)
    for k in range(NSTEPS):
        for t in range(T + 1):
            data[k, r, t] = alphabet[s]
            s = rng.choice(20, p=trans[s])

def forward(P, batch, h, c):
    """Mean cross-entropy over B*T predictions of one (B, T+1) batch; returns (loss, h_T, c_T)."""
    x = torch.as_tensor(batch[:, :T].astype(np.int64))
    y = torch.as_tensor(batch[:, 1:].astype(np.int64))
    return mlstm_torch.loss(dict(zip([n for n, _ in SHAPES], P)), x, y, h, c)

# ---- single step on batch 0: loss, gradients, d/d(h0,c0), final state
P = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params0]
H0 = torch.tensor(h0, dtype=torch.float64, requires_grad=True)
C0 = torch.tensor(c0, dtype=torch.float64, requires_grad=True)
loss, hT, cT = forward(P, data[0], H0, C0)
loss.backward()
print(f"loss {loss.item():.10f}  (ln 256 = {np.log(256):.4f})")

# ---- self-check: central finite differences in float64 on a few entries of each tensor
# error = |fd - grad| / max(|fd| + |grad|, 1e-4): relative for large entries, absolute/1e-4 for tiny ones
def lossval(tensors):
    with torch.no_grad():
        return forward(tensors[:-2], data[0], tensors[-2], tensors[-1])[0].item()
allt = [p.detach().clone() for p in P] + [H0.detach().clone(), C0.detach().clone()]
allg = [p.grad for p in P] + [H0.grad, C0.grad]
names = [n for n, _ in SHAPES] + ["h0", "c0"]
worst = 0.0
for n, x, g in zip(names, allt, allg):
    flat, gflat = x.view(-1), g.reshape(-1)
    idx = list(rng.choice(flat.numel(), size=min(5, flat.numel()), replace=False))
    idx.append(int(gflat.abs().argmax()))                # always include the largest entry
    err = 0.0
    for j in idx:
        old, dx = flat[j].item(), 1e-5
        flat[j] = old + dx; lp = lossval(allt)
        flat[j] = old - dx; lm = lossval(allt)
        flat[j] = old
        fd = (lp - lm) / (2 * dx)
        err = max(err, abs(fd - gflat[j].item()) / max(1e-4, abs(fd) + abs(gflat[j].item())))
    worst = max(worst, err)
    print(f"  fd check {n:5s}: max err {err:.2e}  (|grad|max {gflat.abs().max().item():.3e})")
assert worst < 1e-5, f"finite-difference check failed: {worst:.2e}"
print(f"finite-difference check passed (worst err {worst:.2e})")

# ---- Adam run: losses[k] on batch k with params after k updates; state carried, detached
Q = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params0]
opt = torch.optim.Adam(Q, lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=0.0)
h, c = torch.tensor(h0, dtype=torch.float64), torch.tensor(c0, dtype=torch.float64)
losses = []
for k in range(NSTEPS):
    opt.zero_grad()
    l, h, c = forward(Q, data[k], h, c)
    l.backward()
    opt.step()                                           # bias correction uses step count k+1
    h, c = h.detach(), c.detach()
    losses.append(l.item())
print("adam losses", " ".join(f"{v:.5f}" for v in losses))

# ---- write the fixture (little-endian)
d64 = lambda a: np.asarray(a, dtype="<f8").tobytes()
with open(OUT, "wb") as fh:
    fh.write(b"MLSTMFX1")
    fh.write(struct.pack("<8i", Vv, D, H, WNORM, B, T, NSTEPS, 0))
    fh.write(struct.pack("<4d", LR, BETA1, BETA2, EPS))
    fh.write(np.concatenate([p.ravel() for p in params0]).astype("<f4").tobytes())
    fh.write(h0.astype("<f4").tobytes() + c0.astype("<f4").tobytes())
    fh.write(data.tobytes())
    fh.write(d64([loss.item()]))
    fh.write(d64(torch.cat([p.grad.reshape(-1) for p in P]).numpy()))
    fh.write(d64(H0.grad.numpy()) + d64(C0.grad.numpy()))
    fh.write(d64(hT.detach().numpy()) + d64(cT.detach().numpy()))
    fh.write(d64(losses))
nparams = sum(int(np.prod(s)) for _, s in SHAPES)
print(f"wrote {OUT}: nparams {nparams}")
