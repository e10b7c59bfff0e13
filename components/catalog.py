"""The hardware catalog: instance shapes, fabrics, bandwidth floors and prices, with sources.

Both sides of the project read it: components size the infrastructure from it, and the
validation job judges a running cluster against it. It imports nothing from Pulumi so that
workloads can use it on the cluster. The data lives in ``catalog.yaml`` beside this file; this
module only loads, checks and types it; components/bandwidth.py derives the expected busbw and
the floors from it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from gpu_cluster.components.bandwidth import PATHS, BandwidthModel, Reference, calibrate, calibrate_latency
from gpu_cluster.components.bandwidth_confidence import confidence
from gpu_cluster.components.bandwidth_baseline import parse as parse_baseline

# The catalog file's basics and its fabric facts live beside this module; read from here too.
from gpu_cluster.components.catalog_fabrics import (
    DEVICE_KINDS as DEVICE_KINDS,
    GPU_RUNTIMES as GPU_RUNTIMES,
    FabricImage as FabricImage,
    ImageBuild as ImageBuild,
    ImageFact as ImageFact,
    InstallerFact as InstallerFact,
    StartupCheck as StartupCheck,
    installer_fact as installer_fact,
    load_fabric_facts as load_fabric_facts,
    load_runtime_images as load_runtime_images,
    parse_fabric_facts as parse_fabric_facts,
    parse_runtime_images as parse_runtime_images,
    rxdm_fact as rxdm_fact,
)
from gpu_cluster.components.catalog_file import (
    CATALOG_PATH as CATALOG_PATH,
    CLOUDS as CLOUDS,
    FABRICS as FABRICS,
    CatalogError as CatalogError,
    Cloud as Cloud,
    Fabric as Fabric,
    Source as Source,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Accelerator:
    vendor: Literal["nvidia", "amd"]
    """Who makes the GPU; decides the Kubernetes resource name and the collectives library."""
    model: str
    count: int
    """GPUs per node."""
    memory_gib: float
    """Device memory per GPU."""
    peak_dense_bf16_tflops: float | None
    """Vendor's dense (no sparsity) bf16 tensor peak per GPU, the denominator of MFU; None for a GPU
    without bf16 tensor cores (T4, judge-only types)."""
    memory_bandwidth_tbps: float
    """Vendor's device memory bandwidth per GPU in TB/s."""
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Network:
    fabric: Fabric
    total_gbps: float
    """Aggregate GPU-fabric line rate per node in Gbit/s."""
    network_cards: int
    """AWS network cards (EFA layout), or NICs in total on GCP/Azure."""
    efa_interfaces: int
    """EFA interfaces a node can attach (AWS); 0 elsewhere."""
    gpu_nics: int
    """NICs dedicated to GPU traffic (GCP GPUDirect VPCs, Azure IB ports); 0 on AWS."""
    gvnics: int
    """GCP host (gVNIC) interfaces; 0 elsewhere."""
    mtu: int
    nic_type: str
    source: str
    rdma: bool = True
    """The type has an RDMA (or GPUDirect) fabric between nodes; False only where the catalog says it
    has none, and then NCCL over TCP sockets between nodes is what it has, not a fallback."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Software:
    gpu_runtime: Literal["cuda", "rocm"]
    collectives: Literal["nccl", "rccl"]
    net_plugin: str
    """The collectives' network plugin the fabric needs ('none' for native IB)."""
    expected_transport: str
    """What NCCL/RCCL logs when it uses the fabric; seeing only 'NET/Socket' means fallback."""
    fabric_env: Mapping[str, str]
    """Environment the launchers export for this fabric."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    usd_per_hour: float
    date: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceType:
    name: str
    cloud: Cloud
    accelerator: Accelerator
    vcpu: int
    host_memory_gib: float
    network: Network
    software: Software
    bandwidth: BandwidthModel
    price: Price | None
    """None only for a judge-only type (``judge_types``): one the judge knows, not one we provision."""
    locations: tuple[str, ...]
    """Regions (AWS, Azure) or zones (GCP) where the type is offered."""
    locations_source: str
    zone_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """AWS: per region, the zone IDs (``use1-az4``) that offer the type, where the catalog knows
    them; a region absent here is unknown, not empty. Zone IDs, not names: names map to
    different IDs in every account."""

    @property
    def gpus(self) -> int:
        return self.accelerator.count


@dataclass(frozen=True, slots=True)
class Catalog:
    instances: Mapping[str, InstanceType]
    sources: Mapping[str, Source] = field(default_factory=dict)
    judge_types: Mapping[str, InstanceType] = field(default_factory=dict)
    """Types the judge holds published runs to, which the project does not provision (no price or
    regions read): the spec never offers them."""

    def judge_type(self, name: str) -> InstanceType:
        """A type to judge a run against: a provisionable one or a judge-only one."""
        if name in self.judge_types:
            return self.judge_types[name]
        try:
            return self.get(name)
        except CatalogError:
            raise CatalogError(
                f"instance type {name!r} is not in the catalog (allowed: "
                f"{', '.join(sorted({*self.instances, *self.judge_types}))})"
            ) from None

    def get(self, name: str) -> InstanceType:
        try:
            return self.instances[name]
        except KeyError:
            raise CatalogError(
                f"instance type {name!r} is not in the catalog (allowed: {', '.join(sorted(self.instances))})"
            ) from None

    def names(self, cloud: str | None = None) -> tuple[str, ...]:
        return tuple(sorted(n for n, it in self.instances.items() if cloud is None or it.cloud == cloud))

    def source(self, source_id: str) -> Source:
        return self.sources[source_id]


def _req(d: Mapping[str, Any], key: str, where: str) -> Any:
    if d.get(key) is None:
        raise CatalogError(f"{where}.{key}: missing in {CATALOG_PATH.name}")
    return d[key]


def _instance_env(fabric_env: Mapping[str, Any], sw: Mapping[str, Any], where: str) -> dict[str, str]:
    """The fabric's environment, with the instance's own ``software.env`` on top and the names in
    ``software.env_unset`` taken out (ND MI300X v5 shares the InfiniBand fabric with ND H100 v5
    but not its NCCL topology file)."""
    env = {str(k): str(v) for k, v in fabric_env.items()}
    unset = sw.get("env_unset") or []
    if not isinstance(unset, list) or any(name not in env for name in unset):
        raise CatalogError(f"{where}.software.env_unset: {unset!r} (allowed: names of the fabric's env)")
    for name in unset:
        del env[name]
    env.update({str(k): str(v) for k, v in (sw.get("env") or {}).items()})
    return env


def _parse_instance(
    name: str,
    raw: Mapping[str, Any],
    fabrics: Mapping[str, Any],
    sources: Mapping[str, Source],
    judge_only: bool = False,
) -> InstanceType:
    where = f"{'judge_types' if judge_only else 'instances'}.{name}"
    cloud = _req(raw, "cloud", where)
    if cloud not in CLOUDS:
        raise CatalogError(f"{where}.cloud: {cloud!r} (allowed: {', '.join(CLOUDS)})")
    acc = dict(_req(raw, "accelerator", where))
    net = dict(_req(raw, "network", where))
    net.setdefault("gvnics", 0)
    fabric = net["fabric"]
    if fabric not in fabrics:
        raise CatalogError(f"{where}.network.fabric: {fabric!r} (allowed: {', '.join(fabrics)})")
    sw_raw = _req(raw, "software", where)
    fab = fabrics[fabric]
    software = Software(
        gpu_runtime=sw_raw["gpu_runtime"],
        collectives=sw_raw["collectives"],
        net_plugin=str(fab["collectives_plugin"]),
        expected_transport=str(fab["expected_transport"]),
        fabric_env=_instance_env(fab["env"], sw_raw, where),
    )
    bandwidth = replace(
        _parse_bandwidth(_req(raw, "bandwidth", where), name, int(acc["count"]), sources, where),
        name=name,
        fabric=str(fabric),
    )
    locations = raw.get("zones") if cloud == "gcp" else raw.get("regions")
    loc_source = raw.get("zones_source") if cloud == "gcp" else raw.get("regions_source")
    if (not locations or not loc_source) and not judge_only:
        kind = "zones" if cloud == "gcp" else "regions"
        raise CatalogError(f"{where}.{kind}: missing, or without {kind}_source")
    it = InstanceType(
        name=name,
        cloud=cloud,
        accelerator=Accelerator(**acc),
        vcpu=int(_req(raw, "vcpu", where)),
        host_memory_gib=float(_req(raw, "host_memory_gib", where)),
        network=Network(**net),
        software=software,
        bandwidth=bandwidth,
        price=None if judge_only else Price(**{**_req(raw, "price", where), "date": str(raw["price"]["date"])}),
        locations=tuple(str(x) for x in locations or ()),
        locations_source=str(loc_source or ""),
        zone_ids={str(region): tuple(str(z) for z in ids) for region, ids in (raw.get("zone_ids") or {}).items()},
    )
    if it.zone_ids and raw.get("zone_ids_source") not in sources:
        raise CatalogError(f"{where}.zone_ids_source: unknown source id {raw.get('zone_ids_source')!r}")
    for region in it.zone_ids:
        if region not in it.locations:
            raise CatalogError(f"{where}.zone_ids.{region}: not one of the type's regions")
    ids = [("accelerator.source", it.accelerator.source), ("network.source", it.network.source)]
    if it.price is not None:
        ids += [("price.source", it.price.source), ("locations source", it.locations_source)]
    for path, sid in ids:
        if sid not in sources:
            raise CatalogError(f"{where}.{path}: unknown source id {sid!r}")
    return it


def _parse_bandwidth(
    bw: Mapping[str, Any], name: str, gpus: int, sources: Mapping[str, Source], where: str
) -> BandwidthModel:
    refs = []
    for i, r in enumerate(bw.get("references") or []):
        if r.get("path") not in PATHS:
            raise CatalogError(
                f"{where}.bandwidth.references[{i}].path: {r.get('path')!r} (allowed: {', '.join(PATHS)})"
            )
        if r.get("source") not in sources:
            raise CatalogError(f"{where}.bandwidth.references[{i}].source: unknown source id {r.get('source')!r}")
        refs.append(
            Reference(
                path=r["path"],
                op=str(r["op"]),
                nodes=int(r["nodes"]),
                message_bytes=int(r["message_bytes"]),
                gbps=float(r["gbps"]),
                source=str(r["source"]),
                kind=r.get("kind", "measured"),
                hardware=str(r.get("hardware", "")),
                calibrates=bool(r.get("calibrates", False)),
                curve=_curve(r.get("curve"), f"{where}.bandwidth.references[{i}].curve"),
            )
        )
    for key in ("nvlink_source", "nic_source"):
        if bw.get(key) not in sources:
            raise CatalogError(f"{where}.bandwidth.{key}: unknown source id {bw.get(key)!r}")
    baseline = parse_baseline(bw.get("provider_baseline"), f"{where}.bandwidth.provider_baseline", sources)
    return BandwidthModel(
        op=str(bw["op"]),
        gpus=gpus,
        nvlink_gbytes_per_gpu=bw.get("nvlink_gbytes_per_gpu"),
        nvlink_source=str(bw["nvlink_source"]),
        nic_gbps=float(_req(bw, "nic_gbps", where)),
        nics=int(_req(bw, "nics", where)),
        nic_source=str(bw["nic_source"]),
        references=tuple(refs),
        calibration=str(bw.get("calibration", name)),
        note=str(bw.get("note", "")),
        baseline=baseline,
    )


def _curve(raw: Any, where: str) -> tuple[tuple[int, float], ...]:
    if raw is None:
        return ()
    out = []
    for j, pt in enumerate(raw):
        if not (isinstance(pt, (list, tuple)) and len(pt) == 2 and float(pt[1]) > 0 and int(pt[0]) > 0):
            raise CatalogError(f"{where}[{j}]: {pt!r} (allowed: [size in bytes, busbw GB/s > 0])")
        out.append((int(pt[0]), float(pt[1])))
    if [s for s, _ in out] != sorted({s for s, _ in out}):
        raise CatalogError(f"{where}: sizes must rise and not repeat")
    return tuple(out)


def parse_catalog(doc: Mapping[str, Any]) -> Catalog:
    sources = {
        sid: Source(id=sid, title=str(s["title"]), url=str(s["url"]), read=str(s["read"]))
        for sid, s in doc["sources"].items()
    }
    fabrics = doc["fabrics"]
    for fname, f in fabrics.items():
        if f.get("source") not in sources:
            raise CatalogError(f"fabrics.{fname}.source: unknown source id {f.get('source')!r}")
    instances = {name: _parse_instance(name, raw, fabrics, sources) for name, raw in doc["instances"].items()}
    judge_only = {
        name: _parse_instance(name, raw, fabrics, sources, judge_only=True)
        for name, raw in (doc.get("judge_types") or {}).items()
    }
    for name in judge_only:
        if name in instances:
            raise CatalogError(f"judge_types.{name}: also in instances (a type is one or the other)")
    instances = {**instances, **judge_only}
    for name, it in instances.items():
        if it.bandwidth.calibration not in instances:
            raise CatalogError(f"instances.{name}.bandwidth.calibration: unknown type {it.bandwidth.calibration!r}")
    models = {n: it.bandwidth for n, it in instances.items()}
    latency = calibrate_latency(models)
    efficiency = calibrate(models, latency)
    # How far each kind of figure misses the catalog's own published runs when they are held out:
    # what the floors are widened by (gpu_cluster.components.bandwidth_confidence.confidence).
    conf = confidence(models)
    instances = {
        n: replace(it, bandwidth=replace(it.bandwidth, efficiency=efficiency[n], latency=latency[n], confidence=conf))
        for n, it in instances.items()
    }
    return Catalog(
        instances={n: it for n, it in instances.items() if n not in judge_only},
        sources=sources,
        judge_types={n: it for n, it in instances.items() if n in judge_only},
    )


@functools.cache
def load_catalog(path: Path | None = None) -> Catalog:
    """Load and check the catalog (cached: the file is read once per process)."""
    with open(path or CATALOG_PATH, encoding="utf-8") as fh:
        return parse_catalog(yaml.safe_load(fh))


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuModel:
    """One GPU model's achievable figures: what the node gate holds a sustained GEMM to."""

    model: str
    """The catalog's model name (``accelerator.model``)."""
    name_tokens: tuple[str, ...]
    """Every token appears in the name NVML or amdsmi reports for this model."""
    name_excludes: tuple[str, ...]
    """No token appears (H100 PCIe and NVL share the H100 token with SXM5)."""
    achievable_bf16_tflops: float | None
    """A published measured dense bf16 GEMM rate; None when no source publishes one."""
    source: Source
    note: str = ""
    achievable_copy_gbps: float | None = None
    """A published measured device-to-device copy rate (read and write counted), GB/s; None when no
    source publishes one."""
    copy_source: Source | None = None

    def matches(self, reported_name: str) -> bool:
        name = reported_name.lower()
        return all(t.lower() in name for t in self.name_tokens) and not any(
            t.lower() in name for t in self.name_excludes
        )


