#!/usr/bin/python3
"""gpt_oracle.py IN OUT: the PyTorch oracle for tests/test_gpt_torch_oracle.c.

IN (written by the C test): text lines
    L NH C CTX V B T LR BETA1 BETA2 EPS WD CLIP NSTEPS NUMEL NTENSORS
    NTENSORS lines: name offset numel ndim shape0 shape1
    END
then raw little-endian: float32 params[NUMEL], int32 inputs[B*T], int32 targets[B*T],
float32 grads[NUMEL] (the C trainer's gradients, fed to the AdamW check).

OUT: float64 loss, float64 grads[NUMEL] (autograd in float64 from the same fp32 weights),
float32 params[NUMEL], exp_avg[NUMEL], exp_avg_sq[NUMEL] after clip_grad_norm_(CLIP) and NSTEPS
torch.optim.AdamW steps (float32) with the C gradients: weight decay on tensors with ndim >= 2.
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        head = f.readline().split()
        L, NH, C, CTX, V, B, T = (int(x) for x in head[:7])
        lr, b1, b2, eps, wd, clip = (float(x) for x in head[7:13])
        nsteps, numel, nt = int(head[13]), int(head[14]), int(head[15])
        layout = []
        for _ in range(nt):
            p = f.readline().split()
            name, off, n, nd = p[0].decode(), int(p[1]), int(p[2]), int(p[3])
            shape = tuple(int(x) for x in p[4:4 + nd])
            layout.append((name, off, n, shape))
        assert f.readline().strip() == b"END"
        params = np.frombuffer(f.read(4 * numel), dtype="<f4").copy()
        inp = np.frombuffer(f.read(4 * B * T), dtype="<i4").astype(np.int64).reshape(B, T)
        tgt = np.frombuffer(f.read(4 * B * T), dtype="<i4").astype(np.int64).reshape(B, T)
        cgrads = np.frombuffer(f.read(4 * numel), dtype="<f4").copy()

    # ---- loss and gradients in float64 ----
    P = {}
    for name, off, n, shape in layout:
        P[name] = torch.tensor(params[off:off + n].astype(np.float64).reshape(shape), requires_grad=True)
    idx, tg = torch.from_numpy(inp), torch.from_numpy(tgt)
    hs = C // NH
    x = P["wte.weight"][idx] + P["wpe.weight"][:T].unsqueeze(0)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        g = lambda k: P["h.%d.%s" % (l, k)]
        h = F.layer_norm(x, (C,), g("ln1.weight"), g("ln1.bias"), eps=1e-5)
        qkv = F.linear(h, g("attn.qkv.weight"), g("attn.qkv.bias"))
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / (hs ** 0.5)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + F.linear(y, g("attn.proj.weight"), g("attn.proj.bias"))
        h = F.layer_norm(x, (C,), g("ln2.weight"), g("ln2.bias"), eps=1e-5)
        h = F.gelu(F.linear(h, g("mlp.fc.weight"), g("mlp.fc.bias")), approximate="tanh")
        x = x + F.linear(h, g("mlp.proj.weight"), g("mlp.proj.bias"))
    x = F.layer_norm(x, (C,), P["lnf.weight"], P["lnf.bias"], eps=1e-5)
    logits = x @ P["wte.weight"].t()
    loss = F.cross_entropy(logits.view(-1, V), tg.view(-1))
    loss.backward()
    grads = np.zeros(numel, dtype=np.float64)
    for name, off, n, shape in layout:
        grads[off:off + n] = P[name].grad.numpy().reshape(-1)

    # ---- clip + AdamW in float32 with the C gradients ----
    T32 = []
    decay, no_decay = [], []
    for name, off, n, shape in layout:
        t = torch.tensor(params[off:off + n].reshape(shape), dtype=torch.float32, requires_grad=True)
        t.grad = torch.tensor(cgrads[off:off + n].reshape(shape), dtype=torch.float32)
        T32.append(t)
        (decay if len(shape) >= 2 else no_decay).append(t)
    torch.nn.utils.clip_grad_norm_(T32, clip)
    clipped = [t.grad.clone() for t in T32]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(b1, b2), eps=eps)
    for s in range(nsteps):
        for t, gr in zip(T32, clipped):
            t.grad = gr.clone()
        opt.step()
    out_p = np.concatenate([t.detach().numpy().reshape(-1) for t in T32])
    out_m = np.concatenate([opt.state[t]["exp_avg"].numpy().reshape(-1) for t in T32])
    out_v = np.concatenate([opt.state[t]["exp_avg_sq"].numpy().reshape(-1) for t in T32])
    with open(dst, "wb") as f:
        f.write(np.array([loss.item()], dtype="<f8").tobytes())
        f.write(grads.astype("<f8").tobytes())
        for a in (out_p, out_m, out_v):
            f.write(a.astype("<f4").tobytes())
    print("oracle: torch %s, loss %.7f" % (torch.__version__, loss.item()))


if __name__ == "__main__":
    main()
