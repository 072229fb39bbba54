"""python3 -m rediloco.examples.gpt: a small PyTorch GPT trained on a token file as a ReDiLoCo worker.

The model is the reference GPT of the C trainer (worker/gpt, docs/trainer.md) written in torch: the same
parameter names, shapes and order (wte, wpe, h.<l>.{ln1, attn.qkv, attn.proj, ln2, mlp.fc, mlp.proj},
lnf; the output head tied to wte), so PyTorch workers and `bin/worker` GPT workers can train one run
together. The inner optimizer is the C trainer's too: AdamW (betas 0.9/0.95, weight decay on matrices
only), gradient clipping at 1.0, linear warmup then cosine decay. Data: a `bin/worker prepare-data` token
file, each worker on its own slice of the training split (--num-shards/--shard-index), random windows.

    python3 -m rediloco.examples.gpt --redis redis://127.0.0.1:6390 --run demo --data data/kjv.tok \\
        --layers 2 --heads 4 --dim 128 --ctx 128 --sync-every 100 --steps 600 [--init-run]

--device picks where the model trains: cuda (a GPU; a clear error without one), cpu, or auto (the default:
cuda when torch sees a GPU). --dtype bf16 runs the forward and backward under torch.autocast in bfloat16
with fp32 master weights (the parameters, their gradients, AdamW's moments and everything DiLoCo sends stay
fp32); fp32 is plain fp32. The default is bf16 on cuda and fp32 on the CPU. Attention is
torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient kernels on a GPU) where torch
has it (>= 2.0), and AdamW is torch's fused one on a GPU where torch has it; older torch (Debian's 1.13)
gets the plain equivalents.

--ranks R trains as a node of R processes (torch.multiprocessing, DDP inside: the ranks average their
gradients every step) that is ONE worker of the run (rediloco.DiLoCo's process_group): on the CPU with gloo,
on cuda with rank r on GPU r, DDP on NCCL and DiLoCo on a gloo group of the same processes (docs/python.md,
"A node of GPUs"). Each rank trains on its own part of the worker's slice of the text; rank 0 prints the
progress, evaluates and writes the log.

--init-run creates the run from this model's own initial weights first (rediloco.init_run with
--trainer gpt and the model flags, so C GPT workers can join it too; --compress int3 --download update
with --error-feedback on every worker moves 0.77 bytes per parameter per round instead of 6,
docs/compression.md) when there is no run of that name yet; a run that exists is joined as it is (so the
same command starts a worker again), and --force-init replaces it. The model flags must be the run's:
the package checks the model against the run's layout, and a worker started with other flags is refused
with the flags the run's tensors say (the run's --heads is not in its tensors: pass the one it was made with).

Errors (an unknown run, Redis out of reach, a missing --data file) are one line, exit status 1 (2 for a
bad flag). A stop (Ctrl-C, SIGTERM) ends the worker after its current step with one line, "stopped after N
steps (SIGINT): left run R", exit status 0.
"""
import argparse
import inspect
import json
import math
import os
import sys
import tempfile
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # a python3 without torch: say which one, and where torch is
    sys.exit("python3 -m rediloco.examples.gpt needs PyTorch, which %s cannot import (%s): on Debian, "
             "apt-get install python3-torch%s" % (sys.executable, e, "" if sys.executable == "/usr/bin/python3" else
                                                  " and run /usr/bin/python3 -m rediloco.examples.gpt"))

import rediloco

PROG = "python3 -m rediloco.examples.gpt"

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0
TOKEN_MAGIC = b"RDLTOKEN"
TOKEN_HEADER = 64


