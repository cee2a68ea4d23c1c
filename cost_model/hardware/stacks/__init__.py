"""Reference stacks: one calibration of the time model per engine family, on published figures.

A stack is what turns the roofline's FLOPs and bytes into the seconds a real engine takes. Its
few parameters are physical (``roofline.Efficiency``): the fraction of peak matmul FLOP/s and of
HBM bandwidth its kernels reach, the fraction of the interconnect its all-reduces reach, a
latency per all-reduce (paid twice per layer under tensor parallelism, whatever the engine), a
time per layer (host launches; near zero once an engine captures CUDA graphs or compiles the
decode step) and a fixed time per forward pass (sampling, scheduling, synchronisation).

Modern stacks (``pytorch-compiled``: gpt-fast and torchao; ``lmdeploy``; ``tensorrt-llm``) are
fitted on ``data/published/measurements.csv``: each figure is predicted from the row's
architecture, GPU, tensor-parallel size, batch and token counts, and the parameters minimise the
log errors over the stack's rows, lightly pulled toward typical values so that a stack with few
rows stays physical. ``helm-megatron-2022`` is the calibration of the HELM efficiency paper's
A100 Megatron-LM grid (``data/calibrations/a100-megatron-2022.json``; that old name is an alias).

Two effects near the roofline's ridge are fitted per stack: the matmul rate grows with the
tokens in a pass (``gemm_half_tokens``), and memory traffic overlaps the math only partly
(``compute_memory_serialization``).

Stacks are fitted on 16-bit (bf16/fp16) figures; quantized figures of the same engines (fp8,
int8, int4) then fit, per weight-format kind (``kernel_format``), a few kernel factors on top
(``format_factors``: achieved bandwidth, matmul rate and saturation scale relative to the 16-bit
kernels). Errors are shipped per weight format from bytes and FLOPs alone
(``quantized_predicted``) and with the factors, in sample and held out (``quantized_calibrated``).

Honest errors: besides the in-sample error, every stack ships its leave-one-source-out error
(calibrated without a source's rows, predicting them) and its leave-one-model-out error. A
stack whose rows come from one source is held out against the other modern stacks' averaged
calibration.

Modules: ``targets`` (published figures and their prediction), ``fit`` (the parameters),
``evaluation`` (held-out errors), ``calibrate`` (one stack per engine family), ``catalog`` (the
shipped stacks in ``data/stacks/``); ``python -m idealized_runtime.cost_model.hardware.stacks``
regenerates them.
"""
