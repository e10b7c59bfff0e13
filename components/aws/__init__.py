"""AWS: the five pillars of a GPU cluster, one component per file.

``cluster.build`` composes them: ``network`` (VPC, private node subnet, NAT, S3 endpoint),
``interconnect`` (EFA layout, EFA security group, placement group), ``storage`` (FSx for
Lustre PERSISTENT_2, checkpoint bucket), ``compute`` (launch template, image lookup, node
IAM) and one orchestrator: ``orchestration_eks`` or ``orchestration_pcs`` (managed Slurm).
``mocks`` holds the offline engine's answers for this cloud; ``rules`` the spec rules only AWS
has, ``eks_sizing`` the node-group and address arithmetic, ``versions`` every pinned version.
"""