class Attention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if HAVE_SDPA:  # no T x T probabilities kept on a GPU (flash / memory-efficient kernels)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = torch.nn.Linear(dim, 4 * dim)
        self.proj = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    """model/model.h's gpt_layout, parameter for parameter; GPT-2 init (gpt_init_params' distribution)."""

    def __init__(self, layers=2, heads=4, dim=128, ctx=128, vocab=256):
        super().__init__()
        self.ctx = ctx
        self.wte = torch.nn.Embedding(vocab, dim)
        self.wpe = torch.nn.Embedding(ctx, dim)
        self.h = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.lnf = torch.nn.LayerNorm(dim)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                torch.nn.init.zeros_(p)
            elif ".ln" in name or name.startswith("lnf"):
                torch.nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T].unsqueeze(0)
        for block in self.h:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class Tokens:
    """A prepare-data token file: uint16 little-endian tokens, the first ntrain of them for training."""

    def __init__(self, path):
        try:
            f = open(path, "rb")
        except OSError as e:  # a flag's value that is wrong: a usage error, status 2
            sys.stderr.write("%s: error: --data %s: %s (make a token file with `bin/worker prepare-data`)\n"
                             % (PROG, path, e.strerror))
            raise SystemExit(2) from None
        with f:
            head = f.read(TOKEN_HEADER)
            if len(head) != TOKEN_HEADER or head[:8] != TOKEN_MAGIC:
                raise SystemExit("%s: not a token file (make one with `bin/worker prepare-data`)" % path)
            n = int.from_bytes(head[16:24], "little")
            self.ntrain = int.from_bytes(head[24:32], "little")
            self.vocab = int.from_bytes(head[32:36], "little")
            raw = f.read(2 * n)
        if len(raw) != 2 * n:
            raise SystemExit("%s: truncated (expected %d tokens)" % (path, n))
        self.tok = torch.frombuffer(bytearray(raw), dtype=torch.int16).to(torch.int64) & 0xFFFF
        self.n = n

    def train_batch(self, gen, lo, hi, B, T):
        starts = torch.randint(lo, hi - T - 1, (B,), generator=gen)
        idx = torch.stack([self.tok[s:s + T + 1] for s in starts.tolist()])
        return idx[:, :-1], idx[:, 1:]

    def val_batches(self, nb, B, T):
        """The C trainer's fixed validation windows, evenly spread over the validation split."""
        nval, J = self.n - self.ntrain, nb * B
        for k in range(nb):
            idx = torch.stack([self.tok[s:s + T + 1] for s in
                               (self.ntrain + (j * (nval - T - 1) // (J - 1) if J > 1 else 0)
                                for j in range(k * B, k * B + B))])
            yield idx[:, :-1], idx[:, 1:]


def lr_at(a, step):
    """gpt_lr_at: linear warmup, then cosine to min_lr_ratio * lr at --steps (constant when 0)."""
    if a.warmup > 0 and step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.steps <= 0:
        return a.lr
    lo = a.lr * a.min_lr_ratio
    if step >= a.steps:
        return lo
    span = a.steps - a.warmup
    prog = (step - a.warmup) / span if span > 0 else 1.0
    return lo + 0.5 * (1.0 + math.cos(math.pi * prog)) * (a.lr - lo)


def parse(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="The Redis URL may also come from DL_REDIS_URL (keeps a password out of ps).")
    ap.add_argument("--redis", default=os.environ.get("DL_REDIS_URL"), help="Redis URL of the run")
    ap.add_argument("--run", required=True, help="the run's name")
    ap.add_argument("--worker-id", default=None, help="default <host>-<pid>")
    ap.add_argument("--data", required=True, help="token file from `bin/worker prepare-data`")
    ap.add_argument("--num-shards", type=int, default=1, help="workers splitting the training text (1)")
    ap.add_argument("--shard-index", type=int, default=0, help="this worker's part, 0-based (0)")
    for flag, default in (("layers", 2), ("heads", 4), ("dim", 128), ("ctx", 128), ("vocab", 256)):
        ap.add_argument("--" + flag, type=int, default=default,
                        help="model shape: must be the run's, as at --init-run (%d)" % default)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step (8)")
    ap.add_argument("--seq", type=int, default=128, help="tokens per sequence, <= --ctx (128)")
    ap.add_argument("--lr", type=float, default=4e-4, help="peak AdamW learning rate (4e-4)")
    ap.add_argument("--warmup", type=int, default=100, help="linear warmup steps (100)")
    ap.add_argument("--min-lr-ratio", type=float, default=0.1, help="final lr / peak lr of the cosine (0.1)")
    ap.add_argument("--steps", type=int, default=600, help="inner steps, also the cosine horizon (600)")
    ap.add_argument("--sync-every", type=int, default=100, help="inner steps between syncs (100)")
    ap.add_argument("--final-sync", action="store_true",
                    help="sync once more after the last step (steps since the last sync are not lost)")
    ap.add_argument("--no-bf16", action="store_true", help="send fp32 pseudo-gradients (runs with --compress bf16)")
    ap.add_argument("--error-feedback", action="store_true",
                    help="keep what the run's codec drops from a pseudo-gradient for the next one (int8/int4/int3/int2 "
                         "runs; docs/compression.md)")
    ap.add_argument("--eval-every", type=int, default=100, help="validation loss every N steps, 0 = never (100)")
    ap.add_argument("--eval-batches", type=int, default=8, help="fixed validation batches per evaluation (8)")
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"),
                    help="where the model trains (auto: cuda when torch sees a GPU, else cpu)")
    ap.add_argument("--dtype", default=None, choices=("bf16", "fp32"),
                    help="bf16: autocast with fp32 master weights; fp32 (default: bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--ranks", type=int, default=1,
                    help="processes of this worker, data-parallel inside (DDP): a node of R GPUs or CPU ranks (1)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads, 0 = torch's default (0)")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the initial weights, used by --init-run (1234)")
    ap.add_argument("--data-seed", type=int, default=1, help="data order seed, mixed with the shard index (1)")
    ap.add_argument("--init-run", action="store_true",
                    help="create the run from this model's weights first, unless it exists (then join it)")
    ap.add_argument("--force-init", action="store_true",
                    help="--init-run that replaces a run of that name (its progress is lost)")
    ap.add_argument("--workers", type=int, default=2, help="(--init-run) workers the run waits for (2)")
    ap.add_argument("--shards", type=int, default=8, help="(--init-run) shards (8)")
    ap.add_argument("--compress", default="bf16", choices=("bf16", "fp32", "int8", "int4", "int3", "int2", "topk"),
                    help="(--init-run) the run's pseudo-gradient codec (default bf16; topk: SparseLoCo's "
                         "top-k with an accumulator, docs/compression.md)")
    ap.add_argument("--download", default="params", choices=("params", "update"),
                    help="(--init-run) what a round sends back: parameters, or the encoded update (default params)")
    ap.add_argument("--log", default=None, help="append JSON lines (steps, syncs) to this file")
    ap.add_argument("--quiet", action="store_true", help="no progress line")
    a = ap.parse_args(argv)
    if not a.redis:
        ap.error("--redis URL (or DL_REDIS_URL) is required")
    if a.seq > a.ctx:
        ap.error("--seq %d is longer than the model's --ctx %d" % (a.seq, a.ctx))
    if a.ranks < 1:
        ap.error("--ranks must be 1 or more")
    for flag in ("sync_every", "batch", "seq", "layers", "heads", "dim", "ctx", "vocab"):
        if getattr(a, flag) < 1:
            ap.error("--%s must be 1 or more, got %d" % (flag.replace("_", "-"), getattr(a, flag)))
    if a.steps < 0:
        ap.error("--steps must be 0 (no end) or more, got %d" % a.steps)
    a.init_run = a.init_run or a.force_init
    warn_if_never_syncs(a)
    return a


