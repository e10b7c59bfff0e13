"""Compute rules: instance metadata, disks, public addresses on nodes."""

from __future__ import annotations

from collections.abc import Mapping

from gpu_cluster.policies.core import (
    AWS_EBS_VOLUME,
    AWS_INSTANCE,
    AWS_LAUNCH_TEMPLATES,
    GCP_INSTANCE_TEMPLATES,
    GCP_SLURM_CLUSTER,
    MAX_IMDS_HOPS,
    MAX_IMDS_HOPS_WITH_EXCEPTION,
    Props,
    RuleContext,
    _get,
    _is_true,
    _items,
    _launch_template_data,
    _num,
    resource_rule,
)


@resource_rule(
    name="imdsv2-required",
    description="Launch templates and instances require IMDSv2 tokens (httpTokens=required) with a response hop "
    "limit of 1, so pods cannot take the node role's credentials; a stack that needs pods to reach "
    "IMDS names the reason in exceptions['imdsv2-required'] and may then use 2",
    enforcement="mandatory",
    ids=("CKV_AWS_79", "CKV_AWS_341", "AVD-AWS-0028", "AVD-AWS-0130"),
    anchor="Checkov CKV_AWS_79/CKV_AWS_341, Trivy AVD-AWS-0028/0130",
    resource_types=(*AWS_LAUNCH_TEMPLATES, AWS_INSTANCE),
)
def check_imdsv2(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type not in (*AWS_LAUNCH_TEMPLATES, AWS_INSTANCE):
        return []
    meta = _get(_launch_template_data(resource_type, props), "metadataOptions")
    meta = meta if isinstance(meta, Mapping) else {}
    if meta.get("httpEndpoint") == "disabled":
        return []  # no metadata service at all: nothing to steal credentials from
    problems = []
    tokens = meta.get("httpTokens")
    if tokens != "required":
        problems.append(
            f"metadataOptions.httpTokens is {tokens!r}, must be 'required' (IMDSv2 only): "
            "IMDSv1 answers any SSRF with the node's credentials"
        )
    reason = ctx.exception("imdsv2-required")
    most = MAX_IMDS_HOPS_WITH_EXCEPTION if reason else MAX_IMDS_HOPS
    hops = meta.get("httpPutResponseHopLimit")
    if hops is None:
        # Unset leaves it to the image's default, which for current AMIs can be 2.
        problems.append(
            f"metadataOptions.httpPutResponseHopLimit is unset, must be set to 1"
            f"{' or 2' if reason else ''}: the image's default may let pods reach IMDS"
        )
        return problems
    try:
        n = int(hops)
    except (TypeError, ValueError):
        n = -1
    if not 1 <= n <= most:
        why = (
            f"allowed 1..{most} under the stack's exception ({reason})"
            if reason
            else "allowed 1: with 2 a pod reaches IMDS through the node and takes the node role's credentials; "
            "give pods their own role (EKS Pod Identity, IRSA) or name the reason in "
            "security.exceptions.imdsv2-required"
        )
        problems.append(f"metadataOptions.httpPutResponseHopLimit is {_num(hops)!r}, {why}")
    return problems


@resource_rule(
    name="ebs-encrypted",
    description="Every EBS volume, root and data, in launch templates, instances and standalone volumes is "
    "encrypted (the key may be the account's default, where CKV_AWS_189 asks for a customer key). "
    "GCE and GKE disks are always encrypted by Google and need no rule",
    enforcement="mandatory",
    ids=("CKV_AWS_3", "CKV_AWS_8", "CKV_AWS_189"),
    anchor="Checkov CKV_AWS_3/8/189",
    resource_types=(*AWS_LAUNCH_TEMPLATES, AWS_INSTANCE, AWS_EBS_VOLUME),
)
def check_ebs_encrypted(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type in AWS_LAUNCH_TEMPLATES:
        data = _launch_template_data(resource_type, props)
        return [
            f"blockDeviceMappings[{i}] ({m.get('deviceName', '?')}): ebs.encrypted is "
            f"{_get(m, 'ebs', 'encrypted')!r}, must be true"
            for i, m in enumerate(_items(data.get("blockDeviceMappings")))
            if isinstance(m.get("ebs"), Mapping) and not _is_true(_get(m, "ebs", "encrypted"))
        ]
    if resource_type == AWS_INSTANCE:
        problems = []
        root = props.get("rootBlockDevice")
        if not isinstance(root, Mapping) or not _is_true(root.get("encrypted")):
            problems.append(f"rootBlockDevice.encrypted is {_get(root, 'encrypted')!r}, must be true")
        problems += [
            f"ebsBlockDevices[{i}] ({d.get('deviceName', '?')}): encrypted is {d.get('encrypted')!r}, must be true"
            for i, d in enumerate(_items(props.get("ebsBlockDevices")))
            if not _is_true(d.get("encrypted"))
        ]
        return problems
    if resource_type == AWS_EBS_VOLUME and not _is_true(props.get("encrypted")):
        return [f"encrypted is {props.get('encrypted')!r}, must be true"]
    return []


@resource_rule(
    name="no-public-ip-nodes",
    description="No node gets a public address: launch template interfaces do not associate a public IP, GCE "
    "instance templates have no access configs, Cluster Director login nodes no public IPs",
    enforcement="mandatory",
    ids=("CKV_GCP_40", "CKV_AWS_88", "AVD-AWS-0009"),
    anchor="Checkov CKV_GCP_40/CKV_AWS_88, Trivy AVD-AWS-0009",
    resource_types=(*AWS_LAUNCH_TEMPLATES, AWS_INSTANCE, *GCP_INSTANCE_TEMPLATES, GCP_SLURM_CLUSTER),
)
def check_no_public_ip(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type in AWS_LAUNCH_TEMPLATES:
        data = _launch_template_data(resource_type, props)
        return [
            f"networkInterfaces[{i}] (device {_num(ni.get('deviceIndex', '?'))}, card "
            f"{_num(ni.get('networkCardIndex', 0))}): associatePublicIpAddress is true"
            for i, ni in enumerate(_items(data.get("networkInterfaces")))
            if _is_true(ni.get("associatePublicIpAddress"))
        ]
    if resource_type == AWS_INSTANCE:
        if _is_true(props.get("associatePublicIpAddress")):
            return ["associatePublicIpAddress is true"]
        return [
            f"networkInterfaces[{i}]: associatePublicIpAddress is true"
            for i, ni in enumerate(_items(props.get("networkInterfaces")))
            if _is_true(ni.get("associatePublicIpAddress"))
        ]
    if resource_type in GCP_INSTANCE_TEMPLATES:
        problems = []
        for i, ni in enumerate(_items(props.get("networkInterfaces"))):
            for key in ("accessConfigs", "ipv6AccessConfigs"):
                if _items(ni.get(key)):
                    problems.append(
                        f"networkInterfaces[{i}] ({ni.get('network') or ni.get('subnetwork') or '?'}) "
                        f"has {key}: an external address"
                    )
        return problems
    if resource_type == GCP_SLURM_CLUSTER:
        # Cluster Director: only login nodes can be given external addresses.
        if _is_true(_get(props, "orchestrator", "slurm", "loginNodes", "enablePublicIps")):
            return ["orchestrator.slurm.loginNodes.enablePublicIps is true: reach login nodes through IAP instead"]
    return []
