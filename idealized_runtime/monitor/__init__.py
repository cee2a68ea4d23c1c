"""Provider monitoring over time: ``idealized-runtime monitor CONFIG.yaml`` probes OpenAI-
compatible endpoints round after round and stores each round in the service.

``config``     the monitoring file: endpoints, prices, references, probe, schedule
``reference``  the idealized runtime of the probe's shapes (hardware model or a fit file)
``state``      the state folder: rows, finished rounds and what the store has (resumable)
``store``      the service over HTTP, or a database
``run``        the rounds, their schedule and the queue of rounds to store
"""
