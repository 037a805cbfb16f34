"""Bad weights given to tools/mlstm_ckpt.py's functions, for test/test_pyio.c (the checks are on the C side).

    python3 test/pyio_refuse.py DIR TAG:CKPT:CASE...

For each TAG:CKPT:CASE: takes the weights of CKPT, spoils them as CASE says, hands them
to the function a user would (new, from_state_dict) and saves the result as
DIR/TAG_CASE.ckpt, all in this one process (torch takes a second and a half to
import). Prints, as test/pyio_npz.py does, `TAG:CASE rc=R lines=1 written=W
stderr=MESSAGE`: R is 2 and MESSAGE `error: ...` for a CheckpointError (what the
command line would say), 0 when it was accepted (the C side fails that), -1 and the
traceback for anything else; W is 1 if the output exists after. The sd_ cases need torch.
"""
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import mlstm_ckpt  # noqa: E402

def numpy_case(case, ck):
    """new() from NumPy arrays, one of them the wrong shape."""
    p = {n: np.array(a) for n, a in ck.params.items()}
    if case == "new_W_h_transposed":
        p["W_h"] = p["W_h"].T
    elif case == "new_E_narrow":
        p["E"] = p["E"][:, :-1]
    else:
        raise SystemExit(f"pyio_refuse.py: unknown case {case}")
    return mlstm_ckpt.new(p)


def torch_case(case, ck):
    """from_state_dict() given a state_dict with one thing wrong."""
    import torch
    sd = mlstm_ckpt.state_dict(ck)
    wnorm = ck.wnorm
    if case == "sd_W_h_transposed":
        sd["W_h"] = sd["W_h"].T.contiguous()
    elif case == "sd_E_narrow":
        sd["E"] = sd["E"][:, :-1].contiguous()
    elif case == "sd_W_out_short":  # into a loaded checkpoint, whose D and H are known
        sd["W_out"] = sd["W_out"][:-1]
        ck.params = mlstm_ckpt.from_state_dict(sd, ck.wnorm)
        return ck
    elif case == "sd_extra_key":
        sd["W_extra"] = torch.zeros(3)
    elif case == "sd_complex":
        sd["b"] = sd["b"].to(torch.complex64)
    elif case == "sd_bool":
        sd["b_out"] = sd["b_out"] > 0
    elif case == "sd_int":
        sd["E"] = sd["E"].to(torch.int32)
    elif case == "sd_drop_gains":  # a weight-norm state_dict, told weight norm is off
        wnorm = False
    elif case == "sd_no_gains":  # the other way: gains wanted, none there
        wnorm = True
    else:
        raise SystemExit(f"pyio_refuse.py: unknown case {case}")
    return mlstm_ckpt.new(mlstm_ckpt.from_state_dict(sd, wnorm))


tmp = sys.argv[1]
for arg in sys.argv[2:]:
    tag, ckpt, case = arg.split(":")
    out = os.path.join(tmp, f"{tag}_{case}.ckpt")
    ck = mlstm_ckpt.load(ckpt)
    try:
        mlstm_ckpt.save(out, torch_case(case, ck) if case.startswith("sd_") else numpy_case(case, ck))
        rc, msg = 0, ""
    except mlstm_ckpt.CheckpointError as e:
        rc, msg = 2, f"error: {e}"
    except Exception:
        rc, msg = -1, traceback.format_exc().strip().replace("\n", " | ")
    print(f"{tag}:{case} rc={rc} lines=1 written={int(os.path.exists(out))} stderr={msg}", flush=True)
