"""``gpu-cluster heal``: take the nodes the last validation named out of service, have the cloud
replace them, revalidate the replacements with a node the report cleared, and return them.

One state machine per node slot (a replacement gets a new instance; the slot persists)::

    HEALTHY -> SUSPECT -> CONFIRMED -> QUARANTINED -> REPLACING -> JOINING -> REVALIDATING -> HEALTHY
    side exits: RETRY (a limit or a failed step; the next run continues), ESCALATED (a person must
    act), ABANDONED (the capacity window closes before a replacement could be revalidated)

The modules, bottom up: :mod:`.states` (the states and their allowed moves), :mod:`.journal`
(the append-only ``heal-journal.jsonl`` every step writes before and after it acts),
:mod:`.evidence` (what the validation report says, and which findings are a node's own),
:mod:`.policy` (the safety limits), :mod:`.adapters` (what a scheduler, a cloud and a
revalidation must answer), :mod:`.engine` (the loop), one module per scheduler and cloud, and
:mod:`.cli` (the command). It sits in ``gpu_cluster`` because it drives the validation
(``gpu_cluster.workloads.validate``) and the clouds' SDKs, which nothing below the command may import
(docs/architecture.md).
"""
