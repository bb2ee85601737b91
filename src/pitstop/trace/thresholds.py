"""Every number ``pitstop trace`` compares against (torch-free), documented in docs/trace.md."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TraceThresholds"]


@dataclass(frozen=True)
class TraceThresholds:
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
    launch_min_kernels: float = 50.0
    #: PIT403: memset time, share of the step.
    memset_share: float = 0.01
    #: PIT501: kernels launched per optimizer step before the for-loop mode is suspected.
    optimizer_kernels: float = 50.0
    #: PIT702: communication share of kernel time, and exposed (not overlapped) communication
    #: share of the step.
    communication_share: float = 0.3
    exposed_communication: float = 0.1
    #: PIT905: GPU idle no other finding explains, share of the step.
    unexplained_idle: float = 0.15
    #: stragglers: a rank is late when the others wait at least this long for it (seconds)
    #: and this share of the median step.
    straggler_lag_s: float = 0.002
    straggler_rel_lag: float = 0.05
    #: severity cut-offs on the share of the step a fix could save.
    high_share: float = 0.10
    medium_share: float = 0.02