def warn_if_never_syncs(a):
    """--sync-every larger than --steps: the worker would leave before its first sync and the run would not
    move, silently. Said at start, with the way out (as bin/worker does)."""
    if a.steps > 0 and a.sync_every > a.steps and not a.final_sync:
        sys.stderr.write("WARN --sync-every %d is more than --steps %d: this worker would stop before its first "
                         "sync and send nothing (the run does not move); lower --sync-every, or add --final-sync "
                         "to sync once after the last step\n" % (a.sync_every, a.steps))


def pick_device(a, rank=0):
    """--device and --dtype resolved: (torch.device, "bf16" | "fp32"), rank r of --ranks on GPU r; a clear exit
    when cuda is asked for and torch has no GPU, or fewer GPUs than ranks."""
    if a.device == "cuda" and not torch.cuda.is_available():
        built = getattr(torch.version, "cuda", None)
        raise SystemExit("--device cuda: torch %s sees no GPU (%s); use --device cpu, or auto to take a GPU when "
                         "there is one" % (torch.__version__, "built with CUDA %s: no device or driver" % built
                                           if built else "built without CUDA"))
    cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    if cuda and a.ranks > torch.cuda.device_count():
        raise SystemExit("--ranks %d on cuda: torch sees %d GPU(s) and DDP on NCCL takes one per rank; use --ranks "
                         "%d, or --device cpu" % (a.ranks, torch.cuda.device_count(), torch.cuda.device_count()))
    dev = torch.device("cuda", rank) if cuda and a.ranks > 1 else torch.device("cuda" if cuda else "cpu")
    return dev, a.dtype or ("bf16" if dev.type == "cuda" else "fp32")


