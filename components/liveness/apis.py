"""Typed models of the custom resources the stacks create, at the versions they pin.

Each model is written from the upstream types file at the tag of the version the stack installs
(the chart's version for Kueue, JobSet, the network operator and AMD's operator), and every field
names the line of that file it comes from. A field a model does not have is one the API server
would prune (a structural CRD schema drops unknown fields; Kubernetes docs, "Custom Resources",
Field pruning) or refuse (kubectl's and Pulumi's server-side field validation), so the object
would not mean what the program wrote: the admission check fails on it, naming the field, the
fields the type has, and the line.

Core Kubernetes types inside a custom resource (a LabelSelector, a Toleration, an EnvVar) are
kept opaque here: the API server's own schemas cover them, and the launch tests validate the
manifests we render against those schemas (kubernetes-validate).

To add an API: one :class:`Api` with its source (repository, tag, commit, file) and its fields,
each with the line it is declared on; then add it to :data:`APIS`.
"""

from __future__ import annotations

# The field model and its check live in fields.py; the first names are read from here too.
from gpu_cluster.components.liveness.fields import BUILT_IN_GROUPS as BUILT_IN_GROUPS
from gpu_cluster.components.liveness.fields import Api as Api
from gpu_cluster.components.liveness.fields import Field as Field
from gpu_cluster.components.liveness.fields import FieldProblem as FieldProblem
from gpu_cluster.components.liveness.fields import api_for as api_for
from gpu_cluster.components.liveness.fields import check_fields as check_fields
from gpu_cluster.components.liveness.fields import any_, b, i, lst, mp, obj, q, s

# ---------------------------------------------------------------------------------------------
# Kueue v1beta2 at v0.17.8, the chart components/k8s/kueue.py installs (KUEUE_VERSION). Read again at
# that tag: from v0.17.1 the spec types of these five kinds are unchanged (v0.17.8 adds a doc comment
# above ProvisioningRequestConfig's podSetMergePolicy, moving the lines after it by 4, and raises
# LocalQueue status list limits); the lines below are v0.17.8's.

_KUEUE = dict(
    repo="kubernetes-sigs/kueue", ref="v0.17.8 (818686e)", version_note="chart 0.17.8 (components/k8s/kueue.py)"
)
_STOP = ("None", "Hold", "HoldAndDrain")

CLUSTER_QUEUE = Api(
    api_version="kueue.x-k8s.io/v1beta2",
    kind="ClusterQueue",
    path="apis/kueue/v1beta2/clusterqueue_types.go",
    spec=obj(
        57,
        "ClusterQueueSpec",
        resourceGroups=lst(
            66,
            obj(
                187,
                "ResourceGroup",
                coveredResources=lst(197, s(197), required=True),
                flavors=lst(
                    212,
                    obj(
                        215,
                        "FlavorQuotas",
                        name=s(220, required=True),
                        resources=lst(
                            229,
                            obj(
                                232,
                                "ResourceQuota",
                                name=s(235, required=True),
                                nominalQuota=q(250, required=True),
                                borrowingLimit=q(262),
                                lendingLimit=q(274),
                            ),
                            required=True,
                        ),
                    ),
                    required=True,
                ),
            ),
        ),
        cohortName=s(81),
        queueingStrategy=s(97, enum=("StrictFIFO", "BestEffortFIFO")),
        namespaceSelector=any_(105),
        flavorFungibility=any_(111),
        preemption=any_(116),
        admissionChecksStrategy=obj(
            120,
            "AdmissionChecksStrategy",
            admissionChecks=lst(
                155,
                obj(159, "AdmissionCheckStrategyRule", name=s(162, required=True), onFlavors=lst(169, s(169))),
                required=True,
            ),
        ),
        stopPolicy=s(134, enum=_STOP),
        fairSharing=any_(140),
        admissionScope=any_(144),
    ),
    **_KUEUE,
)
LOCAL_QUEUE = Api(
    api_version="kueue.x-k8s.io/v1beta2",
    kind="LocalQueue",
    path="apis/kueue/v1beta2/localqueue_types.go",
    spec=obj(33, "LocalQueueSpec", clusterQueue=s(37), stopPolicy=s(51, enum=_STOP), fairSharing=any_(57)),
    **_KUEUE,
)
ADMISSION_CHECK = Api(
    api_version="kueue.x-k8s.io/v1beta2",
    kind="AdmissionCheck",
    path="apis/kueue/v1beta2/admissioncheck_types.go",
    spec=obj(
        48,
        "AdmissionCheckSpec",
        controllerName=s(55, required=True),
        parameters=obj(
            63,
            "AdmissionCheckParametersReference",
            apiGroup=s(69, required=True),
            kind=s(75, required=True),
            name=s(81, required=True),
        ),
    ),
    **_KUEUE,
)
PROVISIONING_REQUEST_CONFIG = Api(
    api_version="kueue.x-k8s.io/v1beta2",
    kind="ProvisioningRequestConfig",
    path="apis/kueue/v1beta2/provisioningrequestconfig_types.go",
    spec=obj(
        36,
        "ProvisioningRequestConfigSpec",
        provisioningClassName=s(44, required=True),
        parameters=mp(50),
        managedResources=lst(65, s(65)),
        retryStrategy=obj(
            127,
            "ProvisioningRequestRetryStrategy",
            backoffLimitCount=i(142),
            backoffBaseSeconds=i(150),
            backoffMaxSeconds=i(157),
        ),
        podSetUpdates=any_(84),
        podSetMergePolicy=s(95, enum=("IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements")),
    ),
    **_KUEUE,
)
RESOURCE_FLAVOR = Api(
    api_version="kueue.x-k8s.io/v1beta2",
    kind="ResourceFlavor",
    path="apis/kueue/v1beta2/resourceflavor_types.go",
    spec=obj(
        52,
        "ResourceFlavorSpec",
        nodeLabels=mp(66, s(66)),
        nodeTaints=lst(86),
        tolerations=lst(104),
        topologyName=s(111),
    ),
    **_KUEUE,
)

