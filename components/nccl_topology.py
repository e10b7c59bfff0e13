"""The NCCL topology files the catalog describes, and where a pod finds one.

A VM's ``/sys`` shows NCCL neither which GPU shares a PCIe switch with which HCA nor which NUMA node
each pair hangs off; Azure publishes that for its ND sizes as an NCCL topology file, which its HPC
image points ``NCCL_TOPO_FILE`` at. Pods on AKS run another image, so the stack puts the file in a
ConfigMap of the jobs' namespace and the job mounts it, as Azure/aks-rdma-infiniband's NCCL job does
(catalog source ``aks-rdma-nccl-job``: ConfigMap ``nvidia-topology``, key ``topo.xml``, mounted at
``/opt/nvidia-topology``). The file is written here from the catalog's facts (``nccl_topologies``,
each with its source), in NCCL's own XML form (``nccl-topo-xml``): a ``system`` of ``cpu`` elements
(one per NUMA node), each holding the virtual PCIe switches and, under each, its GPU and its HCA.

Pure: no Pulumi, no torch (the stack's in-cluster layer and the launcher share it).
"""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpu_cluster.components.catalog import CATALOG_PATH, CatalogError

# Where the pods find it (aks-rdma-nccl-job: templates/mpi-job.yaml 53, 96-107; util.sh 139-144).
CONFIGMAP = "nvidia-topology"
KEY = "topo.xml"
MOUNT_DIR = "/opt/nvidia-topology"
PATH = f"{MOUNT_DIR}/{KEY}"
ENV = "NCCL_TOPO_FILE"


@dataclass(frozen=True, slots=True, kw_only=True)
class Numa:
    id: int
    affinity: str
    """The NUMA node's CPU mask, as NCCL writes it (comma-separated 32-bit words, highest first)."""
    pairs: tuple[tuple[str, str], ...]
    """(GPU bus id, HCA bus id) behind one PCIe switch each, in the file's order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    name: str
    instance_types: tuple[str, ...]
    cpu: Mapping[str, str]
    """arch, vendor, familyid, modelid of every NUMA node's CPU."""
    link_speed: str
    link_width: int
    classes: Mapping[str, str]
    """PCI class codes: switch, gpu, hca."""
    switch_prefix: str
    """Bus id of the virtual switches without the device number (``ffff:ff``): the n-th is ``<prefix>:<n>.0``."""
    numa: tuple[Numa, ...]
    sources: tuple[str, ...]

    def xml(self) -> str:
        """The topology as NCCL reads it from ``NCCL_TOPO_FILE``."""
        system = ET.Element("system", attrib={"version": "1"})
        link = {"link_speed": self.link_speed, "link_width": str(self.link_width)}
        unknown = {k: "0x0000" for k in ("vendor", "device", "subsystem_vendor", "subsystem_device")}
        n = 0
        for node in self.numa:
            cpu = ET.SubElement(system, "cpu", attrib={"numaid": str(node.id), "affinity": node.affinity, **self.cpu})
            for gpu, hca in node.pairs:
                n += 1
                switch = ET.SubElement(
                    cpu,
                    "pci",
                    attrib={
                        "busid": f"{self.switch_prefix}:{n:02x}.0",
                        "class": self.classes["switch"],
                        **link,
                        **unknown,
                    },
                )
                ET.SubElement(switch, "pci", attrib={"busid": gpu, "class": self.classes["gpu"], **link})
                ET.SubElement(switch, "pci", attrib={"busid": hca, "class": self.classes["hca"], **link})
        ET.indent(system, space="  ")
        return ET.tostring(system, encoding="unicode") + "\n"

    def gpus(self) -> tuple[str, ...]:
        return tuple(g for node in self.numa for g, _ in node.pairs)

    def hcas(self) -> tuple[str, ...]:
        return tuple(h for node in self.numa for _, h in node.pairs)


def _parse(name: str, raw: Mapping[str, Any], sources: set[str]) -> Topology:
    where = f"nccl_topologies.{name}"
    for s in raw.get("sources") or ():
        if s not in sources:
            raise CatalogError(f"{where}.sources: unknown source id {s!r}")
    if not raw.get("sources"):
        raise CatalogError(f"{where}.sources: missing (every topology names where its facts are read)")
    numa = tuple(
        Numa(
            id=int(n["id"]),
            affinity=str(n["affinity"]),
            pairs=tuple((str(g), str(h)) for g, h in n["pairs"]),
        )
        for n in raw["numa"]
    )
    topo = Topology(
        name=name,
        instance_types=tuple(str(t) for t in raw["instance_types"]),
        cpu={str(k): str(v) for k, v in raw["cpu"].items()},
        link_speed=str(raw["link"]["speed"]),
        link_width=int(raw["link"]["width"]),
        classes={str(k): str(v) for k, v in raw["classes"].items()},
        switch_prefix=str(raw["switch_prefix"]),
        numa=numa,
        sources=tuple(str(s) for s in raw["sources"]),
    )
    buses = [*topo.gpus(), *topo.hcas()]
    if len(set(buses)) != len(buses):
        raise CatalogError(f"{where}: a bus id appears twice")
    return topo


def parse(doc: Mapping[str, Any]) -> dict[str, Topology]:
    """Every topology of a catalog document, by instance type."""
    sources = set(doc.get("sources") or {})
    out: dict[str, Topology] = {}
    for name, raw in (doc.get("nccl_topologies") or {}).items():
        topo = _parse(str(name), raw, sources)
        for itype in topo.instance_types:
            if itype in out:
                raise CatalogError(f"nccl_topologies.{name}: {itype} already has topology {out[itype].name}")
            out[itype] = topo
    return out


@functools.cache
def _all(path: Path = CATALOG_PATH) -> dict[str, Topology]:
    with open(path, encoding="utf-8") as fh:
        return parse(yaml.safe_load(fh))


def for_instance(instance_type: str | None) -> Topology | None:
    """The published topology of ``instance_type``, or None where the catalog has none."""
    return _all().get(instance_type or "")
