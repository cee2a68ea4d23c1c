"""Plan a deployment: the best GPU, engine, precision and layout under an SLO.

``request``  what to plan for: the model, the GPUs and engines to consider, the workload, the SLO
``space``    the deployments searched: precisions, layouts (TP, EP, attention DP), xPyD pairs
``frontier`` Pareto frontiers of throughput per GPU against tokens/s per user
``search``   ``plan``: every deployment at every load on the steady-state estimator, the
             frontiers, the best under the SLO, GPUs for a rate, cost and energy, and the best
             one simulated request by request
"""