# ---------------------------------------------------------------------------------------------
# JobSet v1alpha2 at v0.12.0, the chart components/k8s/addons.py installs (JOBSET_VERSION). The
# replicated job's template is a batch/v1 JobTemplateSpec: core, so opaque here.

JOBSET = Api(
    api_version="jobset.x-k8s.io/v1alpha2",
    kind="JobSet",
    repo="kubernetes-sigs/jobset",
    ref="v0.12.0 (f22e565)",
    path="api/jobset/v1alpha2/jobset_types.go",
    version_note="chart 0.12.0 (components/k8s/addons.py)",
    spec=obj(
        121,
        "JobSetSpec",
        replicatedJobs=lst(
            127,
            obj(
                320,
                "ReplicatedJob",
                name=s(323, required=True),
                groupName=s(327),
                template=any_(330, required=True),
                replicas=i(335),
                dependsOn=lst(353),
            ),
        ),
        network=obj(
            378,
            "Network",
            enableDNSHostnames=b(383),
            subdomain=s(389),
            publishNotReadyAddresses=b(394),
        ),
        successPolicy=any_(139),
        failurePolicy=obj(
            475,
            "FailurePolicy",
            maxRestarts=i(482),
            restartStrategy=s(488),
            rules=lst(494),
        ),
        startupPolicy=any_(151),
        suspend=b(154),
        coordinator=any_(162),
        managedBy=s(176),
        ttlSecondsAfterFinished=i(187),
        volumeClaimPolicies=lst(197),
    ),
)

# ---------------------------------------------------------------------------------------------
# The NVIDIA network operator's NicClusterPolicy at v26.1.0 (components/k8s/aks.py
# NETWORK_OPERATOR_VERSION). ImageSpec is embedded (json:"") in each component's spec.


def _image_spec(**extra: Field) -> dict[str, Field]:
    return {
        "image": s(49, required=True),
        "repository": s(52, required=True),
        "version": s(54, required=True),
        "imagePullSecrets": lst(59, s(59)),
        "containerResources": lst(61),
        **extra,
    }


NIC_CLUSTER_POLICY = Api(
    api_version="mellanox.com/v1alpha1",
    kind="NicClusterPolicy",
    repo="Mellanox/network-operator",
    ref="v26.1.0 (34a16f8)",
    path="api/v1alpha1/nicclusterpolicy_types.go",
    version_note="chart v26.1.0 (components/k8s/aks.py)",
    spec=obj(
        342,
        "NicClusterPolicySpec",
        ofedDriver=obj(
            100,
            "OFEDDriverSpec",
            **_image_spec(
                startupProbe=any_(104),
                livenessProbe=any_(106),
                readinessProbe=any_(108),
                env=lst(110),
                upgradePolicy=any_(112),
                certConfig=any_(114),
                repoConfig=any_(116),
                terminationGracePeriodSeconds=i(122),
                forcePrecompiled=b(128),
            ),
        ),
        rdmaSharedDevicePlugin=obj(199, "DevicePluginSpec", **_image_spec(config=s(77), useCdi=b(204))),
        sriovDevicePlugin=obj(199, "DevicePluginSpec", **_image_spec(config=s(77), useCdi=b(204))),
        ibKubernetes=any_(360),
        secondaryNetwork=any_(366),
        nvIpam=any_(370),
        nicFeatureDiscovery=any_(373),
        docaTelemetryService=any_(376),
        nicConfigurationOperator=any_(380),
        spectrumXOperator=any_(383),
        nodeAffinity=any_(385),
        tolerations=lst(387),
        deploymentNodeAffinity=any_(389),
        deploymentTolerations=lst(391),
    ),
)

