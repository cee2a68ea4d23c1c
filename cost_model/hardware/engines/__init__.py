"""Engine stacks for serving at load: vLLM, SGLang and TensorRT-LLM as step-time models of
their forward passes, built from each engine's measured kernels, with its scheduler defaults.

``kernels``     fitted kernel formulas per engine and GPU (GEMM, attention, MLA, MoE, collectives)
``kernel_fit``  fitting them to the engines' measured per-operation databases (calibration only)
``step``        a serving step's time on a deployment from those kernels (``EngineStepTime``)
``request_path`` what a request spends outside the forward passes (``RequestPath``)
``catalog``     the shipped engines (``data/engines/``): kernels per GPU, scheduler defaults
"""
