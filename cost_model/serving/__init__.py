"""The serving simulator: an ideal continuous-batching server under load.

``workload``       request shapes and arrivals (Poisson, traces, closed-loop clients)
``step_time``      what one scheduler step takes: from the hardware model or fitted to timed steps
``simulator``      the discrete-event simulation; rows shaped like ``measure``'s
``admission``      when a request comes into the KV cache, and what happens when it runs out
``engines``        a deployment served by an engine stack (vLLM, SGLang, TensorRT-LLM)
``disaggregated``  prefill and decode on instances of their own (xPyD), the KV transfer between
``prefix_cache``   prompt tokens found in the KV cache: shared prefixes or a hit rate
``steady_state``   the simulator's closed-loop steady state, estimated in a millisecond
"""