def parse_gpu_models(doc: Mapping[str, Any]) -> dict[str, GpuModel]:
    sources = {
        sid: Source(id=sid, title=str(s["title"]), url=str(s["url"]), read=str(s["read"]))
        for sid, s in (doc.get("gpu_model_sources") or {}).items()
    }
    out: dict[str, GpuModel] = {}
    for model, raw in (doc.get("gpu_models") or {}).items():
        sid = raw.get("source")
        if sid not in sources:
            raise CatalogError(f"gpu_models.{model}.source: unknown source id {sid!r} (allowed: {', '.join(sources)})")
        if not raw.get("name_tokens"):
            raise CatalogError(f"gpu_models.{model}.name_tokens: missing")
        value = raw.get("achievable_bf16_tflops")
        copy = raw.get("achievable_copy_tbps")
        copy_sid = raw.get("copy_source")
        if copy is not None and copy_sid not in sources:
            raise CatalogError(
                f"gpu_models.{model}.copy_source: {copy_sid!r} (allowed: {', '.join(sources)}): a copy rate needs its source"
            )
        out[model] = GpuModel(
            model=model,
            name_tokens=tuple(str(t) for t in raw["name_tokens"]),
            name_excludes=tuple(str(t) for t in raw.get("name_excludes") or ()),
            achievable_bf16_tflops=None if value is None else float(value),
            source=sources[sid],
            note=str(raw.get("note", "")).strip(),
            achievable_copy_gbps=None if copy is None else float(copy) * 1000.0,
            copy_source=sources[copy_sid] if copy is not None else None,
        )
    return out


@functools.cache
def load_gpu_models(path: Path | None = None) -> dict[str, GpuModel]:
    """The catalog's ``gpu_models`` section (cached like :func:`load_catalog`)."""
    with open(path or CATALOG_PATH, encoding="utf-8") as fh:
        return parse_gpu_models(yaml.safe_load(fh))
