"""Azure: the pillars of a GPU cluster on ND-series sizes, one component per file.

``rules`` holds the spec rules only Azure has (each beside the page it follows); ``common``
the names, tags and address plan every pillar shares; ``network`` (resource group, VNet, node
and Lustre subnets, NSGs, NAT gateway), ``compute`` (one Uniform single-placement-group scale
set: the InfiniBand fabric), ``storage`` (Azure Managed Lustre, checkpoint container) and the
orchestrator (``orchestration_aks``, or Slurm on the scale set). ``mocks`` holds the offline
engine's answers for this cloud. Facts and their sources: ../shared/reference/AZURE.md, cited
again beside each value.
"""
