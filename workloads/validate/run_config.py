"""What one validation phase is asked to do: the flags of ``validate run``, typed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Phase = Literal["main", "fabric", "pairs", "storage"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    out_dir: Path
    """Shared directory (on Lustre in a cluster) every node writes into."""
    phase: Phase = "main"
    instance_type: str | None = None
    """Catalog type: sets the pairwise floor; without it nodes are compared with each other."""
    multi_max_bytes: int | None = None
    """Largest multi-node message; default 8 GiB on GPU, 4 MiB on CPU."""
    single_max_bytes: int | None = None
    """Largest single-node message; default 8 GiB on GPU, 4 MiB on CPU."""
    pair_bytes: int | None = None
    """Message size of the pairwise tests; default the size the pair floor is stated at (8 GiB) on GPU,
    4 MiB on CPU."""
    pair_timeout_s: float = 120.0
    """Each pair's own limit: a pair that hangs makes both nodes suspects, and the second pass names one."""
    pairing: Literal["topology", "random"] = "topology"
    """'topology': pair nodes in the order the scheduler lists them (neighbours); 'random': shuffled."""
    iters: int = 20
    warmup: int = 5
    pairwise: Literal["auto", "always", "never"] = "auto"
    timeout_s: float = 300.0
    sweep_min_bytes: int | None = None
    """Smallest swept message; default 1 MiB on GPU, 64 KiB on CPU (``submit --budget`` raises it)."""
    storage_bytes: int | None = None
    """Bytes each rank writes and reads in the storage phase; default sized for about 30 s at the
    provisioned throughput (64 MiB..4 GiB), 1 GiB without one, 32 MiB on CPU."""
    ckpt_bytes: int | None = None
    """Checkpoint bytes per rank in the storage phase; default about 20 s at the provisioned
    throughput (16 MiB..1 GiB), 256 MiB without one, 8 MiB on CPU."""
    storage_expect_gbps: float | None = None
    """The file system's provisioned throughput (from the stack outputs), GB/s."""
    pair_job: str = ""
    """``A+B`` when this pairs phase is one pair's job of its own (the launcher's search after a hang,
    one job per pair as cluster-health-scanner runs them): its files carry the pair's name."""

    @property
    def label(self) -> str:
        """The phase's name in the run directory: ``pairs-A+B`` for one pair's job, else the phase."""
        return f"{self.phase}-{self.pair_job}" if self.pair_job else self.phase