def autocast(dev, dtype):
    """bf16: torch.autocast on the device (matrix products in bfloat16, weights stay fp32); fp32: nothing."""
    return torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dtype == "bf16")


def make_inner(model, a, dev):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    extra = {}
    if dev.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters:
        extra["fused"] = True  # one kernel for the whole step (torch >= 2.0)
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                             lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **extra)


def evaluate(model, data, a, dev, dtype):
    with torch.no_grad(), autocast(dev, dtype):
        losses = [model(x.to(dev), y.to(dev))[1].item() for x, y in data.val_batches(a.eval_batches, a.batch, a.seq)]
    return sum(losses) / len(losses)


def progress(a, dl, step, loss, ev, tok_s, tty):
    if a.quiet:
        return
    info = dl.last_sync
    last = "%.2fs" % info.seconds if info else "-"
    sys.stderr.write("%sstep %d/%d  loss %.4f%s  %.0f tok/s  v%d  sync in %d  last sync %s%s" % (
        "\r\033[K" if tty else "", step, a.steps, loss, " eval %.4f" % ev if ev is not None else "", tok_s,
        info.version if info else dl.version, dl.steps_to_sync, last, "" if tty else "\n"))
    sys.stderr.flush()


def train(a, model, data, dl, inner, log, dev, dtype, rank=0):
    """The inner steps. model: the module, or its DDP wrapper on a rank of --ranks (which trains on its part
    of the worker's slice; rank 0 alone evaluates, logs and prints)."""
    span = data.ntrain
    lo, hi = span * a.shard_index // a.num_shards, span * (a.shard_index + 1) // a.num_shards
    lo, hi = lo + (hi - lo) * rank // a.ranks, lo + (hi - lo) * (rank + 1) // a.ranks
    gen = torch.Generator().manual_seed(a.data_seed * 1000003 + a.shard_index * 1009 + rank)
    module = getattr(model, "module", model)  # evaluated unwrapped: no collective of DDP's on rank 0 alone
    quiet = a.quiet or rank != 0
    tty = sys.stderr.isatty()
    t0, synced = time.time(), None
    for step in range(1, a.steps + 1):
        for g in inner.param_groups:
            g["lr"] = lr_at(a, step - 1)
        x, y = data.train_batch(gen, lo, hi, a.batch, a.seq)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with autocast(dev, dtype):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        inner.step()  # DiLoCo's sync happens in here every --sync-every steps
        inner.zero_grad(set_to_none=True)
        dl.report(loss.item(), tokens=x.numel())
        ev = evaluate(module, data, a, dev, dtype) if rank == 0 and a.eval_every and step % a.eval_every == 0 else None
        info = dl.last_sync
        if log and info and info != synced:
            synced = info
            log.write(json.dumps({"event": "sync", "worker": dl.worker_id, "step": step, "round": info.round,
                                  "version": info.version, "seconds": info.seconds, "digest": info.digest,
                                  "stale": info.stale}) + "\n")
        if log:
            rec = {"event": "step", "step": step, "loss": round(loss.item(), 6)}
            if ev is not None:
                rec["eval_loss"] = round(ev, 6)
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if not quiet and (tty or step % 10 == 0 or ev is not None or step == a.steps):
            progress(a, dl, step, loss.item(), ev, a.ranks * step * x.numel() / (time.time() - t0), tty)
    if tty and not quiet:
        sys.stderr.write("\n")


