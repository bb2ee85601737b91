"""A GPT-style training script sized to run out of memory on a GPU (benchmarks/gpu_oom.py drives it).

    python benchmarks/gpu_oom_train.py --batch-size 256 [--layers 8 --width 1024 --seq 1024 --vocab 32000]

fp32, AdamW, the loss over the whole vocabulary: at these sizes one sample of 1024 tokens holds
about a gigabyte for the backward. ``--limit SIZE`` runs every step under pitstop's tracked
allocator with that limit (a CPU rehearsal of the out-of-memory path; not used on a GPU).
"""

import argparse
import contextlib

import torch
from torch.nn import functional as F

from pitstop.examples.models import TinyGPT

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--batch-size", type=int, required=True)
p.add_argument("--layers", type=int, default=8)
p.add_argument("--width", type=int, default=1024)
p.add_argument("--heads", type=int, default=16)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--vocab", type=int, default=32000)
p.add_argument("--steps", type=int, default=50)
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--limit", default=None, help="bytes or e.g. 64MiB: a tracked-allocator limit (CPU rehearsal)")
a = p.parse_args()

torch.manual_seed(0)
model = TinyGPT(vocab_size=a.vocab, block_size=a.seq, n_layer=a.layers, n_head=a.heads, n_embd=a.width,
                dropout=0.0).to(a.device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
limit = None
if a.limit:
    from pitstop.tune.peak import parse_bytes

    limit = parse_bytes(a.limit)
for step in range(a.steps):
    x = torch.randint(0, a.vocab, (a.batch_size, a.seq), device=a.device)
    y = torch.randint(0, a.vocab, (a.batch_size, a.seq), device=a.device)
    guard = contextlib.nullcontext()
    if limit is not None:
        from pitstop.doctor.record.oom.ledger import StorageLedger

        guard = StorageLedger(limit=limit)
        guard.track(model, optimizer, x, y)
    with guard:
        optimizer.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        optimizer.step()
