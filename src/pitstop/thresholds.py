"""The one thresholds type of the runtime checks (torch-free): doctor (face D), trace (face T)
and the doctor's GPU evidence read their bars from :class:`Thresholds`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Thresholds"]


@dataclass(frozen=True)
class Thresholds:
    """Every number the doctor's and the trace's checks compare against (the one thresholds
    type, also of ``pitstop trace`` and the doctor's GPU evidence), documented in the
    README and docs/trace.md. The stragglers have two bars, by what measures them: the live
    doctor's host timers (``straggler_lag``/``straggler_rel``, loaded-machine noise) and a
    trace's GPU timestamps (``straggler_lag_s``/``straggler_rel_lag``).

    The first three start from the PyTorch profiler TensorBoard plugin's recommendations
    (data loading > 5% of step time, GPU utilisation < 50%, memory > 90%).
    """

    #: PIT101: data wait above this share of the step (profiler plugin: 5%).
    data_wait_share: float = 0.05
    #: MFU below this on a known GPU is reported as low utilisation (profiler plugin: 50%).
    utilisation: float = 0.50
    #: peak memory above this share of device capacity is memory pressure (plugin: 90%).
    memory_share: float = 0.90
    #: the lower bound of a probe's speed-up interval must reach this before a tip is
    #: recommended: below ~10% the difference is within run-to-run noise on a shared
    #: 2-core machine.
    probe_speedup: float = 1.10
    #: a sync call site is "per step" when it fires in at least this share of steps.
    per_step_fraction: float = 0.5
    #: PIT101 (host): host work between the optimizer step and the next training forward
    #: above this share. Higher than the data-wait bar: every loop spends a little there
    #: (moving and converting the batch, zero_grad), and a clean bf16 CNN step measured
    #: 4-6% on this machine; a batch sampled outside a DataLoader measured 83%.
    host_share: float = 0.15
    #: share of the step not explained by any phase before PIT905 says "profile it".
    unexplained_share: float = 0.25
    #: PIT202: live autograd nodes growing by at least this many per step.
    graph_growth_nodes: float = 1.0
    #: PIT401: activations above this share of the accounted memory.
    activation_share: float = 0.5
    #: PIT402: optimizer state above this share of the accounted memory.
    optimizer_state_share: float = 0.3
    #: severity cut-offs on the estimated share of step time (or bytes) a fix saves.
    high_share: float = 0.10
    medium_share: float = 0.02
    #: a straggler (torchrun jobs): the other ranks waited for it in a step by more than
    #: this many seconds, or ``straggler_rel`` of the median step, whichever is larger, in
    #: at least ``straggler_steps`` of the observed steps. 20 ms: scheduling noise on a
    #: loaded 2-core machine stays below it.
    straggler_lag: float = 0.020
    straggler_rel: float = 0.10
    straggler_steps: float = 0.6
    #: PIT703: ranks received identical batches in at least this share of common steps.
    same_batch_share: float = 0.5
    #: PIT706: a DDP rank's replicated parameters, gradients and optimizer state above this
    #: share of its accounted memory (parameters + gradients + optimizer state + activations).
    shard_state_share: float = 0.5
    #: PIT108: the run's busy threads waited for a core (runnable, not running) more than this
    #: share of the step on average; the same 10% as the paired core's contention bar
    #: (``pitstop.paired.CONTENTION``), below which wall time is trusted.
    core_wait_share: float = 0.10
    #: the machine is busy when other processes kept at least this share of its cores busy
    #: during the observed steps (the CPU they got: under contention they wanted more).
    busy_others_share: float = 0.25

    # -- pitstop trace (face T) and the GPU evidence of the doctor (its profiled steps) -------
    #: a kernel shorter than this is "short": its launch (~5-10 us of host time) costs as
    #: much as the kernel itself.
    short_kernel_us: float = 10.0
    #: GPU idle gaps shorter than this between two kernels count as launch gaps.
    launch_gap_us: float = 20.0
    #: PIT101: GPU idle while the host waits in the DataLoader, share of the step
    #: (the profiler plugin's 5% DataLoader bar).
    input_share: float = 0.05
    #: PIT102/PIT103: pageable or un-overlapped host-device copies, share of the step.
    copy_share: float = 0.02
    #: PIT201/PIT203: GPU idle caused by syncs, share of the step.
    sync_share: float = 0.02
    #: PIT301/PIT304: fp32 share of GEMM/conv kernel time, and the GEMM/conv share of kernel
    #: time that makes precision matter.
    fp32_share: float = 0.5
    matmul_share: float = 0.2
    #: PIT601/PIT607: share of kernels that are short, and the launch-idle share of the step.
    short_kernels: float = 0.5
    launch_idle_share: float = 0.05
    #: ... and at least this many kernels per step: with fewer, launch idle is the latency of a
    #: few launch calls (first-call module loading on ROCm, say), not a stream of tiny kernels.
    #: PIT601 waives it for a step that runs compiled code (fusing left few kernels on purpose).
    launch_min_kernels: float = 50.0
    #: PIT403: memset time, share of the step.
    memset_share: float = 0.01
    #: PIT501: kernels launched per optimizer step before the for-loop mode is suspected.
    optimizer_kernels: float = 50.0
    #: PIT702: communication share of kernel time, and exposed (not overlapped) communication
    #: share of the step (PIT705: FSDP's exposed all-gathers and reduce-scatters, doctor and trace).
    communication_share: float = 0.3
    exposed_communication: float = 0.1
    #: PIT905: GPU idle no other finding explains, share of the step.
    unexplained_idle: float = 0.15
    #: stragglers: a rank is late when the others wait at least this long for it (seconds)
    #: and this share of the median step.
    straggler_lag_s: float = 0.002
    straggler_rel_lag: float = 0.05