def describe(a, dev, dtype, inner):
    if a.quiet:
        return
    sys.stderr.write("model on %s%s, %s (%s attention, %s AdamW), torch %s%s\n" % (
        dev, " (%s)" % torch.cuda.get_device_name(dev) if dev.type == "cuda" else "",
        "bf16 autocast, fp32 master weights" if dtype == "bf16" else "fp32",
        "SDPA" if HAVE_SDPA else "plain", "fused" if inner.defaults.get("fused") else "plain", torch.__version__,
        "; %d ranks, DDP on %s" % (a.ranks, "NCCL" if dev.type == "cuda" else "gloo") if a.ranks > 1 else ""))


def run_worker(a, model, data, dev, dtype, process_group=None, rank=0):
    """Join the run with model (on dev), train, and report: the whole life of a worker, or of one rank of it."""
    inner = make_inner(model, a, dev)
    if rank == 0:
        describe(a, dev, dtype, inner)
    log = open(a.log, "a") if a.log and rank == 0 else None
    dl = rediloco.DiLoCo(a.redis, a.run, model, inner, sync_every=a.sync_every, worker_id=a.worker_id,
                         bf16=not a.no_bf16, error_feedback=a.error_feedback, process_group=process_group)
    try:
        dl.open()
    except rediloco.Stopped as e:  # a stop while joining (Ctrl-C; in a node, any rank's): not an error
        if rank == 0:
            sys.stderr.write("stopped while joining run %s: %s\n" % (a.run, e))
        return
    except rediloco.DiLoCoError as e:
        raise rediloco.DiLoCoError(other_model(a, dl) or str(e)) from e
    with dl:
        train(a, model, data, dl, inner, log, dev, dtype, rank)
        if a.final_sync and not dl.stopping:
            dl.sync()
        if not dl.stopping and rank == 0:
            version = dl.last_sync.version if dl.last_sync else dl.version
            print("worker %s: %d steps%s, version %s, validation loss %.4f" % (
                dl.worker_id, a.steps, " on %d ranks" % a.ranks if a.ranks > 1 else "", version,
                evaluate(getattr(model, "module", model), data, a, dev, dtype)))


def other_model(a, dl):
    """When run a.run holds another GPT than the model flags make: a sentence with the flags its tensors say
    (all but --heads, which no tensor's shape shows); else None."""
    try:
        from rediloco import checks
        _, layout = checks.peek_run(dl._lib, dl._base_options())
        shapes = {name: shape for name, shape, _ in json.loads(layout or "[]")}
    except (rediloco.DiLoCoError, ValueError):
        return None
    if "wte.weight" not in shapes or "wpe.weight" not in shapes:
        return None
    flags = {"layers": len({n.split(".")[1] for n in shapes if n.startswith("h.")}), "dim": shapes["wte.weight"][1],
             "ctx": shapes["wpe.weight"][0], "vocab": shapes["wte.weight"][0]}
    mine = {k: getattr(a, k) for k in flags}
    if flags == mine:
        return None
    say = lambda f: " ".join("--%s %d" % kv for kv in f.items())  # noqa: E731
    return ("run %r holds another model: its tensors say %s, this worker has %s; start it with the run's model "
            "flags (and its --heads)" % (a.run, say(flags), say(mine)))


