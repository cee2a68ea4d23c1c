"""Leaderboard: runtimes, cost and accuracy per model and scenario, the accuracy-vs-runtime
Pareto frontiers of the paper's main figure, and the same models under several reference stacks.

Pure computation on inputs that are already loaded: loading lives in
``idealized_runtime.report.inputs`` (bundled HELM data, a results folder, the service database)
and rendering in ``idealized_runtime.report``. The REST service gathers the same inputs from its
database and calls ``build.build_leaderboard``.

``rows``              what the board is built from and the rows it is made of
``metrics``           a fit's runtime at a workload, cost per 1,000 requests, Pareto frontiers
``groups``            one entry per architecture: the names a model is listed under
``stack_comparison``  the same models under several reference stacks
``current_models``    today's models on a chosen GPU and stack, beside HELM's 2022 stack
``build``             ``build_leaderboard`` and the JSON payload
"""