# The NodeFeatureRule CRD the network operator's NFD subchart ships at v26.1.0 (its schema is the
# file: the CRD manifest's line numbers).
_NFD_CRD = "deployment/network-operator/charts/node-feature-discovery/crds/nfd-api-crds.yaml"
_MATCH_EXPRESSION = obj(
    638,
    "MatchExpression",
    op=s(
        644,
        required=True,
        enum=(
            "In",
            "NotIn",
            "InRegexp",
            "Exists",
            "DoesNotExist",
            "Gt",
            "Ge",
            "Lt",
            "Le",
            "GtLt",
            "GeLe",
            "IsTrue",
            "IsFalse",
        ),
    ),
    type=s(661),
    value=lst(666, s(666)),
)
NODE_FEATURE_RULE = Api(
    api_version="nfd.k8s-sigs.io/v1alpha1",
    kind="NodeFeatureRule",
    repo="Mellanox/network-operator",
    ref="v26.1.0 (34a16f8)",
    path=_NFD_CRD,
    version_note="the NFD subchart of network-operator v26.1.0",
    spec=obj(
        481,
        "NodeFeatureRuleSpec",
        rules=lst(
            484,
            obj(
                489,
                "Rule",
                annotations=mp(490, s(490)),
                extendedResources=mp(495, s(495)),
                labels=mp(500, s(500)),
                labelsTemplate=s(505),
                matchAny=lst(511),
                matchFeatures=lst(
                    624,
                    obj(
                        632,
                        "FeatureMatcherTerm",
                        feature=s(633),
                        matchExpressions=mp(637, _MATCH_EXPRESSION),
                        matchName=any_(684),
                    ),
                ),
                name=s(727, required=True),
                taints=lst(730),
                vars=mp(762, s(762)),
                varsTemplate=s(771),
            ),
            required=True,
        ),
    ),
)

# ---------------------------------------------------------------------------------------------
# AMD's DeviceConfig at v1.4.1 (components/k8s/aks.py AMD_OPERATOR_VERSION).

DEVICE_CONFIG = Api(
    api_version="amd.com/v1alpha1",
    kind="DeviceConfig",
    repo="ROCm/gpu-operator",
    ref="v1.4.1 (3b39804)",
    path="api/v1alpha1/deviceconfig_types.go",
    version_note="gpu-operator-charts v1.4.1 (components/k8s/aks.py)",
    spec=obj(
        43,
        "DeviceConfigSpec",
        driver=obj(
            96,
            "DriverSpec",
            enable=b(101),
            driverType=s(110),
            vfioConfig=any_(116),
            kernelModuleConfig=any_(121),
            blacklist=b(127),
            useSourceImage=b(133),
            amdgpuInstallerRepoURL=s(139),
            version=s(145),
            image=s(156),
            imageRegistryTLS=any_(161),
            imageRegistrySecret=any_(166),
            imageSign=any_(172),
            imageBuild=any_(177),
            upgradePolicy=any_(182),
            tolerations=lst(187),
        ),
        metricsExporter=obj(
            477,
            "MetricsExporterSpec",
            enable=b(481),
            image=s(487),
            prometheus=any_(492),
            imageRegistrySecret=any_(497),
            imagePullPolicy=s(503),
            tolerations=lst(508),
            port=i(513),
            serviceType=s(519),
            nodePort=i(526),
            config=any_(531),
            rbacConfig=any_(536),
            selector=mp(541, s(541)),
            upgradePolicy=any_(546),
            podResourceAPISocketPath=s(556),
            resource=any_(562),
            podAnnotations=mp(567, s(567)),
            serviceAnnotations=mp(572, s(572)),
        ),
        configManager=obj(
            433,
            "ConfigManagerSpec",
            enable=b(437),
            image=s(443),
            imagePullPolicy=s(449),
            imageRegistrySecret=any_(454),
            config=any_(459),
            selector=mp(464, s(464)),
            upgradePolicy=any_(469),
            configManagerTolerations=lst(474),
        ),
        devicePlugin=obj(
            307,
            "DevicePluginSpec",
            devicePluginImage=s(312),
            devicePluginImagePullPolicy=s(318),
            devicePluginTolerations=lst(323),
            devicePluginArguments=mp(329, s(329)),
            nodeLabellerImage=s(335),
            nodeLabellerImagePullPolicy=s(341),
            nodeLabellerTolerations=lst(346),
            nodeLabellerArguments=lst(354, s(354)),
            imageRegistrySecret=any_(359),
            enableNodeLabeller=b(364),
            upgradePolicy=any_(369),
        ),
        testRunner=obj(
            697,
            "TestRunnerSpec",
            enable=b(701),
            image=s(707),
            imagePullPolicy=s(713),
            tolerations=lst(718),
            imageRegistrySecret=any_(723),
            config=any_(728),
            selector=mp(733, s(733)),
            upgradePolicy=any_(738),
            logsLocation=any_(743),
        ),
        commonConfig=any_(72),
        selector=mp(77, s(77)),
    ),
)