def rank_main(rank, a, init_file):
    """One process of --ranks: DDP inside the node, the node one worker of the run."""
    import torch.distributed as dist
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev, dtype = pick_device(a, rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", init_method="file://" + init_file, rank=rank,
                            world_size=a.ranks)
    # DiLoCo's collectives move host memory: on NCCL it gets a gloo group of the same processes
    group = dist.new_group(backend="gloo") if dev.type == "cuda" else dist.group.WORLD
    torch.manual_seed(a.seed)
    model = GPT(a.layers, a.heads, a.dim, a.ctx, a.vocab).to(dev)  # the same weights on every rank
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    try:
        run_worker(a, ddp, Tokens(a.data), dev, dtype, process_group=group, rank=rank)
    except rediloco.DiLoCoError as e:  # (every rank gets the same one: rank 0 says it, in one line)
        if rank == 0:
            sys.stderr.write("%s: %s\n" % (PROG, e))
        sys.exit(1)  # spawn_ranks: a rank that exits 1 has said why
    finally:
        dist.destroy_process_group()


def spawn_ranks(a):
    """--ranks: start the ranks and wait for them. SIGINT and SIGTERM to this launcher are passed on to every
    rank (rediloco.DiLoCo's handlers; the ranks agree on the stop and leave the run after the same step), so
    `kill <launcher>` stops the node cleanly instead of leaving its ranks to find their launcher gone. A rank
    that fails ends the others (torch.multiprocessing): a DiLoCoError (an unknown run, another model) in one
    line and exit 1, anything else raised here with its traceback."""
    import signal
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.spawn(rank_main, args=(a, os.path.join(tmp, "init")), nprocs=a.ranks, join=False)

        def pass_on(signum, frame):
            for p in ctx.processes:
                if p.is_alive():
                    os.kill(p.pid, signum)
        old = {s: signal.signal(s, pass_on) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not ctx.join():
                pass
        except mp.ProcessExitedException:  # a rank that exited 1 said why (rank_main); others raise with a traceback
            return 1
        finally:
            for s, h in old.items():
                signal.signal(s, h)
    return 0


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    try:
        return start(a)
    except rediloco.DiLoCoError as e:  # an unknown run, Redis out of reach, another model: one line
        sys.stderr.write("%s: %s\n" % (PROG, e))
        return 1


def init_run(a, model):
    """--init-run: the run from model's weights, unless one of that name exists (then it is joined as it is:
    the same command starts a worker again); --force-init replaces it."""
    try:
        print(rediloco.init_run(a.redis, a.run, model, workers=a.workers, shards=a.shards, trainer="gpt",
                                layers=a.layers, heads=a.heads, dim=a.dim, ctx=a.ctx, vocab=a.vocab,
                                compress=a.compress, download=a.download, force=a.force_init))
    except rediloco.DiLoCoError as e:
        if a.force_init or "already exists" not in str(e):
            raise
        sys.stderr.write("run %s exists: joining it as it is (--force-init replaces it)\n" % a.run)
    sys.stdout.flush()


def start(a):
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    data = Tokens(a.data)
    if data.vocab > a.vocab:
        raise SystemExit("%s has vocab %d, the model %d" % (a.data, data.vocab, a.vocab))
    dev, dtype = pick_device(a)
    torch.manual_seed(a.seed)
    model = GPT(a.layers, a.heads, a.dim, a.ctx, a.vocab)  # initialised on the CPU: the same weights anywhere
    if a.init_run:
        init_run(a, model)
    if a.ranks > 1:
        return spawn_ranks(a)
    model.to(dev)
    run_worker(a, model, data, dev, dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
