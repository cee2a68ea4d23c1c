"""The hardware model: a request's runtime predicted from the architecture and the GPU.

Counting sits below timing, and both below the stacks and estimates that use them:

``counts``       FLOPs and bytes of a forward pass per GPU, memory per GPU (no hardware)
``roofline``     those counts as seconds on a GPU at a stack's ``Efficiency``
``calibration``  a profiled stack's efficiency fitted on its (p, o) grid (``ProfileCalibration``)
``stacks``       engine stacks calibrated on published measurements of real engines
``planner``      the fewest GPUs of a kind that hold a deployment, and their layout
``estimate``     one request's runtime, GPUs, GPU-seconds, joules and dollars
"""
