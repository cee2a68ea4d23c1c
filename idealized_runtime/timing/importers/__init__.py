"""Per-request timings from other tools' result files, as rows our readers take (model,
num_prompt_tokens, num_output_tokens, runtime_s, ...): HELM runs (``helm``)."""
