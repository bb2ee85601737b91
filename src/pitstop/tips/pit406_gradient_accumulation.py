"""PIT406 gradient-accumulation: reach a large effective batch by accumulating micro-batches."""

from __future__ import annotations

from pitstop.catalog import Tip


class GradientAccumulation(Tip):
    code = "PIT406"
    slug = "gradient-accumulation"
    title = "Reach a large effective batch in limited memory by accumulating k micro-batches"
    faces = "DKE"
    seeds = ("001", "002", "004")
    truth = (
        "Accumulation reproduces the big batch's gradient only if each micro-batch loss is "
        "divided by k (mean-reduced loss, equal micro-batches) and gradients are zeroed only "
        "after the step. Each seed's snippet gets part of this wrong: seed 002 never divides the "
        "loss (gradients k times too large, PIT802), seed 004 calls `zero_grad()` every "
        "micro-step so nothing accumulates (PIT801), and seed 001 does not divide either and "
        "writes `(i+1) = len(data)`, a syntax error for `==`. Checked here (float64 MLP, batch "
        "64 vs 4 micro-batches of 16): with `loss / k` the gradient matches the full batch to "
        "3e-17; without it, it is 4.0x as large; with a BatchNorm layer the match breaks "
        "(relative difference 0.39), since batch statistics are per micro-batch. It saves "
        "memory, not time (see below)."
    )

    what = """
        `tune` can switch accumulation on for your training: it splits the batch into k
        micro-batches that fit in memory and measures throughput and the loss curve against
        the plain run. The engine divides the loss by k, steps and zeroes only after the
        k-th micro-batch, handles a last group with fewer micro-batches, and under
        DistributedDataParallel skips the gradient all-reduce on all but the last micro-batch
        with `no_sync()` (PIT702).
    """
    why = """
        Activation memory grows with the batch size, so the batch you want may not fit.
        Gradients add up across `backward()` calls until they are reset, so running k
        micro-batches of size B/k and stepping once gives the gradient of the batch of size B
        (divided correctly) with the activation memory of B/k. The price: the k micro-batches
        run one after another, each with smaller matrix products.
    """
    example = """
        ```python
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()                 # every micro-step: nothing accumulates
            loss = criterion(model(x), y)         # not divided by k
            loss.backward()
            if (i + 1) % k == 0:
                optimizer.step()
        ```
    """
    use_instead = """
        ```python
        optimizer.zero_grad()
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y) / k     # mean over the effective batch
            loss.backward()
            if (i + 1) % k == 0 or i + 1 == len(loader):
                optimizer.step()
                optimizer.zero_grad()
        ```
        Under DDP, wrap the first k-1 backward calls in `with model.no_sync():` (PIT702).
        With a ragged last group, weight each micro-batch by its share of the samples.
    """
    when_not = """
        When the large batch fits, run it: accumulation only splits the same work into
        slower pieces. Measured here (MLP 512-1024-1024-10, SGD with momentum, one thread,
        best-of-30 CPU time per 256 samples): one batch of 256 took 16.8 ms, 4 x 64
        accumulated 21.8 ms, 16 x 16 accumulated 41.9 ms. Models with BatchNorm see micro-batch statistics, not
        those of the effective batch. A larger effective batch also changes the optimization
        (learning rate, number of steps per epoch): it is a training-recipe change, not a
        free speed-up.
    """
    references = (
        "PyTorch docs, DistributedDataParallel.no_sync: https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
        "PyTorch docs, Automatic Mixed Precision examples — Gradient accumulation: https://pytorch.org/docs/stable/notes/amp_examples.html",
        "Goyal et al., Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour, 2017: https://arxiv.org/abs/1706.02677",
        "Seed 001 (Gradient accumulation), seed 002 (Gradient accumulation), seed 004 (4.2 Gradient Accumulation Example)",
    )
    engine = "Recipe.accumulate sets the micro-batches per optimizer step: fit weights each loss by its share of the group's samples (1/k for full groups, also right for the epoch's short tail group) and steps once per group; under DDP the non-final micro-batches run in no_sync()."


# --- knob face ---
from pitstop.tune.knob import Knob  # noqa: E402


class AccumulateKnob(Knob, tip="PIT406"):
    """Gradient accumulation: a memory knob. The batch-size sweep of ``pitstop.tune(...)``
    uses it to keep the effective batch the user asked for (``effective_batch=``) while
    the micro-batch shrinks or grows: ``accumulate = effective_batch // micro_batch``."""

    name = "accumulate"
    title = "gradient accumulation"
    modes = ("api",)
    memory_role = "accumulate"
    order = 61

    def values(self, ctx):
        return []  # chosen by the sweep from the effective batch

    def label(self, value):
        return f"accumulate={value}"

    def recipe_fields(self, value, ctx):
        return {"accumulate": int(value)}

    def snippet(self, value, ctx):
        return f"""
            recipe = pitstop.Recipe(accumulate={int(value)})   # the engine divides the loss by {int(value)}
            # by hand: (loss / {int(value)}).backward() every micro-batch, optimizer.step() every {int(value)}
        """


# --- memory fix face ---
from pitstop.doctor.analysis.fits import FixEstimate, MemoryFix  # noqa: E402


class AccumulationFix(MemoryFix, tip="PIT406"):
    """Accumulating k micro-batches of b/k samples keeps the effective batch and holds the
    activations of b/k, while every gradient stays alive from the first micro-batch's backward
    on: the smallest k that fits the limit with a 10% margin (2 when none does, or when the
    run fits already)."""

    title = "gradient accumulation"

    def estimate(self, basis, obs, *, limit, need, oom):
        b = int(round(basis.batch))
        if b < 2:
            return
        ks = [k for k in range(2, b + 1) if b % k == 0]
        k = next((k for k in ks if limit is not None and basis.need(b / k) <= limit / 1.1), ks[0])
        yield FixEstimate(
            code=self.tip, title=f"accumulate {k} micro-batches of {b // k} (effective batch {b} kept)",
            batch=b / k, grads_held=True, how="computed",
            basis=(f"{basis.per_sample / 2**10:.1f} KiB per sample at the peak (measured) x {b - b // k} samples fewer "
                   f"per forward; the gradients ({basis.full_grads / 2**20:.1f} MiB) stay alive between micro-batches"),
            time_cost=None, cost_basis=f"{k} passes of {b // k} samples instead of one of {b}: smaller matrix products, "
                                       "slower per sample; pitstop tune measures it",
            fix=f"Recipe(accumulate={k}) with a loader batch of {b // k}, or (loss / {k}).backward() per micro-batch and "
                f"optimizer.step() every {k}",
            caveat="BatchNorm sees micro-batch statistics")