# ---------------------------------------------------------------------------------------------
# GKE multi-networking (networking.gke.io/v1), the API GKE serves; its Go types are published in
# GoogleCloudPlatform/gke-networking-api (read at its HEAD, 34c617f, 2025-12-12).

_GKE_NET = dict(repo="GoogleCloudPlatform/gke-networking-api", ref="34c617f", version_note="served by GKE 1.35")
GKE_NETWORK = Api(
    api_version="networking.gke.io/v1",
    kind="Network",
    path="apis/network/v1/network_types.go",
    spec=obj(
        97,
        "NetworkSpec",
        type=s(104, required=True, enum=("L2", "L3", "Device")),
        provider=s(107, enum=("GKE",)),
        nodeInterfaceMatcher=any_(112),
        l2NetworkConfig=any_(116),
        networkLifecycle=s(122, enum=("AnthosManaged", "UserManaged")),
        routes=lst(126),
        gateway4=s(131),
        dnsConfig=any_(136),
        externalDHCP4=b(140),
        parametersRef=obj(
            159,
            "NetworkParametersReference",
            group=s(161, required=True),
            kind=s(164, required=True),
            name=s(167, required=True),
            namespace=s(172),
        ),
        IPAMMode=s(150),
        IPAMMode6=s(155),
    ),
    **_GKE_NET,
)
GKE_NETWORK_PARAM_SET = Api(
    api_version="networking.gke.io/v1",
    kind="GKENetworkParamSet",
    path="apis/network/v1/gkenetworkparamset_types.go",
    spec=obj(
        57,
        "GKENetworkParamSetSpec",
        vpc=s(61),
        vpcSubnet=s(66),
        deviceMode=s(72, enum=("DPDK-VFIO", "NetDevice", "RDMA")),
        podIPv4Ranges=any_(79),
        networkAttachment=s(84),
    ),
    **_GKE_NET,
)

# ---------------------------------------------------------------------------------------------
# GKE managed collection (monitoring.googleapis.com/v1), the API GKE serves with managed collection
# on (components/gcp/metrics.py); its Go types are GoogleCloudPlatform/prometheus-engine's (read at
# its HEAD, 2ffde4e, 2026-07-02). ScrapeEndpoint inlines HTTPClientConfig (http_types.go lines
# 335-348: proxyUrl, authorization, basicAuth, tls, oauth2).

_GMP = dict(
    repo="GoogleCloudPlatform/prometheus-engine",
    ref="2ffde4e",
    version_note="served by GKE's managed collection (components/gcp/metrics.py)",
)
_HTTP = "pkg/operator/apis/monitoring/v1/http_types.go"
POD_MONITORING = Api(
    api_version="monitoring.googleapis.com/v1",
    kind="PodMonitoring",
    path="pkg/operator/apis/monitoring/v1/pod_types.go",
    spec=obj(
        147,
        "PodMonitoringSpec",
        selector=any_(150),
        endpoints=lst(
            154,
            obj(
                215,
                "ScrapeEndpoint",
                port=any_(227, required=True),
                scheme=s(230, enum=("http", "https")),
                path=s(232),
                params=mp(234),
                interval=s(238, required=True),
                timeout=s(242),
                metricRelabeling=lst(248),
                proxyUrl=s(311, file=_HTTP),
                authorization=any_(339, file=_HTTP),
                basicAuth=any_(342, file=_HTTP),
                tls=any_(345, file=_HTTP),
                oauth2=any_(348, file=_HTTP),
            ),
            required=True,
        ),
        targetLabels=obj(
            252,
            "TargetLabels",
            metadata=lst(
                264, s(264, enum=("container", "node", "pod", "top_level_controller_name", "top_level_controller_type"))
            ),
            fromPod=lst(268),
        ),
        limits=any_(162),
        filterRunning=b(166),
    ),
    **_GMP,
)

APIS: dict[tuple[str, str], Api] = {
    (a.api_version, a.kind): a
    for a in (
        CLUSTER_QUEUE,
        LOCAL_QUEUE,
        ADMISSION_CHECK,
        PROVISIONING_REQUEST_CONFIG,
        RESOURCE_FLAVOR,
        JOBSET,
        NIC_CLUSTER_POLICY,
        NODE_FEATURE_RULE,
        DEVICE_CONFIG,
        GKE_NETWORK,
        GKE_NETWORK_PARAM_SET,
        POD_MONITORING,
    )
}
