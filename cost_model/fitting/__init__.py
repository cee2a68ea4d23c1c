"""Runtime models fitted to timings: HELM's method, ours, denoised; HELM import/export.

The stage between measurements and conversion (docs/cost_model.md):

``file_rows``        the rows of a CSV, JSONL or Parquet file or DataFrame, each value checked
``measurements_io``  timings to fit in (``read_measurements``)
``request_logs``     request logs to convert in, as columns (``read_requests``, ``iter_requests``)
``timings``          one model's timings as numpy columns
``methods``          ``fit_measurements`` / ``fit_frame``: HELM's method and ours (``basis``)
``denoise``          the denoised fit of noisy API timings (quantile regression)
``evaluate``         a fit's alpha(p) and runtime(p, o); ``quality``: R^2, MAPE of a fit
``fit_files``        fit files (native JSON, or HELM's table: ``helm_format``)
``convert``          request logs -> idealized / denoised runtimes with a set of fits
"""
