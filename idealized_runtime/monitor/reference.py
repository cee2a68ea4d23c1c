"""The idealized runtime of the probe's shapes for an endpoint's model: the reference its
denoised runtime is compared with (the round's ``discrepancy``).

Either the hardware model (a catalog architecture on a GPU and reference stack, batch 1, the
checkpoint's precision: what ``estimate --arch`` gives) or an idealized fit from a fit file
(``predict_runtime``). Both are the mean over the shapes, as the round's denoised runtime is."""

from __future__ import annotations

from collections.abc import Sequence

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.rounds import ProbeShape
from idealized_runtime.monitor.config import ReferenceSpec
from idealized_runtime.trends.round_statistics import IdealizedReference, mean_runtime


def idealized_reference(
    spec: ReferenceSpec, shapes: Sequence[ProbeShape], model: str
) -> IdealizedReference:
    """The reference of ``spec`` for ``shapes``; InputError for an unknown architecture, GPU,
    stack or fit, or a shape the architecture cannot serve."""
    if spec.fit is not None:
        from idealized_runtime.cost_model.fitting.fit_files import read_fit_file

        fits = read_fit_file(spec.fit)
        name = spec.fit_model or (next(iter(fits)) if len(fits) == 1 else model)
        if name not in fits:
            raise InputError(
                f"holds no fit of {name!r} (it has {', '.join(sorted(fits))}): set fit_model",
                path=str(spec.fit),
            )
        fit = fits[name]
        return IdealizedReference(mean_runtime(fit, shapes), f"{fit.method} fit of {name}")
    from idealized_runtime.core.architectures import load_architecture
    from idealized_runtime.core.catalog import get_hardware
    from idealized_runtime.cost_model.hardware.estimate import hardware_model_estimate

    assert spec.architecture is not None
    arch, gpu = load_architecture(spec.architecture), get_hardware(spec.hardware)
    runtimes, stack = [], ""
    for shape in shapes:
        estimate, stack = hardware_model_estimate(
            arch, gpu, shape.prompt_tokens, shape.output_tokens, stack=spec.stack
        )
        runtimes.append(estimate.runtime_s)
    label = f"{arch.name} on {gpu.name}, {stack}, batch 1"
    return IdealizedReference(sum(runtimes) / len(runtimes), label)
