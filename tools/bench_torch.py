#!/usr/bin/env python3
"""The same mLSTM training step in PyTorch, written as users write it: autograd
through a Python loop over time steps, weight norm, Adam. It is the CPU baseline
for train.c's speed (tools/bench_cpu.sh runs both on the same threads).

    /usr/bin/python3 tools/bench_torch.py --hidden 256 --threads 2
"""
import argparse, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--embed", type=int, default=64)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--seq-len", type=int, default=64)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
H, D, B, T, V = a.hidden, a.embed, a.batch, a.seq_len, 256
wn = torch.nn.utils.weight_norm

class MLSTM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.wx = wn(torch.nn.Linear(D, 4 * H))            # W_x e + b
        self.wh = wn(torch.nn.Linear(H, 4 * H, bias=False))
        self.wmx = wn(torch.nn.Linear(D, H, bias=False))
        self.wmh = wn(torch.nn.Linear(H, H, bias=False))
        self.out = torch.nn.Linear(H, V)

    def forward(self, x, h, c):                            # x: (B, T) bytes
        e = self.emb(x)
        hs = []
        for t in range(x.shape[1]):
            m = self.wmx(e[:, t]) * self.wmh(h)            # m = (W_mx e) * (W_mh h)
            z = self.wx(e[:, t]) + self.wh(m)
            i, f, o, u = z.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(u)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
        return self.out(torch.stack(hs, 1)), h, c

model = MLSTM()
opt = torch.optim.Adam(model.parameters(), lr=5e-4)
data = torch.randint(0, V, (B, (T + 1) * (a.steps + 2)))
h = torch.zeros(B, H); c = torch.zeros(B, H)

def step(s):
    global h, c
    x = data[:, s * T:(s + 1) * T]; y = data[:, s * T + 1:(s + 1) * T + 1]
    logits, h, c = model(x, h.detach(), c.detach())
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    opt.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()

step(0); step(1)                                            # warm up
t0 = time.perf_counter()
for s in range(2, a.steps + 2): step(s)
dt = time.perf_counter() - t0
flops = 3 * 2 * (5 * H * D + 5 * H * H + V * H)             # doc/design.md, "The model", training
cps = B * T * a.steps / dt
print(f"torch {torch.__version__} H={H} D={D} B={B} T={T} threads={a.threads}: "
      f"{cps:.0f} chars/s, {cps * flops / 1e9:.1f} GFLOP/s")
