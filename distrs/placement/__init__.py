"""Trainer placement on heterogeneous GPUs and networks.

Pure logic (no cluster access): cluster/workflow specs (``specs``), the HetRL cost model
(``topology``, ``rings``, ``costmodel``), the search space and plan builder (``plan``,
``space``), schedulers (``hetrl`` SHA-EA, ``hetrl_ilp``, ``areal_hex``, ``espresso``,
``baselines``), plan documents (``report``), KubeRay manifests (``manifests``) and the
placement picture (``picture``). Example specs live in ``examples/``.
"""
