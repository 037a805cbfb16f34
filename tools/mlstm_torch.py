"""The reference mLSTM in PyTorch: the model of mlstm.h written from its equations
(Krause et al. 2016; weight norm of Salimans and Kingma 2016 as in Radford et al.
2017), with nothing shared with the C code. test/torch_crosscheck.py checks the C
reference against it; tools/mlstm_ckpt.py loads checkpoints into it. Parameters are
named and ordered as mlstm.h's single buffer, so a state_dict is a checkpoint's
weights (mlstm_ckpt.state_dict, from_state_dict).

    model = MLSTM(D=64, H=256)                    # weight norm on, float32
    logits, h, c = model(x)                       # x: (B, T) int64 bytes, zero state
    loss, h, c = model.loss(x, y, h, c)           # mean cross-entropy in nats
"""
import torch

from mlstm_ckpt import param_shapes


def weight(Vd, g):
    """The matrix the cell uses: with weight norm W[j,:] = g[j] V[j,:] / ||V[j,:]||
    per output row; without (g is None) V itself."""
    return Vd if g is None else g[:, None] * Vd / Vd.norm(dim=1, keepdim=True)


def forward(P, x, h, c, reset=None):
    """P: {name: tensor} (a state_dict, gains absent without weight norm).
    x: (B, T) int64 bytes; h, c: (B, H) carried-in state; reset: (B, T) bool or None,
    reset[b, t] zeroes row b's state before step t (a document start, as mlstm.h).
    Returns logits (B, T, 256) and the state after the last step, h_T, c_T (B, H)."""
    H = P["W_h"].shape[1]
    Wx, Wh = weight(P["W_x"], P.get("g_x")), weight(P["W_h"], P.get("g_h"))
    Wmx, Wmh = weight(P["W_mx"], P.get("g_mx")), weight(P["W_mh"], P.get("g_mh"))
    logits = []
    for t in range(x.shape[1]):
        if reset is not None:
            r = reset[:, t, None]
            h, c = torch.where(r, torch.zeros_like(h), h), torch.where(r, torch.zeros_like(c), c)
        e = P["E"][x[:, t]]                              # e_t = E[x_t]           (B, D)
        m = (e @ Wmx.T) * (h @ Wmh.T)                    # m_t = (W_mx e_t) * (W_mh h_{t-1})   (B, H)
        z = e @ Wx.T + m @ Wh.T + P["b"]                 # z_t = W_x e_t + W_h m_t + b         (B, 4H)
        i, f, o = (torch.sigmoid(z[:, k * H:(k + 1) * H]) for k in range(3))  # gates i, f, o
        u = torch.tanh(z[:, 3 * H:])                     # u = tanh(z_u)
        c = f * c + i * u                                # c_t = f*c_{t-1} + i*u
        h = o * torch.tanh(c)                            # h_t = o * tanh(c_t)
        logits.append(h @ P["W_out"].T + P["b_out"])     # logits_t = W_out h_t + b_out       (B, 256)
    return torch.stack(logits, 1), h, c


def loss(P, x, y, h, c, reset=None):
    """Mean cross-entropy (nats) over all B*T predictions of targets y (B, T), as
    mlstm.h's mlstm_forward returns it; and h_T, c_T."""
    logits, h, c = forward(P, x, h, c, reset)
    B, T, V = logits.shape
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T)), h, c


class MLSTM(torch.nn.Module):
    """The model as a Module: parameters E, W_x, g_x, ... (mlstm.h's names and order)."""

    def __init__(self, D, H, wnorm=True, dtype=None):
        super().__init__()
        self.D, self.H, self.wnorm = D, H, int(wnorm)
        for name, shape in param_shapes(D, H, wnorm):  # registered in buffer order
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(shape, dtype=dtype)))

    def _state(self, x, h, c):
        z = lambda: torch.zeros(x.shape[0], self.H, dtype=self.E.dtype, device=self.E.device)
        return (z() if h is None else h), (z() if c is None else c)

    def forward(self, x, h=None, c=None, reset=None):
        """logits (B, T, 256), h_T, c_T from x (B, T); a missing state is zero."""
        return forward(dict(self.named_parameters()), x, *self._state(x, h, c), reset)

    def loss(self, x, y, h=None, c=None, reset=None):
        return loss(dict(self.named_parameters()), x, y, *self._state(x, h, c), reset)
