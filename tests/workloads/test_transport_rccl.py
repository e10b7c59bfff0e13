"""The judge's transport check on RCCL's log (ND MI300X v5 over InfiniBand).

RCCL keeps NCCL's "<host>:<pid>:<tid> [<dev>] NCCL INFO ..." prefix and NCCL's transport lines
("NET/IB : Using ...", "Using network IB", "... via NET/IB/<dev>/GDRDMA"), and adds lines of its
own: the banner ("RCCL version : ...", "HIP version", "ROCm version", "Hostname", "Librccl path",
without the INFO prefix), "NET/Plugin: No plugin found (librccl-net.so)" and "NET/Plugin: Using
internal network plugin." Shape read from ROCm/rccl-tests issue 163 (an RCCL 2.21.5 INFO log; the
catalog's rccl-tests-issue-163) and, for the channel line, NVIDIA/nccl issue 707 ("Channel 01 :
2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA"), whose transport code RCCL shares (RCCL 2.21.5
"Compatibility with NCCL 2.21.5", ROCm/rccl PR 1397). Host names, pids, addresses and device
counts are made up.
"""

from __future__ import annotations

from gpu_cluster.workloads.validate import transport

HEADER = """\
mi300x-0:412:412 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.4<0>
mi300x-0:412:412 [0] NCCL INFO NET/Plugin: No plugin found (librccl-net.so)
mi300x-0:412:412 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : librccl-net.so: cannot open shared object file: No such file or directory : when loading librccl-net.so
mi300x-0:412:412 [0] NCCL INFO NET/Plugin: Using internal network plugin.
mi300x-0:412:412 [0] NCCL INFO Kernel version: 5.15.0-1073-azure
RCCL version : 2.21.5-HEAD:9a0e6a1
HIP version  : 6.3.42134-a9a80e791
ROCm version : 6.3.3.0-74-cbc70b5
Hostname     : mi300x-0
Librccl path : /opt/rocm/lib/librccl.so.1
"""
RCCL_IB_LOG = HEADER + "".join(
    [
        "mi300x-0:412:430 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB "
        "[3]mlx5_3:1/IB [4]mlx5_4:1/IB [5]mlx5_5:1/IB [6]mlx5_6:1/IB [7]mlx5_7:1/IB [RO]; OOB eth0:10.1.0.4<0>\n",
        "mi300x-0:412:430 [0] NCCL INFO Using network IB\n",
        "mi300x-0:412:430 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n",
        "mi300x-0:412:430 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n",
        "mi300x-0:412:430 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n",
    ]
)
# The same node with no verbs library: RCCL falls back to TCP (rccl-tests issue 163's own lines).
RCCL_SOCKET_LOG = HEADER + "".join(
    [
        "mi300x-0:412:430 [2] NCCL INFO Failed to open libibverbs.so[.1]\n",
        "mi300x-0:412:430 [2] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.4<0>\n",
        "mi300x-0:412:430 [2] NCCL INFO Using non-device net plugin version 0\n",
        "mi300x-0:412:430 [2] NCCL INFO Using network Socket\n",
        "mi300x-0:412:430 [2] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/0\n",
    ]
)


def test_rccl_over_infiniband_passes_and_names_only_ib() -> None:
    seen = transport.scan(RCCL_IB_LOG.splitlines())
    # RCCL's "NET/Plugin: Using internal network plugin." names no network.
    assert seen.networks == {"ib"} and seen.inter_node_paths == {"ib"}
    ok, msg = transport.judge("NET/IB", seen)
    assert ok is True and msg == "NCCL used ib"


def test_rccl_falling_back_to_sockets_fails_and_says_so() -> None:
    seen = transport.scan(RCCL_SOCKET_LOG.splitlines())
    assert seen.networks == {"socket"} and seen.inter_node_paths == {"socket"}
    ok, msg = transport.judge("NET/IB", seen)
    assert ok is False and "fell back to TCP sockets" in msg and "NET/IB" in msg


def test_rccl_banner_alone_is_no_transport_evidence() -> None:
    seen = transport.scan(HEADER.splitlines())
    assert not seen.any and transport.judge("NET/IB", seen)[0] is None


# --- GPUDirect RDMA: "/GDRDMA" on a network channel exactly when the NIC reaches GPU memory -------
# (NVIDIA/nccl src/transport/net.cc sendSetup/recvSetup at b647562; ROCm/rccl src/transport/net.cc
# recvSetup at 5ae6000, which appends " comm %p nRanks %02d").
RCCL_NO_GDR_LOG = HEADER + "".join(
    [
        "mi300x-0:412:430 [0] NCCL INFO Using network IB\n",
        "mi300x-0:412:430 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0 comm 0x5581 nRanks 16\n",
        "mi300x-0:412:430 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0 comm 0x5581 nRanks 16\n",
        "mi300x-0:412:430 [1] NCCL INFO Channel 01/0 : 9[1] -> 1[1] [receive] via NET/IB/1/GDRDMA comm 0x5582 nRanks 16\n",
        "mi300x-0:412:430 [1] NCCL INFO Channel 01/0 : 1[1] -> 9[1] [send] via NET/IB/1(9)/GDRDMA/Shared comm 0x5582 nRanks 16\n",
    ]
)


def test_every_network_channel_on_gpudirect_rdma_holds() -> None:
    seen = transport.scan(RCCL_IB_LOG.splitlines())
    assert (seen.net_channels, seen.gdr_channels) == (2, 2)
    assert transport.judge_gdr(seen) == (True, "GPUDirect RDMA on all 2 network channels")


def test_channels_staged_through_host_memory_are_counted_and_named() -> None:
    seen = transport.scan(RCCL_NO_GDR_LOG.splitlines())
    assert (seen.net_channels, seen.gdr_channels) == (4, 2)
    ok, msg = transport.judge_gdr(seen)
    assert ok is False and msg.startswith("GPUDirect RDMA on 2 of 4 network channels")
    assert "peer-memory" in msg and "DMA-BUF" in msg
    # The transport itself is still InfiniBand: that check holds; GDR is its own.
    assert transport.judge("NET/IB", seen)[0] is True


def test_no_network_channel_says_nothing_about_gdr() -> None:
    assert transport.judge_gdr(transport.scan(HEADER.splitlines()))[0] is None
    # Socket channels are network channels without GDR (a fallback the transport check FAILs).
    seen = transport.scan(RCCL_SOCKET_LOG.splitlines())
    assert (seen.net_channels, seen.gdr_channels) == (1, 0)
